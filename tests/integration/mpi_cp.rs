//! CP-ALS across MPI ranks: `mpirun -np P sptmc cp` against the single process, on
//! generated and shared tensors, with P = 1 … 4, a grid where a rank holds no
//! nonzeros, bad input, and the per-rank figures of `--json`.
//!
//! Needs a build with `--features mpi` and `mpirun` on the PATH; skipped visibly
//! otherwise (a failure under `SPTMC_REQUIRE_MPI=1`, as CI sets it).

use crate::common;

use common::mpi::{
    assert_same_model_bytes, assert_same_model_form, assert_same_model_values, json, mpirun, ranks,
    single, write,
};

use serde_json::Value;
use sptmc::tensor::CooTensor;
use sptmc::tensor::generate::{GenSpec, Pattern, generate};

fn fits(v: &Value) -> Vec<f64> {
    v["iterations"]
        .as_array()
        .expect("iterations")
        .iter()
        .map(|s| s["fit"].as_f64().expect("a fit"))
        .collect()
}

fn uniform(dims: Vec<usize>, nnz: usize, seed: u64) -> CooTensor {
    generate(&GenSpec {
        dims,
        nnz,
        pattern: Pattern::Uniform,
        seed,
    })
    .unwrap()
}

const CP: [&str; 8] = [
    "--rank", "4", "--iters", "20", "--tol", "0", "--json", "--seed=3",
];

/// The fit after the last of 20 iterations under each count of ranks matches the
/// single process's within 1e-6 relative. The iterations before it agree within 1e-4:
/// the kernels accumulate in f32, and a row's partial sums from several ranks are
/// added in another order than one process adds them; on a tensor whose fit is near
/// 0.005 that shows as about 1e-5 of the fit in the early iterations, which ALS then
/// damps.
fn same_fits(file: &str, rank_counts: &[usize]) {
    let mut args = vec!["cp", file];
    args.extend(CP);
    let one = json(&single(&args), "the single process");
    let want = fits(&one);
    assert_eq!(want.len(), 20);
    for &p in rank_counts {
        let got = json(&ranks(p, &args), &format!("{p} ranks"));
        let got_fits = fits(&got);
        assert_eq!(got_fits.len(), want.len(), "{p} ranks");
        for (k, (a, b)) in got_fits.iter().zip(&want).enumerate() {
            let tol = if k + 1 == want.len() { 1e-6 } else { 1e-4 };
            assert!(
                (a - b).abs() <= tol * b.abs(),
                "{p} ranks, iteration {k}: fit {a} vs {b} of one process"
            );
        }
        assert_eq!(got["nnz"], one["nnz"], "{p} ranks");
        assert_eq!(got["dims"], one["dims"], "{p} ranks");
        let per_rank = got["distributed"]["per_rank"].as_array().expect("per rank");
        assert_eq!(per_rank.len(), p);
        let held: u64 = per_rank.iter().map(|r| r["nnz"].as_u64().unwrap()).sum();
        assert_eq!(
            held,
            one["nnz"].as_u64().unwrap(),
            "{p} ranks hold every nonzero once"
        );
    }
}

#[test]
fn generated_tensor_fits_match_one_process_on_1_to_4_ranks() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let x = uniform(vec![60, 50, 40], 20_000, 7);
    let f = write(dir.path(), "u.tns", &x);
    same_fits(&f, &[1, 2, 3, 4]);
    // The binary form: ranges of entries per rank.
    let b = dir.path().join("u.sptb");
    sptmc::tensor::binary::write(&b, &x).unwrap();
    same_fits(b.to_str().unwrap(), &[2, 3]);
}

#[test]
fn shared_tensor_fits_match_one_process() {
    if mpirun().is_none() {
        return;
    }
    let Some(f) = common::shared_file("movielens-latest-small-4d.tns.gz") else {
        return;
    };
    same_fits(f.to_str().unwrap(), &[1, 2, 3, 4]);
}

/// A uniform 30 × 30 × 20 tensor `a`, and two diagonal blocks of a 2×2 grid over modes
/// 0 and 1 (60 × 60 × 20; the off-diagonal blocks hold nothing) at `a`'s coordinates,
/// their values `values(k, a's k-th value)`.
fn diagonal_blocks(values: impl Fn(usize, f64) -> (f64, f64)) -> (CooTensor, CooTensor) {
    let a = uniform(vec![30, 30, 20], 3000, 1);
    let mut entries = Vec::new();
    for k in 0..a.nnz() {
        let c = a.coords(k);
        let (first, second) = values(k, a.values()[k]);
        entries.push((c.clone(), first));
        entries.push((vec![c[0] + 30, c[1] + 30, c[2]], second));
    }
    let x = CooTensor::from_entries(vec![60, 60, 20], entries).unwrap();
    (a, x)
}

#[test]
fn a_rank_without_nonzeros_still_takes_part() {
    if mpirun().is_none() {
        return;
    }
    let (_, x) = diagonal_blocks(|_, v| (v, v * 0.5));
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "blocks.tns", &x);
    let mut args = vec!["cp", f.as_str()];
    args.extend(CP);
    let got = json(&ranks(4, &args), "4 ranks");
    let per_rank = got["distributed"]["per_rank"].as_array().unwrap();
    assert!(
        per_rank.iter().any(|r| r["nnz"] == 0),
        "some rank holds no nonzero: {per_rank:?}"
    );
    same_fits(&f, &[4]);
}

/// Values far from 1 run across ranks times a power of two, as in one process: a
/// tensor times 2^-140 (its products with factor entries below f32's normal range;
/// the model collapsed to zero) or 2^500 (past f32's range; refused) fits on P ranks
/// as the tensor with its largest magnitude in [1, 2) does on P ranks, to the last bit
/// (JSON's reading of a number moves it at most an ulp), its weights times 2^k; and the
/// last fit matches the single process's within 1e-6, as every distributed fit does.
#[test]
fn values_far_from_one_run_scaled_on_every_rank_count() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut x = uniform(vec![40, 30, 20], 4000, 5);
    let max = x.values().iter().fold(0.0f64, |m, v| m.max(v.abs()));
    x.map_values(|v| v * 2f64.powi(-(max.log2().floor() as i32)));
    let weights = |v: &Value| -> Vec<f64> {
        (v["weights"].as_array().expect("weights").iter())
            .map(|w| w.as_f64().expect("a weight"))
            .collect()
    };
    let near = |a: f64, b: f64| (a - b).abs() <= 1e-15 * b.abs();
    let unit_file = write(dir.path(), "unit.tns", &x);
    for p in [2, 3] {
        let mut args = vec!["cp", unit_file.as_str()];
        args.extend(CP);
        let unit = json(&ranks(p, &args), &format!("{p} ranks, given"));
        for k in [-140, 500] {
            let mut y = x.clone();
            y.map_values(|v| v * 2f64.powi(k));
            let f = write(dir.path(), &format!("x{k}.tns"), &y);
            let mut args = vec!["cp", f.as_str()];
            args.extend(CP);
            let got = json(&ranks(p, &args), &format!("{p} ranks, 2^{k}"));
            let (a, b) = (fits(&got), fits(&unit));
            assert_eq!(a.len(), b.len());
            assert!(
                a.iter().zip(&b).all(|(a, b)| near(*a, *b)),
                "{p} ranks, 2^{k}: {a:?} vs {b:?}"
            );
            let (a, b) = (weights(&got), weights(&unit));
            assert_eq!(a.len(), b.len());
            for (a, b) in a.iter().zip(&b) {
                assert!(
                    near(*a, b * 2f64.powi(k)),
                    "{p} ranks, 2^{k}: weight {a} vs {b}"
                );
            }
            if p == 3 {
                same_fits(&f, &[3]);
            }
        }
    }
}

/// `--json`'s `values` under mpirun: per rank, how its block's values are stored (null
/// for a block without nonzeros); for the run, the ranks' reports together where they
/// all stored them alike: the type and the count of values fp16 does not hold that one
/// process reports. Null where the ranks chose differently: on two diagonal blocks of a
/// 2×2 grid, one of small integers (fp16 holds them) and one of thirds (it does not).
#[test]
fn values_are_reported_per_rank_and_together_where_alike() {
    if mpirun().is_none() {
        return;
    }
    let (a, x) = diagonal_blocks(|k, _| ((k % 5 + 1) as f64, (k % 5 + 1) as f64 / 3.0));
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "blocks.tns", &x);
    let args = ["cp", f.as_str(), "--iters", "2", "--json"];
    let got = json(&ranks(4, &args), "4 ranks");
    assert_eq!(got["distributed"]["grid"], serde_json::json!([2, 2, 1]));
    let types: Vec<Value> = (got["distributed"]["per_rank"].as_array().unwrap().iter())
        .map(|r| r["values"]["type"].clone())
        .collect();
    let (f16, f32) = (Value::from("f16"), Value::from("f32"));
    assert_eq!(types.iter().filter(|t| **t == f16).count(), 1, "{types:?}");
    assert_eq!(types.iter().filter(|t| **t == f32).count(), 1, "{types:?}");
    assert_eq!(types.iter().filter(|t| t.is_null()).count(), 2, "{types:?}");
    assert!(got["values"].is_null(), "{}", got["values"]);
    // Alike: f32 asked for, or the generated tensor's values (none exact in fp16).
    let u = write(dir.path(), "u.tns", &a);
    for (file, p, extra) in [
        (&f, 4, Some("--values=f32")),
        (&f, 3, Some("--values=f32")),
        (&u, 3, None),
        (&u, 1, None),
    ] {
        let mut args = vec!["cp", file.as_str(), "--iters", "2", "--json"];
        args.extend(extra);
        let one = json(&single(&args), "one process");
        let many = json(&ranks(p, &args), &format!("{p} ranks"));
        for key in ["type", "choice", "f16_inexact", "why"] {
            assert_eq!(
                many["values"][key], one["values"][key],
                "{file} on {p} ranks, {key}"
            );
        }
        let sum: u64 = (many["distributed"]["per_rank"].as_array().unwrap().iter())
            .map(|r| r["values"]["f16_inexact"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(Some(sum), one["values"]["f16_inexact"].as_u64());
        assert!(one["values"]["f16_inexact"].as_u64() > Some(0), "{file}");
    }
}

#[test]
fn ranks_hold_a_fair_share_and_medium_sends_less_than_coarse() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let x = uniform(vec![200, 200, 200], 40_000, 11);
    let f = write(dir.path(), "u.tns", &x);
    let mut args = vec!["cp", f.as_str()];
    args.extend(CP);
    let medium = json(&ranks(4, &args), "medium");
    args.extend(["--grain", "coarse"]);
    let coarse = json(&ranks(4, &args), "coarse");
    let share = x.nnz() as f64 / 4.0;
    let (m, c) = (&medium["distributed"], &coarse["distributed"]);
    for (rm, rc) in m["per_rank"]
        .as_array()
        .unwrap()
        .iter()
        .zip(c["per_rank"].as_array().unwrap())
    {
        let nnz = rm["nnz"].as_f64().unwrap();
        assert!(
            (nnz - share).abs() <= 0.1 * share,
            "rank {} holds {nnz} of {} nonzeros",
            rm["rank"],
            x.nnz()
        );
        let (bm, bc) = (
            rm["bytes_per_iter"].as_f64().unwrap(),
            rc["bytes_per_iter"].as_f64().unwrap(),
        );
        let model = rm["model_bytes_per_iter"].as_f64().unwrap();
        assert!(
            bm <= 2.0 * model && bm >= model / 2.0,
            "measured {bm} bytes vs the model's {model}"
        );
        assert!(bm < bc, "medium {bm} bytes vs coarse {bc}");
        assert!(rm["peak_bytes"].as_u64().unwrap() > 0);
        assert!(rm["comm_seconds"].as_f64().unwrap() >= 0.0);
    }
    // The rough I·R/P^(1/N) figure is within 2× of the mean measured bytes.
    let mean = m["per_rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bytes_per_iter"].as_f64().unwrap())
        .sum::<f64>()
        / 4.0;
    let rough = m["rough_bytes_per_iter"].as_f64().unwrap();
    assert!(
        mean <= 2.0 * rough && mean >= rough / 2.0,
        "{mean} vs {rough}"
    );
    // The same fits either way.
    assert!((fits(&medium)[19] - fits(&coarse)[19]).abs() <= 1e-6 * fits(&medium)[19]);
}

#[test]
fn bad_input_is_one_error_line_from_one_rank_and_every_rank_exits() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // About 24 MB: every one of 2 or 3 ranks reads a range; the bad line falls in the
    // last rank's.
    let mut text = String::new();
    for k in 0..1_500_000 {
        text += &format!("{} {} {} 1.5\n", k % 97 + 1, k % 89 + 1, k % 83 + 1);
        if k == 1_300_000 {
            text += "5 6 x 1.0\n";
        }
    }
    let plain = dir.path().join("bad.tns");
    std::fs::write(&plain, &text).unwrap();
    // The same text gzipped: rank 0 streams it and hands the lines out.
    let gz = dir.path().join("bad.tns.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    std::io::Write::write_all(&mut enc, text.as_bytes()).unwrap();
    enc.finish().unwrap();
    for f in [plain, gz] {
        let f = f.to_str().unwrap();
        let one = single(&["cp", f, "--rank", "2"]);
        assert_eq!(one.status.code(), Some(1));
        let want = String::from_utf8_lossy(&one.stderr)
            .lines()
            .find(|l| l.starts_with("sptmc: error:"))
            .expect("an error line")
            .to_string();
        assert!(want.contains(":1300002:"), "{want}");
        for p in [2, 3] {
            let got = ranks(p, &["cp", f, "--rank", "2"]);
            assert_eq!(got.status.code(), Some(1), "{p} ranks");
            let err = String::from_utf8_lossy(&got.stderr);
            let lines: Vec<&str> = err.lines().filter(|l| l.contains("error:")).collect();
            assert_eq!(lines, vec![want.as_str()], "{p} ranks: {err}");
        }
    }
    // A missing file: one line, as from one process.
    let missing = dir.path().join("none.tns");
    let want = String::from_utf8_lossy(&single(&["cp", missing.to_str().unwrap()]).stderr)
        .lines()
        .find(|l| l.starts_with("sptmc: error:"))
        .expect("an error line")
        .to_string();
    let got = ranks(3, &["cp", missing.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&got.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(lines, vec![want.as_str()], "{err}");
    assert_eq!(got.status.code(), Some(1));
}

#[test]
fn model_files_have_the_single_process_form() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "u.tns", &uniform(vec![40, 30, 20], 5000, 5));
    let (a, b) = (dir.path().join("one"), dir.path().join("three"));
    let mut args = vec!["cp", f.as_str(), "--out", a.to_str().unwrap()];
    args.extend(CP);
    json(&single(&args), "one process");
    args[3] = b.to_str().unwrap();
    json(&ranks(3, &args), "3 ranks");
    assert_same_model_form(&a, &b);
}

/// On one rank, where no mode runs on its used rows only, the model files are the
/// single process's byte for byte: the same arithmetic.
#[test]
fn model_files_on_one_rank_are_the_single_process_bytes() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "u.tns", &uniform(vec![300, 30, 20], 20_000, 6));
    let run = |out: &str, many: bool| {
        let out = dir.path().join(out);
        let mut a = vec!["cp", f.as_str(), "--out", out.to_str().unwrap()];
        a.extend(CP);
        let o = if many { ranks(1, &a) } else { single(&a) };
        json(&o, out.to_str().unwrap());
        out
    };
    let (one, many) = (run("one", false), run("ranks-1", true));
    assert_same_model_bytes(&one, &many);
}

/// The model files written under mpirun are the single process's: the same header
/// lines and every row's values in its place. On one rank within 1e-5 of their
/// column's largest: both run mode 0, mostly empty, on its used rows
/// (`decomp::used_rows::UsedRows`, `dist::exchange::UsedIndices`), but the single
/// process adds the Gram of the rows left out to its start's apart, so only f64 Gram
/// sums add in another order, which moves an f32 entry by about its rounding (6e-8) per
/// iteration (measured: below 1e-6 of the column's largest after the run). On 2 to 4 ranks, where a row's f32 partial
/// sums add in another order too, within 1e-3. Mode 0 is longer than the rows rank 0
/// receives at once, so its rows arrive in several windows, each cut among several
/// owners.
#[test]
fn model_files_are_the_single_process_files() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let long = 2 * (sptmc::dist::output::WINDOW_BYTES / (8 * 4)) + 1000;
    let f = write(dir.path(), "u.tns", &uniform(vec![long, 30, 20], 20_000, 5));
    let args = |out: &std::path::Path| {
        let mut a = vec!["cp".to_string(), f.clone(), "--out".into()];
        a.push(out.to_str().unwrap().into());
        a.extend(CP.map(String::from));
        a
    };
    let one = dir.path().join("one");
    let a = args(&one);
    json(
        &single(&a.iter().map(String::as_str).collect::<Vec<_>>()),
        "one process",
    );
    for p in 1..=4 {
        let many = dir.path().join(format!("ranks-{p}"));
        let a = args(&many);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        json(&ranks(p, &a), &format!("{p} ranks"));
        let tol = if p == 1 { 1e-5 } else { 1e-3 };
        assert_same_model_values(&one, &many, tol);
    }
}

/// The built-in tensor (no file given) under mpirun is the single process's, though each
/// rank draws only its part of it: on one rank CP-ALS's fits are the single process's
/// bit for bit (the same threads); on 4 ranks CP-APR's log-likelihoods (f64
/// throughout) are within 1e-6 relative, CP-ALS's fits within 1e-4 (its kernels
/// accumulate in f32, and this tensor's power-law slices hold tens of thousands of
/// nonzeros each: their partial sums from several ranks differ by about 2e-5 of the
/// fit, as they did when every rank generated the whole tensor). No rank holds the
/// whole tensor: every one of 4 ranks peaks below one rank's peak by more than the
/// tensor's entries take.
#[test]
fn the_built_in_tensor_is_the_single_process_one_drawn_in_parts() {
    if mpirun().is_none() {
        return;
    }
    let cp = [
        "cp", "--rank", "4", "--iters", "5", "--tol", "0", "--json", "--seed=3",
    ];
    let threads = [&cp[..], &["--threads", "1"]].concat();
    let one = json(&single(&threads), "one process");
    assert_eq!(fits(&json(&ranks(1, &threads), "1 rank")), fits(&one));
    let four = json(&ranks(4, &cp), "4 ranks");
    assert_eq!(four["nnz"], one["nnz"]);
    for (a, b) in fits(&four).iter().zip(&fits(&one)) {
        assert!((a - b).abs() <= 1e-4 * b, "fit {a} vs {b} of one process");
    }
    let mut apr = cp;
    apr[0] = "cp-apr";
    let lls = |v: &Value| -> Vec<f64> {
        v["iterations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["log_likelihood"].as_f64().unwrap())
            .collect()
    };
    let (a1, a4) = (
        lls(&json(&single(&apr), "one process")),
        lls(&json(&ranks(4, &apr), "4 ranks")),
    );
    assert_eq!(a1.len(), a4.len());
    for (a, b) in a4.iter().zip(&a1) {
        assert!(
            (a - b).abs() <= 1e-6 * b.abs(),
            "log-likelihood {a} vs {b} of one process"
        );
    }
    let peaks = |v: &Value| -> Vec<u64> {
        v["distributed"]["per_rank"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["peak_bytes"].as_u64().unwrap())
            .collect()
    };
    let alone = peaks(&json(&ranks(1, &cp), "1 rank"))[0];
    // Indices and value of every nonzero: 3 × 4 + 8 bytes.
    let entries = one["nnz"].as_u64().unwrap() * 20;
    for (k, p) in peaks(&four).into_iter().enumerate() {
        assert!(
            p + entries < alone,
            "rank {k} of 4 peaked at {} MB, one rank alone at {} MB; the tensor's entries take {} MB",
            p >> 20,
            alone >> 20,
            entries >> 20
        );
    }
}

/// Modes mostly empty run on their used rows under mpirun as in one process: the note
/// says so, `--json` reports the rows held, the fits match the single process's on 1 to
/// 4 ranks (as [`same_fits`] asks), and the model files have every row of the tensor,
/// zero where the single process's are, the others within 1e-3 of their column's
/// largest (as in [`model_files_are_the_single_process_files`]).
#[test]
fn mostly_empty_modes_run_on_their_used_rows_on_1_to_4_ranks() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let x = crate::cp_rows::mostly_empty(300, 6000, 31);
    let f = write(dir.path(), "sparse-rows.tns", &x);
    same_fits(&f, &[1, 2, 3, 4]);
    let one = dir.path().join("one");
    let mut a = vec!["cp", f.as_str(), "--out", one.to_str().unwrap()];
    a.extend(CP);
    json(&single(&a), "one process");
    for p in [1, 3] {
        let many = dir.path().join(format!("ranks-{p}"));
        let mut a = vec!["cp", f.as_str(), "--out", many.to_str().unwrap()];
        a.extend(CP);
        let o = ranks(p, &a);
        let got = json(&o, &format!("{p} ranks"));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.contains("CP-ALS runs on the rows with nonzeros (mode 0: 300 of "),
            "{stderr}"
        );
        assert_eq!(
            got["distributed"]["rows_held"],
            serde_json::json!([300, 300, 9])
        );
        assert_same_model_values(&one, &many, 1e-3);
        let zero_rows = |dir: &std::path::Path| -> Vec<bool> {
            let t = std::fs::read_to_string(dir.join("factor-0.txt")).unwrap();
            (t.lines().filter(|l| !l.starts_with('#')))
                .map(|l| l.split(' ').all(|v| v.parse::<f64>().unwrap() == 0.0))
                .collect()
        };
        let want = zero_rows(&one);
        assert_eq!(want.iter().filter(|&&z| !z).count(), 300);
        assert_eq!(zero_rows(&many), want, "{p} ranks: the empty rows");
    }
}
