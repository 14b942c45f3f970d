//! CP-APR against pyttb's `cp_apr(algorithm="mu")` on the three small shared tensors,
//! from the same initial factors: the log-likelihood after every one of 20 outer
//! iterations must agree to 1e-5 relative; and on a generated tensor of counts above
//! 2048 (kept in f32, exactly) to 1e-8.
//!
//! Both sides run the same multiplicative updates (modes 0, 1, …, N−1, up to 10 inner
//! updates each, κ handling of inadmissible zeros, column 1-norm normalization), with
//! `tol = 0` so neither stops early. Both compute in f64 (ours reads the fp16-stored
//! values, exact for these integer and half-integer counts), so the two differ only by
//! the order of sums: about 1e-13 on movielens-100k. MU amplifies rounding; with f32
//! factors and Khatri-Rao rows movielens-100k drifted to 1.05e-5 at iteration 10.
//! pyttb reports the log-likelihood only at the end; `scripts/pyttb_cp_apr.py --trace`
//! records it after each iteration, both with pyttb's own `tt_loglikelihood` and with
//! model values below ε counted as ε, as sptmc reports it (pyttb takes the log
//! unfloored: its value is -inf once its model is 0 at a nonzero, as on
//! movielens-10m-tags-4d from iteration 4). The test compares the floored ones: the
//! same quantity of the two runs' models.
//!
//! Needs a Python with pyttb (`SPTMC_PYTHON`, else `.venv/bin/python`, else `python3`)
//! and the shared data (`SPTMC_DATA_DIR`, else `../shared/data`). Without them each
//! test prints `SKIPPED: …` and passes, unless `SPTMC_REQUIRE_PYTTB=1` (or, for the
//! data, `SPTMC_REQUIRE_DATA=1`), which makes it fail.
//!
//! Run with: `cargo test --release --test integration peer_pyttb_cp_apr:: -- --nocapture`.

use crate::common;

use sptmc::Op;
use sptmc::decomp::{CpAprOptions, cp_apr};
use sptmc::engine::{Engine, Workload};
use sptmc::model_io::write_factors;
use std::path::Path;
use std::process::Command;

const RANK: usize = 16;
const ITERS: usize = 20;
const SEED: u64 = 1;
const REL_TOL: f64 = 1e-5;

/// A number of the script's JSON, where non-finite ones are written as strings.
fn number(v: &serde_json::Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

fn against_pyttb(file: &str) {
    let Some((python, path)) = common::pyttb_and_data(file) else {
        return;
    };
    let worst = against_pyttb_at(&python, &path, file);
    assert!(
        worst <= REL_TOL,
        "{file}: worst relative difference {worst:.2e}"
    );
}

/// Runs both sides on the tensor at `path` (named `file` in messages) and returns the
/// worst relative difference of their log-likelihoods over the iterations (after
/// checking both ran every one and ours are finite).
fn against_pyttb_at(python: &Path, path: &Path, file: &str) -> f64 {
    let (x, _) = sptmc::tensor::tns::read(path).unwrap();
    let engine = Engine::cpu();
    let p = engine
        .prepare(
            &x,
            &[Workload {
                op: Op::Mttkrp,
                rank: RANK,
            }],
        )
        .unwrap();
    let mut opts = CpAprOptions {
        max_iters: ITERS,
        tol: 0.0,
        seed: SEED,
        ..CpAprOptions::with_rank(RANK)
    };
    let init = opts.initial_factors(x.dims());
    let dir = tempfile::tempdir().unwrap();
    write_factors(dir.path(), &init).unwrap();
    opts.init = Some(init);
    let ours = cp_apr(&engine, &p, &opts).unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pyttb_cp_apr.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(path)
        .args(["--rank", &RANK.to_string(), "--iters", &ITERS.to_string()])
        .args(["--tol", "0", "--trace", "--init"])
        .arg(dir.path())
        .output()
        .expect("run pyttb_cp_apr.py");
    assert!(
        out.status.success(),
        "pyttb_cp_apr.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peer: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("pyttb_cp_apr.py prints JSON");
    let list = |key: &str| -> Vec<f64> {
        peer[key]
            .as_array()
            .unwrap_or_else(|| panic!("a traced run lists {key}"))
            .iter()
            .map(number)
            .collect()
    };
    // pyttb's model after each iteration, its log-likelihood with model values below ε
    // counted as ε as ours are; pyttb's own (unfloored, -inf where its model is 0 at a
    // nonzero) is printed beside.
    let theirs = list("log_likelihoods_floored");
    let their_own = list("log_likelihoods");
    let mine = ours.log_likelihoods();
    let secs: f64 = ours.iters.iter().map(|s| s.seconds).sum();
    let their_viol = &peer["n_violations"];
    println!(
        "{file} CP-APR r{RANK}: iter  sptmc              pyttb (ε-floored)  rel. diff  \
         pyttb's own        κ-modes (sptmc pyttb)"
    );
    let mut worst: f64 = 0.0;
    for (k, (a, b)) in mine.iter().zip(&theirs).enumerate() {
        let rel = (a - b).abs() / b.abs();
        worst = worst.max(rel);
        println!(
            "{file} CP-APR r{RANK}: {k:4}  {a:.10e}  {b:.10e}  {rel:.2e}   {:.10e}  {} {}",
            their_own[k], ours.iters[k].violations, their_viol[k]
        );
    }
    println!(
        "{file} CP-APR r{RANK}: {ITERS} iterations, sptmc {:.3} s/iter, worst rel. diff {worst:.2e}",
        secs / ITERS as f64
    );
    assert_eq!(mine.len(), ITERS, "{file}: sptmc ran every iteration");
    assert_eq!(theirs.len(), ITERS, "{file}: pyttb ran every iteration");
    for (k, a) in mine.iter().enumerate() {
        assert!(a.is_finite(), "{file}: iteration {k} log-likelihood {a}");
    }
    worst
}

#[test]
fn cp_apr_matches_pyttb_movielens_100k() {
    against_pyttb("movielens-100k.tns.gz");
}

#[test]
fn cp_apr_matches_pyttb_movielens_latest_small_4d() {
    against_pyttb("movielens-latest-small-4d.tns.gz");
}

#[test]
fn cp_apr_matches_pyttb_movielens_10m_tags_4d() {
    against_pyttb("movielens-10m-tags-4d.tns.gz");
}

/// Counts above 2048 are not exact in fp16; the tensor's values are then kept in f32
/// (`auto`), which holds integers up to 2^24 exactly, so both sides see the same data
/// and differ only by the order of f64 sums. Over 20 iterations of a small tensor that
/// is well below 1e-8 relative: the bound the exact-values contract promises. (The same
/// run from fp16-rounded values differs by 5e-8 to 2e-6: `tests/integration/exact_values.rs`.)
#[test]
fn cp_apr_matches_pyttb_on_counts_above_2048() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = match sptmc::tools::bench::peers::find_python(root) {
        Ok(p) => p,
        Err(why) => {
            common::skip::<()>(
                "SPTMC_REQUIRE_PYTTB",
                &format!("no Python with pyttb ({why})"),
            );
            return;
        }
    };
    let seed = common::fresh_seed("cp_apr_matches_pyttb_on_counts_above_2048");
    let x = sptmc::tensor::generate::generate(&sptmc::tensor::generate::GenSpec {
        dims: vec![40, 30, 20],
        nnz: 3000,
        pattern: sptmc::tensor::generate::Pattern::Uniform,
        seed,
    })
    .unwrap();
    // Counts from 2049 to about 12000: none exact in fp16 after any power-of-two scale
    // that keeps the largest in range, most of them odd.
    let values: Vec<f64> = x
        .values()
        .iter()
        .enumerate()
        .map(|(i, v)| 2049.0 + (v.abs() * 7919.0).round() + (i % 97) as f64 * 2.0)
        .collect();
    let indices = (0..x.order()).map(|m| x.indices(m).to_vec()).collect();
    let x = sptmc::tensor::CooTensor::new(x.dims().to_vec(), indices, values).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.tns");
    sptmc::tensor::tns::write(&path, &x).unwrap();
    let worst = against_pyttb_at(&python, &path, "counts above 2048");
    assert!(
        worst <= 1e-8,
        "counts above 2048: worst relative difference {worst:.2e}"
    );
}
