//! The model's Gram matrices and what GCP takes from them: its squared norm (the
//! Gaussian loss's zeros in closed form, the start's scale) and the balanced start.

use crate::matrix::Matrix;
use rayon::prelude::*;

/// `Σ_{r,s} Π_n (A⁽ⁿ⁾ᵀ A⁽ⁿ⁾)_{rs}`: the squared norm of the model.
pub fn model_norm_sq(factors: &[Matrix<f64>]) -> f64 {
    let rank = factors.first().map_or(0, Matrix::cols);
    let mut h = vec![1.0; rank * rank];
    for f in factors {
        let g = gram(f);
        h.iter_mut().zip(&g).for_each(|(h, g)| *h *= g);
    }
    h.iter().sum()
}

/// The most partial Grams [`gram`] holds at once (with its result and
/// [`model_norm_sq`]'s product, what [`super::memory_plan`] counts).
pub const GRAM_PARTS: usize = 32;

/// `AᵀA` (`R × R`, row-major), summed over at most [`GRAM_PARTS`] row chunks (of at
/// least 4 096 rows) in a fixed order.
pub fn gram(a: &Matrix<f64>) -> Vec<f64> {
    let r = a.cols();
    let rows = a.rows().div_ceil(GRAM_PARTS).max(4096);
    let parts: Vec<Vec<f64>> = a
        .data()
        .par_chunks(rows * r.max(1))
        .map(|rows| {
            let mut g = vec![0.0; r * r];
            for row in rows.chunks_exact(r) {
                for (s, &a) in row.iter().enumerate() {
                    for (t, &b) in row.iter().enumerate() {
                        g[s * r + t] += a * b;
                    }
                }
            }
            g
        })
        .collect();
    let mut g = vec![0.0; r * r];
    for p in parts {
        g.iter_mut().zip(&p).for_each(|(g, p)| *g += p);
    }
    g
}

/// Unit columns, each component's norm product spread evenly over the modes: column
/// `r` of mode `n` becomes `A⁽ⁿ⁾[:, r] / ‖A⁽ⁿ⁾[:, r]‖ · (Π_m ‖A⁽ᵐ⁾[:, r]‖)^(1/N)`. The
/// model is unchanged. This is what GenTen's `gcp_sgd` (normalize, then distribute)
/// and pyttb's `gcp_opt` (`normalize("all")`) do to an initial guess. A component with
/// a zero (or non-finite) column norm is left as it is.
pub fn balance(factors: &mut [Matrix<f64>]) {
    let order = factors.len();
    let rank = factors.first().map_or(0, Matrix::cols);
    for r in 0..rank {
        let norms: Vec<f64> = factors
            .iter()
            .map(|f| {
                (0..f.rows())
                    .map(|i| f.get(i, r).powi(2))
                    .sum::<f64>()
                    .sqrt()
            })
            .collect();
        if norms.iter().any(|&n| n == 0.0 || !n.is_finite()) {
            continue;
        }
        let share = norms.iter().product::<f64>().powf(1.0 / order as f64);
        for (f, n) in factors.iter_mut().zip(&norms) {
            // Divide, then multiply, as pyttb does: the same bits from the same start.
            for i in 0..f.rows() {
                f.set(i, r, f.get(i, r) / n * share);
            }
        }
    }
}
