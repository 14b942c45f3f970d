//! One call on the device: the factors the kernels need (from the device cache,
//! uploading only those that changed), the launch parameters, the launch(es) timed with
//! events, and the copy of the result straight into the caller's matrix; plus the device
//! copy-rate measurement.

use super::abi::{
    HLS_BLOCK_THREADS, HLS_BLOCK_WARPS, HLS_MAX_ORDER, HLS_OP_MTTKRP, HLS_OP_PHI, HLS_OP_TTMC,
    HLS_SPARSE_TTMC_MAX_RANK, HLS_TILE_ORDER, HLS_TTMC_MAX_RANK, HlsLaunchParams,
};
use super::cache::FactorCache;
use super::device::cuda_err;
use super::kernels;
use super::modules::Kernels;
use super::upload::DeviceHls;
use crate::engine::{CopyRate, Launch, PhiParams, RunStats};
use crate::error::{Error, Result};
use crate::hls::{HlsTensor, TILE_ORDER};
use crate::matrix::Matrix;
use crate::ops::Op;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaEvent, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};
use rayon::prelude::*;
use std::sync::Arc;

// SAFETY: HlsLaunchParams is a plain `repr(C)` struct of integers and floats generated
// from kernels/hls_abi.h, the exact layout the kernels take by value.
unsafe impl DeviceRepr for HlsLaunchParams {}

// The kernels are compiled for tiles of the order the builder makes.
const _: () = assert!(HLS_TILE_ORDER as usize == TILE_ORDER);

/// How the sparse kernel spreads an output row over a warp (see kernels/sparse.cu).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SparseLayout {
    /// log2 of the lanes that share one nonzero.
    pub lanes_log2: u32,
    /// Consecutive columns per vector (4: 16-byte loads and reductions; else 1).
    pub vec: u32,
    /// Vectors per lane in one pass.
    pub slots: u32,
    /// Columns one pass covers: lanes × slots × vec.
    pub cols_per_pass: u32,
}

/// The lane layout for an output of `out_cols` columns whose gathers may use 16-byte
/// vectors when `vec4` holds, with at most `max_slots` vectors per lane: as few lanes
/// per nonzero as cover the row (so small ranks keep every lane busy), more slots before
/// more passes.
pub fn sparse_layout(out_cols: u32, vec4: bool, max_slots: u32) -> SparseLayout {
    let vec = if vec4 { 4 } else { 1 };
    let vectors = out_cols.div_ceil(vec).max(1);
    let (lanes, slots) = if vectors <= 32 {
        (vectors.next_power_of_two(), 1)
    } else {
        (32, vectors.div_ceil(32).next_power_of_two().min(max_slots))
    };
    SparseLayout {
        lanes_log2: lanes.trailing_zeros(),
        vec,
        slots,
        cols_per_pass: lanes * slots * vec,
    }
}

/// Sparse nonzeros per warp (a multiple of 32): about two waves of the warps that fit
/// on the device at once, at least 64 and at most 4096 nonzeros.
pub fn sparse_batch(sp_nnz: usize, resident_warps: usize) -> u32 {
    let warps = (2 * resident_warps).max(1);
    let per_warp = sp_nnz.div_ceil(warps).clamp(64, 4096);
    per_warp.next_multiple_of(32) as u32
}

/// The grids of one call: `(kernel part, blocks)` in launch order, empty grids left out.
/// Fused: one grid of `n_tiles + sparse_blocks`, unless one part is empty, when the
/// other part's own kernel runs (the fused kernel reserves the dense part's shared
/// memory and registers for every block); sequential and concurrent: the dense tiles,
/// then the sparse batches, each kernel reading the same parameters.
pub fn grids(launch: Launch, n_tiles: usize, sparse_blocks: usize) -> Vec<(Part, usize)> {
    let all = match launch {
        Launch::Fused if n_tiles > 0 && sparse_blocks > 0 => {
            vec![(Part::Fused, n_tiles + sparse_blocks)]
        }
        _ => vec![(Part::Dense, n_tiles), (Part::Sparse, sparse_blocks)],
    };
    all.into_iter().filter(|&(_, b)| b > 0).collect()
}

/// Which kernel one grid of [`grids`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The fused kernel of the op.
    Fused,
    /// The op's dense-tiles-only kernel.
    Dense,
    /// The op's sparse-only kernel.
    Sparse,
}

/// What the backend keeps on the device between calls.
pub struct DeviceState {
    /// Device copies of recent factors, keyed by matrix version.
    pub factors: FactorCache<CudaSlice<f32>>,
    /// The output buffer, grown as needed and reused.
    pub out: Option<CudaSlice<f32>>,
    /// Page-locked host memory that large outputs are copied through: a device-to-host
    /// copy into pageable memory runs at a fraction of the link's rate.
    pub staging: Option<Pinned>,
}

/// Page-locked, cacheable host memory (cuMemHostAlloc with no flags) without cudarc's
/// per-buffer event: cudarc's pinned slices are write-combined (the CPU reads them at a
/// fraction of the memory's rate) and wait on a blocking-sync event before every read.
/// Only [`copy_back`] touches it, after synchronizing the stream that wrote it.
pub struct Pinned {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the buffer is plain host memory owned by this value; the backend's mutex
// serializes every use.
unsafe impl Send for Pinned {}

impl Pinned {
    fn new(len: usize) -> Result<Self> {
        // SAFETY: cuMemHostAlloc with flags 0 returns `len * 4` bytes of host memory
        // (aligned for any type) or an error; the context is current on this thread.
        let ptr = unsafe { cudarc::driver::result::malloc_host(len * 4, 0) }
            .map_err(|e| cuda_err("allocating page-locked memory", e))?;
        Ok(Pinned {
            ptr: ptr.cast(),
            len,
        })
    }

    fn as_mut_slice(&mut self) -> &mut [f32] {
        // SAFETY: `ptr` holds `len` floats for the lifetime of `self`, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from malloc_host and is freed once; every copy into it was
        // synchronized before `copy_back` returned.
        let _ = unsafe { cudarc::driver::result::free_host(self.ptr.cast()) };
    }
}

/// Outputs from this many floats (64 MB) up go through the page-locked staging buffer,
/// unless [`Device::staging`] is off (for measuring the two paths against each other). On
/// an H100 host the staged copy won from 30M floats up and lost or tied below 8M
/// (bench/results/2026-11-23-h100-second-run).
const STAGED_FLOATS: usize = 1 << 24;

impl DeviceState {
    /// Room for the factors of two calls of an order-8 tensor.
    pub fn new() -> Self {
        DeviceState {
            factors: FactorCache::new(2 * HLS_MAX_ORDER as usize),
            out: None,
            staging: None,
        }
    }
}

/// The device and its streams, as [`run`] needs them.
pub struct Device<'a> {
    /// The main stream: uploads, the fused or sparse launch, the copy back.
    pub stream: &'a Arc<CudaStream>,
    /// The second stream of [`Launch::Concurrent`] (the dense tiles).
    pub side: &'a Arc<CudaStream>,
    /// Multiprocessors of the device.
    pub sm_count: usize,
    /// The kernels.
    pub kernels: &'a Kernels,
    /// Whether large outputs come back through the staging buffer.
    pub staging: bool,
}

/// An event that records time (cudarc's default disables timing).
pub fn timing_event(stream: &Arc<CudaStream>) -> Result<CudaEvent> {
    stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| cuda_err("recording a timing event", e))
}

/// Seconds between two recorded events (waits for the second).
pub fn seconds_between(start: &CudaEvent, end: &CudaEvent) -> Result<f64> {
    let ms = start
        .elapsed_ms(end)
        .map_err(|e| cuda_err("reading a timing event", e))?;
    Ok(f64::from(ms) / 1e3)
}

/// Device pointer of a slice (the slice outlives the launch; the stream orders uses).
pub fn ptr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}

/// Checks what the kernels assume of a call before anything is launched.
fn check_call(
    op: Op,
    hls: &HlsTensor,
    mode: usize,
    factors: &[Matrix],
    out_cols: usize,
) -> Result<()> {
    let order = hls.order();
    if order > HLS_MAX_ORDER as usize {
        return Err(Error::Unsupported(format!(
            "the CUDA backend handles tensors of order ≤ {HLS_MAX_ORDER}, got {order}"
        )));
    }
    if u32::try_from(out_cols).is_err() {
        return Err(Error::InvalidRank(format!("{out_cols} output columns")));
    }
    if u32::try_from(hls.sparse().block_prefix().len()).is_err() {
        return Err(Error::Unsupported(
            "more than 2^32 sparse key blocks".into(),
        ));
    }
    let n_tiles = hls.dense().map_or(0, |d| d.len());
    if op == Op::Ttmc {
        for (m, f) in factors.iter().enumerate() {
            if m == mode {
                continue;
            }
            if n_tiles > 0 && f.cols() > HLS_TTMC_MAX_RANK as usize {
                return Err(Error::Unsupported(format!(
                    "dense TTMc tiles on the GPU take ranks ≤ {HLS_TTMC_MAX_RANK}; mode {m} has {}",
                    f.cols()
                )));
            }
            if f.cols() > HLS_SPARSE_TTMC_MAX_RANK as usize {
                return Err(Error::Unsupported(format!(
                    "TTMc on the GPU takes ranks ≤ {HLS_SPARSE_TTMC_MAX_RANK}; mode {m} has {}",
                    f.cols()
                )));
            }
        }
    }
    Ok(())
}

/// Runs `op` on `mode` of the uploaded tensor into `out` (shape checked), every entry
/// overwritten, with the given launch mode. Factors come from `state`'s cache, uploading
/// only those whose version it does not hold; the output buffer is reused, cleared on
/// the device and copied straight into `out`. Returns the device seconds of the
/// launch(es) alone and the bytes moved each way.
#[allow(clippy::too_many_arguments)]
pub fn run(
    dev: &Device<'_>,
    state: &mut DeviceState,
    launch: Launch,
    op: Op,
    hls: &HlsTensor,
    tensor: &DeviceHls,
    mode: usize,
    factors: &[Matrix],
    phi: PhiParams,
    out: &mut Matrix,
) -> Result<RunStats> {
    let stream = dev.stream;
    let order = hls.order();
    check_call(op, hls, mode, factors, out.cols())?;
    // Φ reads the target's own factor (B); the other ops never do.
    let reads = |m: usize| m != mode || op == Op::Phi;
    let out_cols = out.cols() as u32;
    let mut stats = RunStats::default();

    // Factors: find or upload every mode but the target.
    state.factors.begin_call();
    let mut slots = [usize::MAX; HLS_MAX_ORDER as usize];
    for (m, f) in factors.iter().enumerate() {
        if !reads(m) {
            continue;
        }
        let data = f.data();
        let entry = state.factors.ensure(
            f.version(),
            data.len().max(1),
            // SAFETY: the buffer is fully written by `fill` before any kernel reads it.
            |n| unsafe { stream.alloc::<f32>(n) }.map_err(|e| cuda_err("allocating a factor", e)),
            |buf| {
                if let Some(bad) = data.iter().find(|v| !v.is_finite()) {
                    return Err(Error::NonFinite(format!("factor of mode {m} holds {bad}")));
                }
                if data.is_empty() {
                    return Ok(());
                }
                stream
                    .memcpy_htod(data, buf)
                    .map_err(|e| cuda_err("uploading a factor", e))
            },
        )?;
        if entry.uploaded {
            stats.bytes_to_device += (data.len() * 4) as u64;
        }
        slots[m] = entry.slot;
    }

    // The output buffer: reused, grown when too small, cleared on the device.
    let n_out = out.data().len();
    if state.out.as_ref().is_none_or(|b| b.len() < n_out.max(1)) {
        state.out = None; // free the old one first
        // SAFETY: cleared below before any kernel adds into it.
        let buf = unsafe { stream.alloc::<f32>(n_out.max(1)) }
            .map_err(|e| cuda_err("allocating the output", e))?;
        state.out = Some(buf);
    }
    let out_dev = state.out.as_mut().expect("allocated above");
    stream
        .memset_zeros(&mut out_dev.slice_mut(0..n_out.max(1)))
        .map_err(|e| cuda_err("clearing the output", e))?;

    let mut factor_ptrs = [0u64; HLS_MAX_ORDER as usize];
    for m in 0..order {
        if reads(m) {
            factor_ptrs[m] = ptr(state.factors.buffer(slots[m]), stream);
        }
    }
    let ranks: Vec<usize> = factors.iter().map(Matrix::cols).collect();
    let out_ptr = ptr(out_dev, stream);
    // Φ's log term: one double the kernels add into atomically.
    let log_dev = if op == Op::Phi && phi.log_term {
        Some(
            stream
                .alloc_zeros::<f64>(1)
                .map_err(|e| cuda_err("allocating the log term", e))?,
        )
    } else {
        None
    };
    let seconds = launch_op_with(
        dev,
        launch,
        op,
        (hls, tensor),
        mode,
        &ranks,
        &factor_ptrs,
        (out_ptr, out_cols),
        (phi.eps, log_dev.as_ref().map_or(0, |b| ptr(b, stream))),
    )?;
    if let Some(b) = &log_dev {
        let mut v = [0f64];
        stream
            .memcpy_dtoh(b, &mut v)
            .map_err(|e| cuda_err("copying the log term back", e))?;
        stats.log_term = Some(v[0]);
    }
    copy_back(
        stream,
        &out_dev.slice(0..n_out),
        dev.staging.then_some(&mut state.staging),
        out.data_mut(),
    )?;
    stats.bytes_from_device = (n_out * 4) as u64;
    stats.kernel_seconds = Some(seconds);
    Ok(stats)
}

/// Fills the launch parameters of `op` on `mode` of the tensor (its host form and
/// device copy), factor `m` at device address `factors[m]` with `ranks[m]` columns and
/// the output, cleared, at `out.0` with `out.1` columns, and launches the kernels with
/// `launch` on `dev`'s streams; returns the device seconds between events around the
/// launches (waiting for them). Nothing is copied.
#[allow(clippy::too_many_arguments)]
pub fn launch_op(
    dev: &Device<'_>,
    launch: Launch,
    op: Op,
    hls: (&HlsTensor, &DeviceHls),
    mode: usize,
    ranks: &[usize],
    factors: &[u64; HLS_MAX_ORDER as usize],
    out: (u64, u32),
) -> Result<f64> {
    let eps = PhiParams::DEFAULT_EPS;
    launch_op_with(dev, launch, op, hls, mode, ranks, factors, out, (eps, 0))
}

/// Fills the tensor's part of `p`: the device addresses of both HLS parts, their key
/// layouts, the tile order, the extents, the counts, the order and the value scale (the op, the mode,
/// the factors and the output are the caller's).
pub fn tensor_params(
    p: &mut HlsLaunchParams,
    hls: &HlsTensor,
    tensor: &DeviceHls,
    stream: &CudaStream,
) {
    p.tile_keys = ptr(&tensor.tile_keys, stream);
    p.tile_bitmaps = ptr(&tensor.tile_bitmaps, stream);
    p.tile_offsets = ptr(&tensor.tile_offsets, stream);
    p.tile_values = ptr(&tensor.tile_values, stream);
    p.sp_keys = ptr(&tensor.sp_keys, stream);
    p.sp_values = ptr(&tensor.sp_values, stream);
    p.sp_block_prefix = ptr(&tensor.sp_block_prefix, stream);
    p.sp_block_offsets = ptr(&tensor.sp_block_offsets, stream);
    let layout = hls.sparse().layout();
    for m in 0..hls.order() {
        p.dims[m] = hls.dims()[m] as u32;
        p.sp_shift[m] = layout.shifts()[m];
        p.sp_mask[m] = layout.mask(m);
    }
    if let Some(d) = hls.dense() {
        for m in 0..TILE_ORDER {
            p.tile_shift[m] = d.layout().shifts()[m];
            p.tile_mask[m] = d.layout().mask(m) as u32;
        }
        p.tile_order = TILE_ORDER as u32;
    }
    p.n_tiles = hls.dense().map_or(0, |d| d.len()) as u64;
    p.sp_nnz = hls.sparse().nnz() as u64;
    p.sp_blocks = hls.sparse().block_prefix().len() as u64;
    p.order = hls.order() as u32;
    p.value_scale = hls.scale();
}

/// [`launch_op`] with Φ's floor `ε` and the device address of the double its log term
/// is added into (`phi.1`, 0: not wanted); for Φ, `factors[mode]` is `B`.
#[allow(clippy::too_many_arguments)]
fn launch_op_with(
    dev: &Device<'_>,
    launch: Launch,
    op: Op,
    (hls, tensor): (&HlsTensor, &DeviceHls),
    mode: usize,
    ranks: &[usize],
    factors: &[u64; HLS_MAX_ORDER as usize],
    (out, out_cols): (u64, u32),
    phi: (f32, u64),
) -> Result<f64> {
    let stream = dev.stream;
    let order = hls.order();
    let n_tiles = hls.dense().map_or(0, |d| d.len());
    let mut p = HlsLaunchParams::default();
    let mut stride = 1u64;
    let mut last = None;
    for m in (0..order).rev() {
        if m == mode {
            continue;
        }
        p.ranks[m] = ranks[m] as u32;
        p.col_stride[m] = stride as u32;
        stride *= ranks[m] as u64;
        last.get_or_insert(m);
        p.factor[m] = factors[m];
    }
    tensor_params(&mut p, hls, tensor, stream);
    p.out = out;
    let sp_nnz = hls.sparse().nnz();
    p.mode = mode as u32;
    p.out_cols = out_cols;
    let (op_name, sl) = match op {
        Op::Mttkrp => {
            p.op = HLS_OP_MTTKRP;
            (
                "mttkrp",
                sparse_layout(out_cols, out_cols.is_multiple_of(4), 4),
            )
        }
        Op::Completion => return Err(completion_refused()),
        Op::Ttmc => {
            p.op = HLS_OP_TTMC;
            let last = last.unwrap_or(mode);
            p.ttmc_last = last as u32;
            let vec4 = last != mode && ranks[last].is_multiple_of(4);
            ("ttmc", sparse_layout(out_cols, vec4, 2))
        }
        Op::Phi => {
            p.op = HLS_OP_PHI;
            p.factor[mode] = factors[mode];
            p.ranks[mode] = ranks[mode] as u32;
            p.phi_eps = phi.0;
            p.phi_log = phi.1;
            let sl = sparse_layout(out_cols, out_cols.is_multiple_of(4), 4);
            // μ needs every column of the row at once: one pass (kernels/phi.cu).
            if sl.cols_per_pass < out_cols {
                return Err(Error::Unsupported(format!(
                    "Φ on the GPU takes ranks ≤ {} ({}), got {out_cols}",
                    sl.cols_per_pass,
                    if sl.vec == 4 {
                        "a multiple of 4"
                    } else {
                        "not a multiple of 4: ≤ 128"
                    }
                )));
            }
            ("phi", sl)
        }
    };
    p.sp_lanes_log2 = sl.lanes_log2;
    p.sp_vec = sl.vec;
    p.sp_slots = sl.slots;
    p.sp_cols_per_pass = sl.cols_per_pass;

    let fused = dev
        .kernels
        .get(&kernels::entry_name(true, op_name, sl.vec, sl.slots))?;
    let sparse = dev
        .kernels
        .get(&kernels::entry_name(false, op_name, sl.vec, sl.slots))?;
    let dense = match op {
        Op::Mttkrp => dev.kernels.get(kernels::DENSE_MTTKRP)?,
        Op::Ttmc => dev.kernels.get(kernels::DENSE_TTMC)?,
        Op::Completion => return Err(completion_refused()),
        // Φ's dense entry has the sparse part's lane layout (kernels/phi.cu).
        Op::Phi => dev
            .kernels
            .get(&kernels::dense_phi_entry_name(sl.vec, sl.slots))?,
    };
    // Batch size from how many warps of the sparse batches' kernel fit at once.
    let batch_kernel = if launch == Launch::Fused {
        &fused
    } else {
        &sparse
    };
    let per_sm = batch_kernel
        .occupancy_max_active_blocks_per_multiprocessor(HLS_BLOCK_THREADS, 0, None)
        .map_err(|e| cuda_err("querying the occupancy", e))?
        .max(1) as usize;
    p.sp_batch = sparse_batch(sp_nnz, dev.sm_count * per_sm * HLS_BLOCK_WARPS as usize);
    let per_block = p.sp_batch as usize * HLS_BLOCK_WARPS as usize;
    let plan = grids(launch, n_tiles, sp_nnz.div_ceil(per_block));

    let start = timing_event(stream)?;
    let mut side_done = None;
    for (part, blocks) in plan {
        let (func, what, on) = match part {
            Part::Fused => (&fused, "the fused kernel", stream),
            Part::Dense if launch == Launch::Concurrent => {
                dev.side
                    .wait(&start)
                    .map_err(|e| cuda_err("ordering the second stream", e))?;
                (&dense, "the dense kernel", dev.side)
            }
            Part::Dense => (&dense, "the dense kernel", stream),
            Part::Sparse => (&sparse, "the sparse kernel", stream),
        };
        let grid = u32::try_from(blocks)
            .map_err(|_| Error::Unsupported(format!("{blocks} blocks in one launch")))?;
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (HLS_BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = on.launch_builder(func);
        builder.arg(&p);
        // SAFETY: every pointer in `p` refers to a live device buffer of this context
        // (the tensor's parts, the factors and the output, which the caller keeps alive
        // until it has synchronized after this call) with the extents the counts in `p`
        // describe; the grid is what the kernel expects (`grids`): n_tiles dense blocks
        // plus the sparse batches for the fused kernel, n_tiles for the dense one, the
        // sparse batches for the sparse one. The second stream starts after the main
        // stream's earlier work (it waits on `start`), and the main stream waits for it
        // before anything after this call.
        unsafe { builder.launch(cfg) }.map_err(|e| cuda_err(&format!("launching {what}"), e))?;
        if std::ptr::eq(on, dev.side) {
            side_done = Some(
                dev.side
                    .record_event(None)
                    .map_err(|e| cuda_err("recording the second stream", e))?,
            );
        }
    }
    if let Some(done) = &side_done {
        stream
            .wait(done)
            .map_err(|e| cuda_err("joining the second stream", e))?;
    }
    let end = timing_event(stream)?;
    stream
        .context()
        .check_err()
        .map_err(|e| cuda_err("after the launches", e))?;
    seconds_between(&start, &end)
}

/// What a launch of [`Op::Completion`] through [`launch_op`] gets: its kernels run in a
/// completion session.
fn completion_refused() -> Error {
    Error::Unsupported("the completion kernels run in a completion session".into())
}

/// Copies the device output into `dst` and waits: small outputs directly, large ones
/// through the page-locked `staging` buffer (grown as needed; `None`: staging is off)
/// and then, in parallel, into `dst`.
fn copy_back(
    stream: &Arc<CudaStream>,
    src: &cudarc::driver::CudaView<'_, f32>,
    staging: Option<&mut Option<Pinned>>,
    dst: &mut [f32],
) -> Result<()> {
    let n = dst.len();
    let Some(staging) = staging.filter(|_| n >= STAGED_FLOATS) else {
        stream
            .memcpy_dtoh(src, dst)
            .map_err(|e| cuda_err("copying the result back", e))?;
        return stream
            .synchronize()
            .map_err(|e| cuda_err("waiting for the result", e));
    };
    if staging.as_ref().is_none_or(|s| s.len < n) {
        *staging = None; // release the old one first
        *staging = Some(Pinned::new(n)?);
    }
    let pinned = staging.as_mut().expect("allocated above");
    let host = &mut pinned.as_mut_slice()[..n];
    stream
        .memcpy_dtoh(src, host)
        .map_err(|e| cuda_err("copying the result back", e))?;
    stream
        .synchronize()
        .map_err(|e| cuda_err("waiting for the result", e))?;
    // One core copies a few MB faster than waking the pool; beyond that, all of them.
    const CHUNK: usize = 1 << 18;
    if n <= 4 * CHUNK {
        dst.copy_from_slice(host);
    } else {
        dst.par_chunks_mut(CHUNK)
            .zip(host.par_chunks(CHUNK))
            .for_each(|(d, s)| d.copy_from_slice(s));
    }
    Ok(())
}

/// Measures the device-to-device copy rate: copies `bytes` (whole 4-byte words, at most
/// half the free device memory, at least one word) between two device buffers once
/// untimed and `reps` times timed with events on `stream`, and reports the median
/// copy's bytes read plus written per second.
pub fn copy_rate(stream: &Arc<CudaStream>, bytes: usize, reps: usize) -> Result<CopyRate> {
    if reps == 0 {
        return Err(Error::InvalidOption(
            "the copy rate needs at least 1 repetition".into(),
        ));
    }
    let (free, _total) = stream
        .context()
        .mem_get_info()
        .map_err(|e| cuda_err("querying free device memory", e))?;
    let words = (bytes.min(free / 2) / 4).max(1);
    let src = stream
        .alloc_zeros::<u32>(words)
        .map_err(|e| cuda_err("allocating the copy-rate source", e))?;
    let mut dst = stream
        .alloc_zeros::<u32>(words)
        .map_err(|e| cuda_err("allocating the copy-rate destination", e))?;
    let copy = |dst: &mut CudaSlice<u32>| {
        stream
            .memcpy_dtod(&src, dst)
            .map_err(|e| cuda_err("copying within the device", e))
    };
    copy(&mut dst)?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = timing_event(stream)?;
        copy(&mut dst)?;
        let end = timing_event(stream)?;
        times.push(seconds_between(&start, &end)?);
    }
    let median_s = crate::engine::median(&times);
    let bytes = (words * 4) as u64;
    Ok(CopyRate {
        bytes,
        reps,
        median_s,
        bytes_per_s: if median_s > 0.0 {
            2.0 * bytes as f64 / median_s
        } else {
            0.0
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_and_concurrent_launch_dense_then_sparse_and_skip_empty_grids() {
        assert_eq!(grids(Launch::Fused, 3, 5), vec![(Part::Fused, 8)]);
        // A fused call with one empty part runs the other part's own kernel.
        assert_eq!(grids(Launch::Fused, 0, 5), vec![(Part::Sparse, 5)]);
        assert_eq!(grids(Launch::Fused, 3, 0), vec![(Part::Dense, 3)]);
        for l in [Launch::Sequential, Launch::Concurrent] {
            assert_eq!(grids(l, 3, 5), vec![(Part::Dense, 3), (Part::Sparse, 5)]);
            assert_eq!(grids(l, 0, 5), vec![(Part::Sparse, 5)]);
            assert_eq!(grids(l, 3, 0), vec![(Part::Dense, 3)]);
        }
        assert!(grids(Launch::Fused, 0, 0).is_empty());
    }

    #[test]
    fn small_ranks_share_a_warp_and_wide_rows_take_slots_then_passes() {
        let l = |c, v, s| sparse_layout(c, v, s);
        // Rank 32 with 16-byte vectors: 8 lanes per nonzero, 4 nonzeros per step.
        assert_eq!(
            l(32, true, 4),
            SparseLayout {
                lanes_log2: 3,
                vec: 4,
                slots: 1,
                cols_per_pass: 32
            }
        );
        // Rank 16: 4 lanes; rank 8: 2 lanes; rank 1: one lane per nonzero.
        assert_eq!(l(16, true, 4).lanes_log2, 2);
        assert_eq!(l(8, true, 4).lanes_log2, 1);
        assert_eq!(
            l(1, false, 4),
            SparseLayout {
                lanes_log2: 0,
                vec: 1,
                slots: 1,
                cols_per_pass: 1
            }
        );
        // Rank 10 (not a multiple of 4): scalar, 16 lanes covering 16 >= 10 columns.
        assert_eq!(
            l(10, false, 4),
            SparseLayout {
                lanes_log2: 4,
                vec: 1,
                slots: 1,
                cols_per_pass: 16
            }
        );
        // Rank 128: one vector per lane over the whole warp; 256: two slots.
        assert_eq!(l(128, true, 4).cols_per_pass, 128);
        assert_eq!(
            l(256, true, 4),
            SparseLayout {
                lanes_log2: 5,
                vec: 4,
                slots: 2,
                cols_per_pass: 256
            }
        );
        // TTMc at 4096 columns with at most 2 slots: 256 per pass, 16 passes.
        let t = l(4096, true, 2);
        assert_eq!((t.slots, t.cols_per_pass), (2, 256));
        // Every layout covers the row in whole passes without a lane past the columns
        // of a single pass going unused by more than one rounding.
        for cols in 1..600 {
            for vec4 in [false, true] {
                for max in [2, 4] {
                    let s = l(cols, vec4, max);
                    assert!(s.cols_per_pass >= 1 && s.slots <= max);
                    assert_eq!(s.cols_per_pass, (1 << s.lanes_log2) * s.slots * s.vec);
                    let passes = cols.div_ceil(s.cols_per_pass);
                    assert!(passes >= 1);
                    if cols <= 32 * s.vec {
                        assert_eq!(passes, 1, "{cols} columns fit one pass");
                    }
                }
            }
        }
    }

    #[test]
    fn batches_are_whole_chunks_sized_to_the_device() {
        assert_eq!(sparse_batch(10, 8448) % 32, 0);
        assert_eq!(sparse_batch(10, 8448), 64);
        assert_eq!(sparse_batch(2_000_000, 132 * 48), 160);
        assert_eq!(sparse_batch(50_000_000, 132 * 48), 3968);
        assert_eq!(sparse_batch(usize::MAX / 2, 1), 4096);
    }
}
