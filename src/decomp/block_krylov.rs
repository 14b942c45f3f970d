//! The leading eigenvectors of a large symmetric positive semidefinite matrix (a
//! Tucker Gram) by restarted block Krylov iteration with Rayleigh–Ritz, for where
//! only a few of many are wanted.
//!
//! A dense eigendecomposition of an `n × n` Gram costs `O(n³)` in memory-bound
//! tridiagonalization, whatever `k`: 3 s at `n = 3000` on two cores, for 16 vectors.
//! Here each cycle builds the block Krylov basis `[V, GV, …, G^q V]` of a block `V` of
//! `b > k` orthonormal columns (each new block made orthogonal to the basis by classical
//! Gram–Schmidt twice, then Householder QR), takes the Ritz pairs of `G` on it, and
//! stops when the `k` leading Ritz pairs' residuals `‖G u − θ u‖` are all within
//! `tol_rel · θ₁`; otherwise the next cycle starts from the `b` leading Ritz vectors.
//! Every product is a matrix–block product (BLAS 3), and a block wider than `k` finds
//! repeated eigenvalues up to its width.
//!
//! The result is checked, not trusted: it is returned only with every residual within
//! the tolerance and the vectors orthonormal. A spent cycle budget gives `None`, and
//! the caller takes the dense eigendecomposition instead.
//!
//! Deterministic: the start is seeded, and faer's products split the work the same way
//! for the same thread count.

use super::dense::top_eigenpairs;
use crate::matrix::Matrix;
use faer::linalg::matmul::matmul;
use faer::prelude::*;
use faer::{Accum, Par};

/// Block Krylov steps per cycle: the basis holds `STEPS + 1` blocks.
const STEPS: usize = 6;

/// The block width for `k` wanted vectors: half as many again (at least 8 more), so the
/// convergence rate is set by the gap from `λ_k` to `λ_{b+1}`, not to `λ_{k+1}`.
pub(crate) fn block_width(k: usize) -> usize {
    k + (k / 2).max(8)
}

/// Whether the block method is expected to be cheaper than a dense eigendecomposition
/// of an `n × n` matrix for `k` vectors: the basis is at most a quarter of `n`.
pub(crate) fn worthwhile(n: usize, k: usize) -> bool {
    k > 0 && 4 * (STEPS + 1) * block_width(k) <= n
}

/// Cycles a solve takes, for choosing between operators: 2 to 4 were measured on
/// Tucker outputs (generated and shared tensors, ranks 12 to 24).
pub(crate) const EXPECTED_CYCLES: f64 = 3.0;

/// Floating-point operations of one cycle for `k` vectors of an operator of order `n`
/// whose product costs `product` per column: the products, the orthogonalization
/// against the basis, the projected matrix and the Ritz vectors (each cycle's first
/// product comes from the last one's Ritz vectors).
pub(crate) fn cycle_flops(n: usize, k: usize, product: f64) -> f64 {
    let b = block_width(k);
    let (nf, bf, mf) = (n as f64, b as f64, ((STEPS + 1) * b) as f64);
    product * bf * STEPS as f64 + 6.0 * nf * mf * mf + 4.0 * nf * mf * bf
}

/// f64 entries [`leading_eigenvectors`] holds at once for `k` vectors of an operator of
/// order `n`: the basis and its products, the block and its product, the Ritz vectors
/// and their products, the projected matrix and its eigenvectors.
pub(crate) fn workspace_entries(n: usize, k: usize) -> usize {
    let b = block_width(k);
    let m = (STEPS + 1) * b;
    n.saturating_mul(2 * m + 4 * b)
        .saturating_add(m.saturating_mul(3 * m))
}

/// A symmetric positive semidefinite `n × n` operator: `apply(x, out)` writes `G x` into
/// `out` for a block `x` of columns, at `flops` floating-point operations per column.
pub(crate) struct Operator<'a> {
    /// The order `n`.
    pub n: usize,
    /// Writes `G x` into `out` (`n × b` both).
    pub apply: &'a (dyn Fn(MatRef<'_, f64>, MatMut<'_, f64>) + Sync),
    /// Floating-point operations of one column's product.
    pub flops: f64,
}

/// The `k` leading eigenvectors of the operator `g` (largest eigenvalue first) as the
/// columns of an `n × k` matrix, each with a residual `‖G u − θ u‖ ≤ tol_rel · θ₁`, or
/// `None` where the method cannot give them within `budget` floating-point operations
/// (what the dense alternative would cost; see the module docs).
pub(crate) fn leading_eigenvectors(
    g: &Operator<'_>,
    k: usize,
    tol_rel: f64,
    budget: f64,
    seed: u64,
) -> Option<Mat<f64>> {
    let n = g.n;
    let b = block_width(k);
    let m = (STEPS + 1) * b;
    if k == 0 || m > n {
        return None;
    }
    let par = faer::get_global_parallelism();
    let cycles = ((budget / cycle_flops(n, k, g.flops)) as usize).max(1);
    let start = Matrix::random(n, b, seed);
    let mut v = Mat::<f64>::from_fn(n, b, |i, j| f64::from(start.get(i, j)))
        .qr()
        .compute_thin_Q();
    let mut gv = Mat::<f64>::zeros(n, b);
    (g.apply)(v.as_ref(), gv.as_mut());
    let mut basis = Mat::<f64>::zeros(n, m);
    let mut gbasis = Mat::<f64>::zeros(n, m);
    for cycle in 0..cycles {
        basis.as_mut().subcols_mut(0, b).copy_from(&v);
        gbasis.as_mut().subcols_mut(0, b).copy_from(&gv);
        for step in 1..=STEPS {
            let done = step * b;
            let next = orthogonal_block(
                basis.as_ref().subcols(0, done),
                gbasis.as_ref().subcols(done - b, b),
                seed.wrapping_add(1 + (cycle * STEPS + step) as u64 * 3),
                par,
            )?;
            basis.as_mut().subcols_mut(done, b).copy_from(&next);
            (g.apply)(next.as_ref(), gbasis.as_mut().subcols_mut(done, b));
        }
        // Rayleigh–Ritz: the projected matrix, symmetrized, and its leading b pairs.
        let mut t = Mat::<f64>::zeros(m, m);
        matmul(
            t.as_mut(),
            Accum::Replace,
            basis.transpose(),
            gbasis.as_ref(),
            1.0,
            par,
        );
        let t = Mat::<f64>::from_fn(m, m, |i, j| 0.5 * (t[(i, j)] + t[(j, i)]));
        let (theta, s) = top_eigenpairs(t.as_ref(), b, Par::Seq).ok()?;
        let mut u = Mat::<f64>::zeros(n, b);
        matmul(
            u.as_mut(),
            Accum::Replace,
            basis.as_ref(),
            s.as_ref(),
            1.0,
            par,
        );
        matmul(
            gv.as_mut(),
            Accum::Replace,
            gbasis.as_ref(),
            s.as_ref(),
            1.0,
            par,
        );
        let tol = tol_rel * theta[0];
        let converged = (0..k).all(|j| {
            let r2: f64 = (0..n)
                .map(|i| (gv[(i, j)] - theta[j] * u[(i, j)]).powi(2))
                .sum();
            // A NaN residual fails too.
            r2.sqrt() <= tol
        });
        if converged {
            let uk = u.subcols(0, k).to_owned();
            let gram = uk.transpose() * &uk;
            let off = (0..k)
                .flat_map(|i| (0..k).map(move |j| (i, j)))
                .map(|(i, j)| (gram[(i, j)] - if i == j { 1.0 } else { 0.0 }).abs())
                .fold(0f64, f64::max);
            return (off <= 1e-10).then_some(uk);
        }
        v = u;
    }
    None
}

/// The next block of the basis: `w` made orthogonal to `basis` (classical Gram–Schmidt
/// twice, orthogonal to working precision while a column keeps more than rounding) and
/// orthonormal (Householder QR). A column that loses all but [`DEPENDENT`] of its size
/// holds nothing new (its direction has converged, or the Krylov space is invariant
/// there): it is replaced by a seeded random one, so the basis stays full and
/// orthonormal. `None` where that does not help within three tries.
fn orthogonal_block(
    basis: MatRef<'_, f64>,
    w: MatRef<'_, f64>,
    seed: u64,
    par: Par,
) -> Option<Mat<f64>> {
    let (n, b) = (w.nrows(), w.ncols());
    let mut w = w.to_owned();
    for attempt in 0..3u64 {
        let before: Vec<f64> = (0..b).map(|j| w.col(j).norm_l2()).collect();
        for _ in 0..2 {
            let c = basis.transpose() * &w;
            matmul(w.as_mut(), Accum::Add, basis, c.as_ref(), -1.0, par);
        }
        let qr = w.qr();
        let r = qr.thin_R();
        let dependent: Vec<usize> = (0..b)
            .filter(|&j| {
                // A NaN counts as dependent.
                r[(j, j)].abs().partial_cmp(&(DEPENDENT * before[j]))
                    != Some(std::cmp::Ordering::Greater)
            })
            .collect();
        if dependent.is_empty() {
            return Some(qr.compute_thin_Q());
        }
        let fresh = Matrix::random(n, dependent.len(), seed.wrapping_add(attempt));
        for (c, &j) in dependent.iter().enumerate() {
            for i in 0..n {
                w[(i, j)] = f64::from(fresh.get(i, c));
            }
        }
    }
    None
}

/// The share of a new column's size below which what is left after Gram–Schmidt is
/// taken as rounding (see [`orthogonal_block`]).
const DEPENDENT: f64 = 1e-12;

#[cfg(test)]
mod tests {
    use super::*;

    /// `Q diag(λ) Qᵀ` for a seeded orthogonal `Q`, and `Q`.
    fn with_spectrum(lambda: &[f64], seed: u64) -> (Mat<f64>, Mat<f64>) {
        let n = lambda.len();
        let r = Matrix::random(n, n, seed);
        let q = Mat::<f64>::from_fn(n, n, |i, j| f64::from(r.get(i, j)))
            .qr()
            .compute_thin_Q();
        let ql = Mat::from_fn(n, n, |i, j| q[(i, j)] * lambda[j]);
        (&ql * q.transpose(), q)
    }

    fn solve(g: &Mat<f64>, k: usize, tol: f64, budget: f64) -> Option<Mat<f64>> {
        let n = g.nrows();
        let apply = |x: MatRef<'_, f64>, out: MatMut<'_, f64>| {
            matmul(out, Accum::Replace, g.as_ref(), x, 1.0, Par::Seq);
        };
        let op = Operator {
            n,
            apply: &apply,
            flops: 2.0 * (n * n) as f64,
        };
        leading_eigenvectors(&op, k, tol, budget, 7)
    }

    /// `‖U − W (WᵀU)‖_F`: the sines of the principal angles between the spans.
    fn sines(u: MatRef<'_, f64>, w: MatRef<'_, f64>) -> f64 {
        (u - w * (w.transpose() * u)).norm_l2()
    }

    /// Every returned set is orthonormal, has residuals within the tolerance, and spans
    /// the dense decomposition's leading subspace within what the residuals allow
    /// (Davis–Kahan: `‖sin Θ‖_F ≤ ‖R‖_F / gap`, `‖R‖_F ≤ √k tol λ₁`, the gap from the
    /// Ritz values, at least `λ_k` less rounding, to `λ_{k+1}`), for a fast decay, a
    /// slow one, and a leading eigenvalue three times over; at an f32-derived and at an
    /// f64-level tolerance.
    #[test]
    fn leading_vectors_span_the_dense_leading_subspace() {
        let n: usize = 600;
        let k = 8;
        let mut triple = vec![1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.3, 0.2];
        triple.extend((8..n).map(|j| 0.1 * 0.99f64.powi(j as i32)));
        let spectra: [(&str, Vec<f64>); 3] = [
            ("decay", (0..n).map(|j| 0.8f64.powi(j as i32)).collect()),
            (
                "slow",
                (0..n).map(|j| 1.0 / (1.0 + j as f64).sqrt()).collect(),
            ),
            ("triple", triple),
        ];
        for (name, lambda) in &spectra {
            let (g, q) = with_spectrum(lambda, 3);
            for tol in [2f64.powi(-30), 16.0 * n as f64 * f64::EPSILON] {
                let u = solve(&g, k, tol, 1e3 * (n as f64).powi(3))
                    .unwrap_or_else(|| panic!("{name} tol {tol:e}: no result"));
                let utu = u.transpose() * &u;
                for i in 0..k {
                    for j in 0..k {
                        let want = if i == j { 1.0 } else { 0.0 };
                        assert!((utu[(i, j)] - want).abs() < 1e-10, "{name}: UᵀU");
                    }
                }
                let theta = u.transpose() * &g * &u;
                for j in 0..k {
                    let r = (&g * u.col(j) - u.col(j) * theta[(j, j)]).norm_l2();
                    assert!(
                        r <= tol * lambda[0] * 1.01,
                        "{name} tol {tol:e}: residual {r:e}"
                    );
                }
                let gap = lambda[k - 1] - lambda[k];
                let bound = (k as f64).sqrt() * tol * lambda[0] / gap + 1e-12;
                let s = sines(u.as_ref(), q.subcols(0, k));
                assert!(s <= bound, "{name} tol {tol:e}: sines {s:e} > {bound:e}");
            }
        }
    }

    /// A Gram of rank 3 asked for 5 vectors: the block runs out of new directions after
    /// one product and takes seeded random ones; the result is orthonormal and holds the
    /// range.
    #[test]
    fn rank_below_k_gives_the_range_and_orthonormal_completion() {
        let n = 500;
        let mut lambda = vec![3.0, 2.0, 1.0];
        lambda.resize(n, 0.0);
        let (g, q) = with_spectrum(&lambda, 5);
        let u = solve(&g, 5, 2f64.powi(-30), 1e3 * (n as f64).powi(3)).expect("a result");
        let utu = u.transpose() * &u;
        assert!((utu - Mat::<f64>::identity(5, 5)).norm_l2() < 1e-10);
        // The range's three directions lie in span(U).
        let s = sines(q.subcols(0, 3), u.as_ref());
        assert!(s < 1e-8, "{s:e}");
    }

    /// An unattainable tolerance within a one-cycle budget, and a NaN operator, give
    /// `None` (the caller's dense decomposition), never a vector set that was not
    /// checked.
    #[test]
    fn unconverged_or_nan_gives_none() {
        let n = 500;
        let lambda: Vec<f64> = (0..n).map(|j| 1.0 / (1.0 + j as f64).sqrt()).collect();
        let (g, _) = with_spectrum(&lambda, 9);
        assert!(solve(&g, 8, 1e-300, 0.0).is_none());
        let nan = Mat::<f64>::from_fn(n, n, |i, j| if i == j { f64::NAN } else { 0.0 });
        assert!(solve(&nan, 8, 2f64.powi(-30), 1e3 * (n as f64).powi(3)).is_none());
    }

    /// Sizes where the basis would not be under a quarter of the order take the dense
    /// path.
    #[test]
    fn small_orders_are_not_worthwhile() {
        assert!(!worthwhile(100, 8));
        assert!(worthwhile(600, 8));
        assert!(!worthwhile(600, 0));
        assert!(!worthwhile(3000, 200));
    }
}
