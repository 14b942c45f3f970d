//! `‖X − X̂‖²` of a CP or Tucker model taken exactly, in f64, from the stored values.
//!
//! CP-ALS and Tucker-HOOI get their residual cheaply from quantities the iteration
//! already has (`‖X‖² + ‖X̂‖² − 2⟨X, X̂⟩`, or `‖X‖² − ‖G‖²`), whose f32 kernel results
//! carry a relative rounding of about `ε₃₂`. Where the model fits well, that
//! cancellation leaves the residual at rounding level and the fit off by up to
//! `√ε₃₂ ≈ 3e-4`. There the decompositions call these instead: one parallel pass over
//! the stored nonzeros evaluating `x̂` in f64 from the factors as they are (f32), so
//! the fit is that of the model actually returned, to f64 rounding.
//!
//! Both split the residual into two sums that are each ≥ 0 (up to f64 rounding):
//! `Σ_nz (x − x̂)²`, the misfit on the nonzeros, and `‖X̂‖² − Σ_nz x̂²`, the model's
//! mass off them, with `‖X̂‖²` taken from the f32 factors too (the running Grams are of
//! the factors before their rounding to f32, which differ from them by about as much
//! as a good fit's residual).

use super::dense::gram;
use crate::hls::{HlsTensor, values::dequantize};
use crate::matrix::Matrix;
use faer::Mat;

/// Below this many times the backend's rounding (relative to `‖X‖²`), a decomposition
/// takes its residual again exactly: there the cheap residual's rounding is a tenth or
/// more of the residual itself. Data that fits that well is rare outside exact
/// low-rank models, so the extra pass seldom runs.
pub(super) const REFINE_WITHIN: f64 = 10.0;

/// `‖X̂‖² = λᵀ (∗_m A_mᵀA_m) λ` of a CP model with `grams[m] = A_mᵀA_m`.
pub(super) fn cp_model_norm_sq(weights: &[f64], grams: &[Mat<f64>]) -> f64 {
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
/// `I_m × R`) against the stored values of `hls`.
pub(super) fn cp(hls: &HlsTensor, weights: &[f64], factors: &[Matrix]) -> f64 {
    let grams: Vec<Mat<f64>> = factors.iter().map(gram).collect();
    let model_sq = cp_model_norm_sq(weights, &grams);
    let (rank, scale) = (weights.len(), hls.scale());
    let [misfit, on_support] = hls.par_sum_nonzeros(
        || (),
        |_, c, v| {
            let x = dequantize(v, scale);
            let xh: f64 = (0..rank)
                .map(|r| {
                    (factors.iter().zip(c))
                        .fold(weights[r], |p, (f, &i)| p * f.get(i as usize, r) as f64)
                })
                .sum();
            [(x - xh) * (x - xh), xh * xh]
        },
    );
    misfit + (model_sq - on_support).max(0.0)
}

/// `‖X − X̂‖²` of the Tucker model `G ×₀ U₀ … ×_{N−1} U_{N−1}` against the stored
/// values of `hls`: `core` row-major over `ranks` (last mode fastest), `factors[m]`
/// `I_m × R_m`. The factors need not be orthonormal.
///
/// `x̂` at `(c_0, …, c_{N−1})` is `Z[c_{N−1}, :] · (U₀[c_0, :] ⊗ … ⊗ U_{N−2}[c_{N−2}, :])`
/// with `Z = U_{N−1} G_(N−1)` formed once, so a nonzero costs about `Π_{m<N−1} R_m`
/// multiply-adds (one TTMc's work, in f64).
pub(super) fn tucker(hls: &HlsTensor, core: &[f64], ranks: &[usize], factors: &[Matrix]) -> f64 {
    let order = ranks.len();
    let last = order - 1;
    let (r_last, rest) = (ranks[last], ranks[..last].iter().product::<usize>());
    // Z[i, s] = Σ_a U_last[i, a] · G[s, a], the core row `s` over the first N−1 modes.
    let u_last = &factors[last];
    let z: Vec<f64> = (0..u_last.rows() * rest)
        .map(|k| {
            let (i, s) = (k / rest, k % rest);
            (0..r_last)
                .map(|a| u_last.get(i, a) as f64 * core[s * r_last + a])
                .sum()
        })
        .collect();
    let model_sq = tucker_model_norm_sq(core, ranks, factors);
    let scale = hls.scale();
    // x̂ = Z[c_{N−1}, :] contracted with U_{N−2}[c_{N−2}, :] (the fastest index of the
    // row), then with U_{N−3}[c_{N−3}, :], … down to mode 0, in a per-chunk buffer:
    // about `Π_{m<N−1} R_m` multiply-adds, no division.
    let scratch = || vec![0.0f64; rest / ranks[last - 1]];
    let [misfit, on_support] = hls.par_sum_nonzeros(scratch, |buf, c, v| {
        let x = dequantize(v, scale);
        let zrow = &z[c[last] as usize * rest..][..rest];
        let (r, row) = (ranks[last - 1], factors[last - 1].row(c[last - 1] as usize));
        let mut len = rest / r;
        for (p, block) in zrow.chunks_exact(r).enumerate() {
            buf[p] = block.iter().zip(row).map(|(z, &u)| z * u as f64).sum();
        }
        for m in (0..last - 1).rev() {
            let (r, row) = (ranks[m], factors[m].row(c[m] as usize));
            len /= r;
            // In place: entry `p` is written after its block `p·r..(p+1)·r` is read,
            // and later blocks start beyond it.
            for p in 0..len {
                let sum: f64 = (0..r).map(|q| buf[p * r + q] * row[q] as f64).sum();
                buf[p] = sum;
            }
        }
        let xh = buf[0];
        [(x - xh) * (x - xh), xh * xh]
    });
    misfit + (model_sq - on_support).max(0.0)
}

/// `‖G ×₀ U₀ … ×_{N−1} U_{N−1}‖² = ⟨G, G ×₀ U₀ᵀU₀ … ×_{N−1} U_{N−1}ᵀU_{N−1}⟩`: the
/// small core times every factor's Gram, mode by mode.
fn tucker_model_norm_sq(core: &[f64], ranks: &[usize], factors: &[Matrix]) -> f64 {
    let mut h = core.to_vec();
    for (m, f) in factors.iter().enumerate() {
        let g = gram(f);
        let (outer, r, inner) = (
            ranks[..m].iter().product::<usize>(),
            ranks[m],
            ranks[m + 1..].iter().product::<usize>(),
        );
        let mut next = vec![0.0; h.len()];
        for o in 0..outer {
            for a in 0..r {
                for b in 0..r {
                    let gab = g[(a, b)];
                    let (dst, src) = ((o * r + a) * inner, (o * r + b) * inner);
                    for t in 0..inner {
                        next[dst + t] += gab * h[src + t];
                    }
                }
            }
        }
        h = next;
    }
    core.iter().zip(&h).map(|(a, b)| a * b).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hls::HlsBuilder;
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
    /// nonzeros) stored in HLS, and its stored values back in COO. Of order 3 with
    /// mode 0 of 20, it has a dense tile (mode-0 rows 0–15, about 190 nonzeros) and a
    /// sparse remainder (rows 16–19, about 50).
    fn sparse(dims: &[usize], seed: u64) -> (HlsTensor, CooTensor) {
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
        let hls = HlsBuilder::new(120).build(&x).unwrap();
        if dims.len() == 3 {
            assert!(hls.dense().is_some_and(|d| d.nnz() > 0) && hls.sparse().nnz() > 0);
        }
        let stored = hls.to_coo();
        (hls, stored)
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
            let (hls, stored) = sparse(dims, seed);
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
            let got = cp(&hls, &weights, &factors);
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
        ] {
            let seed = fresh_seed();
            let (hls, stored) = sparse(dims, seed);
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
            let got = tucker(&hls, &core, ranks, &factors);
            assert!(
                (got - want).abs() <= 1e-12 * want,
                "{dims:?}, seed {seed}: {got} vs {want}"
            );
        }
    }
}
