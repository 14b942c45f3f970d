//! `Σ_all f(0, m)`: the loss of every cell of the index space taken as a zero, and
//! its gradient, for the full-gradient path ([`super::opt`]).
//!
//! - Gaussian, `f(0, m) = m²`: `‖M‖² = Σ_{r,s} Π_n (A⁽ⁿ⁾ᵀA⁽ⁿ⁾)_{rs}` from the factors'
//!   Grams; gradient `2 A⁽ⁿ⁾ ⊛_{j≠n} A⁽ʲ⁾ᵀA⁽ʲ⁾`.
//! - Poisson (identity link), `f(0, m) = m`: `Σ_all m = Σ_r Π_n s⁽ⁿ⁾_r` with
//!   `s⁽ⁿ⁾ = 1ᵀA⁽ⁿ⁾` the column sums; every row of mode `n`'s gradient is
//!   `⊛_{j≠n} s⁽ʲ⁾`.
//! - Every other loss: a pass over the cells on the host, one fiber of the longest
//!   mode `f` at a time. For the other modes' indices `i` of a fiber, `w = ⊛_{k≠f}
//!   a⁽ᵏ⁾_{i_k}`; each cell `j` of the fiber has `m = ⟨a⁽ᶠ⁾_j, w⟩` and derivative
//!   `y = f′(0, m)`, adds `y·w` to row `j` of mode `f`'s gradient and `y·a⁽ᶠ⁾_j` to the
//!   fiber's `z`; then row `i_k` of each other mode's gradient gains
//!   `z ⊛_{l≠f,k} a⁽ˡ⁾_{i_l}`. That is `3R` multiply-adds and one `f′` per cell. The
//!   fibers are cut into one contiguous range per worker, each with its own gradient,
//!   added in range order: the result depends on the thread count only.

use super::{Loss, gram};
use crate::decomp::cp_apr;
use crate::engine::Engine;
use crate::matrix::Matrix;
use crate::tensor::CooTensor;
use rayon::prelude::*;

/// How `Σ_all f(0, m)` is computed for a loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ZeroSum {
    /// `‖M‖²` from the Grams (Gaussian).
    Grams,
    /// `Σ_all m` from the column sums (Poisson, identity link).
    ColumnSums,
    /// A pass over every cell.
    Cells,
}

impl ZeroSum {
    /// The way for `loss`.
    pub(super) fn of(loss: Loss) -> Self {
        match loss {
            Loss::Gaussian => ZeroSum::Grams,
            Loss::Poisson => ZeroSum::ColumnSums,
            _ => ZeroSum::Cells,
        }
    }

    /// `Σ_all f(0, m)` for `factors`, its gradient added to `grads`.
    pub(super) fn add(
        self,
        engine: &Engine,
        loss: Loss,
        factors: &[Matrix<f64>],
        grads: &mut [Matrix<f64>],
    ) -> f64 {
        match self {
            ZeroSum::Grams => grams(engine, factors, grads),
            ZeroSum::ColumnSums => column_sums(engine, factors, grads),
            ZeroSum::Cells => cells(engine, loss, factors, grads),
        }
    }

    /// `Σ_all g(0, c m)` for `factors`: the zeros' loss in the given units of a run on
    /// values divided by `c` ([`super::units`]), without a gradient. The Gaussian and
    /// Poisson sums are `c²` and `c` times the divided ones.
    pub(super) fn value_in_units(
        self,
        engine: &Engine,
        g: Loss,
        factors: &[Matrix<f64>],
        c: f64,
    ) -> f64 {
        let scratch = || -> Vec<Matrix<f64>> {
            factors
                .iter()
                .map(|a| Matrix::zeros(a.rows(), a.cols()))
                .collect()
        };
        match self {
            ZeroSum::Grams => c * c * grams(engine, factors, &mut scratch()),
            ZeroSum::ColumnSums => c * column_sums(engine, factors, &mut scratch()),
            ZeroSum::Cells => cells_value(engine, g, factors, c),
        }
    }
}

/// `Σ_all m²` and its gradient added to `grads`.
fn grams(engine: &Engine, factors: &[Matrix<f64>], grads: &mut [Matrix<f64>]) -> f64 {
    let r = factors[0].cols();
    let grams: Vec<Vec<f64>> = engine.install(|| factors.iter().map(gram).collect());
    let mut norm = vec![1.0; r * r];
    grams
        .iter()
        .for_each(|g| norm.iter_mut().zip(g).for_each(|(h, g)| *h *= g));
    for (n, (a, g)) in factors.iter().zip(grads.iter_mut()).enumerate() {
        let mut h = vec![1.0; r * r];
        for (j, gj) in grams.iter().enumerate() {
            if j != n {
                h.iter_mut().zip(gj).for_each(|(h, g)| *h *= g);
            }
        }
        engine.install(|| {
            g.data_mut()
                .par_chunks_mut(r)
                .zip(a.data().par_chunks(r))
                .for_each(|(g, a)| {
                    for (t, g) in g.iter_mut().enumerate() {
                        *g += 2.0 * (0..r).map(|s| a[s] * h[s * r + t]).sum::<f64>();
                    }
                })
        });
    }
    norm.iter().sum()
}

/// `Σ_all m` and its gradient added to `grads`.
fn column_sums(engine: &Engine, factors: &[Matrix<f64>], grads: &mut [Matrix<f64>]) -> f64 {
    let r = factors[0].cols();
    let sums: Vec<Vec<f64>> = engine.install(|| {
        factors
            .iter()
            .map(|a| cp_apr::column_sums(a.data(), r))
            .collect()
    });
    for (n, g) in grads.iter_mut().enumerate() {
        let mut others = vec![1.0; r];
        for (j, s) in sums.iter().enumerate() {
            if j != n {
                others.iter_mut().zip(s).for_each(|(o, s)| *o *= s);
            }
        }
        g.data_mut()
            .chunks_mut(r)
            .for_each(|row| row.iter_mut().zip(&others).for_each(|(g, o)| *g += o));
    }
    (0..r)
        .map(|c| sums.iter().map(|s| s[c]).product::<f64>())
        .sum()
}

/// How a pass over every cell is cut: along fibers of the longest mode (so that the
/// per-fiber work is spread thinnest), numbered with `others[0]`'s index fastest, in
/// one contiguous range per worker.
struct CellWalk {
    /// The fiber mode.
    mode: usize,
    /// The other modes, in order.
    others: Vec<usize>,
    fibers: usize,
    parts: usize,
}

impl CellWalk {
    /// The walk over `factors`' cells, `None` where there are none or the rank is 0.
    fn of(engine: &Engine, factors: &[Matrix<f64>]) -> Option<Self> {
        let dims: Vec<usize> = factors.iter().map(|a| a.rows()).collect();
        if factors[0].cols() == 0 || dims.contains(&0) {
            return None;
        }
        let mode = (0..dims.len()).max_by_key(|&n| dims[n]).unwrap_or(0);
        let others: Vec<usize> = (0..dims.len()).filter(|&n| n != mode).collect();
        let fibers: usize = others.iter().map(|&n| dims[n]).product();
        let parts = engine.workers().clamp(1, fibers);
        Some(CellWalk {
            mode,
            others,
            fibers,
            parts,
        })
    }

    /// The fibers of part `p`.
    fn range(&self, p: usize) -> std::ops::Range<usize> {
        self.fibers * p / self.parts..self.fibers * (p + 1) / self.parts
    }

    /// `w` (rank entries) set to the product of the rows `fiber` picks in the other
    /// modes: every cell of the fiber is its fiber-mode row times `w`.
    fn fiber_rows(&self, fiber: usize, factors: &[Matrix<f64>], w: &mut [f64]) {
        w.fill(1.0);
        let mut l = fiber;
        for &n in &self.others {
            let rows = factors[n].rows();
            let row = factors[n].row(l % rows);
            l /= rows;
            w.iter_mut().zip(row).for_each(|(w, a)| *w *= a);
        }
    }
}

/// `Σ_all f(0, m)` by a pass over every cell and its gradient added to `grads` (see
/// the [module documentation](self)).
fn cells(engine: &Engine, loss: Loss, factors: &[Matrix<f64>], grads: &mut [Matrix<f64>]) -> f64 {
    let Some(walk) = CellWalk::of(engine, factors) else {
        return 0.0;
    };
    let partials: Vec<(f64, Vec<Matrix<f64>>)> = engine.install(|| {
        (0..walk.parts)
            .into_par_iter()
            .map(|p| fiber_range(loss, factors, walk.mode, &walk.others, walk.range(p)))
            .collect()
    });
    let mut value = 0.0;
    for (v, part) in partials {
        value += v;
        for (g, p) in grads.iter_mut().zip(&part) {
            g.data_mut()
                .iter_mut()
                .zip(p.data())
                .for_each(|(g, p)| *g += p);
        }
    }
    value
}

/// `Σ_all g(0, c m)` by a pass over every cell: [`cells`]' walk without its gradient,
/// in the same ranges (the same sum for a thread count).
fn cells_value(engine: &Engine, g: Loss, factors: &[Matrix<f64>], c: f64) -> f64 {
    let Some(walk) = CellWalk::of(engine, factors) else {
        return 0.0;
    };
    let r = factors[0].cols();
    let partials: Vec<f64> = engine.install(|| {
        (0..walk.parts)
            .into_par_iter()
            .map(|p| {
                let mut w = vec![1.0; r];
                let mut value = 0.0;
                for fiber in walk.range(p) {
                    walk.fiber_rows(fiber, factors, &mut w);
                    for a in factors[walk.mode].data().chunks_exact(r) {
                        let m: f64 = a.iter().zip(&w).map(|(a, w)| a * w).sum();
                        value += g.value(0.0, c * m);
                    }
                }
                value
            })
            .collect()
    });
    partials.iter().sum()
}

/// `Σ f(0, m)` over the cells `x` does not store, each term added as it is (nothing
/// cancels against the stored entries'), for [`super::exact`]: [`cells_value`]'s walk,
/// each fiber's stored cells skipped by a pointer into the stored entries' keys
/// (fiber, then index along it) sorted. The index space must have fewer than 2⁶³
/// cells.
pub(super) fn unstored_value(
    engine: &Engine,
    loss: Loss,
    x: &CooTensor,
    factors: &[Matrix<f64>],
) -> f64 {
    let Some(walk) = CellWalk::of(engine, factors) else {
        return 0.0;
    };
    let len = factors[walk.mode].rows() as u64;
    let key = |k: usize| {
        let (mut fiber, mut stride) = (0u64, 1u64);
        for &n in &walk.others {
            fiber += u64::from(x.indices(n)[k]) * stride;
            stride *= factors[n].rows() as u64;
        }
        fiber * len + u64::from(x.indices(walk.mode)[k])
    };
    let mut keys: Vec<u64> = (0..x.nnz()).map(key).collect();
    engine.install(|| keys.par_sort_unstable());
    let r = factors[0].cols();
    let partials: Vec<f64> = engine.install(|| {
        (0..walk.parts)
            .into_par_iter()
            .map(|p| {
                let range = walk.range(p);
                let mut at = keys.partition_point(|&k| k < range.start as u64 * len);
                let mut w = vec![1.0; r];
                let mut value = 0.0;
                for fiber in range {
                    walk.fiber_rows(fiber, factors, &mut w);
                    let first = fiber as u64 * len;
                    for (j, a) in factors[walk.mode].data().chunks_exact(r).enumerate() {
                        let mut stored = false;
                        while keys.get(at) == Some(&(first + j as u64)) {
                            at += 1;
                            stored = true;
                        }
                        if !stored {
                            let m: f64 = a.iter().zip(&w).map(|(a, w)| a * w).sum();
                            value += loss.value(0.0, m);
                        }
                    }
                }
                value
            })
            .collect()
    });
    partials.iter().sum()
}

/// The fibers `range` of mode `f` (numbered with `others[0]`'s index fastest): their
/// `Σ f(0, m)` and gradient.
fn fiber_range(
    loss: Loss,
    factors: &[Matrix<f64>],
    f: usize,
    others: &[usize],
    range: std::ops::Range<usize>,
) -> (f64, Vec<Matrix<f64>>) {
    let r = factors[0].cols();
    let mut grads: Vec<Matrix<f64>> = factors.iter().map(|a| Matrix::zeros(a.rows(), r)).collect();
    let k = others.len();
    // prefix[t] = ⊛ of the first t other modes' rows; suffix[t] = of those from t on.
    let mut prefix = vec![1.0; (k + 1) * r];
    let mut suffix = vec![1.0; (k + 1) * r];
    let mut z = vec![0.0; r];
    let mut idx = vec![0usize; k];
    let a_f = factors[f].data();
    let mut value = 0.0;
    for fiber in range {
        let mut l = fiber;
        for (i, &n) in idx.iter_mut().zip(others) {
            *i = l % factors[n].rows();
            l /= factors[n].rows();
        }
        for t in 0..k {
            let row = factors[others[t]].row(idx[t]);
            let (head, tail) = prefix.split_at_mut((t + 1) * r);
            let prev = &head[t * r..];
            tail[..r]
                .iter_mut()
                .zip(prev.iter().zip(row))
                .for_each(|(p, (q, a))| *p = q * a);
        }
        for t in (0..k).rev() {
            let row = factors[others[t]].row(idx[t]);
            let (head, tail) = suffix.split_at_mut((t + 1) * r);
            head[t * r..]
                .iter_mut()
                .zip(tail[..r].iter().zip(row))
                .for_each(|(s, (q, a))| *s = q * a);
        }
        let w = &prefix[k * r..];
        z.fill(0.0);
        let g_f = grads[f].data_mut();
        for (a, g) in a_f.chunks_exact(r).zip(g_f.chunks_exact_mut(r)) {
            let m: f64 = a.iter().zip(w).map(|(a, w)| a * w).sum();
            value += loss.value(0.0, m);
            let y = loss.deriv(0.0, m);
            g.iter_mut().zip(w).for_each(|(g, w)| *g += y * w);
            z.iter_mut().zip(a).for_each(|(z, a)| *z += y * a);
        }
        for t in 0..k {
            let g = grads[others[t]].data_mut();
            let row = &mut g[idx[t] * r..(idx[t] + 1) * r];
            let (p, s) = (
                &prefix[t * r..(t + 1) * r],
                &suffix[(t + 1) * r..(t + 2) * r],
            );
            for c in 0..r {
                row[c] += z[c] * p[c] * s[c];
            }
        }
    }
    (value, grads)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CpuOptions;

    /// `Σ_all f(0, m)` and its gradient, cell by cell.
    fn brute(loss: Loss, a: &[Matrix<f64>]) -> (f64, Vec<Matrix<f64>>) {
        let dims: Vec<usize> = a.iter().map(|f| f.rows()).collect();
        let r = a[0].cols();
        let mut g: Vec<Matrix<f64>> = dims.iter().map(|&d| Matrix::zeros(d, r)).collect();
        let mut value = 0.0;
        for l in 0..dims.iter().product() {
            let mut rest = l;
            let c: Vec<usize> = dims
                .iter()
                .map(|&d| {
                    let i = rest % d;
                    rest /= d;
                    i
                })
                .collect();
            let term = |c_: usize, skip: Option<usize>| -> f64 {
                (0..dims.len())
                    .filter(|&n| Some(n) != skip)
                    .map(|n| a[n].get(c[n], c_))
                    .product()
            };
            let m: f64 = (0..r).map(|s| term(s, None)).sum();
            value += loss.value(0.0, m);
            let y = loss.deriv(0.0, m);
            for (n, g) in g.iter_mut().enumerate() {
                for s in 0..r {
                    let old = g.get(c[n], s);
                    g.set(c[n], s, old + y * term(s, Some(n)));
                }
            }
        }
        (value, g)
    }

    #[test]
    fn every_way_is_the_sum_over_every_cell_for_any_thread_count() {
        let losses = [
            Loss::Gaussian,
            Loss::Poisson,
            Loss::PoissonLog,
            Loss::Gamma,
            Loss::Rayleigh,
            Loss::BernoulliOdds,
            Loss::BernoulliLogit,
            Loss::Huber { threshold: 0.25 },
            Loss::Beta { b: 0.5 },
        ];
        // The longest mode first, in the middle and last; orders 2 to 4.
        let shapes: [&[usize]; 4] = [&[7, 3], &[3, 9, 4], &[4, 3, 2, 6], &[5, 5, 1]];
        for (k, dims) in shapes.iter().enumerate() {
            let rank = 3;
            let a: Vec<Matrix<f64>> =
                Matrix::random_factors(dims, &vec![rank; dims.len()], 7 + k as u64)
                    .iter()
                    .map(|f| f.to_f64().map(|v| 0.1 + v))
                    .collect();
            for loss in losses {
                let (want, want_g) = brute(loss, &a);
                let twice: Vec<Matrix<f64>> = a.iter().map(|f| f.map(|v| 2.0 * v)).collect();
                let want_units = brute(loss, &twice).0;
                // The fingerprint of the zeros' gradient: a loss whose every row is the
                // same (Poisson) must still agree row by row.
                for threads in [1, 2, 5] {
                    let engine = Engine::cpu_with(CpuOptions {
                        threads: Some(threads),
                        ..CpuOptions::default()
                    })
                    .unwrap();
                    let mut g: Vec<Matrix<f64>> =
                        dims.iter().map(|&d| Matrix::zeros(d, rank)).collect();
                    let got = ZeroSum::of(loss).add(&engine, loss, &a, &mut g);
                    let tol = |v: f64| 1e-12 * v.abs().max(1.0);
                    assert!(
                        (got - want).abs() <= tol(want),
                        "{loss} {dims:?} {threads} threads: {got} vs {want}"
                    );
                    // In units twice the factors': the values `2^N` times.
                    let c = 2f64.powi(dims.len() as i32);
                    let got = ZeroSum::of(loss).value_in_units(&engine, loss, &a, c);
                    assert!(
                        (got - want_units).abs() <= tol(want_units),
                        "{loss} {dims:?} {threads} threads, in units: {got} vs {want_units}"
                    );
                    for (n, (g, w)) in g.iter().zip(&want_g).enumerate() {
                        for (e, (g, w)) in g.data().iter().zip(w.data()).enumerate() {
                            assert!(
                                (g - w).abs() <= tol(*w),
                                "{loss} {dims:?} {threads} threads, mode {n} entry {e}: {g} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }
}
