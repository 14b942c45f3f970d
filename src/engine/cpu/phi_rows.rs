//! CP-APR's Φ on the CPU for runs of calls with fixed other factors
//! ([`crate::engine::phi`]).
//!
//! The nonzeros are grouped by row of every mode once per session ([`RowGroups`]).
//! [`PhiSession::fix`] forms `π` (the product of the other modes' factor rows, in f64)
//! of every nonzero in the fixed mode's row order: `nnz × R` doubles, written once and
//! streamed by each of the inner iterations' calls. [`PhiSession::phi`] then walks the rows, cut into pieces
//! of at most a few thousand nonzeros (so a mode of a few long rows still spreads over
//! every worker): per nonzero, `μ = B[i] · π` in f64 (four interleaved partial sums
//! of fused multiply-adds), `Φ[i] += x / max(μ, ε) · π` into f64 accumulators held for the whole
//! piece; a row's pieces are then added in order. No gathers,
//! no private outputs of the whole Φ; the cut depends on the tensor only, so results
//! do not depend on the thread count.
//!
//! MU's inner iterations ([`PhiSession::mu_inner`]) run row by row where no row of the
//! mode was cut: each row does all its inner iterations (Φ of the row, its KKT
//! violation, `B ← B ∗ Φ`) while its `π` is in cache. The stop is on the largest
//! violation over all rows, known only at the end; when it comes early, the rows are
//! run again from their starting values up to it, and the next call of that mode runs
//! one Φ at a time. Either way the result is the sequential loop's to the bit.
//!
//! The session is offered only where its buffers (the groups, about `N² · 4` bytes per
//! nonzero, and `π`, `8R` bytes per nonzero) fit in half the available memory;
//! elsewhere CP-APR runs [`crate::ops::Op::Phi`] per call.

use super::row_groups::RowGroups;
use super::rows::Plan;
use super::subnormal::FlushSubnormals;
use crate::engine::{PhiParams, PhiSession, RunStats};
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::math::mu::{MuInner, inner_iterations, nan_max, row_violation, update_row};
use rayon::prelude::*;

/// The width a Φ session of rank `rank` runs at: the smallest of 8, 16 and 32 that
/// holds it, or the rank itself above 32 (the kernels for any rank).
pub fn phi_width(rank: usize) -> usize {
    match rank {
        0..=8 => 8,
        9..=16 => 16,
        17..=32 => 32,
        _ => rank,
    }
}

/// A row of Φ at width `R` from a `b` row of at most `R` values (zero-padded here;
/// `pi`'s padding is zero, so the padding's `μ` terms and Φ entries are zero and the
/// first `b.len()` entries are those of the narrower computation): the first
/// `b.len()` entries into `out`. Returns [`row_phi`]'s log term.
#[inline(always)]
fn padded_phi<const R: usize, const LOG: bool>(
    b: &[f64],
    pi: &[f64],
    x: &[f32],
    eps: f64,
    out: &mut [f64],
) -> f64 {
    let k = b.len();
    if k == R {
        return row_phi::<R, LOG>(b, pi, x, eps, out);
    }
    let mut wb = [0f64; R];
    wb[..k].copy_from_slice(b);
    let mut acc = [0f64; R];
    let log = row_phi::<R, LOG>(&wb, pi, x, eps, &mut acc);
    out.copy_from_slice(&acc[..k]);
    log
}

/// Nonzeros per parallel task when forming `π`.
const PI_CHUNK: usize = 1024;
/// The CPU's Φ session.
pub(super) struct CpuPhi {
    groups: Vec<RowGroups>,
    /// The width the session runs at: the rank, or the next specialized width (8, 16,
    /// 32) above it ([`phi_width`]): `π` is kept at it, zero-padded. The callers' rows
    /// (the factors, `B`, Φ) stay `rank` long; each is padded to the width in
    /// registers as it is used, so no `width`-wide copy of a factor is made.
    rank: usize,
    width: usize,
    /// The fixed mode (`usize::MAX` before the first fix).
    mode: usize,
    /// `π` of every nonzero of the fixed mode, in its row order (`nnz × R`).
    pi: Vec<f64>,
    /// Per mode, how its rows are cut (made on the first fix of the mode).
    plans: Vec<Option<Plan>>,
    /// One f64 row per piece of the fixed mode's plan.
    partial: Vec<f64>,
    /// Per mode, whether its last [`PhiSession::mu_inner`] ran every inner iteration
    /// (then the next runs row by row).
    full: Vec<bool>,
}

impl CpuPhi {
    /// A session on `hls` at rank `rank`, or `None` where its buffers would not fit in
    /// half the available memory (or the tensor has one mode).
    pub(super) fn new(hls: &HlsTensor, rank: usize) -> Result<Option<Self>> {
        let (order, nnz) = (hls.order() as u64, hls.nnz() as u64);
        if order < 2 {
            return Ok(None);
        }
        let width = phi_width(rank);
        let need = order * nnz * order * 4 + nnz * width as u64 * 8;
        let budget = crate::matrix::available_memory().map_or(u64::MAX, |a| a / 2);
        if need > budget {
            return Ok(None);
        }
        let groups = RowGroups::build(hls, 0.0)?;
        Ok(Some(CpuPhi {
            groups,
            rank,
            width,
            mode: usize::MAX,
            pi: Vec::new(),
            plans: (0..order).map(|_| None).collect(),
            partial: Vec::new(),
            full: vec![true; order as usize],
        }))
    }
}

impl PhiSession for CpuPhi {
    fn fix(&mut self, mode: usize, factors: &[&[f64]]) -> Result<RunStats> {
        let (g, r, k) = (&self.groups[mode], self.width, self.rank);
        // The other factors' rows are `rank` long; `π` is `width` long (zero-padded).
        let others: Vec<&[f64]> = (factors.iter().enumerate())
            .filter(|&(m, _)| m != mode)
            .map(|(_, f)| *f)
            .collect();
        let d = others.len();
        let idx = g.others();
        // Every entry is written below: keep the buffer (no zeroing of 8R bytes per
        // nonzero at every fix), only its length follows the mode's nonzero count.
        self.pi.resize(g.values().len() * r, 0.0);
        self.pi
            .par_chunks_mut(PI_CHUNK * r.max(1))
            .enumerate()
            .for_each(|(c, chunk)| {
                let _flush = FlushSubnormals::new();
                let ix = &idx[c * PI_CHUNK * d..];
                match (r, k == r) {
                    (8, true) => pi_rows::<8>(chunk, ix, &others),
                    (16, true) => pi_rows::<16>(chunk, ix, &others),
                    (32, true) => pi_rows::<32>(chunk, ix, &others),
                    (8, false) => pi_rows_padded::<8>(k, chunk, ix, &others),
                    (16, false) => pi_rows_padded::<16>(k, chunk, ix, &others),
                    (32, false) => pi_rows_padded::<32>(k, chunk, ix, &others),
                    _ => pi_rows_any(r, chunk, ix, &others),
                }
            });
        if self.plans[mode].is_none() {
            self.plans[mode] = Some(Plan::new(g.ptr()));
        }
        self.mode = mode;
        Ok(RunStats::default())
    }

    fn phi(&mut self, b: &[f64], params: PhiParams, out: &mut [f64]) -> Result<RunStats> {
        self.phi_rows(b, params, out)
    }

    fn mu_inner(
        &mut self,
        b: &mut [f64],
        params: PhiParams,
        max_inner: usize,
        tol: f64,
        out: &mut [f64],
    ) -> Result<MuInner> {
        let mode = self.mode;
        let cut = self.plans[mode].as_ref().expect("made by fix").cut;
        if cut || !self.full[mode] || max_inner == 0 {
            let phi = |b: &[f64], out: &mut [f64]| {
                let s = self.phi_rows(b, params, out)?;
                Ok((s.bytes_to_device, s.bytes_from_device))
            };
            let done = inner_iterations(phi, b, max_inner, tol, out)?;
            self.full[mode] = done.evaluations == max_inner && done.violation >= tol;
            return Ok(done);
        }
        // Row by row: every inner iteration of a row while its π is in cache. Whether
        // the sequential loop would have stopped early is known only at the end (the
        // stop is on the largest violation over all rows): then the rows are run again
        // from the start, up to that iteration.
        let b0 = b.to_vec();
        let viol = self.rows_mu(b, params, max_inner, true, out);
        match viol.iter().position(|&v| v < tol) {
            None => {
                self.full[mode] = true;
                Ok(MuInner {
                    evaluations: max_inner,
                    violation: viol[max_inner - 1],
                    updated: true,
                    ..MuInner::default()
                })
            }
            Some(t) => {
                b.copy_from_slice(&b0);
                self.rows_mu(b, params, t + 1, false, out);
                self.full[mode] = false;
                Ok(MuInner {
                    evaluations: t + 1,
                    violation: viol[t],
                    updated: t > 0,
                    ..MuInner::default()
                })
            }
        }
    }
}

impl CpuPhi {
    /// [`PhiSession::phi`]: `b` and `out` of `rank`-long rows, each row zero-padded to
    /// the session's width in registers ([`padded_phi`]).
    fn phi_rows(&mut self, b: &[f64], params: PhiParams, out: &mut [f64]) -> Result<RunStats> {
        let (g, r, k) = (&self.groups[self.mode], self.width, self.rank.max(1));
        let plan = self.plans[self.mode].as_ref().expect("made by fix");
        let (x, pi) = (g.values(), &self.pi[..]);
        let eps = f64::from(params.eps);
        let log_term = params.log_term;
        self.partial.resize(plan.cut_slots() * k, 0.0);
        let jobs = plan.cut_jobs(out, &mut self.partial, k);
        let logs: Vec<f64> = jobs
            .into_par_iter()
            .map(|job| {
                let _flush = FlushSubnormals::new();
                let mut log = 0f64;
                job.run(plan, k, |&(i, s, e), acc, _| {
                    let (p, xs, brow) = (&pi[s * r..e * r], &x[s..e], &b[i * k..][..k]);
                    log += match (r, log_term) {
                        (8, false) => padded_phi::<8, false>(brow, p, xs, eps, acc),
                        (16, false) => padded_phi::<16, false>(brow, p, xs, eps, acc),
                        (32, false) => padded_phi::<32, false>(brow, p, xs, eps, acc),
                        (8, true) => padded_phi::<8, true>(brow, p, xs, eps, acc),
                        (16, true) => padded_phi::<16, true>(brow, p, xs, eps, acc),
                        (32, true) => padded_phi::<32, true>(brow, p, xs, eps, acc),
                        _ => row_phi_any(brow, p, xs, eps, log_term, acc),
                    };
                });
                log
            })
            .collect();
        // Each cut row: its pieces' sums, in order.
        plan.add_cut_rows(&self.partial, k, out);
        Ok(RunStats {
            log_term: log_term.then(|| logs.iter().sum()),
            ..RunStats::default()
        })
    }
}

impl CpuPhi {
    /// `evals` inner iterations of every row of the fixed mode (no row cut), each row
    /// on its own: Φ of the row from `b`, its violation, `B ← B ∗ Φ` (after the last
    /// evaluation only when `update_last`); `out` gets the last Φ. Returns the largest
    /// violation of each evaluation over the rows (NaN if any is NaN).
    fn rows_mu(
        &self,
        b: &mut [f64],
        params: PhiParams,
        evals: usize,
        update_last: bool,
        out: &mut [f64],
    ) -> Vec<f64> {
        let (g, r, k) = (&self.groups[self.mode], self.width, self.rank.max(1));
        let plan = self.plans[self.mode].as_ref().expect("made by fix");
        let (ptr, x, pi) = (g.ptr(), g.values(), &self.pi[..]);
        let eps = f64::from(params.eps);
        let jobs: Vec<_> = plan
            .row_jobs(b, k)
            .into_iter()
            .zip(plan.row_jobs(out, k))
            .collect();
        let per_task: Vec<Vec<f64>> = jobs
            .into_par_iter()
            .map(|((r0, r1, b_t), (_, _, o_t))| {
                let _flush = FlushSubnormals::new();
                let mut viol = vec![0f64; evals];
                let rows = b_t.chunks_exact_mut(k).zip(o_t.chunks_exact_mut(k));
                for (i, (bi, oi)) in (r0..r1).zip(rows) {
                    let (s, e) = (ptr[i], ptr[i + 1]);
                    let (p, xs) = (&pi[s * r..e * r], &x[s..e]);
                    let row = RowMu {
                        pi: p,
                        x: xs,
                        eps,
                        evals,
                        update_last,
                    };
                    match r {
                        8 => row.run::<8>(bi, oi, &mut viol),
                        16 => row.run::<16>(bi, oi, &mut viol),
                        32 => row.run::<32>(bi, oi, &mut viol),
                        _ => row.run_any(bi, oi, &mut viol),
                    }
                }
                viol
            })
            .collect();
        (0..evals)
            .map(|t| per_task.iter().map(|v| v[t]).fold(0.0, nan_max))
            .collect()
    }
}

/// One row's inner iterations ([`CpuPhi::rows_mu`]).
struct RowMu<'a> {
    pi: &'a [f64],
    x: &'a [f32],
    eps: f64,
    evals: usize,
    update_last: bool,
}

impl RowMu<'_> {
    /// At width `R`: `b` the row of `B` (at most `R` long, updated), `out` the row of
    /// the last Φ (as long), `viol[t]` raised to this row's violation at evaluation
    /// `t`. The row is zero-padded to `R` in registers: the padding's `π` is zero, so
    /// its Φ and violation are zero too. The same operations in the same order as
    /// [`inner_iterations`] on this row (the rule is [`crate::math::mu`]'s, so the two
    /// cannot drift apart).
    #[inline(always)]
    fn run<const R: usize>(&self, b: &mut [f64], out: &mut [f64], viol: &mut [f64]) {
        if self.x.is_empty() {
            return self.run_empty(b, out, viol);
        }
        let k = b.len();
        let mut wb = [0f64; R];
        wb[..k].copy_from_slice(b);
        let mut phi = [0f64; R];
        for (t, vt) in viol.iter_mut().enumerate().take(self.evals) {
            row_phi::<R, false>(&wb, self.pi, self.x, self.eps, &mut phi);
            *vt = nan_max(*vt, row_violation(&wb, &phi));
            if t + 1 < self.evals || self.update_last {
                update_row(&mut wb, &phi);
            }
        }
        b.copy_from_slice(&wb[..k]);
        out.copy_from_slice(&phi[..k]);
    }

    /// [`RowMu::run`] of a row without nonzeros: its Φ is zero, so its first update
    /// makes `B`'s row zero (`b ∗ 0`, NaN kept), after which every evaluation's
    /// violation is 0 and the row stays zero: the loop ends there, with the same
    /// result. (A mode of 30 M rows and 1 M nonzeros is mostly such rows.)
    fn run_empty(&self, b: &mut [f64], out: &mut [f64], viol: &mut [f64]) {
        out.fill(0.0);
        for (t, vt) in viol.iter_mut().enumerate().take(self.evals) {
            *vt = nan_max(*vt, row_violation(b, out));
            if t + 1 < self.evals || self.update_last {
                update_row(b, out);
            }
            if b.iter().all(|&v| v == 0.0) {
                break;
            }
        }
    }

    /// [`RowMu::run`] at any rank.
    fn run_any(&self, b: &mut [f64], out: &mut [f64], viol: &mut [f64]) {
        if self.x.is_empty() {
            return self.run_empty(b, out, viol);
        }
        for (t, vt) in viol.iter_mut().enumerate().take(self.evals) {
            row_phi_any(b, self.pi, self.x, self.eps, false, out);
            *vt = nan_max(*vt, row_violation(b, out));
            if t + 1 < self.evals || self.update_last {
                update_row(b, out);
            }
        }
    }
}

/// `π` of the nonzeros of `out` (`n × R`): each the product of its rows of `others`
/// (`idx`: `others.len()` indices per nonzero), at rank `R`.
#[inline(always)]
fn pi_rows<const R: usize>(out: &mut [f64], idx: &[u32], others: &[&[f64]]) {
    let d = others.len();
    for (p, ix) in out.chunks_exact_mut(R).zip(idx.chunks_exact(d)) {
        let mut v: [f64; R] = others[0][ix[0] as usize * R..][..R]
            .try_into()
            .expect("a row of rank R");
        for (f, &i) in others[1..].iter().zip(&ix[1..]) {
            let row: &[f64; R] = f[i as usize * R..][..R]
                .try_into()
                .expect("a row of rank R");
            for (a, &b) in v.iter_mut().zip(row) {
                *a *= b;
            }
        }
        p.copy_from_slice(&v);
    }
}

/// [`pi_rows`] at width `R` from factor rows of `k < R` values: `π`'s entries past
/// `k` are zero.
#[inline(always)]
fn pi_rows_padded<const R: usize>(k: usize, out: &mut [f64], idx: &[u32], others: &[&[f64]]) {
    let d = others.len();
    for (p, ix) in out.chunks_exact_mut(R).zip(idx.chunks_exact(d)) {
        let mut v = [0f64; R];
        v[..k].copy_from_slice(&others[0][ix[0] as usize * k..][..k]);
        for (f, &i) in others[1..].iter().zip(&ix[1..]) {
            for (a, &b) in v[..k].iter_mut().zip(&f[i as usize * k..][..k]) {
                *a *= b;
            }
        }
        p.copy_from_slice(&v);
    }
}

/// [`pi_rows`] for any rank.
fn pi_rows_any(r: usize, out: &mut [f64], idx: &[u32], others: &[&[f64]]) {
    let d = others.len();
    for (p, ix) in out.chunks_exact_mut(r).zip(idx.chunks_exact(d)) {
        p.copy_from_slice(&others[0][ix[0] as usize * r..][..r]);
        for (f, &i) in others[1..].iter().zip(&ix[1..]) {
            for (v, &a) in p.iter_mut().zip(&f[i as usize * r..][..r]) {
                *v *= a;
            }
        }
    }
}

/// One row of Φ at rank `R`: `b` the row of `B`, `pi` its nonzeros' `π` (`n × R`), `x`
/// their values; returns `Σ x · ln max(μ, ε)` when `LOG` (else 0). `LOG` is a
/// constant so that the loop without the logarithm calls nothing and keeps its
/// accumulators in vector registers.
#[inline(always)]
fn row_phi<const R: usize, const LOG: bool>(
    b: &[f64],
    pi: &[f64],
    x: &[f32],
    eps: f64,
    out: &mut [f64],
) -> f64 {
    let b: &[f64; R] = b.try_into().expect("a row of rank R");
    let mut acc = [0f64; R];
    let mut log = 0f64;
    for (p, &x) in pi.chunks_exact(R).zip(x) {
        let p: &[f64; R] = p.try_into().expect("a row of rank R");
        // Four lanes (columns k ≡ l mod 4 in lane l), fused multiply-adds: one vector.
        let mut m = [0f64; 4];
        for (bj, pj) in b.chunks_exact(4).zip(p.chunks_exact(4)) {
            for l in 0..4 {
                m[l] = bj[l].mul_add(pj[l], m[l]);
            }
        }
        let m = (m[0] + m[1]) + (m[2] + m[3]);
        // NaN stays NaN (f64::max would turn it into ε), so a bad factor shows.
        let mu = if m.is_nan() { m } else { m.max(eps) };
        let x = f64::from(x);
        if LOG {
            log += x * mu.ln();
        }
        let w = x / mu;
        for (a, &v) in acc.iter_mut().zip(p) {
            *a = w.mul_add(v, *a);
        }
    }
    out.copy_from_slice(&acc);
    log
}

/// [`row_phi`] for any rank, with the same sums in the same order: lane `l` of `μ`
/// sums the columns `k ≡ l (mod 4)` in order. The whole groups of four columns run as
/// one vector each, the last `r mod 4` columns one by one. (A loop over every column
/// indexing its lane by `k % 4` ran as scalars: at rank 40, five times as long per
/// nonzero as rank 32's specialized loop.)
fn row_phi_any(b: &[f64], pi: &[f64], x: &[f32], eps: f64, log_term: bool, out: &mut [f64]) -> f64 {
    let r = b.len();
    let whole = r / 4 * 4;
    let (b4, b_rest) = b.split_at(whole);
    out.fill(0.0);
    let mut log = 0f64;
    for (p, &x) in pi.chunks_exact(r.max(1)).zip(x) {
        let (p4, p_rest) = p.split_at(whole);
        let mut m = [0f64; 4];
        for (bj, pj) in b4.chunks_exact(4).zip(p4.chunks_exact(4)) {
            for l in 0..4 {
                m[l] = bj[l].mul_add(pj[l], m[l]);
            }
        }
        // `whole` is a multiple of 4: column `whole + l` is in lane `l`.
        for (l, (&bk, &pk)) in b_rest.iter().zip(p_rest).enumerate() {
            m[l] = bk.mul_add(pk, m[l]);
        }
        let m = (m[0] + m[1]) + (m[2] + m[3]);
        let mu = if m.is_nan() { m } else { m.max(eps) };
        let x = f64::from(x);
        if log_term {
            log += x * mu.ln();
        }
        let w = x / mu;
        for (a, &v) in out.iter_mut().zip(p) {
            *a = w.mul_add(v, *a);
        }
    }
    log
}
