//! CP-APR's Φ on the CPU (see [`crate::ops`]): per nonzero `x` at `i`, the product
//! `π` of the other modes' factor rows, the model value `μ = B[i_n] · π`, and
//! `Φ[i_n] += x / max(μ, ε) · π`.
//!
//! The work is split as for MTTKRP ([`super::kernel`]'s shares): each worker walks an
//! equal share of the sparse part and of the dense tiles in key order into a private
//! output, and the outputs are summed at the end; no locks or atomics. Unlike MTTKRP's,
//! the private outputs are f64, as are `μ` and the weight `x / μ`: CP-APR multiplies
//! every factor by Φ ten times per outer iteration, so the rounding of an f32 sum over
//! a long row (about `√n · 2⁻²⁴` relative) would be compounded into the model and the
//! log-likelihood would drift from an f64 run by more than 1e-5 within 20 iterations
//! (tests/integration/peer_pyttb_cp_apr.rs). The result is rounded to f32 once.
//!
//! The walk keeps the products of the factor rows of every key level before the last
//! (the target's level skipped) and rebuilds them only from the first level whose
//! coordinate changed, so a sorted stream forms each `π` with one multiplication of
//! rows (f32). The weight depends on `B`, so unlike MTTKRP nothing below the target
//! level can be summed before it is weighed. Values are widened from fp16 and
//! multiplied by the tensor's scale per nonzero (`μ` is not linear in `x`); factors are
//! used as given, without the per-column rescaling of MTTKRP (`μ` sums over the
//! columns, and scaling `π`'s columns would change it).

use super::kernel::{Share, shares, stream};
use super::subnormal::FlushSubnormals;
use super::walk::{Sink, prefetch_row};
use crate::engine::PhiParams;
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use rayon::prelude::*;
use wide::f32x8;

/// Φ of `mode` into `out` (`I_n × R`), `factors[mode]` being `B`; returns
/// `Σ x · ln max(μ, ε)` when `params.log_term`.
pub(super) fn run(
    hls: &HlsTensor,
    mode: usize,
    factors: &[Matrix],
    params: PhiParams,
    out: &mut Matrix,
) -> Option<f64> {
    let workers = rayon::current_num_threads().max(1);
    let workers = if hls.nnz() < 4096 { 1 } else { workers };
    let levels: Vec<usize> = hls.sparse().layout().levels().to_vec();
    let len = out.data().len();
    let parts: Vec<(Vec<f64>, f64)> = shares(hls, workers)
        .par_iter()
        .map(|share: &Share| {
            let _flush = FlushSubnormals::new();
            // Zeroed pages from the allocator, touched first by the worker that fills them.
            let mut buf = vec![0f64; len];
            let mut w = PhiWalker::new(&levels, mode, factors, params, hls.scale(), &mut buf);
            stream(hls, share, &levels, &mut w);
            let log_sum = w.log_sum;
            (buf, log_sum)
        })
        .collect();
    let chunk = out.cols().max(1) * 256;
    out.data_mut()
        .par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(k, dst)| {
            let off = k * chunk;
            for (j, d) in dst.iter_mut().enumerate() {
                *d = parts.iter().map(|(b, _)| b[off + j]).sum::<f64>() as f32;
            }
        });
    params.log_term.then(|| parts.iter().map(|(_, l)| l).sum())
}

/// Walks one stream of nonzeros for Φ into an output buffer.
struct PhiWalker<'a> {
    /// The target's level.
    t: usize,
    /// Levels (the tensor's order).
    n: usize,
    /// Columns (the rank).
    r: usize,
    /// One factor per level, row-major `I × r` (the target's is `B`).
    factors: Vec<&'a [f32]>,
    out: &'a mut [f64],
    eps: f64,
    /// The tensor's value scale.
    scale: f32,
    log_term: bool,
    /// Row `l` (for `l < n − 1`): the product of the rows of levels `0..=l` but the
    /// target's.
    prefix: Vec<f32>,
    pi: Vec<f32>,
    ones: Vec<f32>,
    prev: Vec<u32>,
    started: bool,
    /// Whether prefetching rows ahead pays (the rows do not all fit in L2).
    prefetch: bool,
    /// `Σ x · ln max(μ, ε)` so far (when `log_term`).
    log_sum: f64,
}

impl<'a> PhiWalker<'a> {
    fn new(
        levels: &[usize],
        mode: usize,
        factors: &'a [Matrix],
        params: PhiParams,
        scale: f32,
        out: &'a mut [f64],
    ) -> Self {
        let n = levels.len();
        let r = factors[mode].cols();
        let t = levels
            .iter()
            .position(|&m| m == mode)
            .expect("mode checked against the order");
        let factors: Vec<&[f32]> = levels.iter().map(|&m| factors[m].data()).collect();
        const L2_BYTES: usize = 1 << 20;
        let floats: usize = factors.iter().map(|f| f.len()).sum::<usize>() + 2 * out.len();
        PhiWalker {
            t,
            n,
            r,
            factors,
            out,
            eps: f64::from(params.eps),
            scale,
            log_term: params.log_term,
            prefix: vec![0.0; n.saturating_sub(1).max(1) * r],
            pi: vec![0.0; r],
            ones: vec![1.0; r],
            prev: vec![0; n],
            started: false,
            prefetch: floats * 4 > L2_BYTES,
            log_sum: 0.0,
        }
    }

    #[inline(always)]
    fn row(&self, level: usize, i: u32) -> &'a [f32] {
        let s = i as usize * self.r;
        &self.factors[level][s..s + self.r]
    }
}

impl Sink for PhiWalker<'_> {
    fn wants_prefetch(&self) -> bool {
        self.prefetch
    }

    #[inline(always)]
    fn prefetch(&self, c: &[u32]) {
        for (l, &i) in c.iter().enumerate() {
            let s = i as usize * self.r;
            if let Some(row) = self.factors[l].get(s..s + self.r) {
                prefetch_row(row);
            }
            if l == self.t
                && let Some(row) = self.out.get(s..s + self.r)
            {
                prefetch_row_f64(row);
            }
        }
    }

    #[inline]
    fn push(&mut self, c: &[u32], v: f32) {
        let (n, r, t) = (self.n, self.r, self.t);
        let d = if self.started {
            (0..n).find(|&l| c[l] != self.prev[l]).unwrap_or(n)
        } else {
            self.started = true;
            0
        };
        // Rebuild the prefix products from the first changed level.
        for l in d..n.saturating_sub(1) {
            let (before, rest) = self.prefix.split_at_mut(l * r);
            let dst = &mut rest[..r];
            let base: &[f32] = if l == 0 {
                &self.ones
            } else {
                &before[(l - 1) * r..]
            };
            if l == t {
                dst.copy_from_slice(base);
            } else {
                let s = c[l] as usize * r;
                mul(dst, base, &self.factors[l][s..s + r]);
            }
        }
        self.prev.copy_from_slice(c);
        let pi: &[f32] = if n == 1 {
            &self.ones
        } else if t == n - 1 {
            &self.prefix[(n - 2) * r..(n - 1) * r]
        } else {
            let s = c[n - 1] as usize * r;
            mul(
                &mut self.pi,
                &self.prefix[(n - 2) * r..(n - 1) * r],
                &self.factors[n - 1][s..s + r],
            );
            &self.pi
        };
        let b = self.row(t, c[t]);
        let m = dot(b, pi);
        // NaN stays NaN (f32::max would turn it into ε), so a bad factor shows.
        let mu = if m.is_nan() { m } else { m.max(self.eps) };
        let x = f64::from(v) * f64::from(self.scale);
        if self.log_term {
            self.log_sum += x * mu.ln();
        }
        let s = c[t] as usize * r;
        axpy(&mut self.out[s..s + r], x / mu, pi);
    }

    fn finish(&mut self) {
        self.started = false;
    }
}

/// `d = a ∘ b`.
#[inline(always)]
fn mul(d: &mut [f32], a: &[f32], b: &[f32]) {
    if d.len().is_multiple_of(8) {
        for ((d, a), b) in d
            .chunks_exact_mut(8)
            .zip(a.chunks_exact(8))
            .zip(b.chunks_exact(8))
        {
            d.copy_from_slice(&(load(a) * load(b)).to_array());
        }
    } else {
        for ((d, &a), &b) in d.iter_mut().zip(a).zip(b) {
            *d = a * b;
        }
    }
}

/// `a · b`, in f64, as four interleaved partial sums (columns `k ≡ j mod 4` in sum
/// `j`) added at the end. One running sum made each nonzero wait on a chain of `R`
/// dependent f64 additions, the longest path of the walk; four sums fill one AVX2
/// register and cut the chain by four. The order is fixed, so results stay
/// deterministic; the rounding differs from one sum by a few f64 ulps.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f64 {
    let mut acc = [0f64; 4];
    let (a4, b4) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f64 = a4
        .remainder()
        .iter()
        .zip(b4.remainder())
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum();
    for (a, b) in a4.zip(b4) {
        for j in 0..4 {
            acc[j] += f64::from(a[j]) * f64::from(b[j]);
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `y += a · x`, in f64.
#[inline(always)]
fn axpy(y: &mut [f64], a: f64, x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += a * f64::from(x);
    }
}

/// [`prefetch_row`] for a row of f64.
#[inline(always)]
pub(crate) fn prefetch_row_f64(row: &[f64]) {
    for line in row.chunks(8) {
        super::walk::prefetch_line(&line[0]);
    }
}

#[inline(always)]
fn load(s: &[f32]) -> f32x8 {
    f32x8::from(<[f32; 8]>::try_from(s).expect("8 lanes"))
}
