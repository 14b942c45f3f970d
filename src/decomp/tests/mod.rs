//! Tests of CP-ALS and Tucker-HOOI on the CPU engine.
//!
//! Test tensors hold small integers so that their fp16 storage in HLS is exact: the
//! only rounding left is the engine's f32 arithmetic (unit roundoff u ≈ 6e-8).

use super::*;
use crate::engine::{Engine, Workload};
use crate::ops::Op;
use crate::tensor::CooTensor;
use crate::tensor::generate::{GenSpec, Pattern, generate};
use std::ops::ControlFlow;

mod cp_rows;
mod tucker;
mod tucker_rows;

/// A random matrix with integer entries in `lo..=hi`.
fn int_matrix(rows: usize, cols: usize, lo: u32, hi: u32, seed: u64) -> Matrix<f64> {
    let span = (hi - lo + 1) as f32;
    Matrix::random(rows, cols, seed)
        .map(|u| (lo as f32 + (u * span).floor().min(span - 1.0)) as f64)
}

/// Every cell of the dense tensor `f(coords)`, zeros left out.
fn dense_to_coo(dims: &[usize], f: impl Fn(&[usize]) -> f64) -> CooTensor {
    let mut entries = Vec::new();
    let total: usize = dims.iter().product();
    for lin in 0..total {
        let mut c = vec![0usize; dims.len()];
        let mut rest = lin;
        for m in (0..dims.len()).rev() {
            c[m] = rest % dims[m];
            rest /= dims[m];
        }
        let v = f(&c);
        if v != 0.0 {
            entries.push((c.iter().map(|&i| i as u32).collect::<Vec<u32>>(), v));
        }
    }
    CooTensor::from_entries(dims.to_vec(), entries).unwrap()
}

/// An exact rank-`rank` CP tensor with integer factors in 1..=3.
fn exact_cp(dims: &[usize], rank: usize, seed: u64) -> CooTensor {
    let fs: Vec<Matrix<f64>> = dims
        .iter()
        .enumerate()
        .map(|(m, &d)| int_matrix(d, rank, 1, 3, seed + m as u64))
        .collect();
    dense_to_coo(dims, |c| {
        (0..rank)
            .map(|r| {
                c.iter()
                    .zip(&fs)
                    .map(|(&i, f)| f.get(i, r))
                    .product::<f64>()
            })
            .sum()
    })
}

/// An exact multilinear-rank-`ranks` tensor: integer core in 1..=3, factors in 0..=2.
fn exact_tucker(dims: &[usize], ranks: &[usize], seed: u64) -> CooTensor {
    let fs: Vec<Matrix<f64>> = dims
        .iter()
        .zip(ranks)
        .enumerate()
        .map(|(m, (&d, &r))| int_matrix(d, r, 0, 2, seed + m as u64))
        .collect();
    let core_len: usize = ranks.iter().product();
    let core = int_matrix(1, core_len, 1, 3, seed + 100).into_data();
    dense_to_coo(dims, |c| {
        let mut sum = 0.0;
        for (lin, &g) in core.iter().enumerate() {
            let mut rest = lin;
            let mut p = g;
            for m in (0..ranks.len()).rev() {
                p *= fs[m].get(c[m], rest % ranks[m]);
                rest /= ranks[m];
            }
            sum += p;
        }
        sum
    })
}

/// A sparse random tensor with integer values 1..=5 (like ratings).
fn random_ints(dims: &[usize], nnz: usize, seed: u64) -> CooTensor {
    let t = generate(&GenSpec {
        dims: dims.to_vec(),
        nnz,
        pattern: Pattern::Uniform,
        seed,
    })
    .unwrap();
    let (dims, idx, vals) = t.into_parts();
    let vals = vals.iter().map(|v| v.floor().clamp(1.0, 5.0)).collect();
    CooTensor::new(dims, idx, vals).unwrap()
}

fn prep(x: &CooTensor, op: Op, rank: usize) -> Prepared {
    Engine::cpu().prepare(x, &[Workload { op, rank }]).unwrap()
}

/// `‖X − X̂‖² ` over every cell, with `X̂` given cell by cell.
fn dense_resid_sq(x: &CooTensor, entry: impl Fn(&[usize]) -> f64) -> f64 {
    let dims = x.dims();
    let mut xd = vec![0.0f64; dims.iter().product()];
    for k in 0..x.nnz() {
        let lin = x
            .coords(k)
            .iter()
            .zip(dims)
            .fold(0usize, |acc, (&i, &d)| acc * d + i as usize);
        xd[lin] += x.values()[k];
    }
    let mut s = 0.0;
    for (lin, &xv) in xd.iter().enumerate() {
        let mut c = vec![0usize; dims.len()];
        let mut rest = lin;
        for m in (0..dims.len()).rev() {
            c[m] = rest % dims[m];
            rest /= dims[m];
        }
        let d = xv - entry(&c);
        s += d * d;
    }
    s
}

fn cp_opts(rank: usize, iters: usize, tol: f64, seed: u64) -> CpOptions {
    CpOptions {
        rank,
        max_iters: iters,
        tol,
        seed,
        init: None,
    }
}

#[test]
fn cp_recovers_exact_low_rank_3way() {
    let x = exact_cp(&[20, 18, 16], 3, 11);
    let p = prep(&x, Op::Mttkrp, 3);
    let model = cp_als(&Engine::cpu(), &p, &cp_opts(3, 300, 1e-10, 1)).unwrap();
    let fit = model.fit().unwrap();
    assert!(
        fit > 0.99,
        "fit {fit} after {} iterations",
        model.fits.len()
    );
    assert_eq!(model.rank(), 3);
    assert!(model.weights.windows(2).all(|w| w[0] >= w[1]));
}

#[test]
fn cp_recovers_exact_low_rank_4way() {
    let x = exact_cp(&[7, 6, 5, 4], 2, 21);
    let p = prep(&x, Op::Mttkrp, 2);
    let model = cp_als(&Engine::cpu(), &p, &cp_opts(2, 300, 1e-10, 2)).unwrap();
    let fit = model.fit().unwrap();
    assert!(fit > 0.99, "fit {fit}");
}

#[test]
fn cp_fit_is_monotone_on_random_data() {
    let x = random_ints(&[40, 30, 20], 3000, 5);
    let p = prep(&x, Op::Mttkrp, 6);
    let model = cp_als(&Engine::cpu(), &p, &cp_opts(6, 40, 0.0, 3)).unwrap();
    assert_eq!(model.fits.len(), 40, "tol 0 runs every iteration");
    // Each ALS step minimizes the residual over one factor exactly (the normalization
    // does not change X̂), so the fit cannot drop in exact arithmetic; 1e-6 leaves room
    // for f32 kernel rounding (~1e-7 relative on fits of order 0.1).
    for w in model.fits.windows(2) {
        assert!(w[1] >= w[0] - 1e-6, "fit dropped: {:?}", model.fits);
    }
}

#[test]
fn cp_fit_formula_matches_dense_residual() {
    let x = random_ints(&[30, 25, 20], 6000, 8);
    let p = prep(&x, Op::Mttkrp, 3);
    let model = cp_als(&Engine::cpu(), &p, &cp_opts(3, 6, 0.0, 4)).unwrap();
    let resid = dense_resid_sq(&x, |c| model.entry(c).unwrap()).sqrt();
    let norm = x.norm_sq().sqrt();
    let direct = 1.0 - resid / norm;
    // The last fit is taken in f64 from the stored values; what is left is the
    // returned model's arrangement: its f32 columns, scaled to unit norm, each entry
    // rounded once (relative 2⁻²⁴), which moves every term of X̂ by at most
    // order·2⁻²⁴ of itself, so X̂ by at most order·2⁻²⁴·‖|X̂|‖ (|X̂| the sum of the
    // terms' magnitudes) and the fit by that over ‖X‖ (twice, for the f64 sums).
    let order = x.dims().len();
    let abs_sq = dense_resid_sq(&x, |c| {
        -(0..model.weights.len())
            .map(|r| {
                model.weights[r].abs()
                    * (0..order)
                        .map(|m| (model.factors[m].get(c[m], r) as f64).abs())
                        .product::<f64>()
            })
            .sum::<f64>()
    });
    // dense_resid_sq of −|X̂| is ‖X + |X̂|‖² ≥ ‖|X̂|‖² for nonnegative data.
    let tol = 2.0 * order as f64 * 2f64.powi(-24) * abs_sq.sqrt() / norm;
    let fit = model.fit().unwrap();
    assert!(
        (fit - direct).abs() <= tol,
        "formula {fit} vs dense {direct}: {:e} > {tol:e}",
        (fit - direct).abs()
    );
    let last = model.iters.last().unwrap();
    assert_eq!(last.fit, fit, "the last iteration reports the final fit");
}

/// The fit of a run is its returned model's, computed in f64: on a noisy low-rank
/// tensor (fit above 0.9, where the residual is a small difference of large sums),
/// the f32 inner product alone was further off than the bound below.
#[test]
fn cp_final_fit_is_the_returned_models_in_f64() {
    let dims = [40, 30, 25];
    let fs: Vec<Matrix<f64>> = (0..3)
        .map(|m| int_matrix(dims[m], 3, 1, 3, 70 + m as u64))
        .collect();
    let x = dense_to_coo(&dims, |c| {
        let clean: f64 = (0..3)
            .map(|r| (0..3).map(|m| fs[m].get(c[m], r)).product::<f64>())
            .sum();
        // A fixed ±5 % wobble per cell (a hash of its coordinates).
        let h = (c[0] * 7919 + c[1] * 104_729 + c[2] * 1_299_709) % 1000;
        clean * (1.0 + 0.1 * (h as f64 / 1000.0 - 0.5))
    });
    let p = prep(&x, Op::Mttkrp, 3);
    let model = cp_als(&Engine::cpu(), &p, &cp_opts(3, 15, 0.0, 5)).unwrap();
    let norm = x.norm_sq().sqrt();
    let direct = 1.0 - dense_resid_sq(&x, |c| model.entry(c).unwrap()).sqrt() / norm;
    // As in cp_fit_formula_matches_dense_residual: the arrangement's f32 rounding
    // moves the fit by at most 2·order·2⁻²⁴·‖|X̂|‖/‖X‖ (X̂ ≥ 0 here, so ‖|X̂|‖ = ‖X̂‖,
    // at most ‖X‖ + ‖X − X̂‖).
    let tol = 2.0 * 3.0 * 2f64.powi(-24) * (2.0 - direct);
    let fit = model.fit().unwrap();
    assert!(fit > 0.9, "a good fit: {fit}");
    assert!(
        (fit - direct).abs() <= tol,
        "fit {fit} vs the model's own {direct}: {:e} > {tol:e}",
        (fit - direct).abs()
    );
}

#[test]
fn cp_is_deterministic_and_init_is_as_documented() {
    let x = random_ints(&[30, 20, 10], 1500, 9);
    let p = prep(&x, Op::Mttkrp, 4);
    let e = Engine::cpu();
    let opts = cp_opts(4, 8, 0.0, 42);
    let a = cp_als(&e, &p, &opts).unwrap();
    let b = cp_als(&e, &p, &opts).unwrap();
    assert_eq!(a.fits, b.fits);
    assert_eq!(a.weights, b.weights);
    assert_eq!(a.factors, b.factors);
    // Feeding the documented initial factors back gives the same run.
    let init = Matrix::random_factors(x.dims(), &[4; 3], 42);
    let c = cp_als(
        &e,
        &p,
        &CpOptions {
            init: Some(init),
            ..opts.clone()
        },
    )
    .unwrap();
    assert_eq!(a.fits, c.fits);
    assert_eq!(a.factors, c.factors);
    // Another seed starts elsewhere.
    let d = cp_als(&e, &p, &cp_opts(4, 8, 0.0, 43)).unwrap();
    assert_ne!(a.fits, d.fits);
}

#[test]
fn cp_stops_on_tolerance_and_reports_progress() {
    let x = exact_cp(&[10, 9, 8], 2, 31);
    let p = prep(&x, Op::Mttkrp, 2);
    let mut seen = Vec::new();
    let model = cp_als_with_progress(&Engine::cpu(), &p, &cp_opts(2, 500, 1e-3, 1), &mut |s| {
        seen.push(*s)
    })
    .unwrap();
    assert!(model.fits.len() < 500, "a tolerance of 1e-3 stops early");
    assert_eq!(seen, model.iters);
    let last = model.iters.last().unwrap();
    assert!(last.delta.abs() < 1e-3);
    assert!(
        model
            .iters
            .iter()
            .all(|s| s.seconds_kernel >= 0.0 && s.seconds_other >= 0.0)
    );
    assert_eq!(model.iters[0].delta, model.fits[0]);
}

/// A control callback that breaks after iteration `stop` (0-based), recording what it saw.
fn break_after(stop: usize, seen: &mut Vec<usize>) -> impl FnMut(&IterStats) -> ControlFlow<()> {
    move |s| {
        seen.push(s.iter);
        if s.iter == stop {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

#[test]
fn cp_control_stops_the_run_and_returns_the_model_so_far() {
    let x = random_ints(&[30, 20, 10], 1500, 9);
    let p = prep(&x, Op::Mttkrp, 4);
    let e = Engine::cpu();
    let mut seen = Vec::new();
    let stopped = cp_als_with_control(
        &e,
        &p,
        &cp_opts(4, 50, 0.0, 7),
        &mut break_after(2, &mut seen),
    )
    .unwrap();
    assert_eq!(seen, [0, 1, 2], "no iteration runs after the break");
    // The same model as a run that was only allowed three iterations. That run takes
    // its last fit in f64; the stopped one keeps the estimate its control saw, within
    // the estimate's rounding: `residual_rounding·‖X‖²` on ‖X − X̂‖², so
    // `rounding / (2 (1 − fit))` on the fit.
    let three = cp_als(&e, &p, &cp_opts(4, 3, 0.0, 7)).unwrap();
    assert_eq!(stopped.fits[..2], three.fits[..2]);
    let (got, want) = (stopped.fits[2], three.fits[2]);
    let tol = residual_rounding(&e) / (2.0 * (1.0 - want));
    assert!((got - want).abs() <= tol, "last fit {got} vs {want}");
    assert_eq!(stopped.weights, three.weights);
    assert_eq!(stopped.factors, three.factors);
}

#[test]
fn cp_rejects_bad_options() {
    let x = random_ints(&[5, 4, 3], 30, 1);
    let p = prep(&x, Op::Mttkrp, 2);
    let e = Engine::cpu();
    let run = |o: CpOptions| cp_als(&e, &p, &o).unwrap_err();
    assert!(matches!(run(cp_opts(0, 5, 0.0, 0)), Error::InvalidRank(_)));
    assert!(matches!(
        run(cp_opts(2, 0, 0.0, 0)),
        Error::InvalidOption(_)
    ));
    assert!(matches!(
        run(cp_opts(usize::MAX / 2, 5, 0.0, 0)),
        Error::InvalidRank(_)
    ));
    assert!(matches!(
        run(cp_opts(2, 5, -1.0, 0)),
        Error::InvalidOption(_)
    ));
    assert!(matches!(
        run(cp_opts(2, 5, f64::NAN, 0)),
        Error::InvalidOption(_)
    ));
    let good: Vec<Matrix> = [5, 4, 3].iter().map(|&d| Matrix::random(d, 2, 0)).collect();
    let mut short = good.clone();
    short.pop();
    let mut wrong = good.clone();
    wrong[1] = Matrix::random(4, 3, 0);
    let mut nan = good.clone();
    nan[2].set(1, 1, f32::NAN);
    let with = |init| CpOptions {
        init: Some(init),
        ..cp_opts(2, 5, 0.0, 0)
    };
    assert!(matches!(run(with(short)), Error::Shape { .. }));
    assert!(matches!(run(with(wrong)), Error::Shape { .. }));
    assert!(matches!(run(with(nan)), Error::NonFinite(_)));
    assert!(cp_als(&e, &p, &with(good)).is_ok());
    // A tensor prepared only for TTMc cannot run CP-ALS.
    let q = prep(&x, Op::Ttmc, 2);
    assert!(matches!(
        cp_als(&e, &q, &cp_opts(2, 5, 0.0, 0)).unwrap_err(),
        Error::InvalidOption(_)
    ));
    assert!(matches!(
        CpModel {
            weights: vec![1.0],
            factors: vec![Matrix::zeros(2, 1), Matrix::zeros(2, 1)],
            fits: vec![],
            iters: vec![],
            pinv_solves: 0,
        }
        .entry(&[0, 2]),
        Err(Error::InvalidOption(_))
    ));
}

#[test]
fn cp_rank_above_a_mode_length_uses_the_pseudo_inverse_safely() {
    // Rank 6 on a mode of length 3: that mode's Gram has rank ≤ 3, so the Hadamard
    // products may be singular; the run must stay finite either way.
    let x = random_ints(&[12, 10, 3], 200, 2);
    let p = prep(&x, Op::Mttkrp, 6);
    let model = cp_als(&Engine::cpu(), &p, &cp_opts(6, 10, 0.0, 7)).unwrap();
    assert!(model.fits.iter().all(|f| f.is_finite()));
    assert!(
        model
            .factors
            .iter()
            .all(|f| f.data().iter().all(|v| v.is_finite()))
    );
}

#[test]
fn zero_tensor_is_rejected() {
    let x = CooTensor::new(vec![3, 3, 3], vec![vec![0], vec![1], vec![2]], vec![0.0]).unwrap();
    let p = prep(&x, Op::Mttkrp, 2);
    assert!(matches!(
        cp_als(&Engine::cpu(), &p, &cp_opts(2, 5, 0.0, 0)).unwrap_err(),
        Error::InvalidTensor(_)
    ));
}

#[test]
fn check_finite_finds_the_first_bad_entry_past_the_first_chunk() {
    // More than one parallel chunk (65 536 floats), the bad entries in a later one.
    let mut m = Matrix::zeros(300, 1000);
    assert!(super::check_finite(&m, || "m".into()).is_ok());
    m.set(250, 7, f32::INFINITY);
    m.set(299, 999, f32::NAN);
    match super::check_finite(&m, || "m".into()) {
        Err(Error::NonFinite(msg)) => assert_eq!(msg, "m entry 250007 is inf"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn negative_residuals_are_rounding_only_within_the_backends_precision() {
    let n = 1e6;
    // Within the tolerance: the model fits exactly.
    assert_eq!(
        super::fit_from(n, -0.9e-3 * n, 1e-3, || "t".into()).unwrap(),
        1.0
    );
    // Beyond it: the residual and the norm do not come from the same values.
    assert!(super::fit_from(n, -1.1e-3 * n, 1e-3, || "t".into()).is_err());
    // A GPU's fp16 staging widens the tolerance; the CPU keeps the f32 one.
    let cpu = Engine::cpu();
    assert_eq!(super::residual_rounding(&cpu), super::RESIDUAL_ROUNDING);
    assert!(2.0 * cpu.backend().relative_error() <= super::RESIDUAL_ROUNDING);
}

/// Values near 1e37 overflow CP-ALS's f32 MTTKRP sums: one error that names the entry
/// and says why (the tensor's norm) and what to do, not a bare "inf". The same tensor
/// at 1e30 is a model with the unscaled fit.
#[test]
fn overflowing_values_are_an_error_that_says_why() {
    let x = random_ints(&[30, 20, 10], 2000, 8);
    let scaled = |s: f64| {
        let v = x.values().iter().map(|v| v * s).collect();
        let idx = (0..x.order()).map(|m| x.indices(m).to_vec()).collect();
        CooTensor::new(x.dims().to_vec(), idx, v).unwrap()
    };
    let opts = cp_opts(3, 5, 0.0, 1);
    let want = cp_als(&Engine::cpu(), &prep(&x, Op::Mttkrp, 3), &opts).unwrap();
    let big = scaled(1e30);
    let got = cp_als(&Engine::cpu(), &prep(&big, Op::Mttkrp, 3), &opts).unwrap();
    assert!((got.fit().unwrap() - want.fit().unwrap()).abs() < 1e-5);
    let huge = scaled(1e37);
    match cp_als(&Engine::cpu(), &prep(&huge, Op::Mttkrp, 3), &opts) {
        Err(Error::NonFinite(msg)) => {
            assert!(
                msg.contains("MTTKRP of mode 0 in iteration 0 entry"),
                "{msg}"
            );
            assert!(msg.contains("divide the values by a power of two"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
}
