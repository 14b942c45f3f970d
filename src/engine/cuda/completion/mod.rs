//! The completion kernels on the CUDA backend ([`crate::engine::completion`]): a
//! [`CompletionSession`] whose factors and residual live in device memory between
//! calls. `kernels/completion.cu` holds the kernels and their thread mapping.
//!
//! What crosses the bus: the initial factors once; a replaced factor or column
//! ([`CompletionSession::set_factor`], [`CompletionSession::set_column`]); the results
//! each call returns (the normal equations: a mode is built whole on the device and the
//! rows a caller asks for are copied from that build; the column terms, the
//! loss, the residual on request, the factors on request) and a flag word after kernels
//! whose output stays on the device, which says whether they wrote inf or NaN. Every copy back is followed
//! by a synchronization of the stream before the host reads it.
//!
//! Built lazily, once per session (`rows`): every row's nonzero count (one pass over the
//! tensor, for SGD's regularization and the grouping) and, per mode, the nonzeros
//! grouped by row for the normal equations (one more pass, on the device; the host
//! only sums the counts and cuts long rows into segments). The grouping fixes the order within a row
//! by atomics, so sums over a row may run in a different order from one session to the
//! next; so do the f64 atomics of the loss and of the column terms.
//!
//! SGD is Hogwild on the device (see `kernels/completion.cu`): the visiting order is a
//! seeded permutation of work units, each run in the session's order, many at once.
//! With [`SgdStep::shuffle`] off the permutation is the identity, but the units still
//! run concurrently, so the result equals the sequential reference only where
//! concurrent steps touch disjoint rows.

mod normal_eq;
mod order;
mod rows;

use super::abi::{
    HLS_BLOCK_THREADS, HLS_BLOCK_WARPS, HLS_COMPLETION_TILE_PARTS, HLS_MAX_ORDER,
    HlsCompletionParams,
};
use super::device::cuda_err;
use super::kernels::completion as entries;
use super::launch::{ptr, seconds_between, tensor_params, timing_event};
use super::{CudaBackend, CudaTensor};
use crate::engine::RunStats;
use crate::engine::completion::{
    CompletionSession, SgdStep, check_col, check_factors, check_mode, check_new_column,
    check_new_factor, check_step,
};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits};
use order::unit_permutation;
use rows::{Counts, Groups};

// SAFETY: HlsCompletionParams is a plain `repr(C)` struct of integers, floats and a
// nested HlsLaunchParams generated from kernels/hls_abi.h, the exact layout the kernels
// take by value.
unsafe impl DeviceRepr for HlsCompletionParams {}

/// Most nonzeros one warp of the normal equations takes of a row: longer rows are cut
/// into segments that several warps sum into the row with atomics.
const SEGMENT: u64 = 1024;
/// Sparse nonzeros per SGD work unit.
const SGD_BATCH: u32 = 256;
/// A completion session on one tensor of the CUDA backend.
pub struct CudaCompletion<'a> {
    backend: &'a CudaBackend,
    tensor: &'a CudaTensor,
    offset: f32,
    rank: usize,
    dims: Vec<usize>,
    nnz: usize,
    /// Every mode's factor, row-major `I_n × R` (at least one element).
    factors: Vec<CudaSlice<f32>>,
    /// Per nonzero in the session's order, once [`CompletionSession::reset_residual`]
    /// has run.
    residual: Option<CudaSlice<f32>>,
    counts: Option<Counts>,
    groups: Vec<Option<Groups>>,
    /// The normal equations' output, grown as needed.
    out: Option<CudaSlice<f32>>,
    /// The mode whose every row's normal equations `out` holds for the factors as
    /// they are: a caller taking a mode's rows in several ranges gets each range copied
    /// from one build. Cleared by whatever changes a factor.
    out_of: Option<usize>,
    /// f64 sums: the column terms or the loss, grown as needed.
    acc: Option<CudaSlice<f64>>,
    /// A new column on its way into a factor.
    column: Option<CudaSlice<f32>>,
    flag: CudaSlice<u32>,
    /// Bytes of the initial factors, counted by the first call.
    pending_up: u64,
}

impl<'a> CudaCompletion<'a> {
    /// A session on `tensor` from `factors` (checked: one per mode, one rank, finite),
    /// modelling `offset + CP`. [`Error::Unsupported`] for tensors of order above
    /// [`HLS_MAX_ORDER`].
    pub fn new(
        backend: &'a CudaBackend,
        tensor: &'a CudaTensor,
        factors: &[Matrix],
        offset: f32,
    ) -> Result<Self> {
        let hls = &tensor.hls;
        let rank = check_factors(hls.dims(), factors)?;
        if !offset.is_finite() {
            return Err(Error::NonFinite(format!("completion offset {offset}")));
        }
        if hls.order() > HLS_MAX_ORDER as usize {
            return Err(Error::Unsupported(format!(
                "the CUDA completion kernels handle tensors of order ≤ {HLS_MAX_ORDER}, got {}",
                hls.order()
            )));
        }
        if u32::try_from(rank).is_err() || hls.dims().iter().any(|&d| u32::try_from(d).is_err()) {
            return Err(Error::Unsupported(
                "the CUDA completion kernels take ranks and extents below 2^32".into(),
            ));
        }
        if u32::try_from(hls.sparse().block_prefix().len()).is_err() {
            return Err(Error::Unsupported(
                "more than 2^32 sparse key blocks".into(),
            ));
        }
        let stream = &backend.stream;
        let mut dev = Vec::with_capacity(factors.len());
        let mut pending_up = 0;
        for f in factors {
            let mut buf = alloc::<f32>(backend, f.data().len(), "a completion factor")?;
            if !f.data().is_empty() {
                stream
                    .memcpy_htod(f.data(), &mut buf)
                    .map_err(|e| cuda_err("uploading a completion factor", e))?;
            }
            pending_up += (f.data().len() * 4) as u64;
            dev.push(buf);
        }
        Ok(CudaCompletion {
            backend,
            tensor,
            offset,
            rank,
            dims: hls.dims().to_vec(),
            nnz: hls.nnz(),
            factors: dev,
            residual: None,
            counts: None,
            groups: (0..hls.order()).map(|_| None).collect(),
            out: None,
            out_of: None,
            acc: None,
            column: None,
            flag: alloc::<u32>(backend, 1, "the completion flag")?,
            pending_up,
        })
    }

    /// The launch parameters with the tensor, the factors and the session's constants.
    fn params(&self, mode: usize) -> HlsCompletionParams {
        let stream = &self.backend.stream;
        let mut p = HlsCompletionParams::default();
        tensor_params(&mut p.t, &self.tensor.hls, &self.tensor.dev, stream);
        for (m, f) in self.factors.iter().enumerate() {
            p.t.factor[m] = ptr(f, stream);
            p.t.ranks[m] = self.rank as u32;
        }
        p.t.mode = mode as u32;
        p.rank = self.rank as u32;
        p.offset = self.offset;
        p.flag = ptr(&self.flag, stream);
        p
    }

    /// Blocks for a walk over every nonzero: a thread per sparse nonzero, a warp per
    /// dense tile, at most a few waves (the kernels stride over the rest).
    fn walk_blocks(&self) -> u32 {
        let hls = &self.tensor.hls;
        let threads = HLS_BLOCK_THREADS as usize;
        let need = hls.sparse().nnz().div_ceil(threads).max(
            hls.dense()
                .map_or(0, |d| d.len())
                .div_ceil(HLS_BLOCK_WARPS as usize),
        );
        need.clamp(1, self.backend.sm_count * 32) as u32
    }

    /// Launches `name` with `p` on `blocks` blocks and `smem` bytes of dynamic shared
    /// memory, timed with events; returns the device seconds (waits for the kernel).
    fn launch(&self, name: &str, p: &HlsCompletionParams, blocks: u32, smem: u32) -> Result<f64> {
        let stream = &self.backend.stream;
        let func = self.backend.kernels.get(name)?;
        let cfg = LaunchConfig {
            grid_dim: (blocks.max(1), 1, 1),
            block_dim: (HLS_BLOCK_THREADS, 1, 1),
            shared_mem_bytes: smem,
        };
        let start = timing_event(stream)?;
        let mut builder = stream.launch_builder(&func);
        builder.arg(p);
        // SAFETY: every pointer in `p` is a live buffer of this session or of the
        // uploaded tensor, on this one stream, with the extents the counts in `p`
        // describe (the factors `dims[m] × rank`, the residual `nnz`, the outputs and
        // the grouping as sized by the caller); the kernels stride over the grid and
        // index within those extents (kernels/completion.cu).
        unsafe { builder.launch(cfg) }.map_err(|e| cuda_err(&format!("launching {name}"), e))?;
        let end = timing_event(stream)?;
        stream
            .context()
            .check_err()
            .map_err(|e| cuda_err(&format!("after {name}"), e))?;
        seconds_between(&start, &end)
    }

    /// Clears the flag word before a kernel that may raise it.
    fn clear_flag(&mut self) -> Result<()> {
        self.backend
            .stream
            .memset_zeros(&mut self.flag)
            .map_err(|e| cuda_err("clearing the completion flag", e))
    }

    /// Whether a kernel since [`Self::clear_flag`] wrote inf or NaN (waits for it).
    fn flag_raised(&self) -> Result<bool> {
        let stream = &self.backend.stream;
        let mut f = [0u32];
        stream
            .memcpy_dtoh(&self.flag, &mut f)
            .map_err(|e| cuda_err("copying the completion flag back", e))?;
        stream
            .synchronize()
            .map_err(|e| cuda_err("waiting for the completion flag", e))?;
        Ok(f[0] != 0)
    }

    /// The stats of a call that ran kernels for `seconds`, counting the initial
    /// factors' upload in the first call.
    fn stats(&mut self, seconds: f64, up: u64, down: u64) -> RunStats {
        RunStats {
            kernel_seconds: Some(seconds),
            bytes_to_device: std::mem::take(&mut self.pending_up) + up,
            bytes_from_device: down,
            log_term: None,
        }
    }

    /// An f64 buffer of at least `n` entries, its first `n` cleared.
    fn cleared_acc(&mut self, n: usize) -> Result<()> {
        if self.acc.as_ref().is_none_or(|b| b.len() < n.max(1)) {
            self.acc = None;
            self.acc = Some(alloc::<f64>(self.backend, n, "the completion sums")?);
        }
        let acc = self.acc.as_mut().expect("allocated above");
        self.backend
            .stream
            .memset_zeros(&mut acc.slice_mut(0..n.max(1)))
            .map_err(|e| cuda_err("clearing the completion sums", e))
    }

    /// Copies the first `n` entries of a device buffer into `dst` and waits.
    fn copy_back<T: DeviceRepr>(&self, src: &CudaSlice<T>, n: usize, dst: &mut [T]) -> Result<()> {
        let stream = &self.backend.stream;
        if n > 0 {
            stream
                .memcpy_dtoh(&src.slice(0..n), &mut dst[..n])
                .map_err(|e| cuda_err("copying a completion result back", e))?;
        }
        stream
            .synchronize()
            .map_err(|e| cuda_err("waiting for a completion result", e))
    }

    fn check_residual(&self) -> Result<()> {
        if self.residual.is_none() {
            return Err(Error::InvalidOption(
                "the residual is not set: call reset_residual first".into(),
            ));
        }
        Ok(())
    }

    /// The launch parameters of a kernel that reads or writes the residual.
    fn residual_params(&self, mode: usize) -> Result<HlsCompletionParams> {
        let mut p = self.params(mode);
        let res = self.residual.as_ref().ok_or_else(|| {
            Error::InvalidOption("the residual is not set: call reset_residual first".into())
        })?;
        p.residual = ptr(res, &self.backend.stream);
        Ok(p)
    }
}

/// A device buffer of `n` elements (at least one, so every pointer is valid), zeroed,
/// after checking that it fits in free device memory.
fn alloc<T: DeviceRepr + ValidAsZeroBits>(
    backend: &CudaBackend,
    n: usize,
    what: &str,
) -> Result<CudaSlice<T>> {
    let stream = &backend.stream;
    let bytes = n.max(1).saturating_mul(std::mem::size_of::<T>());
    let (free, _total) = stream
        .context()
        .mem_get_info()
        .map_err(|e| cuda_err("querying free device memory", e))?;
    if bytes > free {
        return Err(Error::DeviceMemory {
            what: what.to_string(),
            needed: bytes as u64,
            available: free as u64,
        });
    }
    stream
        .alloc_zeros::<T>(n.max(1))
        .map_err(|e| cuda_err(&format!("allocating {what}"), e))
}

/// [`Error::NonFinite`] naming `what` when `values` hold inf or NaN.
fn finite(values: &[f32], what: impl FnOnce() -> String) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(p) => Err(Error::NonFinite(format!(
            "{} entry {p} is {}",
            what(),
            values[p]
        ))),
    }
}

impl CompletionSession for CudaCompletion<'_> {
    fn rank(&self) -> usize {
        self.rank
    }

    fn factors(&mut self) -> Result<Vec<Matrix>> {
        let mut out = Vec::with_capacity(self.dims.len());
        for (f, &d) in self.factors.iter().zip(&self.dims) {
            let mut data = vec![0f32; d * self.rank];
            self.copy_back(f, data.len(), &mut data)?;
            out.push(Matrix::new(d, self.rank, data)?);
        }
        Ok(out)
    }

    fn set_factor(&mut self, mode: usize, factor: &Matrix) -> Result<RunStats> {
        check_new_factor(&self.dims, self.rank, mode, factor)?;
        self.out_of = None;
        if !factor.data().is_empty() {
            self.backend
                .stream
                .memcpy_htod(factor.data(), &mut self.factors[mode])
                .map_err(|e| cuda_err("uploading a completion factor", e))?;
        }
        Ok(self.stats(0.0, (factor.data().len() * 4) as u64, 0))
    }

    fn set_column(&mut self, mode: usize, col: usize, values: &[f32]) -> Result<RunStats> {
        check_new_column(&self.dims, self.rank, mode, col, values)?;
        self.out_of = None;
        let rows = self.dims[mode];
        if rows == 0 {
            return Ok(self.stats(0.0, 0, 0));
        }
        if self.column.as_ref().is_none_or(|b| b.len() < rows) {
            self.column = None;
            self.column = Some(alloc::<f32>(self.backend, rows, "a completion column")?);
        }
        let stream = &self.backend.stream;
        let buf = self.column.as_mut().expect("allocated above");
        stream
            .memcpy_htod(values, buf)
            .map_err(|e| cuda_err("uploading a completion column", e))?;
        let mut p = self.params(mode);
        p.col = col as u32;
        p.column = ptr(self.column.as_ref().expect("allocated above"), stream);
        let blocks = rows
            .div_ceil(HLS_BLOCK_THREADS as usize)
            .min(self.backend.sm_count * 8) as u32;
        let seconds = self.launch(entries::SET_COLUMN, &p, blocks, 0)?;
        Ok(self.stats(seconds, (rows * 4) as u64, 0))
    }

    fn normal_equations(
        &mut self,
        mode: usize,
        rows: &[u32],
        out: &mut Matrix,
    ) -> Result<RunStats> {
        self.rows_normal_equations(mode, rows, out)
    }

    fn reset_residual(&mut self) -> Result<RunStats> {
        if self.residual.is_none() {
            self.residual = Some(alloc::<f32>(self.backend, self.nnz, "the residual")?);
        }
        self.clear_flag()?;
        let p = self.residual_params(0)?;
        let name = if self.rank.is_multiple_of(4) {
            entries::RESIDUAL_V4
        } else {
            entries::RESIDUAL_V1
        };
        let seconds = self.launch(name, &p, self.walk_blocks(), 0)?;
        if self.flag_raised()? {
            return Err(Error::NonFinite(
                "the residual holds inf or NaN".to_string(),
            ));
        }
        Ok(self.stats(seconds, 0, 4))
    }

    fn add_column(&mut self, col: usize, sign: f32) -> Result<RunStats> {
        check_col(col, self.rank)?;
        self.check_residual()?;
        self.clear_flag()?;
        let mut p = self.residual_params(0)?;
        p.col = col as u32;
        p.sign = sign;
        let seconds = self.launch(entries::ADD_COLUMN, &p, self.walk_blocks(), 0)?;
        if self.flag_raised()? {
            return Err(Error::NonFinite(format!(
                "the residual after column {col} holds inf or NaN"
            )));
        }
        Ok(self.stats(seconds, 0, 4))
    }

    fn column_terms(&mut self, mode: usize, col: usize, out: &mut Matrix) -> Result<RunStats> {
        check_mode(mode, self.dims.len())?;
        check_col(col, self.rank)?;
        self.check_residual()?;
        let rows = self.dims[mode];
        if out.shape() != (rows, 2) {
            *out = Matrix::zeros(rows, 2);
        }
        self.cleared_acc(2 * rows)?;
        let mut p = self.residual_params(mode)?;
        p.col = col as u32;
        p.acc = ptr(
            self.acc.as_ref().expect("cleared above"),
            &self.backend.stream,
        );
        let seconds = self.launch(entries::COLUMN_TERMS, &p, self.walk_blocks(), 0)?;
        let mut sums = vec![0f64; 2 * rows];
        self.copy_back(
            self.acc.as_ref().expect("cleared above"),
            2 * rows,
            &mut sums,
        )?;
        for (o, s) in out.data_mut().iter_mut().zip(&sums) {
            *o = *s as f32;
        }
        finite(out.data(), || {
            format!("CCD++ terms of mode {mode}, column {col}")
        })?;
        Ok(self.stats(seconds, 0, (rows * 16) as u64))
    }

    fn residual(&mut self) -> Result<Vec<f32>> {
        self.check_residual()?;
        let mut v = vec![0f32; self.nnz];
        self.copy_back(self.residual.as_ref().expect("checked"), self.nnz, &mut v)?;
        Ok(v)
    }

    fn sgd_epoch(&mut self, step: &SgdStep) -> Result<RunStats> {
        check_step(step)?;
        self.out_of = None;
        if !step.anchors.iter().all(|a| a.is_zero()) {
            return Err(Error::Unsupported(
                "the CUDA SGD kernel regularizes every mode toward 0 alike (no anchored context modes yet): run SGD with --backend cpu".into(),
            ));
        }
        if step.bias.is_some() {
            // The kernel updates every column alike: it would move the fixed columns.
            return Err(Error::Unsupported(
                "the CUDA SGD kernel does not learn bias terms yet: run SGD with --backend cpu, or ALS or CCD++ (which learn them on CUDA)".into(),
            ));
        }
        let mut seconds = self.ensure_counts()?;
        let hls = &self.tensor.hls;
        let sp_units = hls.sparse().nnz().div_ceil(SGD_BATCH as usize) as u64;
        let tiles = hls.dense().map_or(0, |d| d.len()) as u64;
        let units = sp_units + HLS_COMPLETION_TILE_PARTS as u64 * tiles;
        if units == 0 {
            return Ok(self.stats(seconds, 0, 0));
        }
        if u32::try_from(units).is_err() {
            return Err(Error::Unsupported(format!(
                "{units} SGD work units (2^32 or more) in one epoch"
            )));
        }
        let (mul, add) = unit_permutation(units, step.seed, step.shuffle);
        self.clear_flag()?;
        let counts = self.counts.as_ref().expect("counted above");
        let mut p = self.params(0);
        p.counts = ptr(&counts.dev, &self.backend.stream);
        for (m, &o) in counts.offsets.iter().enumerate() {
            p.count_off[m] = o as u64;
        }
        p.sgd_units = units;
        p.sgd_batch = SGD_BATCH;
        p.perm_mul = mul;
        p.perm_add = add;
        p.learning_rate = step.learning_rate;
        p.lambda = step.lambda;
        // One warp per unit, at most the warps that are resident at once (8 blocks of 4
        // warps per SM): more would only add staleness.
        let blocks = (units as usize)
            .div_ceil(HLS_BLOCK_WARPS as usize)
            .clamp(1, self.backend.sm_count * 8) as u32;
        seconds += self.launch(entries::SGD, &p, blocks, 0)?;
        if self.flag_raised()? {
            return Err(Error::NonFinite(
                "an SGD step left inf or NaN in a factor".to_string(),
            ));
        }
        Ok(self.stats(seconds, 0, 4))
    }

    fn loss(&mut self) -> Result<f64> {
        self.cleared_acc(1)?;
        let mut p = self.params(0);
        p.acc = ptr(
            self.acc.as_ref().expect("cleared above"),
            &self.backend.stream,
        );
        let name = if self.rank.is_multiple_of(4) {
            entries::LOSS_V4
        } else {
            entries::LOSS_V1
        };
        self.launch(name, &p, self.walk_blocks(), 0)?;
        let mut loss = [0f64];
        self.copy_back(self.acc.as_ref().expect("cleared above"), 1, &mut loss)?;
        if !loss[0].is_finite() {
            return Err(Error::NonFinite(format!(
                "the completion loss is {}",
                loss[0]
            )));
        }
        Ok(loss[0])
    }
}
