//! The small solves of the completion solvers on the host: ALS's per-row
//! regularized normal equations and CCD++'s column update.

use crate::decomp::dense::{cholesky_solve_small, cholesky_solve_x4, inverse_spd};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use faer::MatRef;
use rayon::prelude::*;

/// ALS: every row's `a_i = (G_i + diag(λ))⁻¹ b_i` from the normal equations `ne`
/// (`I × (R² + R)`), `λ` one regularization per column (`R` of them), rows without
/// entries at zero; the count of pseudo-inverse fallbacks.
pub(super) fn solve_rows(
    ne: &Matrix,
    r: usize,
    lambda: &[f64],
    counts: &[u32],
) -> Result<(Matrix, usize)> {
    debug_assert_eq!(lambda.len(), r);
    let rows = ne.rows();
    let mut out = Matrix::zeros(rows, r);
    let pinv = out
        .data_mut()
        .par_chunks_mut(4 * r.max(1))
        .enumerate()
        .with_min_len(4)
        .map(|(c, a)| -> Result<usize> {
            let first = 4 * c;
            let n = a.len() / r;
            let solved = match r {
                8 => solve_x4::<8>(ne, first, n, lambda, counts, a),
                16 => solve_x4::<16>(ne, first, n, lambda, counts, a),
                32 => solve_x4::<32>(ne, first, n, lambda, counts, a),
                _ => [false; 4],
            };
            let mut pinv = 0;
            for (l, a) in a.chunks_exact_mut(r).enumerate() {
                let i = first + l;
                if counts[i] > 0 && !solved[l] {
                    pinv += usize::from(solve_one(ne.row(i), r, lambda, a)?);
                }
                if let Some(v) = a.iter().find(|v| !v.is_finite()) {
                    return Err(Error::NonFinite(format!("ALS solve of row {i} gave {v}")));
                }
            }
            Ok(pinv)
        })
        .sum::<Result<usize>>()?;
    Ok((out, pinv))
}

/// The `n ≤ 4` rows `first..first + n` of [`solve_rows`] for rank `R`, four at a time
/// ([`cholesky_solve_x4`]) into `out` (`n × R`); per row, whether it is done (rows
/// without entries are, at zero; a row whose system was not positive definite is not).
fn solve_x4<const R: usize>(
    ne: &Matrix,
    first: usize,
    n: usize,
    lambda: &[f64],
    counts: &[u32],
    out: &mut [f32],
) -> [bool; 4] {
    let mut g = [[[0f64; 4]; R]; R];
    let mut b = [[0f64; 4]; R];
    for l in 0..4 {
        if l >= n || counts[first + l] == 0 {
            // A placeholder system, I x = 0.
            for (p, gp) in g.iter_mut().enumerate() {
                gp[p][l] = 1.0;
            }
            continue;
        }
        let row = ne.row(first + l);
        for (p, gp) in g.iter_mut().enumerate() {
            for (q, gpq) in gp.iter_mut().enumerate().skip(p) {
                gpq[l] = f64::from(row[p * R + q]);
            }
            gp[p][l] += lambda[p];
            b[p][l] = f64::from(row[R * R + p]);
        }
    }
    let ok = cholesky_solve_x4(&mut g, &mut b);
    let mut done = [false; 4];
    for (l, a) in out.chunks_exact_mut(R).enumerate() {
        if counts[first + l] == 0 {
            done[l] = true;
        } else if ok[l] {
            for (v, bp) in a.iter_mut().zip(&b) {
                *v = bp[l] as f32;
            }
            done[l] = true;
        }
    }
    done
}

/// One row of [`solve_rows`]: `a = (G + diag(λ))⁻¹ b` by Cholesky, or by the
/// pseudo-inverse when `G + diag(λ)` is singular (only `λ = 0` allows it); whether it
/// took the pseudo-inverse.
fn solve_one(row: &[f32], r: usize, lambda: &[f64], a: &mut [f32]) -> Result<bool> {
    let system = || {
        let g: Vec<f64> = (0..r * r)
            .map(|p| f64::from(row[p]) + if p / r == p % r { lambda[p / r] } else { 0.0 })
            .collect();
        let x: Vec<f64> = row[r * r..].iter().map(|&v| f64::from(v)).collect();
        (g, x)
    };
    let (mut g, mut x) = system();
    let pinv = !cholesky_solve_small(&mut g, &mut x, r);
    if pinv {
        let (g, b) = system();
        let (inv, _) = inverse_spd(&MatRef::from_row_major_slice(&g, r, r).to_owned())?;
        for (p, xv) in x.iter_mut().enumerate() {
            *xv = (0..r).map(|q| inv[(p, q)] * b[q]).sum();
        }
    }
    for (v, &xv) in a.iter_mut().zip(&x) {
        *v = xv as f32;
    }
    Ok(pinv)
}

/// CCD++: a column's new values `(Σ ê k + λ c) / (λ + Σ k²)` from its terms (`I × 2`),
/// `c` the value the column is shrunk toward (0 for a CP column, the mean for a bias);
/// rows without entries (or with `λ + Σ k² = 0`) at zero.
pub(super) fn column_update(terms: &Matrix, lambda: f64, center: f64, counts: &[u32]) -> Vec<f32> {
    terms
        .data()
        .chunks_exact(2)
        .zip(counts)
        .map(|(t, &n)| {
            let den = lambda + f64::from(t[1]);
            if n == 0 || den <= 0.0 {
                0.0
            } else {
                ((f64::from(t[0]) + lambda * center) / den) as f32
            }
        })
        .collect()
}
