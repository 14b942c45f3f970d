//! Tests of Tucker-HOOI on the CPU engine (the helpers are the parent's).

use super::*;

pub(super) fn tk_opts(ranks: &[usize], iters: usize, tol: f64, seed: u64) -> TuckerOptions {
    TuckerOptions {
        ranks: ranks.to_vec(),
        max_iters: iters,
        tol,
        seed,
        init: None,
    }
}

pub(super) fn max_orthonormality_error(u: &Matrix) -> f64 {
    let r = u.cols();
    let mut worst = 0.0f64;
    for a in 0..r {
        for b in 0..r {
            let dot: f64 = (0..u.rows())
                .map(|i| u.get(i, a) as f64 * u.get(i, b) as f64)
                .sum();
            let want = if a == b { 1.0 } else { 0.0 };
            worst = worst.max((dot - want).abs());
        }
    }
    worst
}

#[test]
fn tucker_recovers_exact_low_multilinear_rank() {
    // Mode 2 (length 5 ≤ 3·3) takes the thin-SVD path, modes 0 and 1 the Gram path.
    let ranks = [3, 3, 2];
    let x = exact_tucker(&[20, 18, 5], &ranks, 3);
    let p = prep(&x, Op::Ttmc, 3);
    let model = tucker_hooi(&Engine::cpu(), &p, &tk_opts(&ranks, 20, 1e-10, 1)).unwrap();
    let fit = model.fit().unwrap();
    assert!(fit > 0.99, "fit {fit}");
    assert_eq!(model.core.len(), 18);
    for u in &model.factors {
        // Orthonormal in f64, rounded to f32: errors of a few u ≈ 6e-8 per product.
        assert!(max_orthonormality_error(u) < 1e-6);
    }
}

#[test]
fn tucker_recovers_exact_4way() {
    let ranks = [2, 2, 2, 2];
    let x = exact_tucker(&[7, 6, 5, 4], &ranks, 13);
    let p = prep(&x, Op::Ttmc, 2);
    let model = tucker_hooi(&Engine::cpu(), &p, &tk_opts(&ranks, 20, 1e-10, 2)).unwrap();
    assert!(model.fit().unwrap() > 0.99, "fit {:?}", model.fits);
}

#[test]
fn tucker_fit_formula_matches_dense_residual() {
    let x = random_ints(&[9, 8, 7], 200, 8);
    let ranks = [3, 2, 4];
    let p = prep(&x, Op::Ttmc, 4);
    let model = tucker_hooi(&Engine::cpu(), &p, &tk_opts(&ranks, 4, 0.0, 5)).unwrap();
    let resid = dense_resid_sq(&x, |c| model.entry(c).unwrap()).sqrt();
    let direct = 1.0 - resid / x.norm_sq().sqrt();
    // ‖X − X̂‖² = ‖X‖² − ‖G‖² holds for orthonormal factors; ours are orthonormal to
    // f32 rounding (≈ 1e-7) and G carries f32 kernel rounding (≈ 1e-6 relative).
    let fit = model.fit().unwrap();
    assert!(
        (fit - direct).abs() < 1e-5,
        "formula {fit} vs dense {direct}"
    );
    // Fits never drop in HOOI either (each step maximizes ‖G‖ over one factor).
    for w in model.fits.windows(2) {
        assert!(w[1] >= w[0] - 1e-6, "{:?}", model.fits);
    }
}

#[test]
fn tucker_is_deterministic() {
    let x = random_ints(&[30, 20, 10], 1500, 9);
    let p = prep(&x, Op::Ttmc, 4);
    let e = Engine::cpu();
    let opts = tk_opts(&[4, 3, 2], 5, 0.0, 42);
    let a = tucker_hooi(&e, &p, &opts).unwrap();
    let b = tucker_hooi(&e, &p, &opts).unwrap();
    assert_eq!(a.fits, b.fits);
    assert_eq!(a.core, b.core);
    assert_eq!(a.factors, b.factors);
}

#[test]
fn tucker_control_stops_the_run_and_returns_the_model_so_far() {
    let x = random_ints(&[30, 20, 10], 1500, 9);
    let p = prep(&x, Op::Ttmc, 4);
    let e = Engine::cpu();
    let opts = tk_opts(&[4, 3, 2], 50, 0.0, 42);
    let mut seen = Vec::new();
    let stopped = tucker_hooi_with_control(&e, &p, &opts, &mut break_after(1, &mut seen)).unwrap();
    assert_eq!(seen, [0, 1], "no iteration runs after the break");
    let two = tucker_hooi(&e, &p, &tk_opts(&[4, 3, 2], 2, 0.0, 42)).unwrap();
    assert_eq!(stopped.fits, two.fits);
    assert_eq!(stopped.core, two.core);
    assert_eq!(stopped.factors, two.factors);
}

#[test]
fn tucker_rejects_bad_options() {
    let x = random_ints(&[5, 4, 3], 30, 1);
    let p = prep(&x, Op::Ttmc, 2);
    let e = Engine::cpu();
    let run = |o: TuckerOptions| tucker_hooi(&e, &p, &o).unwrap_err();
    assert!(matches!(
        run(tk_opts(&[2, 2], 5, 0.0, 0)),
        Error::InvalidRank(_)
    ));
    assert!(matches!(
        run(tk_opts(&[2, 0, 2], 5, 0.0, 0)),
        Error::InvalidRank(_)
    ));
    assert!(matches!(
        run(tk_opts(&[2, 5, 2], 5, 0.0, 0)),
        Error::InvalidRank(_)
    ));
    // 3 > 1·2: more than the other ranks can feed.
    assert!(matches!(
        run(tk_opts(&[3, 1, 2], 5, 0.0, 0)),
        Error::InvalidRank(_)
    ));
    assert!(matches!(
        run(tk_opts(&[2, 2, 2], 0, 0.0, 0)),
        Error::InvalidOption(_)
    ));
    assert!(matches!(
        run(tk_opts(&[2, 2, 2], 5, f64::NAN, 0)),
        Error::InvalidOption(_)
    ));
    let init = vec![
        Matrix::random(5, 2, 0),
        Matrix::random(4, 2, 0),
        Matrix::random(3, 1, 0),
    ];
    assert!(matches!(
        run(TuckerOptions {
            init: Some(init),
            ..tk_opts(&[2, 2, 2], 5, 0.0, 0)
        }),
        Error::Shape { .. }
    ));
}
