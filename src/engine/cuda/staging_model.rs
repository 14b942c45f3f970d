//! An f64 model of how the dense kernels round a tile's factors to fp16 (see
//! kernels/dense_mttkrp.cu and kernels/dense_ttmc.cu), checked against exact sums on
//! the CPU: each 16-row tile column is scaled by the power of two that brings its
//! largest entry into [0.5, 1) before rounding, products are summed in f32, and the
//! scales are folded back. Factors spread log-uniformly over six decades keep fp16's
//! relative precision this way; a scale per whole factor column (the scheme the kernels
//! used before) loses the entries of tiles far below the column's largest one.

use half::f16;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// The exponent E with m / 2^E in [0.5, 1) (0 for m = 0), clamped as the kernels do.
fn pow2_exponent(m: f32) -> i32 {
    if m == 0.0 {
        return 0;
    }
    // frexp: m = f * 2^e, f in [0.5, 1).
    let e = m.abs().log2().floor() as i32 + 1;
    let e = if m.abs() / 2f32.powi(e) >= 1.0 {
        e + 1
    } else {
        e
    };
    let e = if m.abs() / 2f32.powi(e) < 0.5 {
        e - 1
    } else {
        e
    };
    e.clamp(-126, 126)
}

/// `col` (16 entries) rounded to fp16 after scaling by 2^-E, with E from `max_abs`
/// (the tile column's largest entry for the kernels' scheme); returns the rounded,
/// still scaled values and 2^E.
fn stage(col: &[f32; 16], max_abs: f32) -> ([f32; 16], f32) {
    let e = pow2_exponent(max_abs);
    let inv = 2f32.powi(-e);
    (col.map(|v| f16::from_f32(v * inv).to_f32()), 2f32.powi(e))
}

fn log_uniform(rng: &mut Xoshiro256PlusPlus) -> f32 {
    10f32.powf(rng.random_range(-6.0f32..0.0))
}

/// One tile's MTTKRP column `c` for target offset `e`: M = sum_ea Fa[ea] sum_eb X[ea][eb]
/// Fb[eb], with Fb staged (per tile column, or with the given whole-column maximum).
fn mttkrp_cell(x: &[[f32; 16]; 16], fa: &[f32; 16], fb: &[f32; 16], col_max: Option<f32>) -> f64 {
    let tile_max = fb.iter().fold(0f32, |m, v| m.max(v.abs()));
    let (fb16, scale) = stage(fb, col_max.unwrap_or(tile_max));
    let mut m = 0f32;
    for ea in 0..16 {
        let t: f32 = (0..16).map(|eb| x[ea][eb] * fb16[eb]).sum();
        m += fa[ea] * t;
    }
    f64::from(m) * f64::from(scale)
}

fn exact_mttkrp_cell(x: &[[f32; 16]; 16], fa: &[f32; 16], fb: &[f32; 16]) -> f64 {
    (0..16)
        .map(|ea| {
            (0..16)
                .map(|eb| f64::from(x[ea][eb]) * f64::from(fa[ea]) * f64::from(fb[eb]))
                .sum::<f64>()
        })
        .sum()
}

/// A tile slice of ~`fill` nonzeros with small integer values (exact in fp16).
fn slice(rng: &mut Xoshiro256PlusPlus, fill: f64) -> [[f32; 16]; 16] {
    let mut x = [[0f32; 16]; 16];
    for row in &mut x {
        for v in row.iter_mut() {
            if rng.random_bool(fill) {
                *v = rng.random_range(1..6) as f32;
            }
        }
    }
    x
}

#[test]
fn tile_column_scales_keep_log_uniform_factors_to_fp16_precision() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(42);
    let mut worst = 0f64;
    for _ in 0..2000 {
        let x = slice(&mut rng, 0.1);
        let fa: [f32; 16] = std::array::from_fn(|_| log_uniform(&mut rng));
        let fb: [f32; 16] = std::array::from_fn(|_| log_uniform(&mut rng));
        let exact = exact_mttkrp_cell(&x, &fa, &fb);
        if exact == 0.0 {
            continue;
        }
        let rel = (mttkrp_cell(&x, &fa, &fb, None) - exact).abs() / exact;
        worst = worst.max(rel);
    }
    // fp16 rounds to 2^-11 relative; positive terms cannot amplify it, and entries
    // down to 2^-24 of the tile column's largest stay representable (subnormal).
    assert!(worst < 1e-3, "worst relative error {worst:e}");
}

#[test]
fn a_scale_per_whole_column_loses_tiles_far_below_the_column_maximum() {
    // The old scheme scaled by the largest entry of the whole factor column. A tile
    // whose rows are all near 1e-7 of it rounds to fp16 subnormals: most precision gone.
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
    let x = slice(&mut rng, 0.3);
    let fa: [f32; 16] = std::array::from_fn(|_| rng.random_range(0.5f32..1.0));
    let fb: [f32; 16] = std::array::from_fn(|_| 1e-7 * rng.random_range(1.0f32..2.0));
    let exact = exact_mttkrp_cell(&x, &fa, &fb);
    let per_tile = (mttkrp_cell(&x, &fa, &fb, None) - exact).abs() / exact;
    let per_column = (mttkrp_cell(&x, &fa, &fb, Some(1.0)) - exact).abs() / exact;
    assert!(per_tile < 1e-3, "per tile column: {per_tile:e}");
    assert!(per_column > 1e-2, "per whole column: {per_column:e}");
}

#[test]
fn ttmc_row_scales_keep_the_intermediate_in_fp16_range_and_precision() {
    // dense_ttmc.cu: P[rb][ea] = sum_eb Fb16[eb][rb] X[ea][eb] (f32), each row rescaled
    // by a power of two into [0.5, 1) and rounded to fp16, then Q = P' Fa16; compared
    // with the exact Y[ra][rb] = sum Fa[ea][ra] X[ea][eb] Fb[eb][rb] for one (ra, rb).
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
    let mut worst = 0f64;
    for _ in 0..2000 {
        // Large values too: without the row scale, P would overflow fp16 (65504).
        let mut x = slice(&mut rng, 0.2);
        for row in &mut x {
            for v in row.iter_mut() {
                *v *= 4000.0;
            }
        }
        let fa: [f32; 16] = std::array::from_fn(|_| log_uniform(&mut rng));
        let fb: [f32; 16] = std::array::from_fn(|_| log_uniform(&mut rng));
        let (fa16, sa) = stage(&fa, fa.iter().fold(0f32, |m, v| m.max(*v)));
        let (fb16, sb) = stage(&fb, fb.iter().fold(0f32, |m, v| m.max(*v)));
        let p: [f32; 16] = std::array::from_fn(|ea| (0..16).map(|eb| fb16[eb] * x[ea][eb]).sum());
        let (p16, d) = stage(&p, p.iter().fold(0f32, |m, v| m.max(v.abs())));
        let q: f32 = (0..16).map(|ea| p16[ea] * fa16[ea]).sum();
        let got = f64::from(q) * f64::from(d) * f64::from(sa) * f64::from(sb);
        let exact: f64 = (0..16)
            .map(|ea| {
                (0..16)
                    .map(|eb| f64::from(fa[ea]) * f64::from(x[ea][eb]) * f64::from(fb[eb]))
                    .sum::<f64>()
            })
            .sum();
        if exact == 0.0 {
            continue;
        }
        assert!(got.is_finite());
        worst = worst.max((got - exact).abs() / exact);
    }
    // Three fp16 roundings of positive terms: within about 3 * 2^-11.
    assert!(worst < 2e-3, "worst relative error {worst:e}");
}

#[test]
fn exponents_match_frexp() {
    for (m, e) in [
        (1.0f32, 1),
        (0.5, 0),
        (0.75, 0),
        (0.49, -1),
        (3.0, 2),
        (1e-30, -99),
    ] {
        let got = pow2_exponent(m);
        assert_eq!(got, e, "{m}");
        let f = m / 2f32.powi(got);
        assert!((0.5..1.0).contains(&f), "{m}: {f}");
    }
    assert_eq!(pow2_exponent(0.0), 0);
    assert_eq!(pow2_exponent(f32::MAX), 126, "clamped");
}

/// fp16 of x, as the kernels' `__float2half_rn`.
fn h(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

#[test]
fn f32_values_split_with_the_factor_keep_f32_precision() {
    // dense_mttkrp.cu with f32 values: X = X_hi + X_lo (each fp16), F_b staged per tile
    // column and split into hi + lo_term (the rounding error times 2^12, so it stays in
    // fp16's normal range); three passes X_hi F_hi + 2^-12 X_hi F_lo + X_lo F_hi, summed
    // in f32. Left: X_lo F_lo (2^-24 relative), the rounding of the second terms (2^-23
    // each) and the f32 sums: a few 2^-23, not fp16's 2^-11.
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(11);
    let (mut worst, mut worst_hi_only) = (0f64, 0f64);
    for _ in 0..2000 {
        let mut x = [[0f32; 16]; 16];
        for row in &mut x {
            for v in row.iter_mut() {
                if rng.random_bool(0.3) {
                    *v = rng.random_range(0.1f32..1.0);
                }
            }
        }
        let fa: [f32; 16] = std::array::from_fn(|_| rng.random_range(0.1f32..1.0));
        let fb: [f32; 16] = std::array::from_fn(|_| rng.random_range(0.1f32..1.0));
        let exact = exact_mttkrp_cell(&x, &fa, &fb);
        if exact == 0.0 {
            continue;
        }
        let e = pow2_exponent(fb.iter().fold(0f32, |m, v| m.max(v.abs())));
        let inv = 2f32.powi(-e);
        let fb_hi = fb.map(|v| h(v * inv));
        let fb_lo = fb.map(|v| h((v * inv - h(v * inv)) * 4096.0));
        let (mut m, mut m_hi_only) = (0f32, 0f32);
        for ea in 0..16 {
            let (mut t, mut t_hi_only) = (0f32, 0f32);
            for eb in 0..16 {
                let (xh, xl) = (h(x[ea][eb]), h(x[ea][eb] - h(x[ea][eb])));
                t += xh * fb_hi[eb] + xh * fb_lo[eb] / 4096.0 + xl * fb_hi[eb];
                t_hi_only += (xh + xl) * fb_hi[eb];
            }
            m += fa[ea] * t;
            m_hi_only += fa[ea] * t_hi_only;
        }
        let scale = f64::from(2f32.powi(e));
        worst = worst.max((f64::from(m) * scale - exact).abs() / exact);
        worst_hi_only = worst_hi_only.max((f64::from(m_hi_only) * scale - exact).abs() / exact);
    }
    assert!(
        worst < 8.0 * 2f64.powi(-23),
        "split factor: worst {worst:e}"
    );
    // Splitting the values alone leaves the factor's fp16 rounding.
    assert!(
        worst_hi_only > 2f64.powi(-16),
        "values split only: worst {worst_hi_only:e}"
    );
}
