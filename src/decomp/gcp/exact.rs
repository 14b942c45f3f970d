//! The exact loss of a model, reported at the end of a run (and for its start):
//! `F = Σ_nz f(x, m) + Σ_z f(0, m)`, the first sum over the stored entries, the second
//! over the cells the tensor does not store, each in f64 from the factors.
//!
//! The two parts are summed apart, so that nothing cancels between them. (The
//! L-BFGS objective's form, `Σ_nz [f(x, m) − f(0, m)] + Σ_all f(0, m)`, subtracts two
//! sums of the size of `‖M‖²` where the model fits nearly exactly: it reported a
//! Gaussian loss of 5.96e-7 for 1.32e-6, a Huber loss of 0 for 1.2e-9, and −8.9e-16 on
//! a tensor of one stored entry.) The zeros' part:
//!
//! - none where every cell is stored;
//! - Gaussian, `‖M‖² − Σ_nz m²` from the Grams, and Poisson, `Σ_all m − Σ_nz m` from
//!   the column sums: first in f64; where that keeps fewer than 20 of its bits (the
//!   zeros' part below `2⁻²⁰` of the whole), again in double-double arithmetic
//!   (about 104 bits), whose rounding, at most about `2⁻¹⁰⁰` of `‖M‖²` (of `Σ_all m`),
//!   is what a result below 0 can be: the part is then taken as 0, which it is within
//!   that rounding;
//! - every other loss, a pass over the cells not stored ([`super::zeros`]), where the
//!   index space has at most [`super::GcpOptions::dense_limit`] cells; beyond, none:
//!   the caller reports its estimate instead.

use super::Loss;
use super::sample::cells;
use super::zeros::{self, ZeroSum};
use crate::engine::Engine;
use crate::matrix::Matrix;
use crate::tensor::CooTensor;
use rayon::prelude::*;

/// Stored entries per chunk of the sums over them (fixed: the same sum for every
/// thread count).
const CHUNK: usize = 4096;

/// The exact loss of `factors` (in the tensor's units) on `x` under `loss`, `None`
/// where the zeros' part needs a pass over more than `dense_limit` cells (see the
/// [module documentation](self)).
pub(super) fn loss(
    engine: &Engine,
    x: &CooTensor,
    loss: Loss,
    factors: &[Matrix<f64>],
    dense_limit: f64,
) -> Option<f64> {
    let n_cells = cells(x.dims());
    let way = ZeroSum::of(loss);
    // The cell pass numbers the cells in a u64.
    if way == ZeroSum::Cells && !(n_cells <= dense_limit && n_cells < 2f64.powi(63)) {
        return None;
    }
    let stored = stored_sum(engine, x, |k| {
        loss.value(x.values()[k], model_at(x, factors, k))
    });
    let unstored = if n_cells <= x.nnz() as f64 {
        0.0
    } else {
        match way {
            ZeroSum::Grams => closed_form(engine, x, factors, Square),
            ZeroSum::ColumnSums => closed_form(engine, x, factors, Identity),
            ZeroSum::Cells => zeros::unstored_value(engine, loss, x, factors),
        }
    };
    Some(stored + unstored)
}

/// `Σ_k term(k)` over the stored entries, in fixed chunks.
fn stored_sum(engine: &Engine, x: &CooTensor, term: impl Fn(usize) -> f64 + Sync) -> f64 {
    let nnz = x.nnz();
    let parts: Vec<f64> = engine.install(|| {
        (0..nnz.div_ceil(CHUNK))
            .into_par_iter()
            .map(|c| (c * CHUNK..((c + 1) * CHUNK).min(nnz)).map(&term).sum())
            .collect()
    });
    parts.iter().sum()
}

/// The model's value at stored entry `k`, in f64.
fn model_at(x: &CooTensor, factors: &[Matrix<f64>], k: usize) -> f64 {
    let rank = factors.first().map_or(0, Matrix::cols);
    (0..rank)
        .map(|r| {
            factors
                .iter()
                .enumerate()
                .map(|(n, f)| f.get(x.indices(n)[k] as usize, r))
                .product::<f64>()
        })
        .sum()
}

/// The zeros' term of a loss with a closed form over every cell: `m²` or `m`.
trait ZeroTerm: Sync {
    /// `f(0, m)` of `m` in double-double.
    fn of(&self, m: Dd) -> Dd;
    /// `Σ_all f(0, m)` from the factors, in f64 and in double-double.
    fn all(&self, engine: &Engine, factors: &[Matrix<f64>]) -> (f64, Dd);
}

/// The Gaussian loss's `m²`: `Σ_all m² = Σ_{r,s} Π_n (A⁽ⁿ⁾ᵀA⁽ⁿ⁾)_{rs}`.
struct Square;
/// The Poisson loss's `m`: `Σ_all m = Σ_r Π_n (1ᵀA⁽ⁿ⁾)_r`.
struct Identity;

impl ZeroTerm for Square {
    fn of(&self, m: Dd) -> Dd {
        m.mul(m)
    }
    fn all(&self, engine: &Engine, factors: &[Matrix<f64>]) -> (f64, Dd) {
        let fast = engine.install(|| super::model_norm_sq(factors));
        let r = factors.first().map_or(0, Matrix::cols);
        let grams: Vec<Vec<Dd>> = engine.install(|| {
            factors
                .iter()
                .map(|a| {
                    sums_dd(a, r * r, |row, g| {
                        for s in 0..r {
                            for t in 0..r {
                                g[s * r + t] = g[s * r + t].add(Dd::product(row[s], row[t]));
                            }
                        }
                    })
                })
                .collect()
        });
        (fast, hadamard_sum(&grams, r * r))
    }
}

impl ZeroTerm for Identity {
    fn of(&self, m: Dd) -> Dd {
        m
    }
    fn all(&self, engine: &Engine, factors: &[Matrix<f64>]) -> (f64, Dd) {
        let r = factors.first().map_or(0, Matrix::cols);
        let sums: Vec<Vec<Dd>> = engine.install(|| {
            factors
                .iter()
                .map(|a| {
                    sums_dd(a, r, |row, g| {
                        g.iter_mut()
                            .zip(row)
                            .for_each(|(g, &v)| *g = g.add(Dd::from(v)));
                    })
                })
                .collect()
        });
        let fast = (0..r)
            .map(|c| sums.iter().map(|s| s[c].value()).product::<f64>())
            .sum();
        (fast, hadamard_sum(&sums, r))
    }
}

/// `Σ_c Π_n parts[n][c]` in double-double.
fn hadamard_sum(parts: &[Vec<Dd>], len: usize) -> Dd {
    (0..len).fold(Dd::from(0.0), |total, c| {
        let p = parts.iter().fold(Dd::from(1.0), |p, g| p.mul(g[c]));
        total.add(p)
    })
}

/// `len` double-double sums over the rows of `a`, `add(row, sums)` adding one row, in
/// fixed chunks of rows added in order.
fn sums_dd(a: &Matrix<f64>, len: usize, add: impl Fn(&[f64], &mut [Dd]) + Sync) -> Vec<Dd> {
    let r = a.cols().max(1);
    let parts: Vec<Vec<Dd>> = a
        .data()
        .par_chunks(CHUNK * r)
        .map(|rows| {
            let mut g = vec![Dd::from(0.0); len];
            rows.chunks_exact(r).for_each(|row| add(row, &mut g));
            g
        })
        .collect();
    let mut g = vec![Dd::from(0.0); len];
    for p in parts {
        g.iter_mut().zip(&p).for_each(|(g, p)| *g = g.add(*p));
    }
    g
}

/// `Σ_all f(0, m) − Σ_nz f(0, m)`, the zeros' part of a loss with a closed form over
/// every cell (see the [module documentation](self)).
fn closed_form(
    engine: &Engine,
    x: &CooTensor,
    factors: &[Matrix<f64>],
    term: impl ZeroTerm,
) -> f64 {
    let (all, all_dd) = term.all(engine, factors);
    let stored = stored_sum(engine, x, |k| {
        term.of(Dd::from(model_at(x, factors, k))).value()
    });
    let fast = all - stored;
    if fast >= all.abs() * 2f64.powi(-20) {
        return fast;
    }
    let nnz = x.nnz();
    let parts: Vec<Dd> = engine.install(|| {
        (0..nnz.div_ceil(CHUNK))
            .into_par_iter()
            .map(|c| {
                (c * CHUNK..((c + 1) * CHUNK).min(nnz)).fold(Dd::from(0.0), |s, k| {
                    s.add(term.of(model_at_dd(x, factors, k)))
                })
            })
            .collect()
    });
    let stored = parts.iter().fold(Dd::from(0.0), |s, p| s.add(*p));
    all_dd.add(stored.neg()).value().max(0.0)
}

/// [`model_at`] in double-double.
fn model_at_dd(x: &CooTensor, factors: &[Matrix<f64>], k: usize) -> Dd {
    let rank = factors.first().map_or(0, Matrix::cols);
    (0..rank).fold(Dd::from(0.0), |m, r| {
        let p = factors.iter().enumerate().fold(Dd::from(1.0), |p, (n, f)| {
            p.mul(Dd::from(f.get(x.indices(n)[k] as usize, r)))
        });
        m.add(p)
    })
}

/// A double-double number `hi + lo`, `|lo| ≤ ulp(hi) / 2`: about 104 bits (T. J.
/// Dekker, 1971; the error-free sum and product, the latter by a fused multiply-add).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Dd {
    hi: f64,
    lo: f64,
}

impl Dd {
    fn from(v: f64) -> Dd {
        Dd { hi: v, lo: 0.0 }
    }

    /// `a + b` exactly.
    fn sum(a: f64, b: f64) -> Dd {
        let s = a + b;
        let v = s - a;
        Dd {
            hi: s,
            lo: (a - (s - v)) + (b - v),
        }
    }

    /// `a · b` exactly.
    fn product(a: f64, b: f64) -> Dd {
        let p = a * b;
        Dd {
            hi: p,
            lo: a.mul_add(b, -p),
        }
    }

    /// `hi + lo` renormalized.
    fn fast(hi: f64, lo: f64) -> Dd {
        let s = hi + lo;
        Dd {
            hi: s,
            lo: lo - (s - hi),
        }
    }

    fn add(self, o: Dd) -> Dd {
        let s = Dd::sum(self.hi, o.hi);
        let t = Dd::sum(self.lo, o.lo);
        let s = Dd::fast(s.hi, s.lo + t.hi);
        Dd::fast(s.hi, s.lo + t.lo)
    }

    fn mul(self, o: Dd) -> Dd {
        let p = Dd::product(self.hi, o.hi);
        Dd::fast(p.hi, p.lo + (self.hi * o.lo + self.lo * o.hi))
    }

    fn neg(self) -> Dd {
        Dd {
            hi: -self.hi,
            lo: -self.lo,
        }
    }

    fn value(self) -> f64 {
        self.hi + self.lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_double_keeps_what_f64_rounds_away() {
        // (1 + 2⁻⁴⁰)² − 1 − 2⁻³⁹ = 2⁻⁸⁰: f64 rounds it away.
        let a = Dd::from(1.0 + 2f64.powi(-40));
        let d = a
            .mul(a)
            .add(Dd::from(-1.0))
            .add(Dd::from(-(2f64.powi(-39))));
        assert_eq!(d.value(), 2f64.powi(-80));
    }
}
