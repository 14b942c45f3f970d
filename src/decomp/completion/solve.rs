//! The small solves of the completion solvers on the host: ALS's per-row
//! regularized normal equations and CCD++'s column update.

use crate::decomp::dense::{cholesky_solve_lanes, cholesky_solve_small, inverse_spd};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use faer::MatRef;
use rayon::prelude::*;

/// ALS: every row's `a_i = (G_i + diag(λ))⁻¹ (b_i + diag(λ) c)` from the normal
/// equations `ne` (`I × (R² + R)`, left as they are), `λ` one regularization per
/// column (`R` of them) and `c` the values the columns are shrunk toward (the
/// minimizer of `‖y − K a‖² + Σ_p λ_p (a_p − c_p)²`), rows without entries at zero;
/// the count of pseudo-inverse fallbacks.
pub(super) fn solve_rows(
    ne: &Matrix,
    r: usize,
    lambda: &[f64],
    centers: &[f64],
    counts: &[u32],
) -> Result<(Matrix, usize)> {
    debug_assert_eq!(lambda.len(), r);
    debug_assert_eq!(centers.len(), r);
    let shift: Vec<f64> = lambda.iter().zip(centers).map(|(l, c)| l * c).collect();
    let shift = &shift[..];
    let rows = ne.rows();
    let mut out = Matrix::zeros(rows, r);
    // Rows go LANES at a time through one Cholesky, fewer (4) at widths whose 8-lane
    // system would not fit comfortably on a worker's stack.
    let lanes = if r <= 33 { LANES } else { 4 };
    let pinv = out
        .data_mut()
        .par_chunks_mut(lanes * r.max(1))
        .enumerate()
        .with_min_len(2)
        .map(|(c, a)| -> Result<usize> {
            let first = lanes * c;
            let n = a.len() / r;
            // Other widths run padded with identity rows to the next unrolled one;
            // a CP rank of 8, 16, 32 or 64 plus a bias column runs at its own width
            // (the factorization's cost grows with the cube of the width).
            let mut solved = [false; LANES];
            let s = &mut solved;
            match r {
                0 => {}
                1..=8 => solve_lanes::<8, LANES>(ne, r, first, n, lambda, shift, counts, a, s),
                9 => solve_lanes::<9, LANES>(ne, r, first, n, lambda, shift, counts, a, s),
                10..=16 => solve_lanes::<16, LANES>(ne, r, first, n, lambda, shift, counts, a, s),
                17 => solve_lanes::<17, LANES>(ne, r, first, n, lambda, shift, counts, a, s),
                18..=24 => solve_lanes::<24, LANES>(ne, r, first, n, lambda, shift, counts, a, s),
                25..=32 => solve_lanes::<32, LANES>(ne, r, first, n, lambda, shift, counts, a, s),
                33 => solve_lanes::<33, LANES>(ne, r, first, n, lambda, shift, counts, a, s),
                34..=48 => solve_lanes::<48, 4>(ne, r, first, n, lambda, shift, counts, a, s),
                49..=64 => solve_lanes::<64, 4>(ne, r, first, n, lambda, shift, counts, a, s),
                65 => solve_lanes::<65, 4>(ne, r, first, n, lambda, shift, counts, a, s),
                _ => {}
            };
            let mut pinv = 0;
            for (l, a) in a.chunks_exact_mut(r).enumerate() {
                let i = first + l;
                if counts[i] > 0 && !solved[l] {
                    pinv += usize::from(solve_one(ne.row(i), r, lambda, shift, a)?);
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

/// Rows solved together by [`solve_lanes`] at widths up to 33.
const LANES: usize = 8;

/// The `n ≤ L` rows `first..first + n` of [`solve_rows`] (`shift = λ c`, added to
/// every right-hand side) for a rank `r ≤ P`, `L` at a
/// time ([`cholesky_solve_lanes`]) into `out` (`n × r`); per row, in `done`, whether it
/// is done (rows without entries are, at zero; a row whose system was not positive
/// definite is not). Below `P`, the systems are padded with identity rows and zero
/// right-hand sides: the factorization is block diagonal, so the first `r` unknowns
/// are those of the `r × r` system and the padding's are zero.
#[allow(clippy::too_many_arguments)]
fn solve_lanes<const P: usize, const L: usize>(
    ne: &Matrix,
    r: usize,
    first: usize,
    n: usize,
    lambda: &[f64],
    shift: &[f64],
    counts: &[u32],
    out: &mut [f32],
    done: &mut [bool; LANES],
) {
    let mut g = [[[0f64; L]; P]; P];
    let mut b = [[0f64; L]; P];
    for l in 0..L {
        if l >= n || counts[first + l] == 0 {
            // A placeholder system, I x = 0.
            for (p, gp) in g.iter_mut().enumerate() {
                gp[p][l] = 1.0;
            }
            continue;
        }
        let row = ne.row(first + l);
        for (p, gp) in g.iter_mut().enumerate() {
            if p >= r {
                gp[p][l] = 1.0;
                continue;
            }
            for (q, gpq) in gp.iter_mut().enumerate().take(r).skip(p) {
                gpq[l] = f64::from(row[p * r + q]);
            }
            gp[p][l] += lambda[p];
            b[p][l] = f64::from(row[r * r + p]) + shift[p];
        }
    }
    let ok = cholesky_solve_lanes(&mut g, &mut b);
    for (l, a) in out.chunks_exact_mut(r).enumerate() {
        if counts[first + l] == 0 {
            done[l] = true;
        } else if ok[l] {
            for (v, bp) in a.iter_mut().zip(&b) {
                *v = bp[l] as f32;
            }
            done[l] = true;
        }
    }
}

/// One row of [`solve_rows`]: `a = (G + diag(λ))⁻¹ (b + shift)` by Cholesky, or by
/// the pseudo-inverse when `G + diag(λ)` is singular (only `λ = 0` allows it); whether
/// it took the pseudo-inverse.
fn solve_one(row: &[f32], r: usize, lambda: &[f64], shift: &[f64], a: &mut [f32]) -> Result<bool> {
    let system = || {
        let g: Vec<f64> = (0..r * r)
            .map(|p| f64::from(row[p]) + if p / r == p % r { lambda[p / r] } else { 0.0 })
            .collect();
        let x: Vec<f64> = (row[r * r..].iter().zip(shift))
            .map(|(&v, s)| f64::from(v) + s)
            .collect();
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

/// The squared error over a mode's rows at the solutions `a` (`I × R`), from their
/// normal equations `ne` (`I × (R² + R)`, as the kernel gave them) and their targets'
/// `Σ y²` (`squares`): `Σ_i (Σ y² − 2 a_iᵀ b_i + a_iᵀ G_i a_i)` in f64, rows in
/// fixed blocks summed in order (the same whatever the thread count). No pass over the
/// entries: the loss after an ALS sweep comes with its last mode's solve.
pub(super) fn loss_of_rows(ne: &Matrix, r: usize, a: &Matrix, squares: &[f64]) -> f64 {
    const ROWS: usize = 64;
    let rows = ne.rows();
    let parts: Vec<f64> = (0..rows.div_ceil(ROWS))
        .into_par_iter()
        .map(|blk| {
            (blk * ROWS..((blk + 1) * ROWS).min(rows))
                .map(|i| {
                    let (row, x) = (ne.row(i), a.row(i));
                    let (g, b) = row.split_at(r * r);
                    let mut quad = 0f64;
                    let mut lin = 0f64;
                    for (p, (gp, &xp)) in g.chunks_exact(r).zip(x).enumerate() {
                        let gx: f64 = gp.iter().zip(x).map(|(&v, &xq)| f64::from(v * xq)).sum();
                        quad += f64::from(xp) * gx;
                        lin += f64::from(b[p]) * f64::from(xp);
                    }
                    squares[i] - 2.0 * lin + quad
                })
                .sum::<f64>()
        })
        .collect();
    parts.iter().sum()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank up to 33 (the four-at-a-time widths, the ranks padded up to them and
    /// the one-row fallback above 32) solves the same systems as the one-row Cholesky.
    /// Both solve in f64; they differ in the order of operations only, far below the
    /// f32 rounding of the results, which the bound allows a few units of.
    #[test]
    fn padded_four_row_solves_match_the_one_row_solve() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32) / (1u64 << 24) as f32 - 0.5
        };
        for r in 1..=66 {
            let rows = 7;
            // G = Σ k kᵀ over a few random k (positive semidefinite), λ makes it definite.
            let mut ne = Matrix::zeros(rows, r * r + r);
            for i in 0..rows {
                let row = ne.row_mut(i);
                for _ in 0..(r + 3) {
                    let k: Vec<f32> = (0..r).map(|_| next()).collect();
                    let x = next();
                    for p in 0..r {
                        for q in 0..r {
                            row[p * r + q] += k[p] * k[q];
                        }
                        row[r * r + p] += x * k[p];
                    }
                }
            }
            let lambda: Vec<f64> = (0..r).map(|p| 0.1 + 0.01 * p as f64).collect();
            let counts: Vec<u32> = (0..rows as u32)
                .map(|i| if i == 3 { 0 } else { 5 })
                .collect();
            let centers: Vec<f64> = (0..r).map(|p| 0.5 - 0.1 * p as f64).collect();
            let shift: Vec<f64> = lambda.iter().zip(&centers).map(|(l, c)| l * c).collect();
            let (got, pinv) = solve_rows(&ne, r, &lambda, &centers, &counts).unwrap();
            assert_eq!(pinv, 0, "rank {r}");
            for (i, &count) in counts.iter().enumerate() {
                let mut want = vec![0f32; r];
                if count > 0 {
                    solve_one(ne.row(i), r, &lambda, &shift, &mut want).unwrap();
                }
                for (p, (&g, &w)) in got.row(i).iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                        "rank {r} row {i} entry {p}: {g} vs {w}"
                    );
                }
            }
        }
    }

    /// The loss from the normal equations equals the loss summed over the entries, to
    /// within the f32 rounding of `G` and `b`: each of their `n`-term sums is off by at
    /// most `n·u·Σ|terms|` (`u = 2⁻²⁴`), so `aᵀGa − 2aᵀb` is off by at most
    /// `n·u·Σ_j (|a|ᵀ|k_j| + |x_j|)²`; the bound allows 4 times that.
    #[test]
    fn loss_from_the_normal_equations_matches_the_loss_over_the_entries() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f64) / (1u64 << 24) as f64 - 0.5
        };
        for r in [1, 3, 9, 17, 33] {
            let rows = 5;
            let mut ne = Matrix::zeros(rows, r * r + r);
            let mut squares = vec![0f64; rows];
            let mut entries = Vec::new();
            for (i, sq) in squares.iter_mut().enumerate() {
                for _ in 0..(3 * i + 2) {
                    let k: Vec<f64> = (0..r).map(|_| 2.0 * next()).collect();
                    let x = 3.0 + next();
                    let row = ne.row_mut(i);
                    for p in 0..r {
                        for q in 0..r {
                            row[p * r + q] += (k[p] * k[q]) as f32;
                        }
                        row[r * r + p] += (x * k[p]) as f32;
                    }
                    *sq += x * x;
                    entries.push((i, k, x));
                }
            }
            let lambda = vec![0.5; r];
            let (a, _) = solve_rows(&ne, r, &lambda, &vec![0.0; r], &[1; 5]).unwrap();
            let (mut want, mut bound) = (0f64, 0f64);
            for (i, k, x) in &entries {
                let ai = a.row(*i);
                let m: f64 = k.iter().zip(ai).map(|(kv, &av)| kv * f64::from(av)).sum();
                want += (x - m).powi(2);
                let mag: f64 = k
                    .iter()
                    .zip(ai)
                    .map(|(kv, &av)| (kv * f64::from(av)).abs())
                    .sum();
                bound += (mag + x.abs()).powi(2) * (3 * rows + 2) as f64;
            }
            let got = loss_of_rows(&ne, r, &a, &squares);
            let tol = 4.0 * bound / (1u64 << 24) as f64;
            assert!(
                (got - want).abs() <= tol,
                "rank {r}: {got} vs {want} (bound {tol})"
            );
            assert!(want > 0.0 && got.is_finite(), "rank {r}");
        }
    }
}
