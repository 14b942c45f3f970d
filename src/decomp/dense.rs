//! Dense linear algebra of the decompositions, on top of `faer`.
//!
//! Our matrices are row-major ([`Matrix`]); faer's are column-major. A row-major
//! `rows × cols` buffer is a column-major `cols × rows` matrix, so the conversions here
//! are views, not copies, wherever a transposed view serves.
//!
//! Determinism: products that reduce over the long dimension (`AᵀB` over the rows of
//! a factor or a TTMc output) are cut into row blocks whose boundaries depend only on
//! the row count, each block is multiplied sequentially, and the block results are
//! summed in block order. The result is therefore the same whatever the thread count.

use crate::error::{Error, Result};
use crate::matrix::Matrix;
use faer::linalg::matmul::matmul;
use faer::prelude::*;
use faer::{Accum, Par, Side};
use rayon::prelude::*;

/// At most this many row blocks in a reduction over rows (bounds the memory of the
/// per-block partial results).
const MAX_BLOCKS: usize = 64;
/// At least this many rows per block (below it, threading costs more than it saves).
const MIN_BLOCK_ROWS: usize = 1024;

/// A row-major matrix as a faer view.
fn view(a: &Matrix<f64>) -> MatRef<'_, f64> {
    MatRef::from_row_major_slice(a.data(), a.rows(), a.cols())
}

/// A faer matrix as a row-major [`Matrix`].
pub(crate) fn to_row_major(m: MatRef<'_, f64>) -> Matrix<f64> {
    Matrix::from_fn(m.nrows(), m.ncols(), |i, j| m[(i, j)])
}

/// `AᵀB` for row-major `A` (`n × a`) and `B` (`n × b`): an `a × b` matrix, summed over
/// the `n` rows in fixed blocks (see the module notes on determinism).
pub(crate) fn at_b(a: &Matrix<f64>, b: &Matrix<f64>) -> Mat<f64> {
    debug_assert_eq!(a.rows(), b.rows());
    let n = a.rows();
    let block = n.div_ceil(MAX_BLOCKS).max(MIN_BLOCK_ROWS);
    let (ca, cb) = (a.cols(), b.cols());
    let partial = |lo: usize| {
        let hi = (lo + block).min(n);
        let av = MatRef::from_row_major_slice(&a.data()[lo * ca..hi * ca], hi - lo, ca);
        let bv = MatRef::from_row_major_slice(&b.data()[lo * cb..hi * cb], hi - lo, cb);
        let mut out = Mat::<f64>::zeros(ca, cb);
        matmul(
            out.as_mut(),
            Accum::Replace,
            av.transpose(),
            bv,
            1.0,
            Par::Seq,
        );
        out
    };
    let starts: Vec<usize> = (0..n).step_by(block).collect();
    let parts: Vec<Mat<f64>> = starts.par_iter().map(|&lo| partial(lo)).collect();
    let mut sum = Mat::<f64>::zeros(ca, cb);
    for p in &parts {
        sum += p;
    }
    sum
}

/// `AᵀA`.
pub(crate) fn gram(a: &Matrix<f64>) -> Mat<f64> {
    at_b(a, a)
}

/// How a normal-equations solve went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SolveKind {
    /// The coefficient matrix was positive definite: Cholesky.
    Cholesky,
    /// It was not: the eigen-based pseudo-inverse.
    PseudoInverse,
}

/// Overwrites the row-major `m` (`n × R`) with `m V⁻¹` for a symmetric `V` (`R × R`):
/// by Cholesky when `V` is positive definite, otherwise with the pseudo-inverse of `V`
/// from its eigendecomposition (eigenvalues below `R·ε·λ_max` treated as zero).
pub(crate) fn solve_right_spd(v: &Mat<f64>, m: &mut Matrix<f64>) -> Result<SolveKind> {
    let r = v.nrows();
    debug_assert_eq!(m.cols(), r);
    let n = m.rows();
    // `m` row-major n × R is, as stored, the column-major R × n matrix mᵀ; since V is
    // symmetric, (m V⁻¹)ᵀ = V⁻¹ mᵀ is a left solve on that view.
    if let Ok(llt) = v.llt(Side::Lower) {
        let rhs = MatMut::from_column_major_slice_mut(m.data_mut(), r, n);
        llt.solve_in_place(rhs);
        return Ok(SolveKind::Cholesky);
    }
    let evd = v
        .self_adjoint_eigen(Side::Lower)
        .map_err(|e| Error::Numerical(format!("eigendecomposition of a {r}×{r} Gram: {e:?}")))?;
    let pinv = evd.pseudoinverse();
    m.data_mut().par_chunks_mut(r.max(1)).for_each(|row| {
        let old: Vec<f64> = row.to_vec();
        for (i, out) in row.iter_mut().enumerate() {
            *out = (0..r).map(|j| pinv[(i, j)] * old[j]).sum();
        }
    });
    Ok(SolveKind::PseudoInverse)
}

/// An orthonormal basis (`n × k`, `k ≤ cols`) of the span of the first `k` columns of
/// the row-major `a` (`n × cols`, `n ≥ k`), by Householder QR. Columns that are
/// (numerically) dependent still come out orthonormal.
pub(crate) fn orthonormalize(a: &Matrix<f64>) -> Matrix<f64> {
    let q = view(a).qr().compute_thin_Q();
    to_row_major(q.as_ref())
}

/// The `k` leading left singular vectors of the row-major `y` (`n × p`, `k ≤ n`) as an
/// orthonormal `n × k` row-major matrix.
///
/// When `n ≤ p` a thin SVD of `y` itself is cheapest. Otherwise the `p × p` Gram `yᵀy`
/// is eigendecomposed (its eigenvectors are the right singular vectors `V`), the
/// leading `k` are mapped back by `y V_k` and re-orthonormalized by QR (which also
/// removes the `Σ⁻¹` scaling and copes with zero singular values). The `n × n` matrix
/// `y yᵀ` is never formed.
pub(crate) fn leading_left_singular(y: &Matrix<f64>, k: usize) -> Result<Matrix<f64>> {
    let (n, p) = y.shape();
    debug_assert!(k <= n);
    if n <= p {
        let svd = view(y)
            .thin_svd()
            .map_err(|e| Error::Numerical(format!("thin SVD of a {n}×{p} matrix: {e:?}")))?;
        let u = svd.U();
        return Ok(Matrix::from_fn(n, k, |i, j| u[(i, j)]));
    }
    let g = gram(y);
    let evd = g
        .self_adjoint_eigen(Side::Lower)
        .map_err(|e| Error::Numerical(format!("eigendecomposition of a {p}×{p} Gram: {e:?}")))?;
    // Eigenvalues come in nondecreasing order: the leading k are the last k columns.
    let u = evd.U();
    let vk = Matrix::from_fn(p, k, |i, j| u[(i, p - 1 - j)]);
    let yv = row_times(y, &vk);
    Ok(orthonormalize(&yv))
}

/// `A B` for row-major `A` (`n × p`) and a small row-major `B` (`p × k`), row blocks in
/// parallel (each output row depends only on its input row: deterministic).
pub(crate) fn row_times(a: &Matrix<f64>, b: &Matrix<f64>) -> Matrix<f64> {
    let (p, k) = b.shape();
    debug_assert_eq!(a.cols(), p);
    let mut out = Matrix::<f64>::zeros(a.rows(), k);
    if k == 0 || p == 0 {
        return out;
    }
    out.data_mut()
        .par_chunks_mut(k)
        .zip(a.data().par_chunks(p))
        .for_each(|(o, ar)| {
            for (j, &aj) in ar.iter().enumerate() {
                if aj != 0.0 {
                    for (ov, &bv) in o.iter_mut().zip(b.row(j)) {
                        *ov += aj * bv;
                    }
                }
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_at_b(a: &Matrix<f64>, b: &Matrix<f64>) -> Matrix<f64> {
        Matrix::from_fn(a.cols(), b.cols(), |i, j| {
            (0..a.rows()).map(|r| a.get(r, i) * b.get(r, j)).sum()
        })
    }

    #[test]
    fn at_b_matches_naive_across_blocks() {
        // More rows than one block, not a multiple of the block size.
        let a = Matrix::random(5000, 3, 1).to_f64();
        let b = Matrix::random(5000, 4, 2).to_f64();
        let got = to_row_major(at_b(&a, &b).as_ref());
        let want = naive_at_b(&a, &b);
        for (g, w) in got.data().iter().zip(want.data()) {
            // 5000 terms in [0,1): summation error ≤ n·ε·Σ|terms| ≈ 5000·1.1e-16·5000.
            assert!((g - w).abs() <= 1e-8 * w.abs().max(1.0), "{g} vs {w}");
        }
    }

    #[test]
    fn solve_handles_spd_and_singular() {
        let a = Matrix::random(50, 3, 3).to_f64();
        let v = gram(&a);
        let x = Matrix::random(7, 3, 4).to_f64();
        // m = x V, so m V⁻¹ = x.
        let vm = to_row_major(v.as_ref());
        let mut m = row_times(&x, &vm);
        assert_eq!(solve_right_spd(&v, &mut m).unwrap(), SolveKind::Cholesky);
        for (g, w) in m.data().iter().zip(x.data()) {
            assert!((g - w).abs() < 1e-9, "{g} vs {w}");
        }
        // A rank-1 V: not positive definite; the pseudo-inverse keeps values finite and
        // gives the minimum-norm solution, which for m = x V is the projection of x
        // onto the range of V.
        let ones = Mat::<f64>::from_fn(2, 2, |_, _| 1.0);
        let mut m = Matrix::new(1, 2, vec![2.0, 2.0]).unwrap();
        assert_eq!(
            solve_right_spd(&ones, &mut m).unwrap(),
            SolveKind::PseudoInverse
        );
        for &g in m.data() {
            assert!((g - 1.0).abs() < 1e-12, "{g}");
        }
    }

    #[test]
    fn leading_left_singular_both_paths_span_the_same_space() {
        // A 40×6 matrix of exact rank 2: the leading 2-dim left singular subspace is
        // its column space, whichever path computes it.
        let l = Matrix::random(40, 2, 5).to_f64();
        let r = Matrix::random(2, 6, 6).to_f64();
        let y = row_times(&l, &r);
        let tall = leading_left_singular(&y, 2).unwrap();
        let yt = Matrix::from_fn(6, 40, |i, j| y.get(j, i));
        // Wide path on the transpose gives right singular vectors of y; check the tall
        // path instead against the projection property: (I − UUᵀ) y = 0.
        let uty = to_row_major(at_b(&tall, &y).as_ref());
        let proj = row_times(&tall, &uty);
        for (p, w) in proj.data().iter().zip(y.data()) {
            assert!((p - w).abs() < 1e-9, "{p} vs {w}");
        }
        let wide = leading_left_singular(&yt, 2).unwrap();
        let utu = to_row_major(gram(&wide).as_ref());
        for i in 0..2 {
            for j in 0..2 {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((utu.get(i, j) - want).abs() < 1e-12);
            }
        }
    }
}
