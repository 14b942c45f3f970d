//! One mode's factor update of CP-ALS, `A = M V⁻¹` then column normalization, in two
//! passes so that the rows may be spread over processes: [`solve_rows`] solves the
//! rows held here and gives their share of the column sums ([`RowSums`]); once the
//! shares of every holder are combined ([`RowSums::combine`]), [`finish`] normalizes
//! the rows held here. [`update_factor`] is both passes over a whole factor.

use super::super::dense::{gram_seq, row_blocks, sub_block_rows};
use super::super::zero_rows::nonzero_rows;
use crate::engine::cp_max_norm;
use crate::error::Result;
use crate::matrix::Matrix;
use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatMut, MatRef, Par};
use rayon::prelude::*;

/// What [`update_factor`] hands back besides the new factor.
pub(crate) struct Update {
    /// The column norms divided out (the new `λ`).
    pub(crate) norms: Vec<f64>,
    /// `AᵀA` of the new, normalized factor.
    pub(crate) gram: Mat<f64>,
    /// `Σ_i M[i, r] A[i, r]` per column (only when asked for; for the fit).
    pub(crate) inner: Vec<f64>,
    /// `max_i |A[i, r]|` of the stored (f32) factor, for the kernels' scaling.
    pub(crate) col_max: Vec<f32>,
}

/// The column sums of solved rows before normalization: `AᵀA`, the column norms'
/// accumulators (sums of squares when `two_norm`, else maxima of `|A[i, r]|`) and,
/// when asked for, `Σ_i M[i, r] A[i, r]`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RowSums {
    pub(crate) gram: Mat<f64>,
    pub(crate) norm: Vec<f64>,
    pub(crate) inner: Vec<f64>,
    pub(crate) two_norm: bool,
}

impl RowSums {
    fn zero(r: usize, two_norm: bool, with_inner: bool) -> Self {
        RowSums {
            gram: Mat::zeros(r, r),
            norm: vec![0.0; r],
            inner: vec![0.0; if with_inner { r } else { 0 }],
            two_norm,
        }
    }

    /// Adds the sums of other rows of the same factor.
    pub(crate) fn combine(&mut self, other: &RowSums) {
        for (n, &x) in self.norm.iter_mut().zip(&other.norm) {
            *n = if self.two_norm { *n + x } else { n.max(x) };
        }
        self.gram += &other.gram;
        for (i, &x) in self.inner.iter_mut().zip(&other.inner) {
            *i += x;
        }
    }

    /// The column norms: `sqrt` of the sums of squares, or [`cp_max_norm`] of
    /// `max |A[:, r]|`.
    pub(crate) fn norms(&self) -> Vec<f64> {
        self.norm
            .iter()
            .map(|&n| {
                if self.two_norm {
                    n.sqrt()
                } else {
                    cp_max_norm(n)
                }
            })
            .collect()
    }
}

/// The update of one mode with no full-size temporary, over fixed row blocks (so the
/// result is the same whatever the thread count): [`solve_rows`], then [`finish`].
/// `None` when `m` holds a non-finite entry.
pub(crate) fn update_factor(
    m: &Matrix,
    w: &Mat<f64>,
    a: &mut Matrix,
    two_norm: bool,
    with_inner: bool,
) -> Result<Option<Update>> {
    let Some(sums) = solve_rows(m, w, a, two_norm, with_inner) else {
        return Ok(None);
    };
    Ok(Some(finish(&sums, a)))
}

/// Pass 1, per row block and within it per sub-block
/// ([`super::super::dense::sub_block_rows`]): the MTTKRP rows widened
/// to f64, `A = M V⁻¹` (`w` is `V⁻¹`) and `AᵀA` by two small GEMMs, the column norms'
/// accumulators and, when `with_inner`, `Σ_i M[i, r] A[i, r]`; `A` is stored into `a`
/// (resized to `m`'s shape). `None` when `m` holds a non-finite entry.
pub(crate) fn solve_rows(
    m: &Matrix,
    w: &Mat<f64>,
    a: &mut Matrix,
    two_norm: bool,
    with_inner: bool,
) -> Option<RowSums> {
    let (rows, r) = m.shape();
    if a.shape() != (rows, r) {
        *a = Matrix::zeros(rows, r);
    }
    let mut sums = RowSums::zero(r, two_norm, with_inner);
    if rows == 0 || r == 0 {
        return Some(sums);
    }
    let step = row_blocks(rows) * r;
    let sub = sub_block_rows(r) * r;
    let blocks: Vec<Option<RowSums>> = a
        .data_mut()
        .par_chunks_mut(step)
        .zip(m.data().par_chunks(step))
        .map(|(ab, mb)| {
            let mut sums = RowSums::zero(r, two_norm, with_inner);
            // One sub-block at a time, so that its f64 copies stay in cache.
            let (mut wide, mut abuf) = (Vec::with_capacity(sub), vec![0f64; sub]);
            let mut kept = Vec::with_capacity(sub / r);
            for (ac, mc) in ab.chunks_mut(sub).zip(mb.chunks(sub)) {
                // Widened and checked in one pass; `&=` rather than `all` so the loop
                // does not exit early (the early-exit check was a scalar loop that took
                // about as long as the GEMM in the profile).
                let mut finite = true;
                wide.clear();
                // A zero row of the MTTKRP (a slice with no nonzero) solves to a zero
                // row and adds nothing to any sum: only the others are solved.
                let compact = nonzero_rows(mc, r, &mut kept);
                if compact {
                    for &i in &kept {
                        wide.extend(mc[i * r..(i + 1) * r].iter().map(|&x| {
                            finite &= x.is_finite();
                            x as f64
                        }));
                    }
                } else {
                    wide.extend(mc.iter().map(|&x| {
                        finite &= x.is_finite();
                        x as f64
                    }));
                }
                if !finite {
                    return None;
                }
                let n = wide.len() / r;
                let abuf = &mut abuf[..n * r];
                let mv = MatRef::from_row_major_slice(&wide, n, r);
                // Row-major destination, so the pass below walks memory in order.
                let av = MatMut::from_row_major_slice_mut(abuf, n, r);
                matmul(av, Accum::Replace, mv, w.as_ref(), 1.0, Par::Seq);
                sums.gram += gram_seq(MatRef::from_row_major_slice(abuf, n, r));
                if compact {
                    // Zero rows solve to zero rows; the others go back to their places.
                    ac.fill(0.0);
                    for (&i, row) in kept.iter().zip(abuf.chunks_exact(r)) {
                        for (o, &x) in ac[i * r..(i + 1) * r].iter_mut().zip(row) {
                            *o = x as f32;
                        }
                    }
                } else {
                    for (o, &x) in ac.iter_mut().zip(abuf.iter()) {
                        *o = x as f32;
                    }
                }
                // Column by column (in blocks held in registers), each column's rows
                // still in order. A row-by-row loop kept the accumulators in memory,
                // each row waiting on the last row's store (and, for the maximum,
                // LLVM's masked stores, which Zen 1 microcodes); this cut the update's
                // time by 10-19 % on Zen 1. `max` passes over a NaN as the comparison
                // did.
                if two_norm {
                    fold_columns(abuf, abuf, r, &mut sums.norm, |s, x, _| s + x * x);
                } else {
                    fold_columns(abuf, abuf, r, &mut sums.norm, |s, x, _| s.max(x.abs()));
                }
                if with_inner {
                    fold_columns(abuf, &wide, r, &mut sums.inner, |s, x, y| s + x * y);
                }
            }
            Some(sums)
        })
        .collect();
    for b in blocks {
        sums.combine(&b?);
    }
    Some(sums)
}

/// Per column `c` of the row-major `a` and `b` (`r` columns each, the same rows):
/// `acc[c] = f(acc[c], a[i, c], b[i, c])` for the rows `i` in order. The row loop runs
/// inside blocks of [`FOLD_WIDTH`] columns, so a block's accumulators stay in registers.
#[inline(always)]
fn fold_columns(
    a: &[f64],
    b: &[f64],
    r: usize,
    acc: &mut [f64],
    f: impl Fn(f64, f64, f64) -> f64 + Copy,
) {
    const W: usize = FOLD_WIDTH;
    let rows = || a.chunks_exact(r).zip(b.chunks_exact(r));
    let mut c0 = 0;
    while c0 + W <= r {
        let mut s: [f64; W] = acc[c0..c0 + W].try_into().expect("W columns");
        for (ra, rb) in rows() {
            let (xa, xb) = (&ra[c0..c0 + W], &rb[c0..c0 + W]);
            for k in 0..W {
                s[k] = f(s[k], xa[k], xb[k]);
            }
        }
        acc[c0..c0 + W].copy_from_slice(&s);
        c0 += W;
    }
    for (c, s) in acc.iter_mut().enumerate().skip(c0) {
        for (ra, rb) in rows() {
            *s = f(*s, ra[c], rb[c]);
        }
    }
}

/// Columns per block of [`fold_columns`]: two AVX2 registers of f64.
const FOLD_WIDTH: usize = 8;

/// Pass 2: divides the columns of `a` (rows solved by [`solve_rows`]) by the norms of
/// `sums` (the sums over every row of the factor; a zero column is left as it is), and
/// scales the Gram and the inner products to match. The column maxima are those of the
/// rows in `a`.
pub(crate) fn finish(sums: &RowSums, a: &mut Matrix) -> Update {
    let r = sums.norm.len();
    let norms = sums.norms();
    let inv: Vec<f64> = norms
        .iter()
        .map(|&n| if n > 0.0 { 1.0 / n } else { 1.0 })
        .collect();
    let step = row_blocks(a.rows().max(1)) * r.max(1);
    let col_max = a
        .data_mut()
        .par_chunks_mut(step)
        .map(|ab| {
            let mut big = vec![0f32; r];
            for row in ab.chunks_exact_mut(r) {
                for ((x, &s), b) in row.iter_mut().zip(&inv).zip(&mut big) {
                    *x = (*x as f64 * s) as f32;
                    *b = b.max(x.abs());
                }
            }
            big
        })
        .reduce(
            || vec![0f32; r],
            |mut a, b| {
                for (x, y) in a.iter_mut().zip(b) {
                    *x = x.max(y);
                }
                a
            },
        );
    let gram = Mat::from_fn(r, r, |i, j| sums.gram[(i, j)] * inv[i] * inv[j]);
    let inner = sums.inner.iter().zip(&inv).map(|(x, s)| x * s).collect();
    Update {
        norms,
        gram,
        inner,
        col_max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `update_factor` over several row blocks, each of several sub-blocks (and a short
    /// last one), against the same sums taken row by row in f64. Both are f64 sums of
    /// the same products in other orders, so they differ by at most `n ε` times the sum
    /// of the terms' magnitudes (`n` rows); the bound below is twice that. Run on
    /// outputs with no zero rows, with most rows zero (and one whole sub-block: the
    /// sub-blocks are compacted), and with a few (under `zero_rows::ZERO_SHARE`: they are not);
    /// the factor passed in holds other values, so zero rows must be written as zeros.
    #[test]
    fn sub_blocked_update_matches_row_by_row_sums() {
        // 43 columns: five blocks of `fold_columns` and three left over.
        let (n, r) = (5000, 43);
        assert!(n > 2 * row_blocks(n) && row_blocks(n) > 2 * sub_block_rows(r));
        let zero_rows: [&dyn Fn(usize) -> bool; 3] = [
            &|_| false,
            &|i| i % 7 != 3 || (1000..1000 + 2 * sub_block_rows(r)).contains(&i),
            &|i| i % 50 == 9,
        ];
        for zero in zero_rows {
            let mut m = Matrix::random(n, r, 17);
            for i in (0..n).filter(|&i| zero(i)) {
                m.row_mut(i).fill(0.0);
            }
            check_update_against_rows(&m, n, r);
        }
    }

    fn check_update_against_rows(m: &Matrix, n: usize, r: usize) {
        let w = Mat::from_fn(r, r, |i, j| {
            if i == j {
                1.5
            } else {
                0.1 / (1 + i + j) as f64
            }
        });
        let bound = |mag: f64| 2.0 * n as f64 * f64::EPSILON * mag;
        for two_norm in [true, false] {
            let mut a = Matrix::random(n, r, 5);
            let sums = solve_rows(m, &w, &mut a, two_norm, true).expect("finite");
            // The reference: every row solved, then summed in row order.
            let rows: Vec<Vec<f64>> = (0..n)
                .map(|i| {
                    (0..r)
                        .map(|j| (0..r).map(|k| m.get(i, k) as f64 * w[(k, j)]).sum())
                        .collect()
                })
                .collect();
            // Each entry: a sum of `r` products in f64, then rounded to f32.
            for (i, row) in rows.iter().enumerate() {
                for (j, &x) in row.iter().enumerate() {
                    let mag: f64 = (0..r).map(|k| (m.get(i, k) as f64 * w[(k, j)]).abs()).sum();
                    let tol = f32::EPSILON as f64 * x.abs() + 2.0 * r as f64 * f64::EPSILON * mag;
                    let got = a.get(i, j) as f64;
                    assert!((got - x).abs() <= tol, "row {i} column {j}: {got} vs {x}");
                }
            }
            for p in 0..r {
                for q in 0..r {
                    let (want, mag) = rows.iter().fold((0.0, 0.0), |(s, t), a| {
                        (s + a[p] * a[q], t + (a[p] * a[q]).abs())
                    });
                    let got = sums.gram[(p, q)];
                    assert!(
                        (got - want).abs() <= bound(mag),
                        "gram {p},{q}: {got} vs {want}"
                    );
                }
                let inner: f64 = rows
                    .iter()
                    .enumerate()
                    .map(|(i, a)| a[p] * m.get(i, p) as f64)
                    .sum();
                let mag: f64 = rows
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (a[p] * m.get(i, p) as f64).abs())
                    .sum();
                assert!((sums.inner[p] - inner).abs() <= bound(mag), "inner {p}");
                let norm = if two_norm {
                    rows.iter().map(|a| a[p] * a[p]).sum::<f64>()
                } else {
                    rows.iter().map(|a| a[p].abs()).fold(0.0, f64::max)
                };
                assert!((sums.norm[p] - norm).abs() <= bound(norm), "norm {p}");
            }
        }
        // A non-finite entry in the last sub-block of the last block is seen.
        let mut bad = m.clone();
        bad.set(n - 1, r - 1, f32::NAN);
        assert!(solve_rows(&bad, &w, &mut Matrix::zeros(0, 0), true, false).is_none());
        // And in a zero row of a compacted sub-block.
        if let Some(i) = (0..n).find(|&i| m.row(i).iter().all(|&x| x == 0.0)) {
            let mut bad = m.clone();
            bad.set(i, 0, f32::INFINITY);
            assert!(solve_rows(&bad, &w, &mut Matrix::zeros(0, 0), true, false).is_none());
        }
    }

    /// `finish` over several row blocks: each entry scaled by its column's inverse norm
    /// in f64 and rounded once to f32 (so exactly equal to doing that entry alone), a
    /// column of norm 0 left as it is, and each column maximum exactly the largest
    /// scaled magnitude.
    #[test]
    fn finish_scales_every_column_and_takes_its_maximum() {
        let (n, r) = (3000, 43);
        assert!(n > row_blocks(n));
        let mut a = Matrix::random(n, r, 23);
        for (k, v) in a.data_mut().iter_mut().enumerate() {
            *v -= 0.5 * (k % 3) as f32;
        }
        let before = a.clone();
        let sums = RowSums {
            gram: Mat::zeros(r, r),
            norm: (0..r)
                .map(|c| if c == 5 { 0.0 } else { 1.0 + c as f64 })
                .collect(),
            inner: vec![],
            two_norm: true,
        };
        let update = finish(&sums, &mut a);
        for c in 0..r {
            let inv = if c == 5 {
                1.0
            } else {
                1.0 / (1.0 + c as f64).sqrt()
            };
            let mut big = 0f32;
            for i in 0..n {
                let want = (before.get(i, c) as f64 * inv) as f32;
                assert_eq!(a.get(i, c), want, "row {i} column {c}");
                big = big.max(want.abs());
            }
            assert_eq!(update.col_max[c], big, "column {c}");
        }
    }
}
