//! Filling the launch parameters and running the launch(es) of one call, timed with
//! device events; the device copy-rate measurement.

use super::abi::{
    HLS_BLOCK_THREADS, HLS_BLOCK_WARPS, HLS_MAX_ORDER, HLS_OP_MTTKRP, HLS_OP_TTMC,
    HLS_TTMC_MAX_RANK, HlsLaunchParams,
};
use super::device::cuda_err;
use super::upload::{DeviceHls, half_factor, upload};
use crate::engine::{CopyRate, Launch};
use crate::error::{Error, Result};
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use crate::ops::Op;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig,
    PushKernelArg,
};
use std::sync::Arc;

// SAFETY: HlsLaunchParams is a plain `repr(C)` struct of integers and floats generated
// from kernels/hls_abi.h, the exact layout the kernels take by value.
unsafe impl DeviceRepr for HlsLaunchParams {}

/// Sparse nonzeros per warp: enough to amortize a warp's start, small enough that a
/// tensor fills the GPU with blocks.
pub fn sparse_batch(sp_nnz: usize) -> u32 {
    const TARGET_WARPS: usize = 132 * 64; // about 64 warps per SM on the largest parts
    (sp_nnz.div_ceil(TARGET_WARPS)).clamp(32, 1024) as u32
}

/// The entry points of the kernel module.
pub struct Kernels {
    /// Fused MTTKRP: dense tiles, then sparse batches, in one grid.
    pub fused_mttkrp: CudaFunction,
    /// Fused TTMc.
    pub fused_ttmc: CudaFunction,
    /// MTTKRP of the dense tiles only (one block per tile).
    pub dense_mttkrp: CudaFunction,
    /// TTMc of the dense tiles only.
    pub dense_ttmc: CudaFunction,
    /// The sparse batches only, either op.
    pub sparse: CudaFunction,
}

/// The grids of one call: `(kernel, blocks)` in launch order, empty grids left out.
/// Fused: one grid of `n_tiles + sparse_blocks`; sequential: the dense tiles, then the
/// sparse batches, each kernel reading the same parameters.
pub fn grids(launch: Launch, n_tiles: usize, sparse_blocks: usize) -> Vec<(Part, usize)> {
    let all = match launch {
        Launch::Fused => vec![(Part::Fused, n_tiles + sparse_blocks)],
        Launch::Sequential => vec![(Part::Dense, n_tiles), (Part::Sparse, sparse_blocks)],
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
    /// The sparse-only kernel.
    Sparse,
}

/// An event that records time (cudarc's default disables timing).
fn timing_event(stream: &Arc<CudaStream>) -> Result<CudaEvent> {
    stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| cuda_err("recording a timing event", e))
}

/// Seconds between two recorded events (waits for the second).
fn seconds_between(start: &CudaEvent, end: &CudaEvent) -> Result<f64> {
    let ms = start
        .elapsed_ms(end)
        .map_err(|e| cuda_err("reading a timing event", e))?;
    Ok(f64::from(ms) / 1e3)
}

/// Device pointer of a slice (the slice outlives the launch; the stream orders uses).
fn ptr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}

/// Device buffers of the factors for one run (kept alive until the launch is done).
struct FactorBuffers {
    half: Vec<Option<CudaSlice<u16>>>,
    scale: Vec<Option<CudaSlice<f32>>>,
    full: Vec<Option<CudaSlice<f32>>>,
}

/// Runs `op` on `mode` of the uploaded tensor into `out` (zeroed, shape checked) with
/// the given launch mode; returns the device seconds of the launch(es) alone, between
/// events recorded on `stream` just before the first and just after the last.
#[allow(clippy::too_many_arguments)]
pub fn run(
    stream: &Arc<CudaStream>,
    kernels: &Kernels,
    launch: Launch,
    op: Op,
    hls: &HlsTensor,
    dev: &DeviceHls,
    mode: usize,
    factors: &[Matrix],
    out: &mut Matrix,
) -> Result<f64> {
    let order = hls.order();
    if order > HLS_MAX_ORDER as usize {
        return Err(Error::Unsupported(format!(
            "the CUDA backend handles tensors of order ≤ {HLS_MAX_ORDER}, got {order}"
        )));
    }
    let out_cols = u32::try_from(out.cols())
        .map_err(|_| Error::InvalidRank(format!("{} output columns", out.cols())))?;
    let n_tiles = hls.dense().map_or(0, |d| d.len());
    if op == Op::Ttmc && n_tiles > 0 {
        for (m, f) in factors.iter().enumerate() {
            if m != mode && f.cols() > HLS_TTMC_MAX_RANK as usize {
                return Err(Error::Unsupported(format!(
                    "dense TTMc tiles on the GPU take ranks ≤ {HLS_TTMC_MAX_RANK}; mode {m} has {}",
                    f.cols()
                )));
            }
        }
    }

    let mut p = HlsLaunchParams::default();
    let mut bufs = FactorBuffers {
        half: Vec::new(),
        scale: Vec::new(),
        full: Vec::new(),
    };
    let mut stride = 1u64;
    for m in (0..order).rev() {
        if m == mode {
            bufs.half.push(None);
            bufs.scale.push(None);
            bufs.full.push(None);
            continue;
        }
        let f = &factors[m];
        p.ranks[m] = f.cols() as u32;
        p.col_stride[m] = stride as u32;
        stride *= f.cols() as u64;
        if n_tiles > 0 {
            let h = half_factor(f, m)?;
            bufs.half
                .push(Some(upload(stream, &h.half, "fp16 factor")?));
            bufs.scale
                .push(Some(upload(stream, &h.scale, "factor scales")?));
        } else {
            bufs.half.push(None);
            bufs.scale.push(None);
        }
        if let Some(bad) = f.data().iter().find(|v| !v.is_finite()) {
            return Err(Error::NonFinite(format!("factor of mode {m} holds {bad}")));
        }
        bufs.full.push(Some(upload(stream, f.data(), "factor")?));
    }
    // The buffers were pushed from the last mode down.
    bufs.half.reverse();
    bufs.scale.reverse();
    bufs.full.reverse();
    let out_dev = stream
        .alloc_zeros::<f32>(out.data().len().max(1))
        .map_err(|e| cuda_err("allocating the output", e))?;

    p.tile_keys = ptr(&dev.tile_keys, stream);
    p.tile_bitmaps = ptr(&dev.tile_bitmaps, stream);
    p.tile_offsets = ptr(&dev.tile_offsets, stream);
    p.tile_values = ptr(&dev.tile_values, stream);
    p.sp_keys = ptr(&dev.sp_keys, stream);
    p.sp_values = ptr(&dev.sp_values, stream);
    p.sp_block_prefix = ptr(&dev.sp_block_prefix, stream);
    p.sp_block_offsets = ptr(&dev.sp_block_offsets, stream);
    for m in 0..order {
        p.dims[m] = hls.dims()[m] as u32;
        if let Some(b) = &bufs.half[m] {
            p.factor_h[m] = ptr(b, stream);
        }
        if let Some(b) = &bufs.scale[m] {
            p.col_scale[m] = ptr(b, stream);
        }
        if let Some(b) = &bufs.full[m] {
            p.factor_f[m] = ptr(b, stream);
        }
        let layout = hls.sparse().layout();
        p.sp_shift[m] = layout.shifts()[m];
        p.sp_mask[m] = layout.mask(m);
    }
    if let Some(d) = hls.dense() {
        for m in 0..3 {
            p.tile_shift[m] = d.layout().shifts()[m];
            p.tile_mask[m] = d.layout().mask(m) as u32;
        }
    }
    p.out = ptr(&out_dev, stream);
    let sp_nnz = hls.sparse().nnz();
    p.n_tiles = n_tiles as u64;
    p.sp_nnz = sp_nnz as u64;
    p.sp_blocks = hls.sparse().block_prefix().len() as u64;
    p.sp_batch = sparse_batch(sp_nnz);
    p.order = order as u32;
    p.mode = mode as u32;
    p.op = match op {
        Op::Mttkrp => HLS_OP_MTTKRP,
        Op::Ttmc => HLS_OP_TTMC,
    };
    p.out_cols = out_cols;
    p.value_scale = hls.scale();

    let per_block = p.sp_batch as usize * HLS_BLOCK_WARPS as usize;
    let plan = grids(launch, n_tiles, sp_nnz.div_ceil(per_block));
    let start = timing_event(stream)?;
    for (part, blocks) in plan {
        let (func, what) = match (part, op) {
            (Part::Fused, Op::Mttkrp) => (&kernels.fused_mttkrp, "the fused kernel"),
            (Part::Fused, Op::Ttmc) => (&kernels.fused_ttmc, "the fused kernel"),
            (Part::Dense, Op::Mttkrp) => (&kernels.dense_mttkrp, "the dense kernel"),
            (Part::Dense, Op::Ttmc) => (&kernels.dense_ttmc, "the dense kernel"),
            (Part::Sparse, _) => (&kernels.sparse, "the sparse kernel"),
        };
        let grid = u32::try_from(blocks)
            .map_err(|_| Error::Unsupported(format!("{blocks} blocks in one launch")))?;
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (HLS_BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = stream.launch_builder(func);
        builder.arg(&p);
        // SAFETY: every pointer in `p` refers to a live device buffer of this context
        // (the tensor's parts, `bufs` and `out_dev`, all alive until the copy below has
        // synchronized) with the extents the counts in `p` describe; the grid is what
        // the kernel expects (`grids`): n_tiles dense blocks plus the sparse batches for
        // the fused kernel, n_tiles for the dense one (blocks beyond n_tiles would
        // return at once), the sparse batches for the sparse one.
        unsafe { builder.launch(cfg) }.map_err(|e| cuda_err(&format!("launching {what}"), e))?;
        stream
            .context()
            .check_err()
            .map_err(|e| cuda_err(&format!("after {what}"), e))?;
    }
    let end = timing_event(stream)?;
    let host = stream
        .clone_dtoh(&out_dev)
        .map_err(|e| cuda_err("copying the result back", e))?;
    let n = out.data().len();
    out.data_mut().copy_from_slice(&host[..n]);
    let seconds = seconds_between(&start, &end)?;
    drop(bufs);
    Ok(seconds)
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
    let median_s = crate::timing::median(&times);
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
    fn sequential_launches_dense_then_sparse_and_skip_empty_grids() {
        assert_eq!(grids(Launch::Fused, 3, 5), vec![(Part::Fused, 8)]);
        assert_eq!(
            grids(Launch::Sequential, 3, 5),
            vec![(Part::Dense, 3), (Part::Sparse, 5)]
        );
        assert_eq!(grids(Launch::Sequential, 0, 5), vec![(Part::Sparse, 5)]);
        assert_eq!(grids(Launch::Sequential, 3, 0), vec![(Part::Dense, 3)]);
        assert!(grids(Launch::Fused, 0, 0).is_empty());
    }
}
