//! The loss a GCP run reports is its model's, over every cell: checked against a
//! brute-force dense FP64 loss, near exact fits included, and an estimate is labelled.

use super::*;

/// `Σ_all f(x, m)` of the model `weights`, `factors` on `x`, cell by cell in f64: each
/// cell's model value in the order `exact` takes it, the stored value or 0.
fn dense_loss(x: &CooTensor, weights: &[f64], factors: &[Matrix<f64>], loss: Loss) -> f64 {
    let dims = x.dims();
    let mut value = std::collections::HashMap::new();
    for k in 0..x.nnz() {
        value.insert(x.coords(k), x.values()[k]);
    }
    let mut total = 0.0;
    for l in 0..dims.iter().product::<usize>() {
        let mut rest = l;
        let c: Vec<u32> = dims
            .iter()
            .map(|&d| {
                let i = (rest % d) as u32;
                rest /= d;
                i
            })
            .collect();
        let m: f64 = (0..weights.len())
            .map(|r| {
                weights[r]
                    * c.iter()
                        .zip(factors)
                        .map(|(&i, f)| f.get(i as usize, r))
                        .product::<f64>()
            })
            .sum();
        total += loss.value(value.get(&c).copied().unwrap_or(0.0), m);
    }
    total
}

/// SGD reports the exact loss of the model it returns, over every cell (its estimate
/// apart): the Gaussian and Poisson losses from their closed forms, Rayleigh by a pass
/// over the cells not stored. Beyond `dense_limit` cells a loss without a closed form
/// reports only its estimate, labelled as one.
#[test]
fn sgd_reports_the_exact_loss_of_its_model_or_a_labelled_estimate() {
    let x = low_rank(&[9, 7, 5]);
    for loss in [Loss::Gaussian, Loss::Poisson, Loss::Rayleigh] {
        let opts = GcpOptions {
            value_nonzeros: 40,
            value_zeros: 40,
            ..sgd_options(loss)
        };
        let model = gcp(&engine(2), &x, &opts, &mut |_| ControlFlow::Continue(())).unwrap();
        let want = dense_loss(&x, &model.weights, &model.factors, loss);
        let got = model.loss.unwrap();
        // The written model (unit columns, weights) is the run's up to a rounding per
        // entry; the sums are of 315 terms in another order.
        assert!(
            (got - want).abs() <= 1e-12 * want.abs(),
            "{loss}: {got} vs {want}"
        );
        let e = model.estimate.unwrap();
        assert_eq!((e.nonzeros, e.zeros), (40, 40), "{loss}");
        // A sample of 80 of 315 cells: the estimate is another number.
        assert_ne!(e.final_loss, got, "{loss}");
        let few = GcpOptions {
            dense_limit: 100.0,
            ..opts
        };
        let model = gcp(&engine(2), &x, &few, &mut |_| ControlFlow::Continue(())).unwrap();
        assert_eq!(model.loss.is_some(), loss != Loss::Rayleigh, "{loss}");
        assert_eq!(
            model.initial_loss.is_some(),
            loss != Loss::Rayleigh,
            "{loss}"
        );
        assert!(model.estimate.unwrap().final_loss.is_finite(), "{loss}");
    }
}

/// An epoch whose estimate is not a finite number (poisson-log's `exp(m)` past f64's
/// range after steps far too large) is undone and says why; its loss is `None`, and
/// its JSON holds `null` beside the reason, never a NaN.
#[test]
fn an_epoch_whose_estimate_is_not_finite_says_so() {
    let x = low_rank(&[12, 10, 8]);
    let opts = GcpOptions {
        rate: 100.0,
        epochs: 3,
        ..sgd_options(Loss::PoissonLog)
    };
    let model = gcp(&engine(2), &x, &opts, &mut |_| ControlFlow::Continue(())).unwrap();
    let bad: Vec<&GcpIter> = model.iters.iter().filter(|i| i.loss.is_none()).collect();
    assert!(!bad.is_empty(), "{:?}", model.iters);
    for i in &model.iters {
        let json = serde_json::to_string(i).unwrap();
        assert!(!json.contains("NaN") && !json.contains("inf"), "{json}");
        match i.loss {
            None => {
                assert!(!i.accepted && i.undone == Some(Undone::NotFinite), "{i:?}");
                assert!(json.contains(r#""loss":null"#), "{json}");
                assert!(json.contains(r#""undone":"not-finite""#), "{json}");
            }
            Some(l) => assert!(l.is_finite() && (i.accepted == i.undone.is_none())),
        }
    }
}

/// A nearly exact fit: the loss reported is the dense FP64 loss, not the rounding of
/// `‖M‖²`-sized sums that cancel, and never below 0 for a nonnegative loss. A rank-2
/// model of a fully stored 8×7×6 tensor, off by 1e-9 relative; one stored entry; and a
/// model nearly 0 (factors 1e-7 times) off a stored 4×4×3 block of a 9×8×6 space,
/// whose zeros' part, about 1e-20 of `‖M‖²` (~1e14), only double-double arithmetic
/// resolves (f64's closed form rounds at ~1e-2).
#[test]
fn near_exact_fits_report_the_dense_loss() {
    let rank = 2;
    let make = |dims: &[usize], block: &[usize], off: f64| {
        let f: Vec<Matrix<f64>> = Matrix::random_factors(dims, &vec![rank; dims.len()], 4)
            .iter()
            .zip(block)
            .map(|(f, &b)| {
                let f = f.to_f64();
                Matrix::from_fn(f.rows(), rank, |i, r| {
                    let v = 0.5 + f.get(i, r) * 100.0;
                    if i < b { v } else { v * 1e-7 }
                })
            })
            .collect();
        let cells: usize = block.iter().product();
        let mut idx = vec![Vec::new(); dims.len()];
        let mut vals = Vec::new();
        for l in 0..cells {
            let mut rest = l;
            let c: Vec<usize> = block
                .iter()
                .map(|&d| {
                    let i = rest % d;
                    rest /= d;
                    i
                })
                .collect();
            let m: f64 = (0..rank)
                .map(|r| c.iter().zip(&f).map(|(&i, f)| f.get(i, r)).product::<f64>())
                .sum();
            c.iter()
                .enumerate()
                .for_each(|(n, &i)| idx[n].push(i as u32));
            vals.push(m * (1.0 + off * if l % 2 == 0 { 1.0 } else { -1.0 }));
        }
        (CooTensor::new(dims.to_vec(), idx, vals).unwrap(), f)
    };
    for (dims, block, off) in [
        (vec![8, 7, 6], vec![8, 7, 6], 1e-9),
        (vec![1, 1, 1], vec![1, 1, 1], 1e-9),
        (vec![1, 1, 1], vec![1, 1, 1], 0.0),
        (vec![9, 8, 6], vec![4, 4, 3], 1e-9),
    ] {
        let (x, f) = make(&dims, &block, off);
        for loss in [Loss::Gaussian, Loss::Huber { threshold: 0.5 }] {
            let got = exact::loss(&engine(2), &x, loss, &f, 1e6).unwrap();
            let want = dense_loss(&x, &[1.0; 2], &f, loss);
            // Sums of nonnegative terms, each from the same model values: they differ
            // by the order of the sum, and for the zeros by the closed form's
            // double-double rounding (~1e-30 of ‖M‖², 1e-16 here; f64's, 1e-2).
            assert!(got >= 0.0, "{dims:?} {loss}: {got}");
            assert!(
                (got - want).abs() <= 1e-12 * want + 1e-12,
                "{dims:?} {block:?} {loss}: {got} vs dense {want}"
            );
        }
    }
}
