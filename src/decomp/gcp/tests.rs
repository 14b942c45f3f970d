//! GCP's runs: SGD lowers its loss estimate and is the same for any thread count,
//! L-BFGS-B lowers the exact loss to a point where the gradient vanishes, and data a
//! loss cannot model is refused with one line naming the value.

use super::*;
use crate::engine::CpuOptions;

mod exact_loss;

/// A rank-2 nonnegative tensor with every third cell stored (values rounded to
/// integers, so that every loss family has data it can model).
fn low_rank(dims: &[usize]) -> CooTensor {
    let f: Vec<Matrix<f64>> = Matrix::random_factors(dims, &vec![2; dims.len()], 17)
        .iter()
        .map(Matrix::to_f64)
        .collect();
    let cells: usize = dims.iter().product();
    let mut idx = vec![Vec::new(); dims.len()];
    let mut vals = Vec::new();
    for l in (0..cells).step_by(3) {
        let mut r = l;
        let c: Vec<usize> = dims
            .iter()
            .map(|&d| {
                let i = r % d;
                r /= d;
                i
            })
            .collect();
        let m: f64 = (0..2)
            .map(|r| c.iter().zip(&f).map(|(&i, f)| f.get(i, r)).product::<f64>())
            .sum();
        for (n, &i) in c.iter().enumerate() {
            idx[n].push(i as u32);
        }
        vals.push((4.0 * m).round().max(1.0));
    }
    CooTensor::new(dims.to_vec(), idx, vals).unwrap()
}

fn engine(threads: usize) -> Engine {
    Engine::cpu_with(CpuOptions {
        threads: Some(threads),
        ..CpuOptions::default()
    })
    .unwrap()
}

fn sgd_options(loss: Loss) -> GcpOptions {
    GcpOptions {
        epochs: 6,
        epoch_iters: 40,
        rate: 1e-2,
        seed: 5,
        ..GcpOptions::new(3, loss)
    }
}

#[test]
fn sgd_lowers_its_estimate_and_is_the_same_for_any_thread_count() {
    let x = low_rank(&[12, 10, 8]);
    for loss in [Loss::Gaussian, Loss::Poisson, Loss::PoissonLog] {
        let opts = sgd_options(loss);
        let run = |threads| {
            gcp(&engine(threads), &x, &opts, &mut |_| {
                ControlFlow::Continue(())
            })
        };
        let one = run(1).unwrap();
        let e = one.estimate.unwrap();
        assert!(
            e.final_loss < e.initial_loss,
            "{loss}: {} from {}",
            e.final_loss,
            e.initial_loss
        );
        // The exact losses of the same models fall too (by about as much as their
        // estimates here: every stored entry is in the sample).
        let (exact, start) = (one.loss.unwrap(), one.initial_loss.unwrap());
        assert!(exact < start, "{loss}: exact {exact} from {start}");
        assert_eq!(one.iters.len(), 6);
        let three = run(3).unwrap();
        let losses = |m: &GcpModel| m.iters.iter().map(|i| i.loss).collect::<Vec<_>>();
        assert_eq!(losses(&one), losses(&three), "{loss}: another thread count");
        assert_eq!(one.weights, three.weights, "{loss}");
        for (a, b) in one.factors.iter().zip(&three.factors) {
            assert_eq!(a.data(), b.data(), "{loss}");
        }
        let w = &one.weights;
        assert!(w.windows(2).all(|p| p[0] >= p[1]), "weights sorted: {w:?}");
        if loss.lower_bound() == 0.0 {
            assert!(
                one.factors
                    .iter()
                    .all(|f| f.data().iter().all(|&v| v >= 0.0))
            );
        }
    }
}

#[test]
fn a_failed_epoch_is_undone_and_shrinks_the_step() {
    let x = low_rank(&[12, 10, 8]);
    // A step far too large makes the first epochs fail.
    let opts = GcpOptions {
        rate: 50.0,
        max_fails: 1,
        ..sgd_options(Loss::Gaussian)
    };
    let model = gcp(&engine(2), &x, &opts, &mut |_| ControlFlow::Continue(())).unwrap();
    let failed: Vec<&GcpIter> = model.iters.iter().filter(|i| !i.accepted).collect();
    assert!(!failed.is_empty(), "{:?}", model.iters);
    let e = model.estimate.unwrap();
    assert!(e.final_loss <= e.initial_loss);
    let first = failed[0];
    if let Some(next) = model.iters.get(first.iter + 1) {
        assert_eq!(next.step, first.step * opts.decay);
    }
}

#[test]
fn lbfgs_reaches_a_stationary_point_of_the_exact_loss() {
    let x = low_rank(&[6, 5, 4]);
    for loss in [Loss::Gaussian, Loss::Poisson, Loss::BernoulliLogit] {
        let x = if loss == Loss::BernoulliLogit {
            let (d, i, v) = x.clone().into_parts();
            CooTensor::new(d, i, vec![1.0; v.len()]).unwrap()
        } else {
            x.clone()
        };
        let opts = GcpOptions {
            method: Method::Lbfgs,
            seed: 2,
            ..GcpOptions::new(2, loss)
        };
        let mut seen = 0;
        let model = gcp(&engine(2), &x, &opts, &mut |_| {
            seen += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
        let (exact, start) = (model.loss.unwrap(), model.initial_loss.unwrap());
        assert!(exact < start, "{loss}");
        assert!(model.estimate.is_none());
        assert_eq!(seen, model.iters.len());
        let last = model.iters.last().unwrap().loss.unwrap();
        assert!((last - exact).abs() <= 1e-9 * exact.abs().max(1.0));
        // One of L-BFGS-B's convergence tests ended the run, not a failed line search
        // (on the bounded Poisson loss too).
        assert!(
            model.stopped.starts_with("relative decrease")
                || model.stopped.starts_with("projected gradient"),
            "{loss}: {} after {} iterations",
            model.stopped,
            model.iters.len()
        );
    }
}

/// A run whose loss does not move over its epochs says so; one that moves does not.
/// Counts of 1e30 under the negative binomial loss (no change of units keeps its form,
/// so they run as given): Adam's steps move the model by about the rate per
/// iteration, nowhere near such values.
#[test]
fn sgd_warns_of_a_loss_that_did_not_move() {
    let x = low_rank(&[12, 10, 8]);
    let quiet = |x: &CooTensor, loss| {
        gcp(&engine(1), x, &sgd_options(loss), &mut |_| {
            ControlFlow::Continue(())
        })
        .unwrap()
    };
    let healthy = quiet(&x, Loss::PoissonLog);
    assert!(healthy.warnings.is_empty(), "{:?}", healthy.warnings);
    let huge = CooTensor::new(
        x.dims().to_vec(),
        (0..x.order()).map(|m| x.indices(m).to_vec()).collect(),
        x.values().iter().map(|v| v * 1e30).collect(),
    )
    .unwrap();
    let stalled = quiet(&huge, Loss::NegativeBinomial { trials: 5.0 });
    assert_eq!(stalled.warnings.len(), 1, "{:?}", stalled.iters);
    let w = &stalled.warnings[0];
    assert!(
        w.contains("in 6 epochs") && w.contains("negative-binomial"),
        "{w}"
    );
    // The loss it reports moved by less than the threshold of itself.
    let e = stalled.estimate.unwrap();
    let moved = (e.final_loss - e.initial_loss).abs() / e.initial_loss.abs();
    assert!(moved < sgd::STALLED, "{moved}");
}

/// The Gaussian loss's minimum scales with the data (`F(sX, sM) = s² F(X, M)`), and
/// the default start scales with `‖X‖`. L-BFGS-B's tests are absolute below 1, so
/// without the rescaling in `opt::run` the runs below stopped at their random start
/// (0 iterations, loss ratio 1). The optimizer is not invariant to the factors' scale,
/// so only the minimum reached is compared, to 1 %.
#[test]
fn lbfgs_reaches_the_same_gaussian_minimum_at_small_scales() {
    let x = low_rank(&[9, 7, 6]);
    let opts = GcpOptions {
        method: Method::Lbfgs,
        ..GcpOptions::new(2, Loss::Gaussian)
    };
    let run =
        |x: &CooTensor| gcp(&engine(1), x, &opts, &mut |_| ControlFlow::Continue(())).unwrap();
    let unit = run(&x);
    let (unit_loss, unit_initial) = (unit.loss.unwrap(), unit.initial_loss.unwrap());
    assert!(unit_loss < 0.5 * unit_initial, "{}", unit.stopped);
    for s in [1e-6, 1e-12] {
        let small = CooTensor::new(
            x.dims().to_vec(),
            (0..x.order()).map(|m| x.indices(m).to_vec()).collect(),
            x.values().iter().map(|v| v * s).collect(),
        )
        .unwrap();
        let model = run(&small);
        let (loss, initial) = (
            model.loss.unwrap() / (s * s),
            model.initial_loss.unwrap() / (s * s),
        );
        assert!(
            (initial - unit_initial).abs() <= 1e-9 * unit_initial,
            "scale {s}: start {initial} vs {unit_initial}"
        );
        assert!(
            (loss - unit_loss).abs() <= 0.01 * unit_loss,
            "scale {s}: {loss} after {} iterations ({}) vs {} after {}",
            model.iters.len(),
            model.stopped,
            unit_loss,
            unit.iters.len()
        );
    }
}

#[test]
fn lbfgs_stops_at_max_iters_or_when_the_caller_asks() {
    let x = low_rank(&[6, 5, 4]);
    let opts = GcpOptions {
        method: Method::Lbfgs,
        max_iters: 3,
        ..GcpOptions::new(2, Loss::Poisson)
    };
    let model = gcp(&engine(1), &x, &opts, &mut |_| ControlFlow::Continue(())).unwrap();
    assert_eq!(model.iters.len(), 3);
    assert_eq!(model.stopped, "3 iterations run");
    // The optimizer's loss and the exact one differ only by rounding: this is no
    // near-exact fit.
    let close = |a: f64, b: Option<f64>| (a - b.unwrap()).abs() <= 1e-12 * a.abs().max(1.0);
    assert!(close(model.loss.unwrap(), model.iters[2].loss));
    let opts = GcpOptions {
        max_iters: 1000,
        ..opts
    };
    let model = gcp(&engine(1), &x, &opts, &mut |it| {
        if it.iter == 1 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .unwrap();
    assert_eq!(model.iters.len(), 2);
    assert_eq!(model.stopped, "stopped by the caller after iteration 2");
    assert!(close(model.loss.unwrap(), model.iters[1].loss));
    assert!(model.loss.unwrap() < model.initial_loss.unwrap());
}

#[test]
fn lbfgs_refuses_an_index_space_beyond_the_dense_limit() {
    let x = low_rank(&[6, 5, 4]);
    let opts = GcpOptions {
        method: Method::Lbfgs,
        dense_limit: 100.0,
        ..GcpOptions::new(2, Loss::PoissonLog)
    };
    let err = gcp(&engine(1), &x, &opts, &mut |_| ControlFlow::Continue(())).unwrap_err();
    assert!(err.to_string().contains("dense_limit"), "{err}");
    // The Gaussian and Poisson losses sum their zeros in closed form: no limit.
    for loss in [Loss::Gaussian, Loss::Poisson] {
        let opts = GcpOptions {
            loss,
            max_iters: 3,
            ..opts.clone()
        };
        assert!(gcp(&engine(1), &x, &opts, &mut |_| ControlFlow::Continue(())).is_ok());
    }
}

#[test]
fn data_a_loss_cannot_model_is_refused() {
    let x = low_rank(&[6, 5, 4]);
    let run = |loss| {
        gcp(&engine(1), &x, &sgd_options(loss), &mut |_| {
            ControlFlow::Continue(())
        })
    };
    let err = run(Loss::BernoulliOdds).unwrap_err().to_string();
    assert!(err.contains("binary"), "{err}");
    let (d, i, mut v) = x.clone().into_parts();
    v[3] = -2.0;
    let neg = CooTensor::new(d, i, v).unwrap();
    let err = gcp(&engine(1), &neg, &sgd_options(Loss::Gamma), &mut |_| {
        ControlFlow::Continue(())
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("nonnegative") && err.contains("-2"), "{err}");
}

#[test]
fn the_start_is_balanced_as_the_peers_balance_it() {
    let x = low_rank(&[12, 10, 8]);
    let f: Vec<Matrix<f64>> = Matrix::random_factors(x.dims(), &[3; 3], 9)
        .iter()
        .map(Matrix::to_f64)
        .collect();
    let mut b = f.clone();
    balance(&mut b);
    let col = |m: &Matrix<f64>, r: usize| (0..m.rows()).map(|i| m.get(i, r).powi(2)).sum::<f64>();
    let entry = |fs: &[Matrix<f64>], c: [usize; 3]| -> f64 {
        (0..3)
            .map(|r| (0..3).map(|n| fs[n].get(c[n], r)).product::<f64>())
            .sum()
    };
    for r in 0..3 {
        let n0 = col(&b[0], r);
        for m in &b[1..] {
            assert!((col(m, r) - n0).abs() <= 1e-12 * n0, "component {r}");
        }
    }
    for c in [[0, 0, 0], [11, 9, 7], [5, 3, 6]] {
        let (a, z) = (entry(&f, c), entry(&b, c));
        assert!((a - z).abs() <= 1e-12 * a.abs(), "{c:?}: {a} vs {z}");
    }
    // Mode 0 ×4 and mode 1 ÷4 is the same model, and after balancing the same start
    // (powers of two scale exactly): the same run, bit for bit.
    let mut uneven = f.clone();
    uneven[0].data_mut().iter_mut().for_each(|v| *v *= 4.0);
    uneven[1].data_mut().iter_mut().for_each(|v| *v /= 4.0);
    let run = |init: Vec<Matrix<f64>>| {
        let opts = GcpOptions {
            init: Some(init),
            ..sgd_options(Loss::Poisson)
        };
        gcp(&engine(2), &x, &opts, &mut |_| ControlFlow::Continue(())).unwrap()
    };
    let (a, z) = (run(f), run(uneven));
    assert_eq!(a.initial_loss, z.initial_loss);
    let losses = |m: &GcpModel| m.iters.iter().map(|i| i.loss).collect::<Vec<_>>();
    assert_eq!(losses(&a), losses(&z));
}

#[test]
fn sgd_on_values_far_from_one_is_the_run_on_them_divided_by_a_power_of_two() {
    let x = low_rank(&[12, 10, 8]);
    // `c = 2^60`, each factor `2^20`: products of powers of two are exact, so the run
    // on `Y = c X` is the run on `X`, bit for bit, in the given units.
    let (c, f) = (2f64.powi(60), 2f64.powi(20));
    let (d, i, v) = x.clone().into_parts();
    let y = CooTensor::new(d, i, v.iter().map(|v| v * c).collect()).unwrap();
    let mut init: Vec<Matrix<f64>> = Matrix::random_factors(x.dims(), &[3; 3], 4)
        .iter()
        .map(Matrix::to_f64)
        .collect();
    balance(&mut init);
    let init_y: Vec<Matrix<f64>> = init
        .iter()
        .map(|m| Matrix::from_fn(m.rows(), m.cols(), |i, r| m.get(i, r) * f))
        .collect();
    for (loss_x, loss_y) in [
        (Loss::Gaussian, Loss::Gaussian),
        (Loss::Gamma, Loss::Gamma),
        (
            Loss::Huber { threshold: 0.5 },
            Loss::Huber { threshold: 0.5 * c },
        ),
    ] {
        let scale = units::ValueScale::of(&y, &loss_y).expect("values 2^60 from 1 are scaled");
        assert_eq!((scale.exponent, scale.order), (20, 3), "{loss_y}");
        assert_eq!(units::ValueScale::of(&x, &loss_x), None);
        let run = |t: &CooTensor, loss, init: &[Matrix<f64>], scale| {
            let opts = sgd_options(loss);
            sgd::run(&engine(2), t, &opts, init.to_vec(), scale, &mut |_| {
                ControlFlow::Continue(())
            })
            .unwrap()
        };
        let (fx, lx, ix, itx, _, _) = run(&x, loss_x, &init, None);
        let (fy, ly, iy, ity, _, _) = run(&y, loss_y, &init_y, Some(scale));
        for (a, b) in fx.iter().zip(&fy) {
            let up: Vec<f64> = a.data().iter().map(|v| v * f).collect();
            assert_eq!(up, b.data(), "{loss_y}: factors");
        }
        let accepted = |its: &[GcpIter]| its.iter().map(|i| i.accepted).collect::<Vec<_>>();
        assert_eq!(accepted(&itx), accepted(&ity), "{loss_y}");
        assert!(lx < ix, "{loss_y}: the run on X moves ({lx} from {ix})");
        if loss_x == Loss::Gaussian {
            // The Gaussian loss has degree 2: the given units' losses are `c²` times.
            assert_eq!((ly, iy), (lx * c * c, ix * c * c));
        } else {
            assert!(ly < iy, "{loss_y}: {ly} from {iy}");
        }
    }
}

#[test]
fn poisson_log_starts_at_the_scale_of_log_counts_and_refuses_an_overflowing_start() {
    let x = low_rank(&[12, 10, 8]);
    let (d, i, v) = x.clone().into_parts();
    let big = CooTensor::new(d, i, v.iter().map(|v| v * 1000.0).collect()).unwrap();
    let model = gcp(
        &engine(2),
        &big,
        &sgd_options(Loss::PoissonLog),
        &mut |_| ControlFlow::Continue(()),
    )
    .unwrap();
    let e = model.estimate.unwrap();
    assert!(e.initial_loss.is_finite() && e.final_loss < e.initial_loss);
    // A start scaled to ‖X‖ (the other losses' start) puts exp(m) past f64's range:
    // both methods refuse it in words, neither reports a loss of inf.
    let mut start: Vec<Matrix<f64>> = Matrix::random_factors(big.dims(), &[3; 3], 0)
        .iter()
        .map(Matrix::to_f64)
        .collect();
    let s = (big.norm_sq().sqrt() / model_norm_sq(&start).sqrt()).powf(1.0 / 3.0);
    start
        .iter_mut()
        .for_each(|m| m.data_mut().iter_mut().for_each(|v| *v *= s));
    for method in [Method::Sgd, Method::Lbfgs] {
        let opts = GcpOptions {
            init: Some(start.clone()),
            method,
            ..sgd_options(Loss::PoissonLog)
        };
        let err = gcp(&engine(1), &big, &opts, &mut |_| ControlFlow::Continue(())).unwrap_err();
        assert!(
            matches!(&err, Error::NonFinite(m) if m.contains("starting model's loss")),
            "{method:?}: {err}"
        );
    }
}

/// Values whose squares are past f64's range: neither the start (scaled to ‖X‖) nor a
/// loss in the tensor's units can be held. Both methods say that the values are too
/// large, not that the start is.
#[test]
fn values_too_large_for_the_loss_are_named_as_such() {
    let x = low_rank(&[6, 5, 4]);
    let huge = CooTensor::new(
        x.dims().to_vec(),
        (0..3).map(|n| x.indices(n).to_vec()).collect(),
        x.values().iter().map(|v| v * 1e300).collect(),
    )
    .unwrap();
    for method in [Method::Sgd, Method::Lbfgs] {
        let opts = GcpOptions {
            method,
            ..sgd_options(Loss::Gaussian)
        };
        let err = gcp(&engine(1), &huge, &opts, &mut |_| ControlFlow::Continue(())).unwrap_err();
        assert!(
            matches!(&err, Error::Unsupported(m) if m.contains("values are too large")),
            "{method:?}: {err}"
        );
    }
}

/// A start the run could not leave (two factors all zero: every gradient is zero) is
/// refused, as CP-ALS and CP-APR refuse theirs; one zero factor still moves. A NaN is
/// a non-finite value, not an option.
#[test]
fn starts_that_cannot_move_or_are_not_finite_are_refused() {
    let x = low_rank(&[6, 5, 4]);
    let start = |zero: &[usize]| -> Vec<Matrix<f64>> {
        let mut f: Vec<Matrix<f64>> = Matrix::random_factors(x.dims(), &[2; 3], 3)
            .iter()
            .map(Matrix::to_f64)
            .collect();
        for &n in zero {
            f[n].data_mut().iter_mut().for_each(|v| *v = 0.0);
        }
        f
    };
    let run = |init: Vec<Matrix<f64>>| {
        let opts = GcpOptions {
            rank: 2,
            init: Some(init),
            ..sgd_options(Loss::Gaussian)
        };
        gcp(&engine(1), &x, &opts, &mut |_| ControlFlow::Continue(()))
    };
    let err = run(start(&[0, 2])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid option: the initial factors of modes 0 and 2 are all zero; every gradient is zero there, so the run could not leave the start"
    );
    let one = run(start(&[1])).unwrap();
    let (end, began) = (one.loss.unwrap(), one.initial_loss.unwrap());
    assert!(end < began, "{end} vs {began}");
    let mut nan = start(&[]);
    nan[1].data_mut()[3] = f64::NAN;
    let err = run(nan).unwrap_err();
    assert!(matches!(err, Error::NonFinite(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "non-finite value: initial factor of mode 1 holds NaN"
    );
}
