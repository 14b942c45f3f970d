//! `‖X − X̂‖²` of a CP or Tucker model taken exactly, in f64, from the stored values.
//!
//! CP-ALS and Tucker-HOOI get their residual cheaply from quantities the iteration
//! already has (`‖X‖² + ‖X̂‖² − 2⟨X, X̂⟩`, or `‖X‖² − ‖G‖²`), whose f32 kernel results
//! carry a relative rounding of about `ε₃₂`. Where the model fits well, that
//! cancellation leaves the residual at rounding level and the fit off by up to
//! `√ε₃₂ ≈ 3e-4`. There the decompositions call these instead: one parallel pass over
//! the stored nonzeros (an engine op, run where the tensor lives) evaluating `x̂` in
//! f64 from the factors as they are (f32), so the fit is that of the model actually
//! returned, to f64 rounding.
//!
//! Both split the residual into two sums that are each ≥ 0 (up to f64 rounding):
//! `Σ_nz (x − x̂)²`, the misfit on the nonzeros, and `‖X̂‖² − Σ_nz x̂²`, the model's
//! mass off them, with `‖X̂‖²` taken from the f32 factors too (the running Grams are of
//! the factors before their rounding to f32, which differ from them by about as much
//! as a good fit's residual).

use super::dense::gram;
use crate::engine::{Engine, Prepared};
use crate::error::Result;
use crate::matrix::Matrix;
use crate::ops::Op;
use faer::Mat;

/// Below this many times the backend's rounding (relative to `‖X‖²`), a decomposition
/// takes its residual again exactly: there the cheap residual's rounding is a tenth or
/// more of the residual itself. Data that fits that well is rare outside exact
/// low-rank models, so the extra pass seldom runs.
pub(crate) const REFINE_WITHIN: f64 = 10.0;

/// `‖X̂‖² = λᵀ (∗_m A_mᵀA_m) λ` of a CP model with `grams[m] = A_mᵀA_m`.
pub(crate) fn cp_model_norm_sq(weights: &[f64], grams: &[Mat<f64>]) -> f64 {
    let r = weights.len();
    let mut sum = 0.0;
    for i in 0..r {
        for j in 0..r {
            let g: f64 = grams.iter().map(|g| g[(i, j)]).product();
            sum += weights[i] * weights[j] * g;
        }
    }
    sum
}

/// `‖X − X̂‖²` of the CP model `Σ_r λ_r a⁽⁰⁾_r ∘ … ∘ a⁽ᴺ⁻¹⁾_r` (`factors[m]` is
/// `I_m × R`) against the stored values of `x`'s form for `op`, the pass over the
/// nonzeros an engine op ([`Engine::cp_residual_sums`]).
pub(super) fn cp(
    engine: &Engine,
    x: &Prepared,
    op: Op,
    weights: &[f64],
    factors: &[Matrix],
) -> Result<f64> {
    let grams: Vec<Mat<f64>> = factors.iter().map(gram).collect();
    let model_sq = cp_model_norm_sq(weights, &grams);
    let s = engine.cp_residual_sums(x, op, weights, factors)?;
    Ok(s.misfit + (model_sq - s.on_support).max(0.0))
}

/// `‖X − X̂‖²` of the Tucker model `G ×₀ U₀ … ×_{N−1} U_{N−1}` against the stored
/// values of `x`'s form for `op`: `core` row-major over `ranks` (last mode fastest),
/// `factors[m]` `I_m × R_m`. The factors need not be orthonormal. The pass over the
/// nonzeros is an engine op ([`Engine::tucker_residual_sums`]).
pub(super) fn tucker(
    engine: &Engine,
    x: &Prepared,
    op: Op,
    core: &[f64],
    ranks: &[usize],
    factors: &[Matrix],
) -> Result<f64> {
    // Checked when the pass runs, against the memory left then (the fit's own buffers
    // are held): the sorted nonzeros with their values, each worker's level rows, and
    // the model norm's two copies of the core.
    let levels: u128 = (1..ranks.len())
        .map(|k| ranks[..k].iter().map(|&r| r as u128).product::<u128>())
        .sum();
    crate::memplan::MemoryPlan::new(
        format!("Tucker-HOOI's exact residual at ranks {ranks:?}"),
        "lower --ranks",
    )
    .add(
        "the nonzeros sorted by key, with their values",
        x.nnz() as u128,
        32,
    )
    .add(
        "each worker's level rows and the core's two copies (f64)",
        levels
            .saturating_mul(engine.workers() as u128)
            .saturating_add(2 * core.len() as u128),
        8,
    )
    .check()?;
    let model_sq = tucker_model_norm_sq(core, ranks, factors);
    let s = engine.tucker_residual_sums(x, op, core, ranks, factors)?;
    Ok(s.misfit + (model_sq - s.on_support).max(0.0))
}

/// `‖G ×₀ U₀ … ×_{N−1} U_{N−1}‖² = ⟨G, G ×₀ U₀ᵀU₀ … ×_{N−1} U_{N−1}ᵀU_{N−1}⟩`: the
/// core times every factor's Gram, mode by mode. Mode `m`'s product is, for each
/// index `o` of the modes before it, `Γ_m H_o` with `H_o` the `R_m × (Π_{k>m} R_k)`
/// slice of the running tensor: products of matrices on rayon, in fixed column blocks
/// each on one thread, so that the result does not depend on the thread count (a core
/// of 50⁵ entries costs 8·10¹⁰ multiply-adds, minutes in a scalar loop on one thread).
fn tucker_model_norm_sq(core: &[f64], ranks: &[usize], factors: &[Matrix]) -> f64 {
    use faer::linalg::matmul::matmul;
    use faer::{Accum, MatMut, MatRef, Par};
    use rayon::prelude::*;
    const COLS: usize = 512;
    let mut h = core.to_vec();
    let mut next = vec![0.0f64; h.len()];
    for (m, f) in factors.iter().enumerate() {
        let g = gram(f);
        let (r, inner) = (ranks[m], ranks[m + 1..].iter().product::<usize>());
        if r == 0 || inner == 0 {
            return 0.0;
        }
        let product = |dst: MatMut<'_, f64>, src: MatRef<'_, f64>| {
            dst.par_col_chunks_mut(COLS)
                .zip(src.par_col_chunks(COLS))
                .for_each(|(d, s)| matmul(d, Accum::Replace, g.as_ref(), s, 1.0, Par::Seq));
        };
        if inner == 1 {
            // The slices are columns: all of them side by side, `R_m` apart.
            let outer = h.len() / r;
            product(
                MatMut::from_column_major_slice_mut(&mut next, r, outer),
                MatRef::from_column_major_slice(&h, r, outer),
            );
        } else {
            next.par_chunks_mut(r * inner)
                .zip(h.par_chunks(r * inner))
                .for_each(|(d, s)| {
                    product(
                        MatMut::from_row_major_slice_mut(d, r, inner),
                        MatRef::from_row_major_slice(s, r, inner),
                    )
                });
        }
        std::mem::swap(&mut h, &mut next);
    }
    let parts: Vec<f64> = (core.par_chunks(1 << 16).zip(h.par_chunks(1 << 16)))
        .map(|(a, b)| a.iter().zip(b).map(|(a, b)| a * b).sum::<f64>())
        .collect();
    parts.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::CooTensor;

    fn fresh_seed() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    }

    /// Every cell of a `dims` box, mode 0 slowest.
    fn cells(dims: &[usize]) -> Vec<Vec<u32>> {
        let mut out = vec![vec![]];
        for &d in dims {
            out = out
                .iter()
                .flat_map(|c| {
                    (0..d as u32).map(move |i| {
                        let mut c = c.clone();
                        c.push(i);
                        c
                    })
                })
                .collect();
        }
        out
    }

    /// A random sparse tensor (about 40 % of cells, so the model has mass off the
    /// nonzeros) prepared for `op` on the CPU engine `e`, and its stored values back
    /// in COO. Of order 3 with mode 0 of 20, it has a dense tile (mode-0 rows 0–15,
    /// about 190 nonzeros) and a sparse remainder (rows 16–19, about 50).
    fn sparse(e: &Engine, op: Op, dims: &[usize], seed: u64) -> (Prepared, CooTensor) {
        let mut s = seed;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut entries = Vec::new();
        for c in cells(dims) {
            if next() < 0.4 {
                entries.push((c, next() * 4.0 - 1.0));
            }
        }
        let x = CooTensor::from_entries(dims.to_vec(), entries).unwrap();
        let p = e.prepare_with_thresholds(&x, &[(op, 120)]).unwrap();
        let hls = p.hls(op).unwrap();
        if dims.len() == 3 {
            assert!(hls.dense().is_some_and(|d| d.nnz() > 0) && hls.sparse().nnz() > 0);
        }
        let stored = hls.to_coo();
        (p, stored)
    }

    /// `Σ_cells (x − x̂)²` over every cell of the box, `x̂` from `model`.
    fn brute(stored: &CooTensor, model: impl Fn(&[u32]) -> f64) -> f64 {
        let mut at = std::collections::HashMap::new();
        for k in 0..stored.nnz() {
            at.insert(stored.coords(k), stored.values()[k]);
        }
        cells(stored.dims())
            .iter()
            .map(|c| {
                let e = at.get(c).copied().unwrap_or(0.0) - model(c);
                e * e
            })
            .sum()
    }

    #[test]
    fn the_cp_residual_is_the_sum_over_every_cell() {
        for dims in [&[20usize, 5, 6][..], &[4, 3, 5, 2]] {
            let seed = fresh_seed();
            let e = Engine::cpu();
            let (p, stored) = sparse(&e, Op::Mttkrp, dims, seed);
            let n = dims.len();
            let factors = Matrix::random_factors(dims, &vec![3; n], seed ^ 0x5eed);
            let weights = [1.5, -0.25, 0.75];
            let want = brute(&stored, |c| {
                (0..3)
                    .map(|r| {
                        weights[r]
                            * (0..n)
                                .map(|m| factors[m].get(c[m] as usize, r) as f64)
                                .product::<f64>()
                    })
                    .sum()
            });
            let got = cp(&e, &p, Op::Mttkrp, &weights, &factors).unwrap();
            assert!(
                (got - want).abs() <= 1e-12 * want,
                "{dims:?}, seed {seed}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn the_tucker_residual_is_the_sum_over_every_cell() {
        for (dims, ranks) in [
            (&[20usize, 5, 6][..], &[2usize, 3, 2][..]),
            (&[4, 3, 5, 2], &[2, 3, 2, 2]),
            (&[6, 7], &[3, 2]),
            // More than one chunk of sorted nonzeros (about 19 k of them).
            (&[16, 12, 14, 16], &[2, 3, 2, 2]),
            // Every rank its mode's extent, order 5.
            (&[4, 3, 5, 2, 3], &[4, 3, 5, 2, 3]),
        ] {
            let seed = fresh_seed();
            let e = Engine::cpu();
            let (p, stored) = sparse(&e, Op::Ttmc, dims, seed);
            // Not orthonormal, so ‖X̂‖ ≠ ‖G‖ and the Grams matter.
            let factors = Matrix::random_factors(dims, ranks, seed ^ 0x7c);
            let size: usize = ranks.iter().product();
            let core: Vec<f64> = (0..size)
                .map(|k| (k as f64 - size as f64 / 2.0) / 7.0)
                .collect();
            let want = brute(&stored, |c| {
                cells(ranks)
                    .iter()
                    .enumerate()
                    .map(|(k, a)| {
                        (0..dims.len()).fold(core[k], |p, m| {
                            p * factors[m].get(c[m] as usize, a[m] as usize) as f64
                        })
                    })
                    .sum()
            });
            let got = tucker(&e, &p, Op::Ttmc, &core, ranks, &factors).unwrap();
            assert!(
                (got - want).abs() <= 1e-12 * want,
                "{dims:?}, seed {seed}: {got} vs {want}"
            );
            // The same sums on another number of threads, to the bit.
            let three = Engine::cpu_with(crate::engine::CpuOptions {
                threads: Some(3),
                ..Default::default()
            })
            .unwrap();
            let p3 = three
                .prepare_with_thresholds(&stored, &[(Op::Ttmc, 120)])
                .unwrap();
            let again = tucker(&three, &p3, Op::Ttmc, &core, ranks, &factors).unwrap();
            assert_eq!(again.to_bits(), got.to_bits(), "{dims:?}, seed {seed}");
        }
    }
}
