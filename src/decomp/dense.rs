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
use faer::diag::Diag;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::evd::{self, ComputeEigenvectors, EvdError};
use faer::linalg::matmul::matmul;
use faer::prelude::*;
use faer::{Accum, Par, Side};
use rayon::prelude::*;

/// At most this many row blocks in a reduction over rows (bounds the memory of the
/// per-block partial results).
const MAX_BLOCKS: usize = 64;
/// At least this many rows per block (below it, threading costs more than it saves).
const MIN_BLOCK_ROWS: usize = 1024;
/// Bytes of one f64 sub-block: a row block is worked on this much at a time, so that
/// its widened copy and the products made from it stay in the core's L2 cache. A whole
/// block of a 4 M-row factor (62 k rows, 8 MB at rank 16) went through memory three
/// times; in sub-blocks CP-ALS's update of such a factor took two thirds of the time.
const SUB_BLOCK_BYTES: usize = 128 << 10;
/// At least this many rows per sub-block: below it faer's products lose more than the
/// cache saves (a 512-column Gram took twice as long in 16-row sub-blocks as in 256).
const MIN_SUB_BLOCK_ROWS: usize = 256;

/// Element types the reductions over rows accept: widened to f64 block by block, so an
/// f32 kernel output needs no full f64 copy.
pub(crate) trait Real: Copy + Default + Send + Sync {
    /// The type's unit roundoff (half the distance from 1 to the next value).
    const ROUNDOFF: f64;
    /// The value as f64.
    fn wide(self) -> f64;
    /// Whether every entry of `row` is ±0 (one branch-free pass over the bits).
    fn is_zero_row(row: &[Self]) -> bool;
}

impl Real for f32 {
    const ROUNDOFF: f64 = f32::EPSILON as f64 / 2.0;
    #[inline(always)]
    fn wide(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn is_zero_row(row: &[Self]) -> bool {
        row.iter().fold(0, |any, x| any | (x.to_bits() << 1)) == 0
    }
}

impl Real for f64 {
    const ROUNDOFF: f64 = f64::EPSILON / 2.0;
    #[inline(always)]
    fn wide(self) -> f64 {
        self
    }
    #[inline(always)]
    fn is_zero_row(row: &[Self]) -> bool {
        row.iter().fold(0, |any, x| any | (x.to_bits() << 1)) == 0
    }
}

/// The `k` largest eigenvalues of the symmetric `g` (largest first) and their
/// eigenvectors as the columns of an `n × k` matrix, from faer's dense decomposition
/// with parallelism `par`.
pub(crate) fn top_eigenpairs(
    g: MatRef<'_, f64>,
    k: usize,
    par: Par,
) -> std::result::Result<(Vec<f64>, Mat<f64>), EvdError> {
    let n = g.nrows();
    let mut s = Diag::<f64>::zeros(n);
    let mut u = Mat::<f64>::zeros(n, n);
    let scratch =
        evd::self_adjoint_evd_scratch::<f64>(n, ComputeEigenvectors::Yes, par, Default::default());
    evd::self_adjoint_evd(
        g,
        s.as_mut(),
        Some(u.as_mut()),
        par,
        MemStack::new(&mut MemBuffer::new(scratch)),
        Default::default(),
    )?;
    // Eigenvalues come in nondecreasing order: the leading k are the last k.
    let values = (0..k).map(|j| s[n - 1 - j]).collect();
    Ok((values, Mat::from_fn(n, k, |i, j| u[(i, n - 1 - j)])))
}

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
pub(crate) fn at_b<A: Real, B: Real>(a: &Matrix<A>, b: &Matrix<B>) -> Mat<f64> {
    debug_assert_eq!(a.rows(), b.rows());
    let n = a.rows();
    let block = row_blocks(n);
    let (ca, cb) = (a.cols(), b.cols());
    // Each row block a sub-block at a time: a block of a Tucker output of a million
    // rows × 4096 columns would be 512 MB widened whole.
    let sub = sub_block_rows(ca.max(cb));
    let partial = |lo: usize| {
        let hi = (lo + block).min(n);
        let mut out = Mat::<f64>::zeros(ca, cb);
        let (mut aw, mut bw) = (Vec::new(), Vec::new());
        for s in (lo..hi).step_by(sub) {
            let e = (s + sub).min(hi);
            aw.clear();
            aw.extend(a.data()[s * ca..e * ca].iter().map(|x| x.wide()));
            bw.clear();
            bw.extend(b.data()[s * cb..e * cb].iter().map(|x| x.wide()));
            let av = MatRef::from_row_major_slice(&aw, e - s, ca);
            let bv = MatRef::from_row_major_slice(&bw, e - s, cb);
            matmul(out.as_mut(), Accum::Add, av.transpose(), bv, 1.0, Par::Seq);
        }
        out
    };
    blocks_in_order(n, block, (ca, cb), partial)
}

/// `Σ partial(lo)` over the row blocks starting at `0, block, 2·block, … < n`, each
/// `shape`, computed in parallel and added in block order (the same sum for any
/// thread count).
fn blocks_in_order(
    n: usize,
    block: usize,
    shape: (usize, usize),
    partial: impl Fn(usize) -> Mat<f64> + Sync,
) -> Mat<f64> {
    let starts: Vec<usize> = (0..n).step_by(block).collect();
    let parts: Vec<Mat<f64>> = starts.par_iter().map(|&lo| partial(lo)).collect();
    let mut sum = Mat::<f64>::zeros(shape.0, shape.1);
    for part in &parts {
        sum += part;
    }
    sum
}

/// `AᵀA X` for a row-major `A` (`n × p`) and a small `X` (`p × b`), never forming
/// `AᵀA`: each fixed row block of `A` a sub-block at a time, widened to f64 once into
/// this worker's scratch and used for both `T = A_s X` and `Aᵀ_s T`, the blocks'
/// sums added in order (deterministic). One pass over `A`, and no `n × b` product: a
/// block Krylov step on a long mode's TTMc output, which separate products `A X` and
/// `Aᵀ (A X)` read twice, each widening and allocating its own.
pub(crate) fn gram_times<T: Real>(a: &Matrix<T>, x: MatRef<'_, f64>) -> Mat<f64> {
    thread_local! {
        static WIDE: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let (n, p) = a.shape();
    debug_assert_eq!(x.nrows(), p);
    let b = x.ncols();
    let block = row_blocks(n);
    let sub = sub_block_rows(p);
    let partial = |lo: usize| {
        let hi = (lo + block).min(n);
        let mut out = Mat::<f64>::zeros(p, b);
        let mut t = Mat::<f64>::zeros(sub.min(hi - lo), b);
        WIDE.with_borrow_mut(|wide| {
            for s in (lo..hi).step_by(sub) {
                let e = (s + sub).min(hi);
                wide.clear();
                wide.extend(a.data()[s * p..e * p].iter().map(|v| v.wide()));
                let av = MatRef::from_row_major_slice(wide, e - s, p);
                let mut tv = t.as_mut().subrows_mut(0, e - s);
                matmul(tv.rb_mut(), Accum::Replace, av, x, 1.0, Par::Seq);
                matmul(
                    out.as_mut(),
                    Accum::Add,
                    av.transpose(),
                    tv.rb(),
                    1.0,
                    Par::Seq,
                );
            }
        });
        out
    };
    blocks_in_order(n, block, (p, b), partial)
}

/// How a normal-equations solve went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SolveKind {
    /// The coefficient matrix was positive definite: Cholesky.
    Cholesky,
    /// It was not: the eigen-based pseudo-inverse.
    PseudoInverse,
}

/// `V⁻¹` for a symmetric `V` (`R × R`): from its Cholesky factor when `V` is positive
/// definite, otherwise its pseudo-inverse (eigenvalues below `R·ε·λ_max` treated as
/// zero). For callers that apply it to many rows in one fused pass.
pub(crate) fn inverse_spd(v: &Mat<f64>) -> Result<(Mat<f64>, SolveKind)> {
    let r = v.nrows();
    if let Ok(llt) = v.llt(Side::Lower) {
        let mut inv = Mat::<f64>::identity(r, r);
        llt.solve_in_place(inv.as_mut());
        return Ok((inv, SolveKind::Cholesky));
    }
    let evd = v
        .self_adjoint_eigen(Side::Lower)
        .map_err(|e| Error::Numerical(format!("eigendecomposition of a {r}×{r} Gram: {e:?}")))?;
    Ok((evd.pseudoinverse(), SolveKind::PseudoInverse))
}

/// The row blocks of a reduction over `n` rows: boundaries that depend only on `n` (see
/// the module notes on determinism).
pub(crate) fn row_blocks(n: usize) -> usize {
    n.div_ceil(MAX_BLOCKS).max(MIN_BLOCK_ROWS)
}

/// Rows of a sub-block of `cols` f64 columns ([`SUB_BLOCK_BYTES`], at least
/// [`MIN_SUB_BLOCK_ROWS`]). Within a row block, sub-blocks are taken in order, so the
/// result still depends on the row count alone.
pub(crate) fn sub_block_rows(cols: usize) -> usize {
    (SUB_BLOCK_BYTES / 8 / cols.max(1)).max(MIN_SUB_BLOCK_ROWS)
}

/// `AᵀA` in f64 for a row-major `A`: each fixed row block is widened to f64 and
/// multiplied on its own ([`gram_rows`]), and the block results are summed in order
/// (deterministic). The blocks run in waves of one per worker, each wave's Grams added
/// as it ends: the same sum to the bit, holding a wave's Grams, not every block's (a
/// 4096-column output's 64 blocks held 8.6 GB).
pub(crate) fn gram<T: Real>(a: &Matrix<T>) -> Mat<f64> {
    let (n, c) = a.shape();
    let block = row_blocks(n) * c.max(1);
    let wave = rayon::current_num_threads().max(1);
    let mut sum = Mat::<f64>::zeros(c, c);
    for rows in a.data().chunks(block * wave) {
        let parts: Vec<Mat<f64>> = (rows.par_chunks(block))
            .map(|rows| gram_rows(rows, c))
            .collect();
        for part in &parts {
            sum += part;
        }
    }
    sum
}

/// The `c × c` `parts` (a [`gram`]'s, one per row block) summed in order.
pub(crate) fn sum_in_order(parts: &[Mat<f64>], c: usize) -> Mat<f64> {
    let mut sum = Mat::<f64>::zeros(c, c);
    for p in parts {
        sum += p;
    }
    sum
}

/// `AᵀA` in f64 of the row-major rows `rows` (`len / cols × cols`), sequentially, one
/// sub-block ([`sub_block_rows`]) widened at a time and added to the lower triangle of
/// one sum, mirrored at the end. (A Gram per sub-block added to the sum cost, at a
/// Tucker output's 256 to 512 columns, a fresh `cols²` matrix zeroed, mirrored and
/// added per 256 rows: a fifth of a uboot-commitwords-3d rank-16 Tucker iteration.)
pub(crate) fn gram_rows<T: Real>(rows: &[T], cols: usize) -> Mat<f64> {
    let mut sum = GramRows::new(cols);
    sum.add(rows);
    sum.finish()
}

/// [`gram_rows`] of rows given a piece at a time, for rows that are never all held (a
/// start drawn and transformed on the fly): the same sum, to the bit, where every piece
/// but the last holds whole sub-blocks ([`sub_block_rows`]).
pub(crate) struct GramRows {
    cols: usize,
    sum: Mat<f64>,
    wide: Vec<f64>,
    kept: Vec<usize>,
}

impl GramRows {
    /// An empty sum of `cols` columns.
    pub(crate) fn new(cols: usize) -> Self {
        GramRows {
            cols,
            sum: Mat::<f64>::zeros(cols, cols),
            wide: Vec::with_capacity(sub_block_rows(cols) * cols),
            kept: Vec::new(),
        }
    }

    /// Adds the row-major `rows` (`len / cols` of them).
    pub(crate) fn add<T: Real>(&mut self, rows: &[T]) {
        let cols = self.cols;
        if cols == 0 {
            return;
        }
        let (wide, kept) = (&mut self.wide, &mut self.kept);
        for sub in rows.chunks(sub_block_rows(cols) * cols) {
            wide.clear();
            if super::zero_rows::nonzero_rows(sub, cols, kept) {
                for &i in kept.iter() {
                    wide.extend(sub[i * cols..(i + 1) * cols].iter().map(|x| x.wide()));
                }
            } else {
                wide.extend(sub.iter().map(|x| x.wide()));
            }
            let v = MatRef::from_row_major_slice(wide, wide.len() / cols, cols);
            add_lower_gram(self.sum.as_mut(), v);
        }
    }

    /// The sum, symmetric.
    pub(crate) fn finish(mut self) -> Mat<f64> {
        if self.cols > 0 {
            mirror_lower(self.sum.as_mut());
        }
        self.sum
    }
}

/// `VᵀV`, sequentially (for callers that parallelize over blocks themselves): the lower
/// triangle only (half the multiplications), mirrored, so it is exactly symmetric.
pub(crate) fn gram_seq(v: MatRef<'_, f64>) -> Mat<f64> {
    let c = v.ncols();
    let mut out = Mat::<f64>::zeros(c, c);
    add_lower_gram(out.as_mut(), v);
    mirror_lower(out.as_mut());
    out
}

/// Adds `VᵀV` to the lower triangle of `out` (diagonal included), sequentially.
fn add_lower_gram(out: MatMut<'_, f64>, v: MatRef<'_, f64>) {
    use faer::linalg::matmul::triangular::{BlockStructure, matmul as tri_matmul};
    tri_matmul(
        out,
        BlockStructure::TriangularLower,
        Accum::Add,
        v.transpose(),
        BlockStructure::Rectangular,
        v,
        BlockStructure::Rectangular,
        1.0,
        Par::Seq,
    );
}

/// Copies the strict lower triangle of the square `m` onto its upper one.
fn mirror_lower(mut m: MatMut<'_, f64>) {
    for j in 1..m.ncols() {
        for i in 0..j {
            m[(i, j)] = m[(j, i)];
        }
    }
}

/// An orthonormal basis (`n × k`, `k ≤ cols`) of the span of the first `k` columns of
/// the row-major `a` (`n × cols`, `n ≥ k`), by Householder QR. Columns that are
/// (numerically) dependent still come out orthonormal.
pub(crate) fn orthonormalize(a: &Matrix<f64>) -> Matrix<f64> {
    let q = view(a).qr().compute_thin_Q();
    to_row_major(q.as_ref())
}

/// `A B` for row-major `A` (`n × p`) and a small row-major `B` (`p × k`): fixed row
/// blocks in parallel, each widened to f64 and multiplied by faer on its own (each
/// output row depends only on its input row: deterministic). Row by row with scalar
/// loops, a Tucker output of 118 k × 64 times its 64 × 8 eigenvectors took a fifth of
/// a uboot-commitwords-3d iteration.
pub(crate) fn row_times<T: Real>(a: &Matrix<T>, b: &Matrix<f64>) -> Matrix<f64> {
    let (p, k) = b.shape();
    debug_assert_eq!(a.cols(), p);
    let n = a.rows();
    let mut out = Matrix::<f64>::zeros(n, k);
    if k == 0 || p == 0 || n == 0 {
        return out;
    }
    let bv = MatRef::from_row_major_slice(b.data(), p, k);
    let block = row_blocks(n).min(1024);
    out.data_mut()
        .par_chunks_mut(block * k)
        .zip(a.data().par_chunks(block * p))
        .for_each(|(o, ar)| {
            let rows = o.len() / k;
            let wide: Vec<f64> = ar.iter().map(|x| x.wide()).collect();
            let av = MatRef::from_row_major_slice(&wide, rows, p);
            let dst = MatMut::from_row_major_slice_mut(o, rows, k);
            matmul(dst, Accum::Replace, av, bv, 1.0, Par::Seq);
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
    fn gram_times_matches_the_gram_times_x_across_blocks() {
        // More rows than one block and one sub-block, not a multiple of either.
        for (n, p) in [(5000, 3), (70_001, 300)] {
            let a = Matrix::random(n, p, 5);
            let x = Matrix::random(p, 4, 6).to_f64();
            let xv = MatRef::from_row_major_slice(x.data(), p, 4);
            let got = gram_times(&a, xv);
            let want = gram(&a) * xv;
            for i in 0..p {
                for j in 0..4 {
                    let (g, w) = (got[(i, j)], want[(i, j)]);
                    // n·p terms in [0, 1): summation error ≤ n·p·ε·Σ|terms| at most.
                    assert!(
                        (g - w).abs() <= 1e-9 * w.abs(),
                        "{n}×{p} ({i}, {j}): {g} vs {w}"
                    );
                }
            }
        }
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
    fn inverse_handles_spd_and_singular() {
        let a = Matrix::random(50, 3, 3).to_f64();
        let v = gram(&a);
        let x = Matrix::random(7, 3, 4).to_f64();
        // m = x V, so m V⁻¹ = x.
        let vm = to_row_major(v.as_ref());
        let m = row_times(&x, &vm);
        let (inv, kind) = inverse_spd(&v).unwrap();
        assert_eq!(kind, SolveKind::Cholesky);
        let got = row_times(&m, &to_row_major(inv.as_ref()));
        for (g, w) in got.data().iter().zip(x.data()) {
            assert!((g - w).abs() < 1e-9, "{g} vs {w}");
        }
        // A rank-1 V: not positive definite; the pseudo-inverse keeps values finite and
        // gives the minimum-norm solution, which for m = x V is the projection of x
        // onto the range of V.
        let ones = Mat::<f64>::from_fn(2, 2, |_, _| 1.0);
        let (pinv, kind) = inverse_spd(&ones).unwrap();
        assert_eq!(kind, SolveKind::PseudoInverse);
        let m = Matrix::new(1, 2, vec![2.0, 2.0]).unwrap();
        let got = row_times(&m, &to_row_major(pinv.as_ref()));
        for &g in got.data() {
            assert!((g - 1.0).abs() < 1e-12, "{g}");
        }
    }

    /// Over several row blocks of several sub-blocks each, against the sum taken row by
    /// row: two f64 sums of the same products, at most `n ε` times the sum of their
    /// magnitudes apart (the bound is twice that). Again with most rows zero, which the
    /// sub-blocks leave out ([`super::super::zero_rows`]).
    #[test]
    fn gram_in_sub_blocks_matches_the_row_by_row_sum() {
        let (n, c) = (5000, 40);
        assert!(n > 2 * row_blocks(n) && row_blocks(n) > 2 * sub_block_rows(c));
        let mut sparse = Matrix::random(n, c, 29);
        (0..n)
            .filter(|i| i % 9 != 4)
            .for_each(|i| sparse.row_mut(i).fill(0.0));
        for a in [Matrix::random(n, c, 23), sparse] {
            check_gram(&a, n, c);
        }
    }

    fn check_gram(a: &Matrix, n: usize, c: usize) {
        let got = gram(a);
        for p in 0..c {
            for q in 0..c {
                let terms = (0..n).map(|i| a.get(i, p) as f64 * a.get(i, q) as f64);
                let want: f64 = terms.clone().sum();
                let mag: f64 = terms.map(f64::abs).sum();
                let g = got[(p, q)];
                let tol = 2.0 * n as f64 * f64::EPSILON * mag;
                assert!((g - want).abs() <= tol, "{p},{q}: {g} vs {want}");
            }
        }
    }

    #[test]
    fn gram_of_f32_matches_the_f64_gram_across_blocks() {
        let a = Matrix::random(3000, 5, 9);
        let got = gram(&a);
        let want = gram(&a.to_f64());
        for i in 0..5 {
            for j in 0..5 {
                let (g, w) = (got[(i, j)], want[(i, j)]);
                assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{g} vs {w}");
            }
        }
    }
}
