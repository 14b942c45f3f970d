//! Passes over a prepared tensor's stored nonzeros that the decompositions need besides
//! the kernels: the exact residual of a CP or Tucker model, the census of values
//! CP-APR checks, and completion's per-row counts and mean. They are engine ops, so
//! that they run wherever the tensor lives: on the CPU inside the backend's thread
//! pool; on CUDA over the host copy of the HLS form the CUDA tensor keeps beside its
//! device copy (on rayon's pool of the calling thread).
//!
//! Values are the stored fp16 times the tensor's scale (what the kernels see).

use super::backend::foreign;
use super::cpu::prefetch_row;
use super::{Backend, BackendTensor, Engine, Prepared};
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::hls::layout::KeyLayout;
use crate::matrix::Matrix;
use crate::ops::Op;
use rayon::prelude::*;

/// The two sums of a model's exact residual `‖X − X̂‖²` over the stored nonzeros;
/// the residual is `misfit + max(0, ‖X̂‖² − on_support)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResidualSums {
    /// `Σ_nz (x − x̂)²`, the misfit on the nonzeros.
    pub misfit: f64,
    /// `Σ_nz x̂²`, the model's mass on the nonzeros.
    pub on_support: f64,
}

/// How many stored values are negative and how many are not integers, with the first
/// of each (in the HLS form's order: the sparse part, then the dense tiles).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValueCensus {
    /// Values below zero.
    pub negative: usize,
    /// The first of them.
    pub first_negative: Option<f64>,
    /// Values ≥ 0 that are not integers.
    pub non_integer: usize,
    /// The first of them.
    pub first_non_integer: Option<f64>,
    /// Values other than zero (an explicit zero is stored but counted apart).
    pub nonzero: usize,
}

/// The stored entries per row of every mode and the mean of their values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowCounts {
    /// `counts[m][i]`: the stored entries in row `i` of mode `m`.
    pub counts: Vec<Vec<u32>>,
    /// The mean of the stored values (0 for a tensor without entries).
    pub mean: f64,
}

impl Engine {
    /// Runs `f` over the host HLS form of `p`'s part for `op`, where that part lives
    /// (see the [module documentation](self)).
    fn pass<T: Send>(
        &self,
        p: &Prepared,
        op: Op,
        f: impl FnOnce(&HlsTensor) -> T + Send,
    ) -> Result<T> {
        match (self.backend(), p.part(op)?) {
            (Backend::Cpu(b), BackendTensor::Cpu(t)) => Ok(b.install(|| f(t.hls()))),
            (Backend::Cuda(_), BackendTensor::Cuda(t)) => Ok(f(t.hls())),
            (b, t) => Err(foreign(b.kind(), t)),
        }
    }

    /// The residual sums over the stored nonzeros of `p`'s form for `op` of the CP
    /// model `Σ_r λ_r a⁽⁰⁾_r ∘ … ∘ a⁽ᴺ⁻¹⁾_r` (`weights` λ, `factors[m]` `I_m × R`,
    /// shapes checked by the caller), `x̂` evaluated in f64 from the f32 factors.
    pub fn cp_residual_sums(
        &self,
        p: &Prepared,
        op: Op,
        weights: &[f64],
        factors: &[Matrix],
    ) -> Result<ResidualSums> {
        self.pass(p, op, |hls| cp_sums(hls, weights, factors))
    }

    /// The residual sums over the stored nonzeros of `p`'s form for `op` of the Tucker
    /// model `G ×₀ U₀ … ×_{N−1} U_{N−1}`: `core` row-major over `ranks` (last mode
    /// fastest), `factors[m]` `I_m × R_m` (shapes checked by the caller; order ≥ 2).
    ///
    /// `x̂` at `(c_0, …, c_{N−1})` is `Z[c_{N−1}, :] · (U₀[c_0, :] ⊗ … ⊗
    /// U_{N−2}[c_{N−2}, :])` with `Z = U_{N−1} G_(N−1)` formed once, so a nonzero costs
    /// about `Π_{m<N−1} R_m` multiply-adds (one TTMc's work, in f64).
    pub fn tucker_residual_sums(
        &self,
        p: &Prepared,
        op: Op,
        core: &[f64],
        ranks: &[usize],
        factors: &[Matrix],
    ) -> Result<ResidualSums> {
        self.pass(p, op, |hls| tucker_sums(hls, core, ranks, factors))
    }

    /// The census of the stored values of `p`'s form for `op` ([`ValueCensus`]).
    pub fn value_census(&self, p: &Prepared, op: Op) -> Result<ValueCensus> {
        self.pass(p, op, census)
    }

    /// The stored entries per row of every mode of `p`'s form for `op`, and their
    /// mean ([`RowCounts`]).
    pub fn row_counts(&self, p: &Prepared, op: Op) -> Result<RowCounts> {
        self.pass(p, op, row_counts)
    }
}

/// [`Engine::cp_residual_sums`] over `hls`: per nonzero, the rank's products taken
/// row by row into a scratch row (each factor row read once, contiguously), added in
/// four lanes; the factor rows of the nonzeros ahead are prefetched.
fn cp_sums(hls: &HlsTensor, weights: &[f64], factors: &[Matrix]) -> ResidualSums {
    let ahead = |c: &[u32]| {
        for (f, &i) in factors.iter().zip(c) {
            prefetch_row(f.row(i as usize));
        }
    };
    let [misfit, on_support] = hls.par_sum_nonzeros_ahead(
        || weights.to_vec(),
        Some(&ahead),
        |acc, c, x| {
            acc.copy_from_slice(weights);
            for (f, &i) in factors.iter().zip(c) {
                for (a, &v) in acc.iter_mut().zip(f.row(i as usize)) {
                    *a *= f64::from(v);
                }
            }
            // Four running sums, not one chain of R dependent additions.
            let mut lanes = [0.0f64; 4];
            let quads = acc.chunks_exact(4);
            for &a in quads.remainder() {
                lanes[0] += a;
            }
            for q in quads {
                for (l, &a) in lanes.iter_mut().zip(q) {
                    *l += a;
                }
            }
            let xh = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
            [(x - xh) * (x - xh), xh * xh]
        },
    );
    ResidualSums { misfit, on_support }
}

/// [`Engine::tucker_residual_sums`] over `hls`: the nonzeros sorted by their
/// coordinates from the last mode to the first, and `x̂` taken down a tree of shared
/// prefixes, as a CSF form evaluates it. At level 0, the core contracted with
/// `U_{N−1}[c_{N−1}, :]` (its rows over the first `N−1` modes, `Π_{m<N−1} R_m`
/// values); at level `k`, the level above contracted with `U_{N−1−k}[c_{N−1−k}, :]`
/// (the fastest index of its rows); at the last level, `x̂`. A level is taken again
/// only where its coordinate or one before it changes, so a level costs its distinct
/// prefixes times the level above's length: on a 5th-order tensor of 200 k nonzeros at
/// ranks 50, where each nonzero's row of the level above is 50 MB, about 5·10¹⁰
/// multiply-adds in all against 1.3·10¹² for a row per nonzero. The sorted nonzeros
/// are cut into fixed chunks, each starting its tree afresh, whose sums are added in
/// order: the same sums for any number of threads.
fn tucker_sums(hls: &HlsTensor, core: &[f64], ranks: &[usize], factors: &[Matrix]) -> ResidualSums {
    const CHUNK: usize = 1 << 14;
    let order = ranks.len();
    let last = order - 1;
    let levels: Vec<usize> = (0..order).rev().collect();
    let layout = KeyLayout::with_levels(hls.dims(), &levels).expect("the form's extents fit a key");
    let mut entries: Vec<(u128, f64)> = Vec::with_capacity(hls.nnz());
    hls.for_each_nonzero(|c, v| entries.push((layout.encode(c), v)));
    entries.par_sort_unstable_by_key(|e| e.0);
    // `len[k]`: the length of level `k`'s row (`len[N−1]` = 1, x̂ itself).
    let mut len = vec![0usize; order];
    len[0] = ranks[..last].iter().product();
    for k in 1..order {
        len[k] = len[k - 1] / ranks[last - k];
    }
    let sums: Vec<[f64; 2]> = entries
        .par_chunks(CHUNK)
        .map_init(
            || len.iter().map(|&n| vec![0.0f64; n]).collect::<Vec<_>>(),
            |rows, chunk| {
                let mut prev = vec![u32::MAX; order];
                let mut c = vec![0u32; order];
                let mut fresh = true;
                let mut sum = [0.0f64; 2];
                for &(key, x) in chunk {
                    layout.decode_all(key, &mut c);
                    // The first level whose coordinate (mode `last − k`) or an earlier
                    // one changed.
                    let from = if fresh {
                        0
                    } else {
                        (0..order)
                            .find(|&k| c[last - k] != prev[last - k])
                            .unwrap_or(order)
                    };
                    fresh = false;
                    for k in from..order {
                        let m = last - k;
                        let u = factors[m].row(c[m] as usize);
                        let r = ranks[m];
                        let (above, below) = rows.split_at_mut(k);
                        let out = &mut below[0];
                        let src: &[f64] = if k == 0 { core } else { &above[k - 1] };
                        for (p, o) in out.iter_mut().enumerate() {
                            *o = dot_in_lanes(&src[p * r..][..r], u);
                        }
                    }
                    prev.copy_from_slice(&c);
                    let xh = rows[last][0];
                    sum[0] += (x - xh) * (x - xh);
                    sum[1] += xh * xh;
                }
                sum
            },
        )
        .collect();
    let mut total = [0.0f64; 2];
    for s in sums {
        total[0] += s[0];
        total[1] += s[1];
    }
    ResidualSums {
        misfit: total[0],
        on_support: total[1],
    }
}

/// `Σ g_i u_i` in f64, in eight running sums added pairwise at the end: one chain of
/// dependent additions would hold the Tucker pass to one addition per four cycles,
/// where eight sums fill the vector units. Fixed order, so the same bits every call.
fn dot_in_lanes(g: &[f64], u: &[f32]) -> f64 {
    const LANES: usize = 8;
    let mut lanes = [0.0f64; LANES];
    let (gs, us) = (g.chunks_exact(LANES), u.chunks_exact(LANES));
    for (l, (&g, &u)) in lanes
        .iter_mut()
        .zip(gs.remainder().iter().zip(us.remainder()))
    {
        *l = g * f64::from(u);
    }
    for (g, u) in gs.zip(us) {
        for ((l, &g), &u) in lanes.iter_mut().zip(g).zip(u) {
            *l += g * f64::from(u);
        }
    }
    let [a, b, c, d, e, f, g, h] = lanes;
    ((a + b) + (c + d)) + ((e + f) + (g + h))
}

impl ValueCensus {
    /// The census of `values`, in their order.
    pub fn of_values(values: impl IntoIterator<Item = f64>) -> Self {
        let mut c = ValueCensus::default();
        for v in values {
            if v != 0.0 {
                c.nonzero += 1;
            }
            if v < 0.0 {
                c.negative += 1;
                c.first_negative.get_or_insert(v);
            } else if v.fract() != 0.0 {
                c.non_integer += 1;
                c.first_non_integer.get_or_insert(v);
            }
        }
        c
    }
}

/// [`Engine::value_census`] over `hls`.
fn census(hls: &HlsTensor) -> ValueCensus {
    let scale = f64::from(hls.scale());
    let (sparse, dense) = (hls.sparse().values(), hls.dense().map(|d| d.values()));
    let stored = (0..sparse.len()).map(|p| sparse.get(p)).chain(
        dense
            .into_iter()
            .flat_map(|d| (0..d.len()).map(|p| d.get(p))),
    );
    ValueCensus::of_values(stored.map(|v| v * scale))
}

/// [`Engine::row_counts`] over `hls`.
fn row_counts(hls: &HlsTensor) -> RowCounts {
    let mut counts: Vec<Vec<u32>> = hls.dims().iter().map(|&d| vec![0; d]).collect();
    let mut sum = 0.0;
    hls.for_each_nonzero(|c, v| {
        for (n, &i) in counts.iter_mut().zip(c) {
            n[i as usize] += 1;
        }
        sum += v;
    });
    RowCounts {
        counts,
        mean: sum / hls.nnz().max(1) as f64,
    }
}
