//! Completion on the rows with training entries (`decomp/completion/compact.rs`): the
//! run on a tensor whose modes are mostly rows without entries is the run on all rows.

use crate::common;

use rand::{Rng, SeedableRng};
use sptmc::decomp::completion::{Compaction, Split, split};
use sptmc::decomp::{CompletionModel, CompletionOptions, Solver, complete, complete_compacted};
use sptmc::driver::{self, CompletionRequest, NoForms};
use sptmc::engine::{Engine, Prepared, Workload};
use sptmc::{CooTensor, Matrix, Op};

/// A tensor of `nnz` entries over `dims`, the rows of mode `m` drawn from `used[m]` of
/// them spread over its extent (so that most rows may have no entry), values of a rank-2 model (its
/// third mode constant) plus 3, with uniform noise on [−0.05, 0.05), split 80/10/10.
fn sparse_rows(dims: &[usize], used: &[usize], nnz: usize, seed: u64) -> Split {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut entries = std::collections::BTreeMap::new();
    // A mode past the second is a context mode the model holds near a constant
    // (`completion/mod.rs`): the truth's is constant.
    let row = |m: usize, i: u32| match m % 3 {
        2 => 1.0,
        _ => ((i as f64 + 1.0) * (m as f64 + 1.7)).sin(),
    };
    while entries.len() < nnz {
        // Spread the used rows over the extent, not all at its start.
        let c: Vec<u32> = (0..dims.len())
            .map(|m| {
                let k = rng.random_range(0..used[m]);
                (k * (dims[m] / used[m])) as u32
            })
            .collect();
        let v = 3.0
            + c.iter()
                .enumerate()
                .map(|(m, &i)| row(m, i))
                .product::<f64>()
            + 0.5
                * c.iter()
                    .enumerate()
                    .map(|(m, &i)| row(m + 3, i))
                    .product::<f64>()
            + 0.1 * (rng.random::<f64>() - 0.5);
        entries.insert(c, v);
    }
    let x = CooTensor::from_entries(dims.to_vec(), entries).unwrap();
    split(&x, [0.8, 0.1, 0.1], seed).unwrap()
}

fn prepare(engine: &Engine, x: &CooTensor, rank: usize) -> Prepared {
    let w = [Workload {
        op: Op::Completion,
        rank,
    }];
    engine.prepare(x, &w).unwrap()
}

fn runs(s: &Split, o: &CompletionOptions) -> (CompletionModel, CompletionModel, Compaction) {
    let engine = Engine::cpu();
    let width = o.rank + s.train.order();
    let all = complete(
        &engine,
        &prepare(&engine, &s.train, width),
        &s.validation,
        o,
    )
    .unwrap();
    let c = Compaction::of(&s.train, &s.validation)
        .unwrap()
        .expect("most rows have no entry");
    let p = prepare(&engine, c.train(), width);
    let used = complete_compacted(&engine, &p, &c, o, &mut |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    (all, used, c)
}

/// Whether `a` and `b` agree within `n` roundings of f64 (relative): what summing the
/// same `n` terms in another order can change.
fn close(a: f64, b: f64, n: usize) -> bool {
    (a - b).abs() <= n as f64 * f64::EPSILON * a.abs().max(b.abs())
}

/// Asserts what a model on the tensor's rows holds at the rows without training
/// entries: zero factor rows and zero biases.
fn empty_rows_are_zero(m: &CompletionModel, c: &Compaction) {
    for (mode, f) in m.factors.iter().enumerate() {
        let used = &c.rows.used[mode];
        for i in 0..f.rows() {
            if used.binary_search(&(i as u32)).is_err() {
                assert!(f.row(i).iter().all(|&v| v == 0.0), "mode {mode} row {i}");
                assert_eq!(m.biases[mode][i], 0.0, "mode {mode} row {i}");
            }
        }
    }
}

#[test]
fn als_and_ccd_on_the_rows_with_entries_run_as_on_every_row() {
    let seed = common::fresh_seed("completion on the used rows, ALS and CCD++");
    // Modes 0 and 1 use 6 % and 7 % of their rows; the third mode (a context mode,
    // anchored) all of them.
    let s = sparse_rows(&[5000, 3000, 30], &[300, 200, 30], 6000, seed);
    let dims = s.train.dims().to_vec();
    let k = 3 + dims.len();
    // The sums that may run in another order: the loss over the entries, the penalty
    // over every row's learned columns.
    let terms = s.train.nnz() + dims.iter().sum::<usize>() * k;
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5eed);
    let given: Vec<Matrix> = (dims.iter())
        .map(|&d| Matrix::from_fn(d, 3, |_, _| rng.random::<f32>() - 0.5))
        .collect();
    for (solver, init) in [
        (Solver::Als, None),
        (Solver::Ccd, None),
        (Solver::Als, Some(given)),
    ] {
        let o = CompletionOptions {
            rank: 3,
            solver,
            lambda: Some(0.5),
            max_epochs: 30,
            patience: 30,
            seed,
            init,
            ..CompletionOptions::default()
        };
        let (all, used, c) = runs(&s, &o);
        let what = format!("{solver}, init given: {}", o.init.is_some());
        assert_eq!(c.rows.spare, [true, true, false], "{what}");
        assert_eq!(all.epochs.len(), used.epochs.len(), "{what}");
        for (a, b) in all.epochs.iter().zip(&used.epochs) {
            let e = a.epoch;
            assert!(
                close(a.validation_rmse, b.validation_rmse, terms),
                "{what} epoch {e}: {a:?} {b:?}"
            );
            assert!(
                close(a.train_rmse, b.train_rmse, terms),
                "{what} epoch {e}: {a:?} {b:?}"
            );
            assert!(
                close(a.objective, b.objective, terms),
                "{what} epoch {e}: {a:?} {b:?}"
            );
        }
        assert_eq!(all.best_epoch, used.best_epoch, "{what}");
        assert_eq!(all.empty_rows, used.empty_rows, "{what}");
        assert_eq!(used.dims(), dims, "{what}");
        for (m, (a, b)) in all.factors.iter().zip(&used.factors).enumerate() {
            let scale = a.data().iter().fold(0f32, |s, v| s.max(v.abs()));
            let worst =
                (a.data().iter().zip(b.data())).fold(0f32, |s, (x, y)| s.max((x - y).abs()));
            // The factors of the same iterates, up to the rounding of the sums above.
            assert!(worst <= 1e-5 * scale, "{what} mode {m}: {worst} of {scale}");
        }
        empty_rows_are_zero(&used, &c);
    }
}

#[test]
fn sgd_on_the_rows_with_entries_predicts_to_the_noise_level() {
    // SGD visits the entries in strata of the prepared tensor, which renumbering
    // changes: the iterates differ, the model must not be worse. From a small random
    // start SGD sometimes stops on a plateau of this tensor (1 run in 50 at rank 4),
    // on all rows as on the used ones, so both start from ALS's model on all rows.
    let seed = common::fresh_seed("completion on the used rows, SGD");
    let s = sparse_rows(&[4000, 3000, 30], &[150, 100, 30], 20000, seed);
    // The noise: uniform on [−0.05, 0.05).
    let sigma = 0.1 / 12f64.sqrt();
    let als = CompletionOptions {
        rank: 4,
        solver: Solver::Als,
        lambda: Some(0.05),
        max_epochs: 200,
        patience: 20,
        seed,
        ..CompletionOptions::default()
    };
    let (start, _, _) = runs(&s, &als);
    let o = CompletionOptions {
        solver: Solver::Sgd,
        max_epochs: 300,
        patience: 50,
        init: Some(start.factors.clone()),
        ..als
    };
    let (all, used, c) = runs(&s, &o);
    for (what, m) in [
        ("ALS", &start),
        ("SGD on all rows", &all),
        ("SGD on used rows", &used),
    ] {
        let rmse = m.rmse(&s.test).unwrap().unwrap();
        // About 16 000 training entries for 1 400 parameters: the estimation error
        // adds a few percent to σ.
        assert!(
            (rmse - sigma).abs() <= 0.1 * sigma,
            "{what}: test RMSE {rmse}, σ {sigma}, {} epochs",
            m.epochs.len()
        );
    }
    assert_eq!(all.empty_rows, used.empty_rows);
    empty_rows_are_zero(&used, &c);
}

#[test]
fn the_driver_runs_on_the_used_rows_where_an_eighth_of_a_mode_is_empty() {
    let seed = common::fresh_seed("completion driver on the used rows");
    let engine = Engine::cpu();
    let request = CompletionRequest {
        rank: 2,
        lambda: Some(0.5),
        epochs: 5,
        seed,
        ..CompletionRequest::defaults()
    };
    // Every row used in training: nothing to renumber.
    let dense = sparse_rows(&[40, 30, 5], &[40, 30, 5], 4000, seed);
    let used: Vec<usize> = (0..3)
        .map(|m| {
            let mut u = dense.train.indices(m).to_vec();
            u.sort_unstable();
            u.dedup();
            u.len()
        })
        .collect();
    let job = request.validate(&dense.train, &dense.validation).unwrap();
    assert_eq!(job.compaction.is_some(), used != [40, 30, 5], "{used:?}");
    // Mode 0 with 1 000 of its 8 000 rows empty (an eighth) is renumbered; mode 1, at
    // all of its rows, is not.
    let s = sparse_rows(&[8000, 30, 5], &[7000, 30, 5], 6000, seed);
    let job = request.validate(&s.train, &s.validation).unwrap();
    let c = job
        .compaction
        .as_ref()
        .expect("an eighth of mode 0 is empty");
    let empty = 8000 - c.rows.used[0].len();
    assert!(empty >= 1000, "{empty}");
    assert!(c.rows.spare[0]);
    let r = driver::run(&job, &engine, &s.train, &NoForms, &mut |_: &_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(r.model.dims(), s.train.dims());
    assert_eq!(r.model.empty_rows[0], empty);
    empty_rows_are_zero(&r.model, c);
    // The validation entries at rows without training entries predict as such rows do.
    assert!(r.model.rmse(&s.validation).unwrap().unwrap().is_finite());
}
