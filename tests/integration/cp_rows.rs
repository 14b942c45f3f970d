//! CP-ALS and CP-APR on the used rows of mostly empty modes (`decomp/used_rows.rs`):
//! through the driver, as both front ends run them, the model is the run on all rows,
//! on the tensor's own rows; the command line says so and writes every row; one
//! rank of the distributed CP-APR runs them as the single process does.

use crate::common::{self, twin};

use rand::{Rng, SeedableRng};
use sptmc::decomp::{CpAprOptions, CpOptions, cp_als, cp_apr};
use sptmc::driver::{self, CpAprRequest, CpRequest, NoForms};
use sptmc::engine::Workload;
use sptmc::{CooTensor, Op};
use std::collections::BTreeMap;

/// `nnz` distinct entries with values in 1..=5 (exact in fp16) whose modes 0 and 1
/// use `used` rows each, spread over extents of 20 000 and 30 000; mode 2 has 9 rows.
pub(crate) fn mostly_empty(used: usize, nnz: usize, seed: u64) -> CooTensor {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let dims = vec![20_000, 30_000, 9];
    let mut entries = BTreeMap::new();
    while entries.len() < nnz {
        let c: Vec<u32> = vec![
            (rng.random_range(0..used) * (dims[0] / used)) as u32,
            (rng.random_range(0..used) * (dims[1] / used)) as u32,
            rng.random_range(0..9),
        ];
        entries.insert(c, f64::from(rng.random_range(1..=5u32)));
    }
    CooTensor::from_entries(dims, entries).unwrap()
}

twin!(
    /// The driver runs the renumbered tensor and returns the all-rows run's model: the
    /// fits and unit-norm factors within four times the backend's bound on an entry's
    /// relative error (both runs form the same products, summed in another order),
    /// every empty row exactly zero. Fresh seeds.
    the_driver_runs_the_used_rows_and_returns_every_row,
    |engine| {
        let seed = common::fresh_seed("cp_rows");
        let x = mostly_empty(300, 6000, seed);
        let rank = 4;
        let request = CpRequest {
            rank,
            iters: 12,
            tol: 0.0,
            seed,
            init: None,
        };
        let job = request.validate(&x).unwrap();
        let rows = job.rows.as_ref().expect("modes 0 and 1 are 98.5 % empty");
        assert_eq!(rows.tensor().dims(), &[300, 300, 9]);
        let report = driver::run(&job, engine, &x, &NoForms, &mut |_: &_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        let all_rows = engine
            .prepare(&x, &[Workload { op: Op::Mttkrp, rank }])
            .unwrap();
        let opts = CpOptions {
            rank,
            max_iters: 12,
            tol: 0.0,
            seed,
            init: None,
        };
        let want = cp_als(engine, &all_rows, &opts).unwrap();
        let got = &report.model;
        let tol = 4.0 * engine.backend().relative_error();
        for (it, (a, b)) in want.fits.iter().zip(&got.fits).enumerate() {
            assert!((a - b).abs() <= tol, "iteration {it}: {b} vs {a} on all rows");
        }
        assert_eq!(want.fits.len(), got.fits.len());
        for (m, (a, b)) in want.factors.iter().zip(&got.factors).enumerate() {
            assert_eq!(a.shape(), b.shape(), "mode {m}");
            for (k, (u, v)) in a.data().iter().zip(b.data()).enumerate() {
                assert!((u - v).abs() <= tol as f32, "mode {m} entry {k}: {v} vs {u}");
            }
        }
        for m in 0..2 {
            let used: std::collections::BTreeSet<u32> = x.indices(m).iter().copied().collect();
            for i in 0..x.dims()[m] {
                let zero = got.factors[m].row(i).iter().all(|&v| v == 0.0);
                assert_eq!(zero, !used.contains(&(i as u32)), "mode {m} row {i}");
            }
        }
    }
);

twin!(
    /// CP-APR through the driver: the log-likelihoods and KKT violations of the run on
    /// all rows within four times the backend's bound on an entry's relative error,
    /// the factors (columns summing to 1) within it, every empty row exactly zero.
    cp_apr_through_the_driver_is_the_all_rows_run,
    |engine| {
        let seed = common::fresh_seed("cp_apr_rows");
        let x = mostly_empty(300, 6000, seed);
        let request = CpAprRequest {
            rank: 4,
            iters: 6,
            seed,
            ..CpAprRequest::defaults()
        };
        let job = request.validate(&x).unwrap();
        assert_eq!(job.rows.as_ref().unwrap().tensor().dims(), &[300, 300, 9]);
        let report = driver::run(&job, engine, &x, &NoForms, &mut |_: &_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        let all_rows = engine
            .prepare(&x, &[Workload { op: Op::Mttkrp, rank: 4 }])
            .unwrap();
        let opts = CpAprOptions {
            rank: 4,
            max_iters: 6,
            seed,
            ..CpAprOptions::default()
        };
        let want = cp_apr(engine, &all_rows, &opts).unwrap();
        let got = &report.model;
        let tol = 4.0 * engine.backend().relative_error();
        assert_eq!(want.iters.len(), got.iters.len());
        for (a, b) in want.iters.iter().zip(&got.iters) {
            let (la, lb) = (a.log_likelihood, b.log_likelihood);
            assert!((la - lb).abs() <= tol * la.abs(), "iteration {}: {lb} vs {la}", a.iter);
            let (ka, kb) = (a.kkt_violation, b.kkt_violation);
            assert!((ka - kb).abs() <= tol * ka.abs(), "iteration {}: {kb} vs {ka}", a.iter);
        }
        for (m, (a, b)) in want.factors.iter().zip(&got.factors).enumerate() {
            assert_eq!(a.shape(), b.shape(), "mode {m}");
            for (k, (u, v)) in a.data().iter().zip(b.data()).enumerate() {
                assert!((u - v).abs() <= tol as f32, "mode {m} entry {k}: {v} vs {u}");
            }
        }
        let used: std::collections::BTreeSet<u32> = x.indices(1).iter().copied().collect();
        for i in 0..x.dims()[1] {
            let zero = got.factors[1].row(i).iter().all(|&v| v == 0.0);
            assert_eq!(zero, !used.contains(&(i as u32)), "mode 1 row {i}");
        }
    }
);

/// Runs `sptmc COMMAND FILE ARGS --backend cpu --out DIR` on a mostly empty tensor
/// (mode 0: 200 of its 19 901 rows used; of seed `seed`, written in `dir`) and checks
/// that it says `what` runs on the used rows and writes every row of the tensor, zero
/// where a row is empty. The tensor's file.
pub(crate) fn says_so_and_writes_every_row(
    dir: &std::path::Path,
    seed: u64,
    (command, args): (&str, &[&str]),
    what: &str,
) -> std::path::PathBuf {
    let x = mostly_empty(200, 3000, seed);
    let file = dir.join("sparse-rows.tns");
    sptmc::tensor::tns::write(&file, &x).unwrap();
    let out = dir.join("model");
    let o = common::sptmc_command(dir)
        .args([command, file.to_str().unwrap()])
        .args(args)
        .args(["--backend", "cpu", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{what} runs on the rows with nonzeros (mode 0: 200 of 19901 rows"
        )),
        "{stderr}"
    );
    let rows = |m: usize| -> Vec<String> {
        let t = std::fs::read_to_string(out.join(format!("factor-{m}.txt"))).unwrap();
        t.lines()
            .filter(|l| !l.starts_with('#'))
            .map(String::from)
            .collect()
    };
    let f0 = rows(0);
    // The file's extent: the largest index used, 199 × 100, plus one.
    assert_eq!(f0.len(), 19_901);
    assert!(f0[100].split(' ').any(|v| v.parse::<f64>().unwrap() != 0.0));
    assert!(f0[101].split(' ').all(|v| v.parse::<f64>().unwrap() == 0.0));
    assert_eq!(rows(2).len(), 9);
    file
}

/// `sptmc cp` says which modes run on their used rows and writes the factors on the
/// tensor's own rows; `sptmc cp-apr` says so too.
#[test]
fn the_command_line_says_so_and_writes_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let cp = ("cp", &["--rank", "3", "--iters", "5"][..]);
    let file = says_so_and_writes_every_row(dir.path(), 7, cp, "CP-ALS");
    let o = common::sptmc_command(dir.path())
        .args([
            "cp-apr",
            file.to_str().unwrap(),
            "--rank",
            "3",
            "--iters",
            "2",
        ])
        .args(["--backend", "cpu"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("CP-APR runs on the rows with nonzeros (mode 0: 200 of 19901 rows"),
        "{stderr}"
    );
}

twin!(
    /// CP-APR on one rank's distributed path (`sptmc::dist`, the process its own
    /// communicator) runs mostly empty modes on their used rows as the single process
    /// does on the same engine (`cp_apr_on_rows`): the rows held, every iteration's
    /// log-likelihood within 1e-9 relative on the CPU's f64 sessions (only the order of
    /// the start's column sums differs) and within the 1e-6 that runs across ranks
    /// must meet where Φ runs per call in f32 (CUDA, and the CPU so, here). Fresh
    /// seeds.
    cp_apr_on_one_rank_runs_the_used_rows,
    |engine| {
        use sptmc::dist::{comm::Channel, exchange::distribute, partition::Scheme};
        use sptmc::engine::{CpuOptions, Engine, PhiKernel};
        let seed = common::fresh_seed("cp_apr_on_one_rank_runs_the_used_rows");
        let x = mostly_empty(300, 6000, seed);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.tns");
        sptmc::tensor::tns::write(&p, &x).unwrap();
        // As read back: the file's extents are the largest indices used, plus one.
        let (x, _) = sptmc::tensor::tns::read(&p).unwrap();
        let opts = CpAprOptions {
            rank: 3,
            max_iters: 8,
            tol: 0.0,
            seed,
            ..Default::default()
        };
        let per_call = Engine::cpu_with(CpuOptions {
            phi: PhiKernel::PerCall,
            ..Default::default()
        })
        .unwrap();
        let mut engines = vec![(engine, 1e-9)];
        match engine.kind() {
            sptmc::engine::BackendKind::Cpu => engines.push((&per_call, 1e-6)),
            _ => engines[0].1 = 1e-6,
        }
        for (engine, within) in engines {
            let rows = sptmc::decomp::used_rows::UsedRows::of(&x, 3)
                .unwrap()
                .expect("modes 0 and 1 mostly empty");
            let w = Workload {
                op: Op::Mttkrp,
                rank: 3,
            };
            let prepared = engine.prepare(rows.tensor(), &[w]).unwrap();
            let want = sptmc::decomp::cp_apr::cp_apr_on_rows(engine, &prepared, &rows, &opts, &mut |_| {
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
            let ch = Channel::single();
            let share = sptmc::dist::read::read_share(&ch, &p).unwrap();
            let mut block = distribute(&ch, share, Scheme::Medium, &p, Some(3)).unwrap();
            assert_eq!(block.dims, rows.tensor().dims());
            let got = sptmc::dist::cp_apr::cp_apr(&ch, engine, &mut block, &opts, &mut |_| {})
                .unwrap()
                .expect("every mode updates");
            let (a, b) = (got.model.log_likelihoods(), want.log_likelihoods());
            assert_eq!(a.len(), b.len());
            for (k, (a, b)) in a.iter().zip(&b).enumerate() {
                assert!(
                    a.is_finite() && (a - b).abs() <= within * b.abs(),
                    "seed {seed}, iteration {k}: {a} on one rank, {b} alone"
                );
            }
        }
    }
);
