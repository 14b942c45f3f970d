//! The leading left singular vectors of a TTMc output, from the eigendecomposition of
//! its small Gram, never from an SVD of the output itself.
//!
//! Tucker-HOOI needs the `k` leading left singular vectors of `Y` (`n × p`, row-major):
//! - `n ≤ p`: the eigenvectors of `Y Yᵀ` (`n × n`) are `Y`'s left singular vectors; the
//!   `k` of the largest eigenvalues are `U`, orthonormal as they come;
//! - `n > p`: the eigenvectors of `YᵀY` (`p × p`) are the right singular vectors `V`;
//!   `Y V_k` has the left ones as columns, each scaled by its singular value, and is
//!   made orthonormal by Cholesky QR, twice (the second pass removes what rounding left
//!   of the first's error); where a Cholesky factor does not exist (a singular value
//!   zero to working precision) Householder QR takes over.
//!
//! The Gram squares `Y`'s condition, but only the leading subspace is wanted: its
//! error is about `ε σ₁² / (σ_k² − σ_{k+1}²)`, small wherever the subspace is well
//! defined (checked against the SVD in the tests).
//!
//! The products over rows run on rayon in fixed row blocks (deterministic, see
//! [`super::dense`]). The eigendecomposition of a Gram below [`SEQ_BELOW`] rows runs on
//! the calling thread: faer's parallel factorizations keep their workers spinning
//! between steps, which on uboot-commitwords-3d (ranks 8) cost a third of a Tucker
//! iteration's CPU time with the spinning threads competing with the work itself.

use super::block_krylov;
use super::dense::{gram, gram_times, orthonormalize, row_blocks, row_times, top_eigenpairs};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use faer::linalg::matmul::matmul;
use faer::prelude::*;
use faer::{Accum, Par};
use rayon::prelude::*;

/// Grams of fewer rows than this are eigendecomposed on the calling thread; larger ones
/// with faer's parallelism, where each step has enough work to hide the handoffs.
pub(crate) const SEQ_BELOW: usize = 1024;

/// The `k` leading left singular vectors of a TTMc output (see the module docs), on
/// the rows its `y` keeps ([`leading_left_singular`]).
#[derive(Debug)]
pub(crate) struct Leading {
    /// One orthonormal row of `k` per row `y` kept.
    pub(crate) u: Matrix<f64>,
    /// The rows of the given `y` that `u`'s rows are, ascending; `None`: every row.
    pub(crate) rows: Option<Vec<usize>>,
    /// The given `y`'s rows.
    pub(crate) n: usize,
}

impl Leading {
    /// The vectors on every row of the given `y`, zero on the rows it dropped.
    pub(crate) fn spread(&self) -> Matrix<f64> {
        let Some(rows) = &self.rows else {
            return self.u.clone();
        };
        let mut u = Matrix::<f64>::zeros(self.n, self.u.cols());
        for (r, &i) in rows.iter().enumerate() {
            u.row_mut(i).copy_from_slice(self.u.row(r));
        }
        u
    }
}

/// The `k` leading left singular vectors of the row-major `y` (`n × p`, `k ≤ n`), an
/// orthonormal `n × k` matrix (see the module docs). Rows of `y` that are all zero
/// give zero rows of the result and add nothing to either Gram: where at least one row
/// in [`EMPTY_SHARE`] is (and `k` rows are not), `y` keeps only its other rows (moved
/// together in place, no copy: an output of a million rows × 4096 columns is 16 GB)
/// and the vectors are theirs, [`Leading::rows`] saying where they go.
pub(crate) fn leading_left_singular<T: super::dense::Real>(
    y: &mut Matrix<T>,
    k: usize,
) -> Result<Leading> {
    let (n, _) = y.shape();
    debug_assert!(k <= n);
    let used: Vec<usize> = (0..n)
        .into_par_iter()
        .filter(|&i| !T::is_zero_row(y.row(i)))
        .collect();
    if (n - used.len()) * EMPTY_SHARE < n || used.len() < k {
        let u = leading_of_rows(y, k)?;
        return Ok(Leading { u, rows: None, n });
    }
    y.keep_rows(&used);
    let u = leading_of_rows(y, k)?;
    Ok(Leading {
        u,
        rows: Some(used),
        n,
    })
}

/// [`leading_left_singular`] drops the zero rows of a TTMc output where at least one row
/// in this many is zero: a mode whose rows are mostly empty (4 M rows, 568 k of them
/// holding a nonzero, on a generated power-law tensor) then costs its nonzero rows'
/// Gram, not the whole output's, for one scan that stops at a row's first nonzero.
const EMPTY_SHARE: usize = 8;

/// [`leading_left_singular`] over every row of `y`: by block Krylov iteration on `Y`
/// itself where that is expected to cost fewer operations than forming the Gram
/// ([`krylov_on_y_is_cheaper`]), else from the Gram.
fn leading_of_rows<T: super::dense::Real>(y: &Matrix<T>, k: usize) -> Result<Matrix<f64>> {
    let (n, p) = y.shape();
    let on_y = krylov_on_y_is_cheaper(n, p, k);
    if n <= p {
        // One f64 copy, for the products with `Y` and, failing those, the Gram.
        let wide: Vec<f64> = y.data().iter().map(|x| x.wide()).collect();
        let yr = MatRef::from_row_major_slice(&wide, n, p);
        if on_y && let Some(u) = krylov_on_y::<T>(yr, k) {
            return Ok(Matrix::from_fn(n, k, |i, j| u[(i, j)]));
        }
        let g = outer_gram(yr);
        let u = leading_eigenvectors(g.as_ref(), k, krylov_tol::<T>(n))?;
        return Ok(Matrix::from_fn(n, k, |i, j| u[(i, j)]));
    }
    if on_y && let Some(v) = krylov_on_tall(y, k) {
        return Ok(left_from_right(y, &Matrix::from_fn(p, k, |i, j| v[(i, j)])));
    }
    let v = leading_eigenvectors(gram(y).as_ref(), k, krylov_tol::<T>(p))?;
    Ok(left_from_right(y, &Matrix::from_fn(p, k, |i, j| v[(i, j)])))
}

/// Block Krylov on a wide `yr` (`n × p`, `n ≤ p`, f64) itself, never its Gram: the `k`
/// leading eigenvectors of `Y Yᵀ = Y (Yᵀ x)`, its left singular vectors; `None` where
/// the solver falls back.
fn krylov_on_y<T: super::dense::Real>(yr: MatRef<'_, f64>, k: usize) -> Option<Mat<f64>> {
    let (n, p) = (yr.nrows(), yr.ncols());
    let par = faer::get_global_parallelism();
    let apply = |x: MatRef<'_, f64>, out: MatMut<'_, f64>| {
        let mut t = Mat::<f64>::zeros(p, x.ncols());
        matmul(t.as_mut(), Accum::Replace, yr.transpose(), x, 1.0, par);
        matmul(out, Accum::Replace, yr, t.as_ref(), 1.0, par);
    };
    krylov_with(&apply, n, p, k, krylov_tol::<T>(n))
}

/// Block Krylov on a tall `y` (`n × p`, `n > p`) itself: the `k` leading eigenvectors
/// of `YᵀY = Yᵀ (Y x)`, its right singular vectors; `None` where the solver falls
/// back. Each product widens `y` a sub-block at a time ([`gram_times`]): a tall output
/// (a long mode's) is never copied whole to f64.
fn krylov_on_tall<T: super::dense::Real>(y: &Matrix<T>, k: usize) -> Option<Mat<f64>> {
    let (n, p) = y.shape();
    let apply = |x: MatRef<'_, f64>, mut out: MatMut<'_, f64>| {
        out.copy_from(gram_times(y, x));
    };
    krylov_with(&apply, n, p, k, krylov_tol::<T>(p))
}

/// Block Krylov for the `k` leading eigenvectors of `Y Yᵀ` or `YᵀY` (`Y` `n × p`)
/// given as `apply`, within the budget of the Gram's path.
fn krylov_with(
    apply: &(dyn Fn(MatRef<'_, f64>, MatMut<'_, f64>) + Sync),
    n: usize,
    p: usize,
    k: usize,
    tol: f64,
) -> Option<Mat<f64>> {
    let order = n.min(p);
    let op = block_krylov::Operator {
        n: order,
        apply,
        flops: 4.0 * n as f64 * p as f64,
    };
    let budget = gram_flops(n, p) + 2.0 * (order as f64).powi(3);
    block_krylov::leading_eigenvectors(&op, k, tol, budget, KRYLOV_SEED)
}

/// The left singular vectors from the right ones `v` (`p × k`) of a tall `y`: `Y V`,
/// made orthonormal (see the module docs).
fn left_from_right<T: super::dense::Real>(y: &Matrix<T>, v: &Matrix<f64>) -> Matrix<f64> {
    let yv = row_times(y, v);
    cholesky_qr(&yv)
        .and_then(|q| cholesky_qr(&q))
        .unwrap_or_else(|| orthonormalize(&yv))
}

/// Floating-point operations of forming the Gram of an `n × p` output on the smaller
/// side: `Y Yᵀ` as a whole product (`2n²p`), `YᵀY` into one triangle (`np²`).
fn gram_flops(n: usize, p: usize) -> f64 {
    let (nf, pf) = (n as f64, p as f64);
    if n <= p {
        2.0 * nf * nf * pf
    } else {
        nf * pf * pf
    }
}

/// Whether block Krylov iteration applied to `Y` itself (each product two passes over
/// `Y`, `4np` operations per column) is expected to cost less than forming the Gram
/// and iterating on it, at [`block_krylov::EXPECTED_CYCLES`] cycles. Products with `Y`
/// win where the Gram's order is large against the block: a 3000 × 4096 output at rank
/// 16 (its Gram 3.7·10¹⁰ operations more than a whole solve on `Y`), not a
/// 300 k × 1024 one at rank 32.
pub(crate) fn krylov_on_y_is_cheaper(n: usize, p: usize, k: usize) -> bool {
    let order = n.min(p);
    if !block_krylov::worthwhile(order, k) {
        return false;
    }
    let cycles = block_krylov::EXPECTED_CYCLES;
    let on_y = cycles * block_krylov::cycle_flops(order, k, 4.0 * n as f64 * p as f64);
    let on_gram = gram_flops(n, p)
        + cycles * block_krylov::cycle_flops(order, k, 2.0 * (order as f64).powi(2));
    on_y < on_gram
}

/// `Y Yᵀ` for `y` (`n × p`, an f64 view of a row-major matrix): each fixed block of output rows,
/// `Y[a..b] Yᵀ`, computed on its own (deterministic; `Y Yᵀ` is symmetric, so the
/// row-major result is also its column-major form).
fn outer_gram(yr: MatRef<'_, f64>) -> Mat<f64> {
    let n = yr.nrows();
    let mut out = vec![0f64; n * n];
    let block = row_blocks(n).clamp(1, 256);
    out.par_chunks_mut(block * n.max(1))
        .enumerate()
        .for_each(|(b, o)| {
            let rows = o.len() / n;
            let dst = MatMut::from_row_major_slice_mut(o, rows, n);
            let src = yr.subrows(b * block, rows);
            matmul(dst, Accum::Replace, src, yr.transpose(), 1.0, Par::Seq);
        });
    Mat::from_fn(n, n, |i, j| out[i * n + j])
}

/// Residual tolerance of the block Krylov eigenvectors of a Gram of order `n` made from
/// `T` values, relative to the largest eigenvalue: 1/64 of `T`'s unit roundoff, and no
/// tighter than `16 n` f64 roundoffs (about what rounding leaves of a product with the
/// Gram, so also what a dense eigendecomposition's own error is). A Gram of f32 TTMc
/// outputs already carries perturbations near 2⁻²⁴ `λ₁` from their rounding; the
/// solver's error in the subspace, about this tolerance over the eigengap, stays 64
/// times below what that rounding can move it by.
fn krylov_tol<T: super::dense::Real>(n: usize) -> f64 {
    (T::ROUNDOFF / 64.0).max(16.0 * n as f64 * f64::EPSILON)
}

/// Seed of the block Krylov start (any fixed value: the result does not depend on it
/// beyond the tolerance).
const KRYLOV_SEED: u64 = 0x5eed_b10c;

/// The eigenvectors of the `k` largest eigenvalues of the symmetric `g`, largest first,
/// as the columns of an `n × k` matrix: by block Krylov iteration where `g` is large
/// and `k` few ([`block_krylov`]), else (or where that does not converge within its
/// budget) by the dense eigendecomposition.
fn leading_eigenvectors(g: MatRef<'_, f64>, k: usize, tol: f64) -> Result<Mat<f64>> {
    let n = g.nrows();
    if block_krylov::worthwhile(n, k) {
        let par = faer::get_global_parallelism();
        let apply = |x: MatRef<'_, f64>, out: MatMut<'_, f64>| {
            matmul(out, Accum::Replace, g, x, 1.0, par);
        };
        let nf = n as f64;
        let op = block_krylov::Operator {
            n,
            apply: &apply,
            flops: 2.0 * nf * nf,
        };
        // The dense eigendecomposition's cost, about.
        let budget = 2.0 * nf * nf * nf;
        if let Some(u) = block_krylov::leading_eigenvectors(&op, k, tol, budget, KRYLOV_SEED) {
            return Ok(u);
        }
    }
    let par = if n < SEQ_BELOW {
        Par::Seq
    } else {
        faer::get_global_parallelism()
    };
    let (_, u) = top_eigenpairs(g, k, par)
        .map_err(|e| Error::Numerical(format!("eigendecomposition of a {n}×{n} Gram: {e:?}")))?;
    Ok(u)
}

/// `W R⁻¹` for the Cholesky factor `RᵀR = WᵀW` of the row-major `w` (`n × k`): an
/// orthonormal basis of its columns' span when they are well conditioned; `None` where
/// a pivot is not safely positive (dependent columns).
pub(crate) fn cholesky_qr(w: &Matrix<f64>) -> Option<Matrix<f64>> {
    let k = w.cols();
    let l = cholesky_lower(&gram(w))?;
    let mut q = Matrix::<f64>::zeros(w.rows(), k);
    q.data_mut()
        .par_chunks_mut(k.max(1))
        .zip(w.data().par_chunks(k.max(1)))
        .for_each(|(u, wr)| l.solve_row(wr, u));
    Some(q)
}

/// The lower-triangular Cholesky factor `L` of a Gram `C = L Lᵀ` (`k × k`), row-major.
pub(crate) struct CholeskyLower {
    k: usize,
    l: Vec<f64>,
}

/// The Cholesky factor of the `k × k` Gram `c`; `None` where a pivot is not safely
/// positive (the columns it came from are numerically dependent), a NaN one too.
pub(crate) fn cholesky_lower(c: &Mat<f64>) -> Option<CholeskyLower> {
    let k = c.nrows();
    let mut l = vec![0f64; k * k];
    let scale = (0..k).map(|i| c[(i, i)]).fold(0f64, f64::max);
    for j in 0..k {
        let mut d = c[(j, j)];
        for t in 0..j {
            d -= l[j * k + t] * l[j * k + t];
        }
        if d.partial_cmp(&(scale * k as f64 * f64::EPSILON)) != Some(std::cmp::Ordering::Greater) {
            return None;
        }
        let d = d.sqrt();
        l[j * k + j] = d;
        for i in j + 1..k {
            let mut x = c[(i, j)];
            for t in 0..j {
                x -= l[i * k + t] * l[j * k + t];
            }
            l[i * k + j] = x / d;
        }
    }
    Some(CholeskyLower { k, l })
}

impl CholeskyLower {
    /// `k`, the order of `L`.
    pub(crate) fn order(&self) -> usize {
        self.k
    }

    /// The row `u` with `u Lᵀ = w` (forward substitution): a row of `W R⁻¹`.
    pub(crate) fn solve_row(&self, w: &[f64], u: &mut [f64]) {
        let (k, l) = (self.k, &self.l);
        for j in 0..k {
            let mut x = w[j];
            for t in 0..j {
                x -= u[t] * l[j * k + t];
            }
            u[j] = x / l[j * k + j];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomp::dense::{at_b, to_row_major};

    /// [`leading_left_singular`] of a copy of `y`, on every row of `y`.
    fn leading<T: crate::decomp::dense::Real>(y: &Matrix<T>, k: usize) -> Result<Matrix<f64>> {
        let mut y = y.clone();
        leading_left_singular(&mut y, k).map(|l| l.spread())
    }

    fn view(a: &Matrix<f64>) -> MatRef<'_, f64> {
        MatRef::from_row_major_slice(a.data(), a.rows(), a.cols())
    }

    /// `n × p` with singular values `σ_j = 2^{-j}` (of `min(n, p)`), random singular
    /// vectors.
    fn spectrum(n: usize, p: usize, seed: u64) -> Matrix<f64> {
        let m = n.min(p);
        let a = orthonormalize(&Matrix::random(n, m, seed).to_f64());
        let b = orthonormalize(&Matrix::random(p, m, seed + 1).to_f64());
        Matrix::from_fn(n, p, |i, j| {
            (0..m)
                .map(|t| a.get(i, t) * 0.5f64.powi(t as i32) * b.get(j, t))
                .sum()
        })
    }

    /// The distance of `u`'s span from `want`'s: `‖U − W (WᵀU)‖_F`, the sines of the
    /// principal angles between them; and how far `UᵀU` is from the identity.
    fn angle_and_orthogonality(u: &Matrix<f64>, want: &Matrix<f64>) -> (f64, f64) {
        let wtu = to_row_major(at_b(want, u).as_ref());
        let proj = row_times(want, &wtu);
        let sin = (u.data().iter().zip(proj.data()))
            .map(|(a, b)| (a - b).powi(2))
            .sum::<f64>()
            .sqrt();
        let utu = to_row_major(gram(u).as_ref());
        let k = u.cols();
        let off = (0..k * k)
            .map(|t| (utu.data()[t] - if t / k == t % k { 1.0 } else { 0.0 }).abs())
            .fold(0f64, f64::max);
        (sin, off)
    }

    /// Both paths (tall: `YᵀY`; wide and square: `Y Yᵀ`) give the SVD's leading
    /// subspace, orthonormal, in f64 and from f32 outputs, within what the Gram's
    /// squared condition allows: `ε σ₁² / (σ_k² − σ_{k+1}²)` (f64), and for the f32
    /// output its rounding over the gap, `ε₃₂ σ₁ / (σ_k − σ_{k+1})` (times a margin).
    #[test]
    fn leading_vectors_span_the_svds_leading_subspace() {
        for (n, p, k) in [(300, 40, 8), (40, 300, 8), (64, 64, 16), (2000, 64, 8)] {
            let y = spectrum(n, p, 11 + n as u64);
            let svd = MatRef::from_row_major_slice(y.data(), n, p)
                .thin_svd()
                .unwrap();
            let want = Matrix::from_fn(n, k, |i, j| svd.U()[(i, j)]);
            let (sk, sk1) = (0.5f64.powi(k as i32 - 1), 0.5f64.powi(k as i32));
            let u = leading(&y, k).unwrap();
            assert_eq!(u.shape(), (n, k));
            let (sin, off) = angle_and_orthogonality(&u, &want);
            let bound = 100.0 * f64::EPSILON / (sk * sk - sk1 * sk1);
            assert!(sin < bound && off < 1e-12, "{n}×{p} k {k}: {sin:e} {off:e}");
            let u32 = leading(&y.to_f32(), k).unwrap();
            let (sin, off) = angle_and_orthogonality(&u32, &want);
            let bound = 100.0 * f64::from(f32::EPSILON) / (sk - sk1);
            assert!(
                sin < bound && off < 1e-12,
                "f32 {n}×{p} k {k}: {sin:e} {off:e}"
            );
        }
    }

    /// Outputs where block Krylov on `Y` itself is the cheaper path, wide (`Y (Yᵀ x)`)
    /// and tall (`Yᵀ (Y x)`, then `Y V` made orthonormal): the subspace is the SVD's
    /// within the solver's own bound, `√k tol σ₁² / (σ_k² − σ_{k+1}²)` (Davis–Kahan on
    /// the residuals), and for the f32 output within that output's rounding over the
    /// gap, as on the dense path.
    #[test]
    fn outputs_on_the_krylov_path_span_the_svds_leading_subspace() {
        for (n, p, k) in [(700, 2000, 8), (3000, 1500, 8)] {
            assert!(krylov_on_y_is_cheaper(n, p, k), "{n}×{p}");
            let m = n.min(p);
            let a = orthonormalize(&Matrix::random(n, m, 21).to_f64());
            let b = orthonormalize(&Matrix::random(p, m, 22).to_f64());
            let a_s = Matrix::from_fn(n, m, |i, t| a.get(i, t) * 0.5f64.powi(t as i32));
            let y = to_row_major((view(&a_s) * view(&b).transpose()).as_ref());
            let want = Matrix::from_fn(n, k, |i, j| a.get(i, j));
            let (sk, sk1) = (0.5f64.powi(k as i32 - 1), 0.5f64.powi(k as i32));
            let u = leading(&y, k).unwrap();
            let (sin, off) = angle_and_orthogonality(&u, &want);
            let tol = krylov_tol::<f64>(m);
            let bound = 2.0 * (k as f64).sqrt() * tol / (sk * sk - sk1 * sk1);
            assert!(
                sin < bound && off < 1e-10,
                "{n}×{p} f64: {sin:e} {off:e} (bound {bound:e})"
            );
            let u32 = leading(&y.to_f32(), k).unwrap();
            let (sin, off) = angle_and_orthogonality(&u32, &want);
            let bound = 100.0 * f64::from(f32::EPSILON) / (sk - sk1)
                + 2.0 * (k as f64).sqrt() * krylov_tol::<f32>(m) / (sk * sk - sk1 * sk1);
            assert!(
                sin < bound && off < 1e-10,
                "{n}×{p} f32: {sin:e} {off:e} (bound {bound:e})"
            );
        }
        // Small orders and a tall output of few columns keep the Gram.
        assert!(!krylov_on_y_is_cheaper(300, 40, 8));
        assert!(!krylov_on_y_is_cheaper(300_000, 1024, 32));
    }

    /// Zero rows among the others (two in three, a tall and a wide remainder): the
    /// result's rows there are exactly zero, and the rest span the SVD's leading
    /// subspace as without them, orthonormal.
    #[test]
    fn zero_rows_are_dropped_and_give_zero_rows() {
        for (held, p, k) in [(300, 40, 8), (30, 200, 6)] {
            let dense = spectrum(held, p, 3 + held as u64);
            let n = 3 * held;
            let y = Matrix::from_fn(
                n,
                p,
                |i, j| {
                    if i % 3 == 1 { dense.get(i / 3, j) } else { 0.0 }
                },
            );
            let svd = MatRef::from_row_major_slice(y.data(), n, p)
                .thin_svd()
                .unwrap();
            let want = Matrix::from_fn(n, k, |i, j| svd.U()[(i, j)]);
            let u = leading(&y, k).unwrap();
            assert_eq!(u.shape(), (n, k));
            for i in (0..n).filter(|i| i % 3 != 1) {
                assert!(u.row(i).iter().all(|&x| x == 0.0), "row {i}");
            }
            let (sk, sk1) = (0.5f64.powi(k as i32 - 1), 0.5f64.powi(k as i32));
            let (sin, off) = angle_and_orthogonality(&u, &want);
            let bound = 100.0 * f64::EPSILON / (sk * sk - sk1 * sk1);
            assert!(sin < bound && off < 1e-12, "{n}×{p} k {k}: {sin:e} {off:e}");
        }
        // Fewer nonzero rows than k: every row is kept, k orthonormal columns.
        let y = Matrix::from_fn(40, 10, |i, j| if i < 3 { (i + j) as f64 } else { 0.0 });
        let u = leading(&y, 5).unwrap();
        let (_, off) = angle_and_orthogonality(&u, &u);
        assert!(off < 1e-12, "{off:e}");
    }

    /// A tall `Y` of rank below `k`: Cholesky QR finds no factor, Householder QR still
    /// gives `k` orthonormal columns holding the column space.
    #[test]
    fn rank_deficient_outputs_still_give_orthonormal_factors() {
        let l = Matrix::random(200, 2, 5).to_f64();
        let r = Matrix::random(2, 6, 6).to_f64();
        let y = row_times(&l, &r);
        assert!(
            cholesky_qr(&row_times(
                &y,
                &Matrix::from_fn(6, 4, |i, j| { if i == j { 1.0 } else { 0.0 } })
            ))
            .is_none()
        );
        let u = leading(&y, 4).unwrap();
        let (_, off) = angle_and_orthogonality(&u, &u);
        assert!(off < 1e-12, "{off:e}");
        // The leading two columns hold y's column space: (I − U₂U₂ᵀ) y = 0.
        let u2 = Matrix::from_fn(200, 2, |i, j| u.get(i, j));
        let proj = row_times(&u2, &to_row_major(at_b(&u2, &y).as_ref()));
        for (a, b) in proj.data().iter().zip(y.data()) {
            assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        }
    }
}
