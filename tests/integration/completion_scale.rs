//! Completion on values far from 1 (`decomp/completion/scale.rs`): the driver, as the
//! command line and Python run it, multiplies them by a power of two and returns the
//! model in the given units; the library's own entry point refuses what its f32 sums
//! cannot hold instead of returning the bias model.

use crate::common;
use crate::low_rank::{Case, draw};

use sptmc::decomp::completion::{Baselines, ValueScale};
use sptmc::decomp::{CompletionModel, CompletionOptions, complete};
use sptmc::driver::{self, CompletionRequest, NoForms};
use sptmc::engine::{Engine, Workload};
use sptmc::{CooTensor, Op};

/// `x` with every value times `k`.
fn times(x: &CooTensor, k: f64) -> CooTensor {
    let indices = (0..x.order()).map(|m| x.indices(m).to_vec()).collect();
    let values = x.values().iter().map(|v| v * k).collect();
    CooTensor::new(x.dims().to_vec(), indices, values).unwrap()
}

/// Rank 3 with factors uniform in [0, 1), times 4: a spread of about 1 (between 2^-1.5
/// and 2^1.5, so that a power `2^(3e)` brings `2^(−3e)` times the values back to
/// them exactly).
fn case() -> Case {
    Case {
        dims: [30, 28, 24],
        rank: 3,
        offset: 2.0,
        scale: 4.0,
        observed: 0.3,
        noise: 0.05,
    }
}

/// The driver's run on the problem's training and validation entries times `k`: the
/// scale it chose and its model.
fn run(seed: u64, k: f64) -> (Option<ValueScale>, CompletionModel, f64) {
    let p = draw(&case(), seed);
    let (train, validation) = (times(&p.split.train, k), times(&p.split.validation, k));
    let request = CompletionRequest {
        rank: 8,
        seed,
        epochs: 30,
        ..CompletionRequest::defaults()
    };
    let job = request.validate(&train, &validation).unwrap();
    let engine = Engine::cpu();
    let r = driver::run(&job, &engine, &train, &NoForms, &mut |_: &_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap_or_else(|e| panic!("×{k:e}: {e}"));
    let test = r.model.rmse(&times(&p.split.test, k)).unwrap().unwrap() / k;
    (job.scale, r.model, test)
}

/// Values times `2^±99` (order 3): the driver runs them times `2^∓99`, which are the
/// unit run's values exactly, so the model is the unit run's bit for bit, each factor
/// times `2^±33`, the offset, biases and RMSEs times `2^±99`, `λ` times `2^±132`.
#[test]
fn the_driver_runs_values_times_a_power_of_two_as_the_values_themselves() {
    let seed = common::fresh_seed("completion at 2^±99");
    let (none, want, _) = run(seed, 1.0);
    assert_eq!(none, None, "a spread near 1 runs as given");
    for e in [-33, 33] {
        let (scale, got, _) = run(seed, 2f64.powi(3 * e));
        let at = format!("×2^{}", 3 * e);
        assert_eq!(
            scale,
            Some(ValueScale {
                exponent: -e,
                order: 3
            }),
            "{at}"
        );
        let (f, v, l) = (2f32.powi(e), 2f64.powi(3 * e), 2f64.powi(4 * e));
        for (m, (g, w)) in got.factors.iter().zip(&want.factors).enumerate() {
            assert_eq!(g, &w.map(|x| x * f), "{at}: factor of mode {m}");
        }
        for (m, (g, w)) in got.biases.iter().zip(&want.biases).enumerate() {
            let w: Vec<f64> = w.iter().map(|x| x * v).collect();
            assert_eq!(g, &w, "{at}: biases of mode {m}");
        }
        assert_eq!(got.offset, want.offset * v, "{at}: offset");
        assert_eq!(got.lambda, want.lambda * l, "{at}: λ");
        assert_eq!(got.best_epoch, want.best_epoch, "{at}");
        assert_eq!(got.epochs.len(), want.epochs.len(), "{at}");
        for (g, w) in got.epochs.iter().zip(&want.epochs) {
            assert_eq!(g.train_rmse, w.train_rmse * v, "{at}: epoch {}", w.epoch);
            assert_eq!(g.validation_rmse, w.validation_rmse * v, "{at}");
            assert_eq!(g.lambda, w.lambda * l, "{at}");
        }
        for (g, w) in got.lambda_path.iter().zip(&want.lambda_path) {
            assert_eq!(g.lambda, w.lambda * l, "{at}: λ path");
        }
    }
}

/// Values times 1e±30: the driver runs them near 1 (not exactly the unit run's values,
/// so f32 rounds differently), and the test RMSE, in the values' units, matches the
/// unit run's within one standard error of a test RMSE's estimate (`1/√(2m)` for `m`
/// test entries: `completion_defaults.rs` says why the chosen λ may differ by a
/// point) and stays far below the bias baseline. Before the driver scaled them, 1e-30
/// gave the bias model: the kernels flushed every right-hand side term to zero.
#[test]
fn the_driver_fits_values_at_1e30_and_1e_minus_30_as_at_1() {
    let seed = common::fresh_seed("completion at 1e±30");
    let p = draw(&case(), seed);
    let bias = Baselines::fit(&p.split.train)
        .unwrap()
        .bias_rmse(&p.split.test)
        .unwrap();
    let standard_error = 1.0 / (2.0 * p.split.test.nnz() as f64).sqrt();
    let (_, _, want) = run(seed, 1.0);
    assert!(
        want < 0.25 * bias,
        "unit run: test RMSE {want}, bias {bias}"
    );
    for k in [1e-30, 1e30] {
        let (scale, _, got) = run(seed, k);
        assert!(scale.is_some(), "×{k:e} is scaled");
        assert!(
            (got - want).abs() <= standard_error * want,
            "×{k:e}: test RMSE {got} (÷ k), {want} unscaled"
        );
        assert!(got < 0.25 * bias, "×{k:e}: test RMSE {got}, bias {bias}");
    }
}

/// The library's `complete`, given values it cannot sum in f32, says so: at 1e-24
/// (order 3, rank 8) one right-hand side term is about 1e-40; at 1e24 a row's sum
/// about 1e41.
#[test]
fn complete_refuses_values_its_f32_sums_cannot_hold() {
    let seed = common::fresh_seed("completion refuses");
    let p = draw(&case(), seed);
    let engine = Engine::cpu();
    let o = CompletionOptions {
        rank: 8,
        seed,
        ..CompletionOptions::default()
    };
    for (k, why) in [(1e-24, "flushed to zero"), (1e24, "beyond f32's 3.4e38")] {
        let train = times(&p.split.train, k);
        let w = [Workload {
            op: Op::Completion,
            rank: 8,
        }];
        let prepared = engine.prepare(&train, &w).unwrap();
        let err = complete(&engine, &prepared, &times(&p.split.validation, k), &o)
            .unwrap_err()
            .to_string();
        assert!(err.contains(why), "×{k:e}: {err}");
    }
}
