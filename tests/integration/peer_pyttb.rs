//! CP-ALS and Tucker-HOOI against pyttb on the shared real tensors, from the same
//! initial factors.
//!
//! Both sides update modes 0, 1, …, N−1 each iteration with the same normalization
//! (column 2-norm in the first CP iteration, `max(1, max-norm)` after; where a column's
//! entries are all below 1 ours divides it by a power of two, which scales the factors
//! exactly and changes no fit) and the same fit formulas, so from identical starting
//! factors their fits differ only by rounding:
//! ours runs the sparse kernels in f32 on fp16-stored values (exact for these integer
//! and half-integer ratings/counts), pyttb everything in f64. Twenty ALS iterations
//! damp rather than amplify such perturbations near a local optimum, which the 1e-4
//! (CP) and 1e-3 (Tucker, whose subspaces can rotate within nearly equal singular
//! values) bounds leave room for.
//!
//! Needs a Python with pyttb (`SPTMC_PYTHON`, else `.venv/bin/python`, else `python3`)
//! and the shared data (`SPTMC_DATA_DIR`, else `../shared/data`). Without them each
//! test prints `SKIPPED: …` and passes, unless `SPTMC_REQUIRE_PYTTB=1` (or, for the
//! data, `SPTMC_REQUIRE_DATA=1`), which makes it fail.
//!
//! Run with: `cargo test --release --test integration peer_pyttb:: -- --nocapture`.

use crate::common;

use sptmc::Op;
use sptmc::decomp::{CpOptions, TuckerOptions, cp_als, tucker_hooi};
use sptmc::engine::{Engine, Workload};
use sptmc::model_io::write_factors;
use std::path::Path;
use std::process::Command;

const CP_RANK: usize = 16;
const CP_ITERS: usize = 20;
const TUCKER_RANK: usize = 8;
const TUCKER_ITERS: usize = 5;
const SEED: u64 = 1;

fn run_script(python: &Path, args: &[String]) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pyttb_check.py");
    let out = Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .expect("run pyttb_check.py");
    assert!(
        out.status.success(),
        "pyttb_check.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("pyttb_check.py prints JSON")
}

fn fits_of(v: &serde_json::Value) -> Vec<f64> {
    v["fits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_f64().unwrap())
        .collect()
}

fn print_side_by_side(what: &str, ours: &[f64], theirs: &[f64]) {
    println!("{what}: iter  sptmc       pyttb");
    for (k, f) in ours.iter().enumerate() {
        let t = theirs
            .get(k)
            .map_or("-".to_string(), |t| format!("{t:.6e}"));
        println!("{what}: {k:4}  {f:.6e}  {t}");
    }
}

fn cp_against_pyttb(file: &str) {
    let Some((python, path)) = common::pyttb_and_data(file) else {
        return;
    };
    let (x, _) = sptmc::tensor::tns::read(&path).unwrap();
    let engine = Engine::cpu();
    let p = engine
        .prepare(
            &x,
            &[Workload {
                op: Op::Mttkrp,
                rank: CP_RANK,
            }],
        )
        .unwrap();
    let mut opts = CpOptions {
        rank: CP_RANK,
        max_iters: CP_ITERS,
        tol: 0.0,
        seed: SEED,
        init: None,
    };
    let init = opts.initial_factors(x.dims());
    let dir = tempfile::tempdir().unwrap();
    write_factors(dir.path(), &init).unwrap();
    opts.init = Some(init);
    let ours = cp_als(&engine, &p, &opts).unwrap();
    let peer = run_script(
        &python,
        &[
            path.display().to_string(),
            "--cp-rank".into(),
            CP_RANK.to_string(),
            "--cp-iters".into(),
            CP_ITERS.to_string(),
            "--cp-init".into(),
            dir.path().display().to_string(),
        ],
    );
    let dims: Vec<usize> = peer["dims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(dims, x.dims(), "both sides read the same shape");
    let cp = &peer["cp"];
    let theirs = cp["fit"].as_f64().unwrap();
    let mine = ours.fit().unwrap();
    let secs: f64 = ours
        .iters
        .iter()
        .map(|s| s.seconds_kernel + s.seconds_linalg + s.seconds_other)
        .sum();
    print_side_by_side(&format!("{file} CP r{CP_RANK}"), &ours.fits, &fits_of(cp));
    println!(
        "{file} CP r{CP_RANK} after {CP_ITERS} iterations: sptmc {mine:.7} ({:.3} s/iter), \
         pyttb {theirs:.7} ({:.3} s/iter), |diff| {:.2e}",
        secs / CP_ITERS as f64,
        cp["seconds"].as_f64().unwrap() / CP_ITERS as f64,
        (mine - theirs).abs()
    );
    assert_eq!(ours.fits.len(), CP_ITERS);
    assert!(
        (mine - theirs).abs() <= 1e-4,
        "{file}: CP fit {mine} vs pyttb {theirs}"
    );
}

#[test]
fn cp_matches_pyttb_movielens_100k() {
    cp_against_pyttb("movielens-100k.tns.gz");
}

#[test]
fn cp_matches_pyttb_movielens_latest_small_4d() {
    cp_against_pyttb("movielens-latest-small-4d.tns.gz");
}

#[test]
fn cp_matches_pyttb_movielens_10m_tags_4d() {
    cp_against_pyttb("movielens-10m-tags-4d.tns.gz");
}

/// Tucker only on movielens-100k: pyttb's tucker_als forms `I_n × I_n` matrices and
/// runs out of memory at ranks 8 on the larger 4-way tensors.
#[test]
fn tucker_matches_pyttb_movielens_100k() {
    let file = "movielens-100k.tns.gz";
    let Some((python, path)) = common::pyttb_and_data(file) else {
        return;
    };
    let (x, _) = sptmc::tensor::tns::read(&path).unwrap();
    let engine = Engine::cpu();
    let p = engine
        .prepare(
            &x,
            &[Workload {
                op: Op::Ttmc,
                rank: TUCKER_RANK,
            }],
        )
        .unwrap();
    let mut opts = TuckerOptions {
        ranks: vec![TUCKER_RANK; x.order()],
        max_iters: TUCKER_ITERS,
        tol: 0.0,
        seed: SEED,
        init: None,
    };
    let init = opts.initial_factors(x.dims());
    let dir = tempfile::tempdir().unwrap();
    write_factors(dir.path(), &init).unwrap();
    opts.init = Some(init);
    let ours = tucker_hooi(&engine, &p, &opts).unwrap();
    let peer = run_script(
        &python,
        &[
            path.display().to_string(),
            "--tucker-ranks".into(),
            TUCKER_RANK.to_string(),
            "--tucker-iters".into(),
            TUCKER_ITERS.to_string(),
            "--tucker-init".into(),
            dir.path().display().to_string(),
        ],
    );
    let tk = &peer["tucker"];
    let theirs = tk["fit"].as_f64().unwrap();
    let mine = ours.fit().unwrap();
    print_side_by_side(
        &format!("{file} Tucker r{TUCKER_RANK}"),
        &ours.fits,
        &fits_of(tk),
    );
    println!(
        "{file} Tucker r{TUCKER_RANK} after {TUCKER_ITERS} iterations: sptmc {mine:.7}, \
         pyttb {theirs:.7}, |diff| {:.2e}",
        (mine - theirs).abs()
    );
    assert!(
        (mine - theirs).abs() <= 1e-3,
        "{file}: Tucker fit {mine} vs pyttb {theirs}"
    );
}
