//! CP-APR across MPI ranks: `mpirun -np P sptmc cp-apr` against the single process, on
//! a generated count tensor and a shared one, with P = 1 … 4, a grid where a rank holds
//! no nonzeros, the per-rank bytes of `--json` against the model, the model files,
//! modes mostly empty run on their used rows, and bad input.
//!
//! Needs a build with `--features mpi` and `mpirun` on the PATH; skipped visibly
//! otherwise (a failure under `SPTMC_REQUIRE_MPI=1`, as CI sets it).

use crate::common;

use common::mpi::{
    assert_same_model_form, assert_same_model_values, json, mpirun, ranks, ranks_with, single,
    single_with, write,
};

use serde_json::Value;
use sptmc::tensor::CooTensor;
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use std::path::PathBuf;
use std::process::Output;

fn lls(v: &Value) -> Vec<f64> {
    v["iterations"]
        .as_array()
        .expect("iterations")
        .iter()
        .map(|s| s["log_likelihood"].as_f64().expect("a log-likelihood"))
        .collect()
}

/// Every iteration's inner iterations (Φ evaluations, over the modes) in `--json`.
fn inner_iters(v: &Value) -> Vec<u64> {
    (v["iterations"].as_array().expect("iterations").iter())
        .map(|s| s["inner_iters"].as_u64().expect("inner iterations"))
        .collect()
}

/// A uniform tensor of counts 1 … 5.
fn counts(dims: Vec<usize>, nnz: usize, seed: u64) -> CooTensor {
    let x = generate(&GenSpec {
        dims,
        nnz,
        pattern: Pattern::Uniform,
        seed,
    })
    .unwrap();
    let entries: Vec<_> = (0..x.nnz())
        .map(|k| (x.coords(k), 1.0 + (k % 5) as f64))
        .collect();
    CooTensor::from_entries(x.dims().to_vec(), entries).unwrap()
}

const APR: [&str; 8] = [
    "--rank", "4", "--iters", "20", "--tol", "0", "--json", "--seed=3",
];

/// Every iteration's log-likelihood under each count of ranks matches the single
/// process's within 1e-6 relative (Φ, the factors and the sums are f64; only the
/// order in which a row's partial Φ from several ranks is added differs), the last
/// one included; the same iterations and inner iterations run.
fn same_lls(file: &str, rank_counts: &[usize]) {
    same_lls_with(file, rank_counts, &[]);
}

/// [`same_lls`] with the variables `env` set on the single process and every rank.
fn same_lls_with(file: &str, rank_counts: &[usize], env: &[(&str, &str)]) {
    let mut args = vec!["cp-apr", file];
    args.extend(APR);
    let one = json(&single_with(&args, env), "the single process");
    let want = lls(&one);
    assert_eq!(want.len(), 20);
    for &p in rank_counts {
        let got = json(&ranks_with(p, &args, env), &format!("{p} ranks"));
        let got_lls = lls(&got);
        assert_eq!(got_lls.len(), want.len(), "{p} ranks");
        for (k, (a, b)) in got_lls.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs(),
                "{p} ranks, iteration {k}: log-likelihood {a} vs {b} of one process"
            );
        }
        assert_eq!(
            inner_iters(&got),
            inner_iters(&one),
            "{p} ranks: inner iterations"
        );
        assert_eq!(got["nnz"], one["nnz"], "{p} ranks");
        assert_eq!(got["dims"], one["dims"], "{p} ranks");
        assert_eq!(got["kind"], "cp-apr");
        let per_rank = got["distributed"]["per_rank"].as_array().expect("per rank");
        assert_eq!(per_rank.len(), p);
        let held: u64 = per_rank.iter().map(|r| r["nnz"].as_u64().unwrap()).sum();
        assert_eq!(
            held,
            one["nnz"].as_u64().unwrap(),
            "{p} ranks hold every nonzero once"
        );
        let (w1, wp) = (
            one["weights"].as_array().unwrap(),
            got["weights"].as_array().unwrap(),
        );
        for (a, b) in wp.iter().zip(w1) {
            let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1e-3),
                "{p} ranks: weight {a} vs {b}"
            );
        }
    }
}

#[test]
fn generated_counts_log_likelihoods_match_one_process_on_1_to_4_ranks() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "c.tns", &counts(vec![60, 50, 40], 12_000, 7));
    same_lls(&f, &[1, 2, 3, 4]);
}

/// With a loose tolerance the inner iterations stop early, where the violation
/// over every rank's rows falls below it: the same inner iterations and
/// log-likelihoods as the single process on 2 to 4 ranks, whose grids leave mode 0's
/// slabs to one rank each (so that a rank's own rows alone would stop elsewhere).
#[test]
fn inner_iterations_stop_where_the_single_process_stops() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "c.tns", &counts(vec![900, 40, 30], 20_000, 12));
    let args = [
        "cp-apr", &f, "--rank", "4", "--iters", "12", "--tol", "0.2", "--json", "--seed=5",
    ];
    let one = json(&single(&args), "the single process");
    let want = inner_iters(&one);
    assert!(
        want.iter().any(|&k| k < 30),
        "no inner iterations stopped early: {want:?}"
    );
    for p in 2..=4 {
        let got = json(&ranks(p, &args), &format!("{p} ranks"));
        assert_eq!(got["distributed"]["grid"][0], p, "{p} ranks: mode 0 cut");
        assert_eq!(inner_iters(&got), want, "{p} ranks: inner iterations");
        for (k, (a, b)) in lls(&got).iter().zip(&lls(&one)).enumerate() {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs(),
                "{p} ranks, iteration {k}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn shared_tensor_log_likelihoods_match_one_process() {
    if mpirun().is_none() {
        return;
    }
    let Some(f) = common::shared_file("movielens-100k.tns.gz") else {
        return;
    };
    same_lls(f.to_str().unwrap(), &[2, 3, 4]);
}

/// Φ per call in f32 on every rank, as on CUDA (the CPU made to run it so): the ranks
/// still meet the single process's log-likelihood within 1e-6. Each rank's partial Φ
/// is an f32 sum over its nonzeros, which the owners add in f64: the ranks differ from
/// one process by the f32 rounding of those sums (about 2⁻²⁴ relative per row), far
/// inside the bound; a missing or misplaced row would not be.
#[test]
fn per_call_phi_log_likelihoods_match_one_process_on_2_to_4_ranks() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "c.tns", &counts(vec![60, 50, 40], 12_000, 11));
    let per_call = [("SPTMC_CPU_PHI_SESSION", "0")];
    // The switch took: f32 Φ moves the log-likelihoods off the f64 sessions' bits.
    let mut args = vec!["cp-apr", f.as_str()];
    args.extend(APR);
    let (f64_run, f32_run) = (
        lls(&json(&single(&args), "sessions")),
        lls(&json(&single_with(&args, &per_call), "per call")),
    );
    assert_ne!(f64_run, f32_run);
    same_lls_with(&f, &[2, 3, 4], &per_call);
    if let Some(f) = common::shared_file("movielens-100k.tns.gz") {
        same_lls_with(f.to_str().unwrap(), &[3], &per_call);
    }
}

/// One rank without a Φ session (here by its switch; on a node, a rank whose session
/// does not fit in memory) puts every rank on the per-call path: the run is the
/// all-per-call run's, bit for bit, not a mix of f64 and f32 Φ.
#[test]
fn one_rank_without_a_session_puts_every_rank_per_call() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "c.tns", &counts(vec![60, 50, 40], 12_000, 13));
    let mut args = vec!["cp-apr", f.as_str()];
    args.extend(APR);
    let per_call = [("SPTMC_CPU_PHI_SESSION", "0")];
    let all = json(&ranks_with(2, &args, &per_call), "2 ranks per call");
    let sessions = json(&ranks(2, &args), "2 ranks with sessions");
    // Rank 0 without its session, rank 1 with it (two programs under one mpirun).
    let bin = env!("CARGO_BIN_EXE_sptmc");
    let mixed = std::process::Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-x",
            "RAYON_NUM_THREADS=1",
        ])
        .args(["-np", "1", "-x", "SPTMC_CPU_PHI_SESSION=0", bin])
        .args(&args)
        .args([":", "-np", "1", "-x", "SPTMC_CPU_PHI_SESSION=1", bin])
        .args(&args)
        .output()
        .expect("mpirun runs");
    let mixed = json(&mixed, "2 ranks, one per call");
    assert_eq!(lls(&mixed), lls(&all));
    assert_eq!(mixed["weights"], all["weights"]);
    assert_ne!(lls(&sessions), lls(&all));
}

#[test]
fn a_rank_without_nonzeros_still_takes_part() {
    if mpirun().is_none() {
        return;
    }
    // Two diagonal blocks of a 2×2 grid over modes 0 and 1: the off-diagonal blocks
    // hold nothing.
    let a = counts(vec![30, 30, 20], 3000, 1);
    let mut entries = Vec::new();
    for k in 0..a.nnz() {
        let c = a.coords(k);
        entries.push((c.clone(), a.values()[k]));
        entries.push((vec![c[0] + 30, c[1] + 30, c[2]], a.values()[k] + 1.0));
    }
    let x = CooTensor::from_entries(vec![60, 60, 20], entries).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "blocks.tns", &x);
    let mut args = vec!["cp-apr", f.as_str()];
    args.extend(APR);
    let got = json(&ranks(4, &args), "4 ranks");
    let per_rank = got["distributed"]["per_rank"].as_array().unwrap();
    assert!(
        per_rank.iter().any(|r| r["nnz"] == 0),
        "some rank holds no nonzero: {per_rank:?}"
    );
    same_lls(&f, &[4]);
}

#[test]
fn bytes_per_iteration_match_the_model_and_stay_below_coarse() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let x = counts(vec![200, 200, 200], 40_000, 11);
    let f = write(dir.path(), "c.tns", &x);
    let mut args = vec!["cp-apr", f.as_str()];
    args.extend(APR);
    let got = json(&ranks(4, &args), "4 ranks");
    let d = &got["distributed"];
    let share = x.nnz() as f64 / 4.0;
    for r in d["per_rank"].as_array().unwrap() {
        let nnz = r["nnz"].as_f64().unwrap();
        assert!(
            (nnz - share).abs() <= 0.1 * share,
            "rank {} holds {nnz}",
            r["rank"]
        );
        let bytes = r["bytes_per_iter"].as_f64().unwrap();
        let model = r["model_bytes_per_iter"].as_f64().unwrap();
        let coarse = r["coarse_model_bytes_per_iter"].as_f64().unwrap();
        assert!(
            bytes <= 2.0 * model && bytes >= model / 2.0,
            "rank {}: measured {bytes} bytes per iteration vs the model's {model}",
            r["rank"]
        );
        assert!(
            bytes < coarse,
            "rank {}: {bytes} vs coarse {coarse}",
            r["rank"]
        );
        assert!(r["peak_bytes"].as_u64().unwrap() > 0);
    }
    let mean = d["per_rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bytes_per_iter"].as_f64().unwrap())
        .sum::<f64>()
        / 4.0;
    let rough = d["rough_bytes_per_iter"].as_f64().unwrap();
    assert!(
        mean <= 2.0 * rough && mean >= rough / 2.0,
        "{mean} vs {rough}"
    );
}

/// `--grain coarse` (every rank over whole modes, whole factors exchanged): the same
/// log-likelihoods as the medium grain, each rank a fair share of the nonzeros, the
/// bytes within 2× of the coarse-grained model and above the medium grain's on every
/// rank.
#[test]
fn coarse_grain_fits_the_same_and_sends_more_than_medium() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let x = counts(vec![200, 200, 200], 40_000, 11);
    let f = write(dir.path(), "c.tns", &x);
    let mut args = vec!["cp-apr", f.as_str()];
    args.extend(APR);
    let medium = json(&ranks(4, &args), "medium");
    args.extend(["--grain", "coarse"]);
    let coarse = json(&ranks(4, &args), "coarse");
    assert_eq!(coarse["distributed"]["scheme"], "coarse");
    assert_eq!(medium["distributed"]["scheme"], "medium");
    let (lm, lc) = (lls(&medium), lls(&coarse));
    assert_eq!(lm.len(), lc.len());
    for (k, (a, b)) in lc.iter().zip(&lm).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 * b.abs(),
            "iteration {k}: coarse {a} vs medium {b}"
        );
    }
    let share = x.nnz() as f64 / 4.0;
    let per_rank = |v: &Value| v["distributed"]["per_rank"].as_array().unwrap().clone();
    for (rm, rc) in per_rank(&medium).iter().zip(&per_rank(&coarse)) {
        let nnz = rc["nnz"].as_f64().unwrap();
        assert!(
            (nnz - share).abs() <= 0.1 * share,
            "coarse: rank {} holds {nnz}",
            rc["rank"]
        );
        let (bm, bc) = (
            rm["bytes_per_iter"].as_f64().unwrap(),
            rc["bytes_per_iter"].as_f64().unwrap(),
        );
        let model = rc["model_bytes_per_iter"].as_f64().unwrap();
        assert_eq!(
            rc["model_bytes_per_iter"],
            rc["coarse_model_bytes_per_iter"]
        );
        assert!(
            bc <= 2.0 * model && bc >= model / 2.0,
            "coarse: rank {} measured {bc} bytes vs the model's {model}",
            rc["rank"]
        );
        assert!(bm < bc, "rank {}: medium {bm} vs coarse {bc}", rc["rank"]);
    }
}

#[test]
fn model_files_have_the_single_process_form() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "c.tns", &counts(vec![40, 30, 20], 5000, 5));
    let (a, b) = (dir.path().join("one"), dir.path().join("three"));
    let mut args = vec!["cp-apr", f.as_str(), "--out", a.to_str().unwrap()];
    args.extend(APR);
    json(&single(&args), "one process");
    args[3] = b.to_str().unwrap();
    json(&ranks(3, &args), "3 ranks");
    assert_same_model_form(&a, &b);
}

#[test]
fn negative_counts_are_one_error_line_from_one_rank() {
    if mpirun().is_none() {
        return;
    }
    let x = counts(vec![30, 30, 30], 3000, 2);
    let mut entries: Vec<_> = (0..x.nnz()).map(|k| (x.coords(k), x.values()[k])).collect();
    entries[1234].1 = -2.0;
    let x = CooTensor::from_entries(vec![30, 30, 30], entries).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "neg.tns", &x);
    let args = ["cp-apr", f.as_str(), "--rank", "2"];
    let one = single(&args);
    assert_eq!(one.status.code(), Some(1));
    let want = String::from_utf8_lossy(&one.stderr)
        .lines()
        .find(|l| l.starts_with("sptmc: error:"))
        .expect("an error line")
        .to_string();
    assert!(want.contains("negative"), "{want}");
    for p in [2, 4] {
        let got = ranks(p, &args);
        assert_eq!(got.status.code(), Some(1), "{p} ranks");
        let err = String::from_utf8_lossy(&got.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| l.contains("error:")).collect();
        assert_eq!(lines, vec![want.as_str()], "{p} ranks: {err}");
    }
}

/// The model files written under mpirun are the single process's: the same header
/// lines and every row's values within 1e-6 of their column's largest. f64 throughout,
/// only the order of sums differs: that in which a row's partial Φ from several ranks
/// adds, and that of the start's column sums (mode 0, mostly empty, runs on its used
/// rows, `decomp::used_rows::UsedRows`, each rank summing its own rows' span). Mode 0
/// is longer than the rows rank 0 receives at once.
#[test]
fn model_files_are_the_single_process_files() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let long = 2 * (sptmc::dist::output::WINDOW_BYTES / (8 * 4)) + 1000;
    let f = write(dir.path(), "c.tns", &counts(vec![long, 30, 20], 12_000, 5));
    let args = |out: &std::path::Path| {
        let mut a = vec!["cp-apr".to_string(), f.clone(), "--out".into()];
        a.push(out.to_str().unwrap().into());
        a.extend(APR.map(String::from));
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
        assert_same_model_values(&one, &many, 1e-6);
    }
}

/// Counts times 2^-50 (an RMS near 2^-48): the single process and every count of ranks
/// run them multiplied by 2^48, that is on the counts / 4, and report that run's
/// log-likelihoods in the given units. Without it the absolute KKT test stopped such
/// runs after 2 iterations, before the model moved.
#[test]
fn values_far_below_one_run_scaled_on_every_rank_count() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let x = counts(vec![60, 50, 40], 12_000, 7);
    let times = |s: f64| {
        let entries: Vec<_> = (0..x.nnz())
            .map(|k| (x.coords(k), x.values()[k] * s))
            .collect();
        CooTensor::from_entries(x.dims().to_vec(), entries).unwrap()
    };
    let quarter = write(dir.path(), "q.tns", &times(0.25));
    let tiny = write(dir.path(), "t.tns", &times(2f64.powi(-50)));
    let args = |f: &str| -> Vec<String> {
        [
            "cp-apr", f, "--rank", "4", "--iters", "20", "--json", "--seed=3",
        ]
        .map(String::from)
        .to_vec()
    };
    let (qa, ta) = (args(&quarter), args(&tiny));
    let (qa, ta): (Vec<&str>, Vec<&str>) = (
        qa.iter().map(String::as_str).collect(),
        ta.iter().map(String::as_str).collect(),
    );
    let unit = json(&single(&qa), "the counts / 4");
    assert_eq!(unit["values_scaled_by_2_to_the"], Value::Null);
    let sum: f64 = x.values().iter().sum::<f64>() * 0.25;
    let want: Vec<f64> = lls(&unit)
        .iter()
        .map(|ll| 2f64.powi(-48) * (ll - 48.0 * std::f64::consts::LN_2 * sum))
        .collect();
    assert!(
        want.len() > 2,
        "the counts / 4 run {} iterations",
        want.len()
    );
    for (what, out) in [
        ("one process", single(&ta)),
        ("2 ranks", ranks(2, &ta)),
        ("3 ranks", ranks(3, &ta)),
    ] {
        let got = json(&out, what);
        assert_eq!(got["values_scaled_by_2_to_the"], 48, "{what}");
        let got = lls(&got);
        assert_eq!(got.len(), want.len(), "{what}: iterations");
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs(),
                "{what}, iteration {k}: {a} vs {b}"
            );
        }
    }
}

/// `sptmc cp-apr` of a mostly empty tensor (`crate::cp_rows::mostly_empty`, 300 rows
/// used in modes 0 and 1, of seed `seed`, written in `dir`) with `args` and `--out`
/// into `dir/NAME`, in one process (`ranks` `None`) or under mpirun; the output and
/// the model's folder, named for the run.
struct SparseRows {
    dir: tempfile::TempDir,
    file: String,
}

impl SparseRows {
    fn new(seed: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let x = crate::cp_rows::mostly_empty(300, 6000, seed);
        let file = write(dir.path(), "sparse-rows.tns", &x);
        SparseRows { dir, file }
    }

    fn run(&self, args: &[&str], ranks_of: Option<usize>) -> (Output, PathBuf) {
        let out = (self.dir.path()).join(ranks_of.map_or("one".into(), |p| format!("ranks-{p}")));
        let mut a = vec!["cp-apr", self.file.as_str(), "--out", out.to_str().unwrap()];
        a.extend(args);
        let o = match ranks_of {
            None => single(&a),
            Some(p) => ranks(p, &a),
        };
        (o, out)
    }
}

/// Modes mostly empty run on their used rows under mpirun as in one process: the note
/// says so, `--json` reports the rows held, the log-likelihoods match on 1 to 4 ranks
/// (as [`same_lls`] asks), and the model files have every row of the tensor, zero
/// where the single process's are, the others as in
/// [`model_files_are_the_single_process_files`].
#[test]
fn mostly_empty_modes_run_on_their_used_rows_on_1_to_4_ranks() {
    if mpirun().is_none() {
        return;
    }
    let t = SparseRows::new(32);
    same_lls(&t.file, &[1, 2, 3, 4]);
    let (o, one) = t.run(&APR, None);
    json(&o, "one process");
    let zero_rows = |dir: &std::path::Path| -> Vec<bool> {
        let t = std::fs::read_to_string(dir.join("factor-1.txt")).unwrap();
        (t.lines().filter(|l| !l.starts_with('#')))
            .map(|l| l.split(' ').all(|v| v.parse::<f64>().unwrap() == 0.0))
            .collect()
    };
    let want = zero_rows(&one);
    assert_eq!(want.iter().filter(|&&z| !z).count(), 300);
    for p in [1, 3] {
        let (o, many) = t.run(&APR, Some(p));
        let got = json(&o, &format!("{p} ranks"));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.contains("CP-APR runs on the rows with nonzeros (mode 0: 300 of "),
            "{stderr}"
        );
        assert_eq!(
            got["distributed"]["rows_held"],
            serde_json::json!([300, 300, 9])
        );
        assert_same_model_values(&one, &many, 1e-6);
        assert_eq!(zero_rows(&many), want, "{p} ranks: the empty rows");
    }
}

/// Where a mode held on its used rows meets the tolerance at the start, the ranks run
/// on every row, as the single process does then: the note says so, and the one
/// iteration's log-likelihood and the model files are the single process's.
#[test]
fn a_mode_that_does_not_update_puts_the_ranks_on_every_row() {
    if mpirun().is_none() {
        return;
    }
    let t = SparseRows::new(33);
    let args = ["--rank", "3", "--tol", "1e6", "--json"];
    let (o, one) = t.run(&args, None);
    let want = json(&o, "one process");
    let (o, many) = t.run(&args, Some(2));
    let got = json(&o, "2 ranks");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("CP-APR runs on every row"), "{stderr}");
    let (a, b) = (lls(&got), lls(&want));
    assert_eq!(a.len(), 1);
    assert_eq!(b.len(), 1);
    assert!((a[0] - b[0]).abs() <= 1e-9 * b[0].abs(), "{a:?} vs {b:?}");
    assert_same_model_values(&one, &many, 1e-6);
}
