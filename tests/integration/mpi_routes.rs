//! The medium-grained exchange of only the factor rows each rank's block uses (`--grain
//! medium`, the default) against the exchange of every row of the slabs (`--grain
//! medium-slabs`), under `mpirun -np 3` and `-np 4`, for CP-ALS and CP-APR, on a tensor
//! sparse enough that the layers of its long modes use under half their rows: the same
//! bits (the rows left out would add exact zeros, in the same order), fewer bytes, and
//! exactly the bytes the routes' model counts.
//!
//! Needs a build with `--features mpi` and `mpirun` on the PATH; skipped visibly
//! otherwise (a failure under `SPTMC_REQUIRE_MPI=1`, as CI sets it).

use crate::common;

use common::mpi::{assert_same_model_bytes, json, mpirun, ranks, write};
use serde_json::Value;
use sptmc::tensor::CooTensor;
use sptmc::tensor::generate::{GenSpec, Pattern, generate};

/// Two long modes with under one nonzero per row and a short one: a block uses under a
/// third of the rows of its slab of a long mode when two or three ranks share the slab
/// (below the share where only the used rows travel); every rank uses the whole short
/// mode, which then goes whole. Counts 1–4, so CP-APR runs on it too.
fn sparse() -> CooTensor {
    let x = generate(&GenSpec {
        dims: vec![3000, 2000, 24],
        nnz: 2000,
        pattern: Pattern::Uniform,
        seed: 17,
    })
    .unwrap();
    let entries: Vec<_> = (0..x.nnz())
        .map(|k| (x.coords(k), 1.0 + (k % 4) as f64))
        .collect();
    CooTensor::from_entries(x.dims().to_vec(), entries).unwrap()
}

/// The numbers of `key` in every iteration of `v`.
fn per_iteration(v: &Value, key: &str) -> Vec<f64> {
    (v["iterations"].as_array().expect("iterations").iter())
        .map(|s| s[key].as_f64().expect("a number"))
        .collect()
}

/// `rank`'s figure `key` from a run's `distributed.per_rank`.
fn figure(v: &Value, rank: usize, key: &str) -> f64 {
    v["distributed"]["per_rank"][rank][key]
        .as_f64()
        .unwrap_or_else(|| panic!("rank {rank}'s {key}"))
}

/// Runs `args` on `p` ranks with each exchange (model files into `dir`), and checks the
/// same `key` in every iteration, the same model files, and per rank: fewer bytes with
/// the used rows where its routes leave rows out, and the difference in bytes between
/// the two runs that of their models (within `slack` bytes: the mean of rounded
/// counts).
fn same_bits_fewer_bytes(args: &[&str], key: &str, p: usize, dir: &std::path::Path, slack: f64) {
    let run = |grain: &str| {
        let out = dir.join(format!("{grain}-{p}"));
        let mut a = args.to_vec();
        let out_s = out.to_str().unwrap().to_string();
        a.extend(["--grain", grain, "--out", &out_s]);
        (json(&ranks(p, &a), &format!("{grain} on {p} ranks")), out)
    };
    let ((used, used_dir), (slabs, slabs_dir)) = (run("medium"), run("medium-slabs"));
    assert_eq!(used["distributed"]["exchange"], "used-rows");
    assert_eq!(slabs["distributed"]["exchange"], "slabs");
    assert_eq!(used["distributed"]["grid"], slabs["distributed"]["grid"]);
    let (a, b) = (per_iteration(&used, key), per_iteration(&slabs, key));
    assert!(a.len() >= 3, "{p} ranks: {} iterations", a.len());
    assert_eq!(a, b, "{p} ranks: {key} with the used rows vs every row");
    assert_same_model_bytes(&slabs_dir, &used_dir);
    let mut fewer = 0;
    for k in 0..p {
        let (bu, bs) = (
            figure(&used, k, "bytes_per_iter"),
            figure(&slabs, k, "bytes_per_iter"),
        );
        let (mu, ms) = (
            figure(&used, k, "model_bytes_per_iter"),
            figure(&slabs, k, "model_bytes_per_iter"),
        );
        // The slab model is the exchange of every row, whichever exchange ran.
        assert_eq!(
            ms,
            figure(&slabs, k, "slab_model_bytes_per_iter"),
            "rank {k}"
        );
        assert_eq!(
            ms,
            figure(&used, k, "slab_model_bytes_per_iter"),
            "rank {k}"
        );
        assert!(mu <= ms && bu <= bs, "rank {k}: {bu} ({mu}) vs {bs} ({ms})");
        assert!(
            ((bs - bu) - (ms - mu)).abs() <= slack,
            "rank {k}: the used rows save {} bytes, the model {}",
            bs - bu,
            ms - mu
        );
        fewer += usize::from(mu < ms);
    }
    assert!(fewer > 0, "{p} ranks: no rank's routes left a row out");
}

#[test]
fn cp_als_on_the_used_rows_is_the_slab_exchange_with_fewer_bytes() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "s.tns", &sparse());
    let args = [
        "cp", &f, "--rank", "5", "--iters", "6", "--tol", "0", "--json", "--seed=2",
    ];
    for p in [3, 4] {
        same_bits_fewer_bytes(&args, "fit", p, dir.path(), 0.0);
    }
}

#[test]
fn cp_apr_on_the_used_rows_is_the_slab_exchange_with_fewer_bytes() {
    if mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "s.tns", &sparse());
    let args = [
        "cp-apr", &f, "--rank", "3", "--iters", "4", "--tol", "0", "--json", "--seed=2",
    ];
    // The CP-APR model reads the mean Φ evaluations per iteration: its byte counts
    // are rounded, and the measured ones are means rounded down.
    for p in [3, 4] {
        same_bits_fewer_bytes(&args, "log_likelihood", p, dir.path(), 2.0);
    }
}
