//! The completion kernels on the CPU ([`crate::engine::completion`]).
//!
//! The nonzeros are cut into one share per worker, as for MTTKRP (equal nonzero
//! counts of the sparse part and of the dense tiles, [`shares`]). The ALS normal
//! equations group each mode's nonzeros by row once per session and build every row's
//! system in registers ([`super::rows`]); once grouped, the loss walks mode 0's groups.
//! The CCD++ column terms walk each
//! share into a private output and sum the private outputs row-parallel at the end;
//! kernels whose output is per nonzero (the CCD++ residual) write each share's own
//! slice of it; the loss sums per share, in share order (so a result depends on the
//! thread count, never on timing). No locks or atomics. SGD runs in stratified blocks
//! ([`super::sgd`]). Arithmetic is f32 with subnormals flushed, as in every CPU kernel;
//! the loss is summed in f64.

use super::kernel::{Share, dense_nonzeros, shares};
use super::row_groups::RowGroups;
use super::sgd::Strata;
use super::subnormal::FlushSubnormals;
use crate::engine::RunStats;
use crate::engine::completion::{
    CompletionSession, SgdStep, check_bias_columns, check_col, check_factors, check_mode,
    check_new_column, check_new_factor, check_step,
};
use crate::error::{Error, Result};
use crate::hls::values::with_values;
use crate::hls::{HlsTensor, LOW_KEY_BITS, StoredValue};
use crate::matrix::Matrix;
use rayon::prelude::*;

/// Tensors below this many nonzeros run as one share (no private buffers).
const ONE_SHARE_NNZ: usize = 4096;

/// Calls `f(q, c, x)` for every nonzero of `share`: its position `q` in the session's
/// nonzero order (the sparse part, then the dense values), its coordinates `c` in mode
/// order and its value `x` (stored value × the tensor's scale − `offset`).
#[inline(always)]
pub(super) fn visit(
    hls: &HlsTensor,
    share: &Share,
    offset: f32,
    f: impl FnMut(usize, &[u32], f32),
) {
    with_values!(hls.sparse().values(), |vals| {
        visit_as(hls, vals, share, offset, f)
    })
}

/// [`visit`] with the sparse part's values of their stored type `V`.
#[inline(always)]
fn visit_as<V: StoredValue>(
    hls: &HlsTensor,
    vals: &[V],
    share: &Share,
    offset: f32,
    mut f: impl FnMut(usize, &[u32], f32),
) {
    let sp = hls.sparse();
    let scale = hls.scale();
    let order = hls.order();
    let mut c = vec![0u32; order];
    let (s, e) = share.sparse;
    if s < e {
        let layout = sp.layout();
        let shifts = layout.shifts();
        let masks: Vec<u64> = (0..order).map(|m| layout.mask(m)).collect();
        let (keys, offs) = (sp.keys(), sp.block_offsets());
        let mut b = sp.block_of(s);
        let mut p = s;
        while p < e {
            let end = (offs[b + 1] as usize).min(e);
            if layout.total_bits() <= 64 {
                let hi = sp.block_prefix()[b] << LOW_KEY_BITS;
                for q in p..end {
                    let key = hi | keys[q] as u64;
                    for ((cm, &sh), &mk) in c.iter_mut().zip(shifts).zip(&masks) {
                        *cm = ((key >> sh) & mk) as u32;
                    }
                    f(q, &c, vals[q].to_f32() * scale - offset);
                }
            } else {
                for (q, v) in (p..end).zip(&vals[p..end]) {
                    layout.decode_all(sp.full_key(b, q), &mut c);
                    f(q, &c, v.to_f32() * scale - offset);
                }
            }
            p = end;
            b += 1;
        }
    }
    if let Some(d) = hls.dense() {
        let mut q = sp.nnz() + d.offsets()[share.tiles.0] as usize;
        dense_nonzeros(d, share.tiles, |cc, v| {
            f(q, &cc, v * scale - offset);
            q += 1;
        });
    }
}

/// The model's value `Σ_r Π_m F_m[c_m, r]` at `c` (without the offset).
#[inline(always)]
fn model_at(factors: &[Matrix], c: &[u32], rank: usize, prod: &mut [f32]) -> f32 {
    prod.fill(1.0);
    for (f, &i) in factors.iter().zip(c) {
        for (p, &a) in prod.iter_mut().zip(f.row(i as usize)) {
            *p *= a;
        }
    }
    prod[..rank].iter().sum()
}

/// The CPU's completion session: factors in host memory, row-major.
pub(super) struct CpuCompletion<'a> {
    hls: &'a HlsTensor,
    offset: f32,
    rank: usize,
    factors: Vec<Matrix>,
    /// Per nonzero, in the session's order; empty until [`reset_residual`].
    ///
    /// [`reset_residual`]: CompletionSession::reset_residual
    residual: Vec<f32>,
    shares: Vec<Share>,
    /// Private output buffers, kept between calls.
    private: Vec<Vec<f32>>,
    /// SGD's blocks, made on the first epoch.
    strata: Option<Strata>,
    /// ALS's nonzeros grouped by row, per mode, made on the first normal equations.
    groups: Option<Vec<RowGroups>>,
    /// Whether the bias-layout ALS systems run on AVX-512.
    wide: bool,
}

impl<'a> CpuCompletion<'a> {
    /// A session on `hls` from `factors` (checked: one per mode, one rank, finite);
    /// `wide`: the bias-layout ALS systems on AVX-512 (the caller checked the CPU has
    /// it).
    pub(super) fn new(
        hls: &'a HlsTensor,
        factors: &[Matrix],
        offset: f32,
        wide: bool,
    ) -> Result<Self> {
        let rank = check_factors(hls.dims(), factors)?;
        let workers = if hls.nnz() < ONE_SHARE_NNZ {
            1
        } else {
            rayon::current_num_threads().max(1)
        };
        Ok(CpuCompletion {
            hls,
            offset,
            rank,
            factors: factors.to_vec(),
            residual: Vec::new(),
            shares: shares(hls, workers),
            private: Vec::new(),
            strata: None,
            groups: None,
            wide,
        })
    }

    /// For the ALS kernels on the rows `rows` of `mode` (checked): `out` sized to
    /// `rows.len() × width`, the nonzeros grouped by row (once per session), and
    /// `mode`'s groups with the other modes' factors.
    fn row_inputs(
        &mut self,
        mode: usize,
        rows: &[u32],
        width: usize,
        out: &mut Matrix,
    ) -> Result<(&RowGroups, Vec<&Matrix>)> {
        check_mode(mode, self.hls.order())?;
        crate::engine::completion::check_rows(mode, rows, self.hls.dims()[mode])?;
        let rows = rows.len();
        if out.shape() != (rows, width) {
            crate::matrix::check_alloc("the normal equations", rows, width, 4)?;
            *out = Matrix::zeros(rows, width);
        }
        if self.groups.is_none() {
            self.groups = Some(RowGroups::build(self.hls, self.offset)?);
        }
        let groups = &self.groups.as_ref().expect("built above")[mode];
        let others = (self.factors.iter().enumerate())
            .filter(|&(m, _)| m != mode)
            .map(|(_, f)| f)
            .collect();
        Ok((groups, others))
    }

    fn check_residual(&self) -> Result<()> {
        if self.residual.len() != self.hls.nnz() {
            return Err(Error::InvalidOption(
                "the residual is not set: call reset_residual first".into(),
            ));
        }
        Ok(())
    }
}

impl CompletionSession for CpuCompletion<'_> {
    fn rank(&self) -> usize {
        self.rank
    }

    fn factors(&mut self) -> Result<Vec<Matrix>> {
        Ok(self.factors.clone())
    }

    fn set_factor(&mut self, mode: usize, factor: &Matrix) -> Result<RunStats> {
        check_new_factor(self.hls.dims(), self.rank, mode, factor)?;
        self.factors[mode] = factor.clone();
        Ok(RunStats::default())
    }

    fn set_column(&mut self, mode: usize, col: usize, values: &[f32]) -> Result<RunStats> {
        check_new_column(self.hls.dims(), self.rank, mode, col, values)?;
        let r = self.rank;
        let data = self.factors[mode].data_mut();
        for (i, &v) in values.iter().enumerate() {
            data[i * r + col] = v;
        }
        Ok(RunStats::default())
    }

    fn normal_equations(
        &mut self,
        mode: usize,
        rows: &[u32],
        out: &mut Matrix,
    ) -> Result<RunStats> {
        let r = self.rank;
        let (groups, others) = self.row_inputs(mode, rows, r * r + r, out)?;
        groups.normal_equations(&others, r, rows, out);
        finite(out.data(), || format!("normal equations of mode {mode}"))?;
        Ok(RunStats::default())
    }

    fn bias_normal_equations(
        &mut self,
        mode: usize,
        rank: usize,
        rows: &[u32],
        out: &mut Matrix,
        squares: &mut Vec<f64>,
    ) -> Result<RunStats> {
        check_mode(mode, self.hls.order())?;
        crate::engine::completion::check_bias_layout(self.rank, rank, mode)?;
        if rank + self.hls.order() != self.rank {
            return Err(Error::InvalidRank(format!(
                "a bias layout of CP rank {rank} on an order-{} tensor has {} columns; the session has {}",
                self.hls.order(),
                rank + self.hls.order(),
                self.rank
            )));
        }
        let (k, w) = (self.rank, rank + 1);
        let wide = self.wide;
        let (groups, others) = self.row_inputs(mode, rows, w * w + w, out)?;
        groups.bias_normal_equations(&others, k, rank, mode, rows, out, squares, wide);
        finite(out.data(), || format!("normal equations of mode {mode}"))?;
        if let Some(v) = squares.iter().find(|v| !v.is_finite()) {
            return Err(Error::NonFinite(format!(
                "a row's squared targets of mode {mode} sum to {v}"
            )));
        }
        Ok(RunStats::default())
    }

    fn reset_residual(&mut self) -> Result<RunStats> {
        self.residual.resize(self.hls.nnz(), 0.0);
        let sp_nnz = self.hls.sparse().nnz();
        let (hls, offset, factors, r) = (self.hls, self.offset, &self.factors, self.rank);
        let base = |share: &Share| {
            let d0 = hls
                .dense()
                .map_or(0, |d| d.offsets()[share.tiles.0] as usize);
            (share.sparse.0, sp_nnz + d0)
        };
        per_residual(hls, &self.shares, &mut self.residual, |share, sp, dn| {
            let _flush = FlushSubnormals::new();
            let (s0, d0) = base(share);
            let mut prod = vec![0f32; r];
            visit(hls, share, offset, |q, c, x| {
                let e = x - model_at(factors, c, r, &mut prod);
                if q < sp_nnz {
                    sp[q - s0] = e;
                } else {
                    dn[q - d0] = e;
                }
            });
        });
        finite(&self.residual, || "the residual".to_string())?;
        Ok(RunStats::default())
    }

    fn add_column(&mut self, col: usize, sign: f32) -> Result<RunStats> {
        check_col(col, self.rank)?;
        self.check_residual()?;
        let sp_nnz = self.hls.sparse().nnz();
        let (hls, factors, r) = (self.hls, &self.factors, self.rank);
        per_residual(hls, &self.shares, &mut self.residual, |share, sp, dn| {
            let _flush = FlushSubnormals::new();
            let s0 = share.sparse.0;
            let d0 = sp_nnz
                + hls
                    .dense()
                    .map_or(0, |d| d.offsets()[share.tiles.0] as usize);
            visit(hls, share, 0.0, |q, c, _| {
                let mut p = sign;
                for (f, &i) in factors.iter().zip(c) {
                    p *= f.data()[i as usize * r + col];
                }
                if q < sp_nnz {
                    sp[q - s0] += p;
                } else {
                    dn[q - d0] += p;
                }
            });
        });
        finite(&self.residual, || {
            format!("the residual after column {col}")
        })?;
        Ok(RunStats::default())
    }

    fn column_terms(&mut self, mode: usize, col: usize, out: &mut Matrix) -> Result<RunStats> {
        check_mode(mode, self.hls.order())?;
        check_col(col, self.rank)?;
        self.check_residual()?;
        let rows = self.hls.dims()[mode];
        if out.shape() != (rows, 2) {
            *out = Matrix::zeros(rows, 2);
        }
        let (hls, factors, r) = (self.hls, &self.factors, self.rank);
        let res = &self.residual;
        privatized(
            &self.shares,
            &mut self.private,
            out.data_mut(),
            |share, buf| {
                let _flush = FlushSubnormals::new();
                visit(hls, share, 0.0, |q, c, _| {
                    let mut k = 1f32;
                    for (m, (f, &i)) in factors.iter().zip(c).enumerate() {
                        if m != mode {
                            k *= f.data()[i as usize * r + col];
                        }
                    }
                    let row = 2 * c[mode] as usize;
                    buf[row] = res[q].mul_add(k, buf[row]);
                    buf[row + 1] = k.mul_add(k, buf[row + 1]);
                });
            },
        );
        finite(out.data(), || {
            format!("CCD++ terms of mode {mode}, column {col}")
        })?;
        Ok(RunStats::default())
    }

    fn residual(&mut self) -> Result<Vec<f32>> {
        self.check_residual()?;
        Ok(self.residual.clone())
    }

    fn sgd_epoch(&mut self, step: &SgdStep) -> Result<RunStats> {
        check_step(step)?;
        check_bias_columns(step, self.rank, self.hls.order())?;
        if self.strata.is_none() {
            self.strata = Some(Strata::new(self.hls, rayon::current_num_threads())?);
        }
        let strata = self.strata.as_ref().expect("made above");
        strata.epoch(self.hls, self.offset, &mut self.factors, step);
        for (m, f) in self.factors.iter().enumerate() {
            finite(f.data(), || format!("SGD factor of mode {m}"))?;
        }
        Ok(RunStats::default())
    }

    fn loss(&mut self) -> Result<f64> {
        let (hls, offset, factors, r) = (self.hls, self.offset, &self.factors, self.rank);
        if let Some(groups) = &self.groups {
            // ALS has the nonzeros grouped by row: walk mode 0's groups, contiguous.
            let others: Vec<&Matrix> = factors[1..].iter().collect();
            let loss = groups[0].loss(&factors[0], &others, r);
            if !loss.is_finite() {
                return Err(Error::NonFinite(format!("the completion loss is {loss}")));
            }
            return Ok(loss);
        }
        let parts: Vec<f64> = self
            .shares
            .par_iter()
            .map(|share| {
                let _flush = FlushSubnormals::new();
                let mut prod = vec![0f32; r];
                let mut sum = 0f64;
                visit(hls, share, offset, |_, c, x| {
                    let e = f64::from(x - model_at(factors, c, r, &mut prod));
                    sum += e * e;
                });
                sum
            })
            .collect();
        let loss: f64 = parts.iter().sum();
        if !loss.is_finite() {
            return Err(Error::NonFinite(format!("the completion loss is {loss}")));
        }
        Ok(loss)
    }
}

/// Runs `walk(share, buffer)` for every share, each into a zeroed buffer as long as
/// `out` (the first share into `out` itself, the others into `private`, kept between
/// calls), then adds the others into `out`.
fn privatized(
    shares: &[Share],
    private: &mut Vec<Vec<f32>>,
    out: &mut [f32],
    walk: impl Fn(&Share, &mut [f32]) + Sync,
) {
    let len = out.len();
    let (first, rest) = shares.split_first().expect("at least one share");
    private.resize_with(rest.len(), Vec::new);
    out.fill(0.0);
    let private = &mut private[..rest.len()];
    rayon::scope(|s| {
        for (share, buf) in rest.iter().zip(private.iter_mut()) {
            let walk = &walk;
            s.spawn(move |_| {
                // Zeroed by the thread that walks into it (see kernel::run).
                buf.clear();
                buf.resize(len, 0.0);
                walk(share, buf);
            });
        }
        walk(first, out);
    });
    if !rest.is_empty() {
        const CHUNK: usize = 1 << 14;
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(k, o)| {
            for b in private.iter() {
                for (x, y) in o.iter_mut().zip(&b[k * CHUNK..]) {
                    *x += y;
                }
            }
        });
    }
}

/// Runs `walk(share, sparse_residual, dense_residual)` for every share in parallel,
/// each with its own slices of `residual` (those of its sparse positions and of its
/// dense tiles' values).
fn per_residual(
    hls: &HlsTensor,
    shares: &[Share],
    residual: &mut [f32],
    walk: impl Fn(&Share, &mut [f32], &mut [f32]) + Sync,
) {
    let sp_nnz = hls.sparse().nnz();
    let offsets = hls.dense().map(|d| d.offsets());
    let (mut sparse, mut dense) = residual.split_at_mut(sp_nnz);
    let mut jobs = Vec::with_capacity(shares.len());
    for share in shares {
        let (s, e) = share.sparse;
        let (mine, rest) = std::mem::take(&mut sparse).split_at_mut(e - s);
        sparse = rest;
        let n_dense = offsets.map_or(0, |o| (o[share.tiles.1] - o[share.tiles.0]) as usize);
        let (dmine, drest) = std::mem::take(&mut dense).split_at_mut(n_dense);
        dense = drest;
        jobs.push((share, mine, dmine));
    }
    jobs.into_par_iter()
        .for_each(|(share, s, d)| walk(share, s, d));
}

/// [`Error::NonFinite`] naming `what` when `values` hold inf or NaN.
fn finite(values: &[f32], what: impl FnOnce() -> String) -> Result<()> {
    // Blocks checked without an early exit (so that the check vectorizes), in parallel;
    // the first bad entry is looked for only when there is one.
    let bad = values
        .par_chunks(1 << 14)
        .any(|c| c.iter().fold(false, |bad, v| bad | !v.is_finite()));
    if !bad {
        return Ok(());
    }
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(p) => Err(Error::NonFinite(format!(
            "{} entry {p} is {}",
            what(),
            values[p]
        ))),
    }
}
