//! The small solves of the completion solvers on the host: ALS's per-row
//! regularized normal equations and CCD++'s column update.

use crate::decomp::dense::inverse_spd;
use crate::decomp::small_cholesky::{cholesky_solve_lanes, cholesky_solve_small};
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
    let sys = Systems {
        ne,
        r,
        lambda,
        shift,
        counts,
    };
    // Other widths run padded with identity rows to the next unrolled one; a CP rank
    // of 8, 16, 32 or 64 plus a bias column runs at its own width (the factorization's
    // cost grows with the cube of the width). Rows go 8 at a time through one
    // Cholesky, 4 at the widths above 33 (an 8-lane workspace there would be 150 KB
    // or more; 8 lanes have not been timed at those widths).
    let a = out.data_mut();
    let pinv = match r {
        0 => 0,
        1..=8 => sys.solve_in_lanes::<8, 8>(a)?,
        9 => sys.solve_in_lanes::<9, 8>(a)?,
        10..=16 => sys.solve_in_lanes::<16, 8>(a)?,
        17 => sys.solve_in_lanes::<17, 8>(a)?,
        18..=24 => sys.solve_in_lanes::<24, 8>(a)?,
        25..=32 => sys.solve_in_lanes::<32, 8>(a)?,
        33 => sys.solve_in_lanes::<33, 8>(a)?,
        34..=48 => sys.solve_in_lanes::<48, 4>(a)?,
        49..=64 => sys.solve_in_lanes::<64, 4>(a)?,
        65 => sys.solve_in_lanes::<65, 4>(a)?,
        _ => sys.solve_in_lanes::<0, 1>(a)?,
    };
    Ok((out, pinv))
}

/// [`solve_rows`]' inputs: the normal equations `ne` of rank `r`, `λ`, `shift = λ c`
/// (added to every right-hand side) and the rows' entry counts.
struct Systems<'a> {
    ne: &'a Matrix,
    r: usize,
    lambda: &'a [f64],
    shift: &'a [f64],
    counts: &'a [u32],
}

/// One worker's systems of [`Systems::solve_in_lanes`], `L` rows interleaved, kept
/// from one group of rows to the next (only the entries the factorization reads are
/// written per group: at width 17 the array is 18 KiB, and clearing it per 8 rows
/// was 3 % of an ALS epoch).
struct Lanes<const P: usize, const L: usize> {
    g: Box<[[[f64; L]; P]; P]>,
    b: [[f64; L]; P],
}

impl<const P: usize, const L: usize> Lanes<P, L> {
    fn new() -> Self {
        let g = vec![[[0f64; L]; P]; P].into_boxed_slice();
        Lanes {
            g: g.try_into().expect("P rows"),
            b: [[0f64; L]; P],
        }
    }
}

impl Systems<'_> {
    /// Solves every row into `out` (`rows × r`), `L` rows at a time at width `P ≥ r`
    /// ([`cholesky_solve_lanes`]); a row whose system is not positive definite, and
    /// every row at `P = 0` (ranks above the unrolled widths), one at a time
    /// ([`solve_one`]). Returns the count of pseudo-inverse fallbacks.
    fn solve_in_lanes<const P: usize, const L: usize>(&self, out: &mut [f32]) -> Result<usize> {
        let r = self.r;
        // A placeholder system for the lanes without a row: I x = 0 (λ is added to
        // it as to the others; its solution, zero, is not used).
        let mut identity = vec![0f32; r * r + r];
        for p in 0..r {
            identity[p * r + p] = 1.0;
        }
        let identity = &identity[..];
        out.par_chunks_mut(L * r)
            .enumerate()
            .with_min_len(2)
            .map_init(Lanes::<P, L>::new, |lanes, (c, a)| -> Result<usize> {
                let first = L * c;
                let mut solved = [false; L];
                if P > 0 {
                    self.lanes(lanes, identity, first, a.len() / r, a, &mut solved);
                }
                let mut pinv = 0;
                for (l, a) in a.chunks_exact_mut(r).enumerate() {
                    let i = first + l;
                    if self.counts[i] > 0 && !solved[l] {
                        let row = self.ne.row(i);
                        pinv += usize::from(solve_one(row, r, self.lambda, self.shift, a)?);
                    }
                    if let Some(v) = a.iter().find(|v| !v.is_finite()) {
                        return Err(Error::NonFinite(format!("ALS solve of row {i} gave {v}")));
                    }
                }
                Ok(pinv)
            })
            .sum()
    }

    /// The `n ≤ L` rows `first..first + n` for a rank `r ≤ P`, `L` at a time
    /// ([`cholesky_solve_lanes`]) into `out` (`n × r`); per row, in `done`, whether it
    /// is done (rows without entries are, at zero; a row whose system was not positive
    /// definite is not). Below `P`, the systems are padded with identity rows and zero
    /// right-hand sides: the factorization is block diagonal, so the first `r` unknowns
    /// are those of the `r × r` system and the padding's are zero. Every entry of the
    /// upper triangle and of `b` is written (the workspace is reused).
    fn lanes<const P: usize, const L: usize>(
        &self,
        lanes: &mut Lanes<P, L>,
        identity: &[f32],
        first: usize,
        n: usize,
        out: &mut [f32],
        done: &mut [bool; L],
    ) {
        let (r, counts) = (self.r, self.counts);
        let (g, b) = (&mut *lanes.g, &mut lanes.b);
        let src: [&[f32]; L] = std::array::from_fn(|l| {
            if l < n && counts[first + l] > 0 {
                self.ne.row(first + l)
            } else {
                identity
            }
        });
        // The upper triangle and the right-hand sides, one lane array per entry,
        // gathered across the rows (an array per entry is one or two vectors; lane by
        // lane, every entry is a scalar store).
        for p in 0..P {
            if p < r {
                let rows: [&[f32]; L] = std::array::from_fn(|l| &src[l][p * r..p * r + r]);
                for q in p..r {
                    g[p][q] = std::array::from_fn(|l| f64::from(rows[l][q]));
                }
                for gpq in &mut g[p][r..] {
                    *gpq = [0.0; L];
                }
                for v in &mut g[p][p] {
                    *v += self.lambda[p];
                }
                b[p] = std::array::from_fn(|l| f64::from(src[l][r * r + p]) + self.shift[p]);
            } else {
                // The padding: identity rows, zero right-hand sides.
                for (q, gpq) in g[p].iter_mut().enumerate().skip(p) {
                    *gpq = [f64::from(u8::from(q == p)); L];
                }
                b[p] = [0.0; L];
            }
        }
        let ok = cholesky_solve_lanes(g, b);
        for (l, a) in out.chunks_exact_mut(r).enumerate() {
            if counts[first + l] == 0 {
                done[l] = true;
            } else if ok[l] {
                for (v, bp) in a.iter_mut().zip(&*b) {
                    *v = bp[l] as f32;
                }
                done[l] = true;
            }
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
/// entries: the loss after an ALS sweep comes with its last mode's solve. Near an exact
/// fit the three terms cancel and the f32 rounding of `G` and `b` is all that is left:
/// [`RowsLoss::trusted`] says when.
pub(super) fn loss_of_rows(ne: &Matrix, r: usize, a: &Matrix, squares: &[f64]) -> RowsLoss {
    const ROWS: usize = 64;
    let rows = ne.rows();
    let parts: Vec<RowsLoss> = (0..rows.div_ceil(ROWS))
        .into_par_iter()
        .map(|blk| {
            let mut part = RowsLoss::default();
            let first = blk * ROWS;
            for (i, &sq) in (first..).zip(&squares[first..(first + ROWS).min(rows)]) {
                let (row, x) = (ne.row(i), a.row(i));
                let (g, b) = row.split_at(r * r);
                let mut quad = 0f64;
                let mut lin = 0f64;
                for (p, (gp, &xp)) in g.chunks_exact(r).zip(x).enumerate() {
                    let gx: f64 = gp.iter().zip(x).map(|(&v, &xq)| f64::from(v * xq)).sum();
                    quad += f64::from(xp) * gx;
                    lin += f64::from(b[p]) * f64::from(xp);
                }
                part.loss += sq - 2.0 * lin + quad;
                part.magnitude += sq + 2.0 * lin.abs() + quad.abs();
            }
            part
        })
        .collect();
    parts.iter().fold(RowsLoss::default(), |s, p| s.plus(p))
}

/// A loss summed from normal equations ([`loss_of_rows`]) and the magnitude of its
/// terms, which bounds their rounding.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct RowsLoss {
    /// `Σ (Σ y² − 2aᵀb + aᵀGa)`.
    pub(super) loss: f64,
    /// `Σ (Σ y² + 2|aᵀb| + |aᵀGa|)`.
    pub(super) magnitude: f64,
}

/// Below this share of its terms' magnitude, a loss from normal equations has lost more
/// than 8 of f32's 24 bits to cancellation: it is taken again from the entries. (At
/// the share, rounding errors of a few units of f32's ε in `G` and `b`, grown by the
/// square root of a row's length, are below 2⁻¹⁶ √n of the loss; real data sits far
/// above it: movielens' ALS loss is about half its terms' magnitude.)
const TRUSTED_SHARE: f64 = 1.0 / 256.0;

impl RowsLoss {
    /// The sum of both parts.
    pub(super) fn plus(self, other: &RowsLoss) -> RowsLoss {
        RowsLoss {
            loss: self.loss + other.loss,
            magnitude: self.magnitude + other.magnitude,
        }
    }

    /// The loss where cancellation has left it most of its digits, else `None` (then a
    /// pass over the entries gives it: near an exact fit, the formula's result is
    /// rounding, and a train RMSE of 0, or of a thousand times the truth, was reported).
    pub(super) fn trusted(&self) -> Option<f64> {
        (self.loss >= TRUSTED_SHARE * self.magnitude).then_some(self.loss)
    }
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

    /// Every rank up to 66 (the lane widths, the ranks padded up to them and the
    /// one-row solves above 65) solves the same systems as the one-row Cholesky.
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
            // Several groups of lanes per worker, so that a workspace is reused after a
            // group with empty rows (placeholders) and padding.
            let rows = 37;
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
                .map(|i| if [3, 9, 10, 20].contains(&i) { 0 } else { 5 })
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
            let got = loss_of_rows(&ne, r, &a, &squares).loss;
            let tol = 4.0 * bound / (1u64 << 24) as f64;
            assert!(
                (got - want).abs() <= tol,
                "rank {r}: {got} vs {want} (bound {tol})"
            );
            assert!(want > 0.0 && got.is_finite(), "rank {r}");
        }
    }
}
