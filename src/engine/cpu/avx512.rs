//! Kernels on CPUs with AVX-512F, 16 columns per instruction instead of AVX2's 8: the
//! per-row bias-layout ALS systems ([`super::row_kernels::row_system_bias`]); the
//! MTTKRP's are [`super::avx512_mttkrp`]'s.
//!
//! The build's baseline is AVX2 (x86-64-v3), and the compiler keeps autovectorized code
//! at 256 bits even where 512-bit instructions are enabled, so this kernel is written
//! with the 512-bit intrinsics, with index loops of constant bounds (so that every
//! vector stays in a register). A row's nonzeros run a chunk at a time, as on AVX2:
//! each Khatri-Rao row is formed in registers, added to the chunk's right-hand sides
//! and `Σ k` there, and stored to the chunk buffer; then `G = Σ k kᵀ` accumulates over
//! the chunk, `B` rows of `G` at a time. Rows of `G` from `a0` on need only the columns
//! from their 16-wide block on (the rest is mirrored), so at rank 16 a nonzero costs 16
//! FMAs for `G` (AVX2: 24 at half the width), at rank 32 48 (AVX2: 80). Which path runs
//! is the backend's choice ([`crate::engine::CpuVectors`]), made once per call; the sums
//! run in the same order as on AVX2, so results differ only by roundings.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    _mm512_add_ps, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_mul_ps, _mm512_set1_ps,
    _mm512_setzero_ps, _mm512_storeu_ps,
};

use super::row_kernels::BiasFactors;
#[cfg(target_arch = "x86_64")]
use super::row_kernels::{CHUNK, mirror, write_bias_system};

/// Whether this CPU runs the AVX-512 kernels (AVX-512F).
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The padded width a CP rank runs at on the AVX-512 path: a multiple of 16 (16 to 64),
/// or 0 where the AVX2 path is as fast (ranks up to 8) or the rank is above 64.
pub(super) fn padded_width(rank: usize) -> usize {
    match rank {
        9..=64 => rank.div_ceil(16) * 16,
        _ => 0,
    }
}

/// Rows of `G` accumulated at a time at padded width `P`: at most 24 accumulators of
/// 16 floats, which leaves AVX-512's 32 registers room for a Khatri-Rao row and a
/// broadcast.
pub(super) const fn block(p: usize) -> usize {
    match p {
        16 => 16,
        32 => 8,
        48 => 8,
        _ => 4,
    }
}

/// Adds `Σ_j k_j k_jᵀ` to `g`'s first `r` rows, `B` rows at a time; rows from `a0` on
/// get the columns from their 16-wide block on (the rest is left to the mirror).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn gram<const P: usize, const B: usize>(k: &[[f32; P]], r: usize, g: &mut [[f32; P]; P]) {
    for a0 in (0..r).step_by(B) {
        // The first vector a row block needs, as a constant, so that its accumulators
        // stay in registers.
        match a0 / 16 {
            0 => gram_rows::<P, B, 0>(k, a0, g),
            1 => gram_rows::<P, B, 1>(k, a0, g),
            2 => gram_rows::<P, B, 2>(k, a0, g),
            _ => gram_rows::<P, B, 3>(k, a0, g),
        }
    }
}

/// Adds `Σ_j k_j[a0 + t] · k_j[16 v..16 v + 16]` for `t < B` and vectors `v ≥ V0` to
/// `g`'s rows `a0..a0 + B`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::needless_range_loop)] // vectors indexed by constants: kept in registers
fn gram_rows<const P: usize, const B: usize, const V0: usize>(
    k: &[[f32; P]],
    a0: usize,
    g: &mut [[f32; P]; P],
) {
    let vectors = P / 16;
    let mut acc = [[_mm512_setzero_ps(); 4]; B];
    // Index loops with constant bounds (iterator adapters over vectors are not inlined
    // into a function with other target features, which spills every accumulator).
    for kj in k {
        let p = kj.as_ptr();
        let mut kv = [_mm512_setzero_ps(); 4];
        for v in V0..vectors {
            // SAFETY: `kj` holds `P ≥ 16 v + 16` floats.
            kv[v] = unsafe { _mm512_loadu_ps(p.add(16 * v)) };
        }
        for t in 0..B {
            let s = _mm512_set1_ps(kj[a0 + t]);
            for v in V0..vectors {
                acc[t][v] = _mm512_fmadd_ps(s, kv[v], acc[t][v]);
            }
        }
    }
    for t in 0..B {
        let o = g[a0 + t].as_mut_ptr();
        for v in V0..vectors {
            // SAFETY: row `a0 + t` of `g` holds `P ≥ 16 v + 16` floats.
            unsafe {
                let o = o.add(16 * v);
                _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), acc[t][v]));
            }
        }
    }
}

/// One row's bias-layout system ([`super::row_kernels::row_system_bias`], the same
/// inputs and output) for a CP rank `r ≤ P`, `P` a multiple of 16 up to 64.
///
/// # Safety
/// The CPU must have AVX-512F ([`available`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)] // vectors indexed by constants: kept in registers
pub(super) unsafe fn row_system_bias<const P: usize, const B: usize>(
    f: &BiasFactors<P>,
    r: usize,
    others: &[u32],
    values: &[f32],
    dst: &mut [f32],
) -> f64 {
    let vectors = P / 16;
    let d = f.cp.len();
    let mut g = [[0f32; P]; P];
    let (mut b, mut cross) = ([_mm512_setzero_ps(); 4], [_mm512_setzero_ps(); 4]);
    let mut be = 0f32;
    let mut squares = 0f64;
    let mut k = [[0f32; P]; CHUNK];
    for (idx, vals) in others.chunks(CHUNK * d).zip(values.chunks(CHUNK)) {
        let n = vals.len();
        let (mut cb, mut ck) = ([_mm512_setzero_ps(); 4], [_mm512_setzero_ps(); 4]);
        // `Σ y²` in f64: in f32 a target of 2e19 squared overflowed, and one of 1e-20
        // flushed to zero (a loss below zero, an RMSE of NaN).
        let (mut cy, mut cy2) = (0f32, 0f64);
        for j in 0..n {
            let ix = &idx[j * d..(j + 1) * d];
            let row = &f.cp[0][ix[0] as usize].0;
            let mut kv = [_mm512_setzero_ps(); 4];
            for v in 0..vectors {
                // SAFETY: a padded row holds `P ≥ 16 v + 16` floats.
                kv[v] = unsafe { _mm512_loadu_ps(row.as_ptr().add(16 * v)) };
            }
            let mut fixed = f.bias[0][ix[0] as usize];
            for m in 1..d {
                let i = ix[m] as usize;
                let row = &f.cp[m][i].0;
                for v in 0..vectors {
                    // SAFETY: as above.
                    kv[v] =
                        _mm512_mul_ps(kv[v], unsafe { _mm512_loadu_ps(row.as_ptr().add(16 * v)) });
                }
                fixed += f.bias[m][i];
            }
            let y = vals[j] - fixed;
            let yv = _mm512_set1_ps(y);
            for v in 0..vectors {
                cb[v] = _mm512_fmadd_ps(yv, kv[v], cb[v]);
                ck[v] = _mm512_add_ps(ck[v], kv[v]);
                // SAFETY: `k[j]` holds `P ≥ 16 v + 16` floats.
                unsafe { _mm512_storeu_ps(k[j].as_mut_ptr().add(16 * v), kv[v]) };
            }
            cy += y;
            cy2 = f64::from(y).mul_add(f64::from(y), cy2);
        }
        squares += cy2;
        for v in 0..vectors {
            b[v] = _mm512_add_ps(b[v], cb[v]);
            cross[v] = _mm512_add_ps(cross[v], ck[v]);
        }
        be += cy;
        gram::<P, B>(&k[..n], r, &mut g);
    }
    mirror::<P, B, 16>(&mut g, r);
    let (mut bs, mut cs) = ([0f32; P], [0f32; P]);
    for v in 0..vectors {
        // SAFETY: `bs` and `cs` hold `P ≥ 16 v + 16` floats.
        unsafe {
            _mm512_storeu_ps(bs.as_mut_ptr().add(16 * v), b[v]);
            _mm512_storeu_ps(cs.as_mut_ptr().add(16 * v), cross[v]);
        }
    }
    write_bias_system(&g, &cs, &bs, be, values.len(), r, dst);
    squares
}

/// Not reached: [`available`] is false off x86-64.
///
/// # Safety
/// Never called.
#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn row_system_bias<const P: usize, const B: usize>(
    _: &BiasFactors<P>,
    _: usize,
    _: &[u32],
    _: &[f32],
    _: &mut [f32],
) -> f64 {
    unreachable!("the AVX-512 kernels run on x86-64 only")
}
