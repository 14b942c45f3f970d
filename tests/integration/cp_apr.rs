//! CP-APR (the library function) on generated count tensors and on bad input: the
//! log-likelihood it reports is the FP64 reference's of the model it returns, and rank 0,
//! negative or non-integer values, zero tensors and all-zero slices give typed errors or
//! finite models, never NaN.

use sptmc::decomp::{CpAprOptions, NonInteger, cp_apr};
use sptmc::engine::{Engine, Prepared, Workload};
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::{CooTensor, Error, Op, reference};

fn prepare(engine: &Engine, x: &CooTensor, rank: usize) -> Prepared {
    engine
        .prepare(
            x,
            &[Workload {
                op: Op::Mttkrp,
                rank,
            }],
        )
        .unwrap()
}

/// A generated tensor with values turned into counts `1..=9` (or kept as `f(v)`).
fn tensor(dims: Vec<usize>, nnz: usize, f: impl Fn(f64) -> f64) -> CooTensor {
    let (dims, idx, vals) = generate(&GenSpec {
        dims,
        nnz,
        pattern: Pattern::PowerLaw { alpha: 0.9 },
        seed: 7,
    })
    .unwrap()
    .into_parts();
    let vals = vals.iter().map(|&v| f(v)).collect();
    CooTensor::new(dims, idx, vals).unwrap()
}

fn counts(v: f64) -> f64 {
    (v.abs() * 9.0).ceil().clamp(1.0, 9.0)
}

/// Every number of the model is finite, the factors nonnegative.
fn assert_finite(m: &sptmc::decomp::CpAprModel) {
    assert!(m.log_likelihood.is_finite(), "{}", m.log_likelihood);
    assert!(m.weights.iter().all(|w| w.is_finite() && *w >= 0.0));
    for f in &m.factors {
        assert!(f.data().iter().all(|v| v.is_finite() && *v >= 0.0));
    }
    for s in &m.iters {
        assert!(s.log_likelihood.is_finite() && s.kkt_violation.is_finite());
    }
}

#[test]
fn the_reported_log_likelihood_is_the_references_of_the_model() {
    let engine = Engine::cpu();
    for dims in [vec![40, 30, 20], vec![15, 12, 10, 8]] {
        let x = tensor(dims, 3000, counts);
        let p = prepare(&engine, &x, 6);
        let opts = CpAprOptions {
            max_iters: 15,
            tol: 0.0,
            ..CpAprOptions::with_rank(6)
        };
        let m = cp_apr(&engine, &p, &opts).unwrap();
        assert_finite(&m);
        assert_eq!(m.iters.len(), 15);
        let want = reference::log_likelihood(&x, &m.weights, &m.factors, 1e-10).unwrap();
        assert!(
            ((m.log_likelihood - want) / want).abs() < 1e-6,
            "{} vs the reference's {want}",
            m.log_likelihood
        );
        // The multiplicative updates raise the likelihood from the start.
        let ll = m.log_likelihoods();
        assert!(ll[14] > ll[0], "{ll:?}");
        // Weights sorted, factor columns summing to 1.
        assert!(m.weights.windows(2).all(|w| w[0] >= w[1]));
        for f in &m.factors {
            for c in 0..f.cols() {
                let s: f64 = (0..f.rows()).map(|i| f.get(i, c) as f64).sum();
                assert!((s - 1.0).abs() < 1e-5 || s == 0.0, "column sum {s}");
            }
        }
    }
}

#[test]
fn the_run_stops_once_no_mode_needs_an_update() {
    // κ keeps moving inadmissible zeros, so MU rarely meets a tight KKT tolerance; at a
    // tolerance above every violation of the first sweep no mode updates and the run
    // stops after one iteration, as pyttb's does.
    let engine = Engine::cpu();
    let x = tensor(vec![30, 20, 10], 1500, counts);
    let p = prepare(&engine, &x, 3);
    let opts = CpAprOptions {
        max_iters: 50,
        tol: 1e6,
        ..CpAprOptions::with_rank(3)
    };
    let m = cp_apr(&engine, &p, &opts).unwrap();
    assert!(m.converged);
    assert_eq!(m.iters.len(), 1);
    assert_eq!(m.iters[0].inner_iters, 3, "one Φ per mode, no update");
    assert_finite(&m);
    let unbounded = CpAprOptions {
        tol: 0.0,
        max_iters: 3,
        ..opts
    };
    let m = cp_apr(&engine, &p, &unbounded).unwrap();
    assert!(!m.converged);
    assert_eq!(m.iters.len(), 3);
    assert_eq!(m.iters[0].inner_iters, 3 * 10);
}

#[test]
fn bad_options_are_typed_errors() {
    let engine = Engine::cpu();
    let x = tensor(vec![20, 10, 5], 300, counts);
    let p = prepare(&engine, &x, 4);
    let e = cp_apr(&engine, &p, &CpAprOptions::with_rank(0)).unwrap_err();
    assert!(matches!(e, Error::InvalidRank(_)), "{e}");
    for opts in [
        CpAprOptions {
            max_inner: 0,
            ..CpAprOptions::with_rank(2)
        },
        CpAprOptions {
            eps: 0.0,
            ..CpAprOptions::with_rank(2)
        },
        CpAprOptions {
            kappa: f64::NAN,
            ..CpAprOptions::with_rank(2)
        },
        CpAprOptions {
            max_seconds: -1.0,
            ..CpAprOptions::with_rank(2)
        },
    ] {
        let e = cp_apr(&engine, &p, &opts).unwrap_err();
        assert!(matches!(e, Error::InvalidOption(_)), "{opts:?}: {e}");
    }
    // Initial factors with a negative entry.
    let mut init = CpAprOptions::with_rank(2).initial_factors(x.dims());
    init[1].set(3, 1, -0.5);
    let opts = CpAprOptions {
        init: Some(init),
        ..CpAprOptions::with_rank(2)
    };
    let e = cp_apr(&engine, &p, &opts).unwrap_err();
    assert!(e.to_string().contains("nonnegative"), "{e}");
}

#[test]
fn negative_values_are_refused_and_non_integers_warned_or_refused() {
    let engine = Engine::cpu();
    let neg = tensor(vec![20, 10, 5], 300, |v| -counts(v));
    let p = prepare(&engine, &neg, 4);
    let e = cp_apr(&engine, &p, &CpAprOptions::with_rank(4)).unwrap_err();
    assert!(
        matches!(e, Error::InvalidTensor(_)) && e.to_string().contains("negative"),
        "{e}"
    );

    let frac = tensor(vec![20, 10, 5], 300, |v| counts(v) + 0.5);
    let p = prepare(&engine, &frac, 4);
    let opts = CpAprOptions {
        max_iters: 5,
        ..CpAprOptions::with_rank(4)
    };
    let m = cp_apr(&engine, &p, &opts).unwrap();
    assert_finite(&m);
    assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
    assert!(m.warnings[0].contains("not integers"), "{:?}", m.warnings);
    let strict = CpAprOptions {
        non_integer: NonInteger::Error,
        ..opts
    };
    let e = cp_apr(&engine, &p, &strict).unwrap_err();
    assert!(
        matches!(e, Error::InvalidTensor(_)) && e.to_string().contains("not integers"),
        "{e}"
    );
}

#[test]
fn zero_tensors_and_empty_slices_give_finite_models() {
    let engine = Engine::cpu();
    // Every stored value zero.
    let zero = tensor(vec![20, 10, 5], 300, |_| 0.0);
    let p = prepare(&engine, &zero, 3);
    let opts = CpAprOptions {
        max_iters: 4,
        ..CpAprOptions::with_rank(3)
    };
    let m = cp_apr(&engine, &p, &opts).unwrap();
    assert_finite(&m);
    assert!(
        m.warnings.iter().any(|w| w.contains("no nonzero")),
        "{:?}",
        m.warnings
    );

    // Slices 0..10 of mode 0 and 0..3 of mode 2 hold no nonzero.
    let x = tensor(vec![30, 20, 10], 2000, counts);
    let (dims, idx, vals) = x.into_parts();
    let keep: Vec<usize> = (0..vals.len())
        .filter(|&k| idx[0][k] >= 10 && idx[2][k] >= 3)
        .collect();
    let idx: Vec<Vec<u32>> = idx
        .iter()
        .map(|col| keep.iter().map(|&k| col[k]).collect())
        .collect();
    let vals: Vec<f64> = keep.iter().map(|&k| vals[k]).collect();
    let x = CooTensor::new(dims, idx, vals).unwrap();
    let p = prepare(&engine, &x, 4);
    let opts = CpAprOptions {
        max_iters: 10,
        tol: 0.0,
        ..CpAprOptions::with_rank(4)
    };
    let m = cp_apr(&engine, &p, &opts).unwrap();
    assert_finite(&m);
    // The empty slices' rows of the model go to zero: nothing there to explain.
    for i in 0..10 {
        for c in 0..4 {
            assert!(
                m.factors[0].get(i, c) < 1e-6,
                "row {i}: {}",
                m.factors[0].get(i, c)
            );
        }
    }
    let want = reference::log_likelihood(&x, &m.weights, &m.factors, 1e-10).unwrap();
    assert!(((m.log_likelihood - want) / want).abs() < 1e-6);
}

/// On a tensor whose values are all zero the CLI writes a zero model, and its
/// `weights.txt` does not claim that the factor columns sum to 1.
#[test]
fn a_zero_model_is_written_without_claiming_columns_that_sum_to_1() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("zero.tns");
    std::fs::write(&file, "1 1 1 0\n2 2 2 0\n2 1 2 0\n").unwrap();
    let out = dir.path().join("model");
    let o = crate::common::sptmc_command(dir.path())
        .args(["cp-apr", "--rank", "2", "--iters", "2", "--out"])
        .arg(&out)
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("no nonzero value"), "{stderr}");
    let weights = std::fs::read_to_string(out.join("weights.txt")).unwrap();
    let header = weights.lines().next().unwrap();
    assert!(header.contains("those of weight 0 are 0"), "{header}");
    let factor = std::fs::read_to_string(out.join("factor-0.txt")).unwrap();
    let values: Vec<f64> = (factor.lines().filter(|l| !l.starts_with('#')))
        .flat_map(|l| l.split_whitespace().map(|v| v.parse::<f64>().unwrap()))
        .collect();
    assert!(
        !values.is_empty() && values.iter().all(|&v| v == 0.0),
        "{factor}"
    );
}

/// Counts times 1e-12, through the driver as the command line and Python run them:
/// the run takes the values multiplied by a power of two (pyttb's absolute tolerance
/// stopped it after 2 iterations before), as many iterations as the counts take, and
/// the log-likelihood it reports is the FP64 reference's of the model it returns, in
/// the given units (`ε` with them).
#[test]
fn values_far_below_one_fit_as_counts_do_and_report_the_given_units() {
    use sptmc::driver::{CpAprRequest, NoForms, run};
    use std::ops::ControlFlow;
    let engine = Engine::cpu();
    let fit = |x: &CooTensor| {
        let request = CpAprRequest {
            rank: 4,
            iters: 15,
            seed: 4,
            ..CpAprRequest::defaults()
        };
        let job = request.validate(x).unwrap();
        let scale = job.scale;
        let steps = std::cell::Cell::new(0);
        let r = run(
            &job,
            &engine,
            x,
            &NoForms,
            &mut |_: &sptmc::decomp::CpAprIter| {
                steps.set(steps.get() + 1);
                ControlFlow::Continue(())
            },
        )
        .unwrap();
        assert_eq!(steps.get(), r.model.iters.len());
        (r.model, scale)
    };
    let x = tensor(vec![40, 30, 20], 3000, counts);
    let (unit, none) = fit(&x);
    assert_eq!(none, None);
    let small = tensor(vec![40, 30, 20], 3000, |v| counts(v) * 1e-12);
    let (m, scale) = fit(&small);
    let scale = scale.expect("values far below 1 run scaled");
    assert_finite(&m);
    assert_eq!(
        m.iters.len(),
        unit.iters.len(),
        "as many iterations as the counts"
    );
    assert!(m.iters.len() > 2);
    let c = 2f64.powi(scale.exponent);
    let want = reference::log_likelihood(&small, &m.weights, &m.factors, 1e-10 * c).unwrap();
    assert!(
        ((m.log_likelihood - want) / want).abs() < 1e-6,
        "{} vs the reference's {want}",
        m.log_likelihood
    );
    let ll = m.log_likelihoods();
    assert!(ll.last() > ll.first(), "{ll:?}");
}

#[test]
fn observed_counts_the_model_gives_no_rate_are_warned_of() {
    // (0, 0, 0) is the only nonzero of row 0 in modes 0 and 1. From a start that is zero
    // on both rows its Φ stays zero, so the updates never move them (κ moves only
    // zeros whose Φ exceeds 1): its rate stays 0.
    let body = tensor(vec![20, 15, 6], 900, counts);
    let mut entries: Vec<(Vec<u32>, f64)> = (0..body.nnz())
        .map(|k| {
            let c = body.coords(k);
            (vec![c[0] + 1, c[1] + 1, c[2]], body.values()[k])
        })
        .collect();
    entries.push((vec![0, 0, 0], 3.0));
    let x = CooTensor::from_entries(vec![21, 16, 6], entries).unwrap();
    let engine = Engine::cpu();
    let p = prepare(&engine, &x, 3);
    let run = |zero_rows: bool| {
        let mut init = CpAprOptions::with_rank(3).initial_factors(x.dims());
        if zero_rows {
            for f in init.iter_mut().take(2) {
                for r in 0..3 {
                    f.set(0, r, 0.0);
                }
            }
        }
        let opts = CpAprOptions {
            max_iters: 4,
            tol: 0.0,
            init: Some(init),
            ..CpAprOptions::with_rank(3)
        };
        cp_apr(&engine, &p, &opts).unwrap()
    };
    let m = run(true);
    let said: Vec<&String> = m
        .warnings
        .iter()
        .filter(|w| w.contains("rate is at most eps"))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", m.warnings);
    assert!(
        said[0].contains("at 1 observed nonzero (the first at (1, 1, 1), value 3)"),
        "{}",
        said[0]
    );
    // The rate is zero there, and the reported log-likelihood floors it at eps.
    let rate: f64 = (0..3)
        .map(|r| {
            m.weights[r]
                * (0..3)
                    .map(|n| m.factors[n].get(0, r) as f64)
                    .product::<f64>()
        })
        .sum();
    assert_eq!(rate, 0.0);
    let want = reference::log_likelihood(&x, &m.weights, &m.factors, 1e-10).unwrap();
    assert!(((m.log_likelihood - want) / want).abs() < 1e-6);
    // From a start without the zero rows, nothing to say.
    let m = run(false);
    assert!(
        m.warnings.iter().all(|w| !w.contains("rate")),
        "{:?}",
        m.warnings
    );
}
