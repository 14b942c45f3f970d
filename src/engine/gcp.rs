//! GCP's gradient as an engine op: an MTTKRP over a small sampled sparse tensor whose
//! values are loss derivatives at the model's values.
//!
//! A [`GcpSample`] is a list of tensor entries in COO form (coordinates, the observed
//! value `x`, a weight `w`), made by the model from the stored nonzeros and from
//! uniformly drawn cells of the index space. For factors `A⁽⁰⁾ … A⁽ᴺ⁻¹⁾` (f64,
//! `I_n × R`) the engine computes at every entry `k` of the sample the model value
//! `m_k = Σ_r Π_n A⁽ⁿ⁾[i_kn, r]` ([`Engine::gcp_values`]) and, given what the model
//! makes of `(x, m)` ([`EntryLoss`]), the gradient of `Σ_k w_k f(x_k, m_k)` with
//! respect to every factor ([`Engine::gcp_gradient`]):
//!
//! `G⁽ⁿ⁾[i, :] = Σ_{k : i_kn = i} w_k ∂f/∂m(x_k, m_k) · Π_{j≠n} A⁽ʲ⁾[i_kj, :]`,
//!
//! the MTTKRP of the sparse tensor `Y` with `y_k = w_k ∂f/∂m(x_k, m_k)`. The engine
//! knows no loss: the model passes its derivative as an [`EntryLoss`].
//!
//! On the CPU ([`crate::engine::cpu`]'s `gcp`) both run in the backend's pool; each
//! mode's rows are cut into a fixed number of row blocks, independent of the thread
//! count, and each block sums its entries in sample order, so the result is the same
//! to the bit for any thread count. On CUDA (`kernels/gcp.cu`) the sample and the
//! factors are uploaded per call, the values computed on the device and copied back,
//! the derivatives formed on the host and the gradient summed on the device with f64
//! atomics (an order that varies from run to run).

use super::{Backend, Engine};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use rayon::prelude::*;

/// What a model makes of one entry: its loss `f(x, m)` and `∂f/∂m`.
pub trait EntryLoss: Sync {
    /// `f(x, m)`.
    fn value(&self, x: f64, m: f64) -> f64;
    /// `∂f/∂m` at `(x, m)`.
    fn deriv(&self, x: f64, m: f64) -> f64;
}

/// Entries of a tensor of extents `dims` in COO form, each with its observed value and
/// weight (see the [module documentation](self)).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GcpSample {
    dims: Vec<usize>,
    coords: Vec<u32>,
    values: Vec<f64>,
    weights: Vec<f64>,
}

impl GcpSample {
    /// An empty sample of a tensor of extents `dims`.
    pub fn new(dims: &[usize]) -> Self {
        GcpSample {
            dims: dims.to_vec(),
            ..GcpSample::default()
        }
    }

    /// Empties the sample, keeping its allocations.
    pub fn clear(&mut self) {
        self.coords.clear();
        self.values.clear();
        self.weights.clear();
    }

    /// Adds the entry at `coord` with observed value `x` and weight `w`;
    /// [`Error::Shape`] when `coord` is not a cell of the tensor.
    pub fn push(&mut self, coord: &[u32], x: f64, w: f64) -> Result<()> {
        if coord.len() != self.dims.len()
            || coord.iter().zip(&self.dims).any(|(&i, &d)| i as usize >= d)
        {
            return Err(Error::shape(
                "a GCP sample entry",
                format!("a cell of a {:?} tensor", self.dims),
                format!("{coord:?}"),
            ));
        }
        self.coords.extend_from_slice(coord);
        self.values.push(x);
        self.weights.push(w);
        Ok(())
    }

    /// A sample from its parts: coordinates entry after entry (`N` per entry), values
    /// and weights (one per entry); [`Error::Shape`] when the lengths disagree or a
    /// coordinate is outside the tensor.
    pub fn from_parts(
        dims: &[usize],
        coords: Vec<u32>,
        values: Vec<f64>,
        weights: Vec<f64>,
    ) -> Result<Self> {
        let n = dims.len();
        if n == 0 || coords.len() != values.len() * n || weights.len() != values.len() {
            return Err(Error::shape(
                "a GCP sample",
                format!(
                    "{n} coordinates, a value and a weight per entry ({} entries)",
                    values.len()
                ),
                format!("{} coordinates, {} weights", coords.len(), weights.len()),
            ));
        }
        // Blocks checked without an early exit (so that the check vectorizes), in
        // parallel where there are many; the first bad entry is looked for only in the
        // first bad block.
        const BLOCK: usize = 4096;
        let outside = |c: &[u32]| c.iter().zip(dims).any(|(&i, &d)| i as usize >= d);
        let block_bad = |b: &[u32]| {
            b.chunks_exact(n).fold(false, |bad, c| {
                bad | c
                    .iter()
                    .zip(dims)
                    .fold(false, |o, (&i, &d)| o | (i as usize >= d))
            })
        };
        let first_bad = if values.len() <= 4 * BLOCK {
            coords.chunks(BLOCK * n).position(block_bad)
        } else {
            coords.par_chunks(BLOCK * n).position_first(block_bad)
        };
        let bad = first_bad.and_then(|blk| {
            let b = &coords[blk * BLOCK * n..];
            b.chunks_exact(n)
                .take(BLOCK)
                .position(outside)
                .map(|k| blk * BLOCK + k)
        });
        if let Some(k) = bad {
            return Err(Error::shape(
                "a GCP sample entry",
                format!("a cell of a {dims:?} tensor"),
                format!("{:?}", &coords[k * n..(k + 1) * n]),
            ));
        }
        Ok(GcpSample {
            dims: dims.to_vec(),
            coords,
            values,
            weights,
        })
    }

    /// The coordinates, values and weights, for reusing their allocations.
    pub fn into_parts(self) -> (Vec<u32>, Vec<f64>, Vec<f64>) {
        (self.coords, self.values, self.weights)
    }

    /// The tensor's extents.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the sample holds no entry.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The coordinates of entry `k`.
    pub fn coord(&self, k: usize) -> &[u32] {
        let n = self.dims.len();
        &self.coords[k * n..(k + 1) * n]
    }

    /// Every entry's coordinates, entry after entry.
    pub fn coords(&self) -> &[u32] {
        &self.coords
    }

    /// The observed values.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The weights.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }
}

/// Checks that `factors` fit `sample`: one per mode, mode `n` of `dims[n]` rows, one
/// rank `R ≥ 1` for all. Returns `R`.
fn check_factors(sample: &GcpSample, factors: &[Matrix<f64>]) -> Result<usize> {
    let dims = sample.dims();
    if factors.len() != dims.len() {
        return Err(Error::shape(
            "GCP factors",
            format!("{} matrices (one per mode)", dims.len()),
            format!("{} matrices", factors.len()),
        ));
    }
    let rank = factors.first().map_or(0, Matrix::cols);
    if rank == 0 {
        return Err(Error::InvalidRank("GCP rank 0".into()));
    }
    for (n, f) in factors.iter().enumerate() {
        if f.shape() != (dims[n], rank) {
            return Err(Error::shape(
                format!("GCP factor of mode {n}"),
                format!("{}×{rank}", dims[n]),
                format!("{}×{}", f.rows(), f.cols()),
            ));
        }
    }
    Ok(rank)
}

/// How the CPU backend may spread one GCP gradient over its workers
/// ([`Engine::gcp_gradient_spread`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcpSpread {
    /// Over every worker: a small sample's fused pass in two fixed halves, the second
    /// into private outputs added after it (where the rows are not many more than the
    /// entries).
    Workers,
    /// The fused pass in one piece on the calling worker, whatever the sample's size:
    /// for a caller that keeps the other workers busy meanwhile (SGD draws its next
    /// sample beside the gradient), where the halves would run one after the other and
    /// the second's private outputs (zeroed, then added: three passes over every
    /// factor row) would be pure cost.
    Caller,
    /// [`GcpSpread::Caller`]'s bits over every worker, in stages: every entry's terms
    /// entry-parallel into a buffer, then summed row-block-parallel in sample order.
    /// About twice the one piece's work (on two cores, 1.3–1.8× its time on two
    /// workers): for a caller with more workers free than that costs, or one that times
    /// the two (the bits are the same, so the choice changes no result).
    Staged,
}

impl Engine {
    /// The factor width at which [`Engine::gcp_gradient`] runs a compiled kernel for
    /// `rank` on a tensor of order `order`: on the CPU, orders 2 to 6 at ranks up to
    /// 64 run kernels of width 4, 8, 16, 32 or 64, and the ranks between copy each
    /// entry's rows into zero-padded arrays; factors given with zero columns up to the
    /// width skip those copies and give the same bits. `rank` where no such kernel
    /// exists (other orders, larger ranks, the GPU).
    pub fn gcp_kernel_width(&self, order: usize, rank: usize) -> usize {
        match self.backend() {
            Backend::Cpu(_) => super::cpu::gcp::kernel_width(order, rank),
            Backend::Cuda(_) => rank,
        }
    }

    /// The width at which SGD keeps factors of `rank` columns and `rows` rows in all:
    /// [`Self::gcp_kernel_width`] where the widened factors, the gradient and Adam's
    /// two moments (4 × rows × width f64) fit in a quarter of the last-level cache,
    /// else `rank`. The zero columns spare the gradient its per-entry row copies, but
    /// every Adam step moves them too, which is cheap only while they stay in the
    /// cache: on a 4th-order tensor of 75 000 rows (77 MB widened at rank 24) the
    /// wider steps cost more than the copies saved; on movielens-latest-small-4d
    /// (10 381 rows) rank 10 widened to 16 ran 1.45 times as fast and rank 20 to 32
    /// no faster.
    pub fn gcp_sgd_width(&self, order: usize, rank: usize, rows: usize) -> usize {
        let width = self.gcp_kernel_width(order, rank);
        let bytes = 4usize
            .saturating_mul(rows)
            .saturating_mul(width)
            .saturating_mul(8);
        if width > rank && bytes <= super::cpu::CacheSizes::cached().llc / 4 {
            width
        } else {
            rank
        }
    }

    /// The model's value at every entry of `sample` into `out` (resized to the
    /// sample's length).
    pub fn gcp_values(
        &self,
        sample: &GcpSample,
        factors: &[Matrix<f64>],
        out: &mut Vec<f64>,
    ) -> Result<()> {
        let rank = check_factors(sample, factors)?;
        out.resize(sample.len(), 0.0);
        match self.backend() {
            Backend::Cpu(_) => {
                self.install(|| super::cpu::gcp::model_values(sample, factors, rank, out));
                Ok(())
            }
            Backend::Cuda(b) => b.gcp_values(sample, factors, rank, out),
        }
    }

    /// The gradient of `Σ_k w_k f(x_k, m_k)` over `sample` with respect to every factor
    /// into `grads` (one `I_n × R` matrix per mode, reshaped when they do not fit; every
    /// entry overwritten), `f` and its derivative from `loss`. With `with_value`, also
    /// returns that sum (else 0).
    pub fn gcp_gradient<L: EntryLoss>(
        &self,
        sample: &GcpSample,
        factors: &[Matrix<f64>],
        loss: &L,
        with_value: bool,
        grads: &mut Vec<Matrix<f64>>,
    ) -> Result<f64> {
        self.gcp_gradient_spread(sample, factors, loss, with_value, grads, GcpSpread::Workers)
    }

    /// [`Engine::gcp_gradient`], spread over the workers as `spread` says (the CPU
    /// backend's choice; the result depends on it, never on the thread count).
    pub fn gcp_gradient_spread<L: EntryLoss>(
        &self,
        sample: &GcpSample,
        factors: &[Matrix<f64>],
        loss: &L,
        with_value: bool,
        grads: &mut Vec<Matrix<f64>>,
        spread: GcpSpread,
    ) -> Result<f64> {
        let rank = check_factors(sample, factors)?;
        let dims = sample.dims();
        if grads.len() != dims.len() || grads.iter().zip(dims).any(|(g, &d)| g.shape() != (d, rank))
        {
            *grads = dims.iter().map(|&d| Matrix::zeros(d, rank)).collect();
        }
        match self.backend() {
            Backend::Cpu(_) => Ok(self.install(|| {
                super::cpu::gcp::gradient(sample, factors, rank, loss, with_value, spread, grads)
            })),
            Backend::Cuda(b) => {
                let mut m = vec![0.0; sample.len()];
                b.gcp_values(sample, factors, rank, &mut m)?;
                let (xs, ws) = (sample.values(), sample.weights());
                let y: Vec<f64> = (0..m.len())
                    .into_par_iter()
                    .map(|k| ws[k] * loss.deriv(xs[k], m[k]))
                    .collect();
                // Fixed chunks summed in order, so the value does not depend on how
                // rayon's work was stolen.
                let value = if with_value {
                    (0..m.len().div_ceil(4096))
                        .into_par_iter()
                        .map(|c| {
                            (c * 4096..((c + 1) * 4096).min(m.len()))
                                .map(|k| ws[k] * loss.value(xs[k], m[k]))
                                .sum::<f64>()
                        })
                        .collect::<Vec<f64>>()
                        .iter()
                        .sum()
                } else {
                    0.0
                };
                b.gcp_gradient(sample, factors, rank, &y, grads)?;
                Ok(value)
            }
        }
    }
}
