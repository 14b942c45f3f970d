//! Filling the launch parameters and running one fused launch.

use super::abi::{
    HLS_BLOCK_THREADS, HLS_BLOCK_WARPS, HLS_MAX_ORDER, HLS_OP_MTTKRP, HLS_OP_TTMC,
    HLS_TTMC_MAX_RANK, HlsLaunchParams,
};
use super::device::cuda_err;
use super::upload::{DeviceHls, half_factor, upload};
use crate::error::{Error, Result};
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use crate::ops::Op;
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
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

/// Runs `op` on `mode` of the uploaded tensor into `out` (zeroed, shape checked).
#[allow(clippy::too_many_arguments)]
pub fn run(
    stream: &Arc<CudaStream>,
    func: &CudaFunction,
    op: Op,
    hls: &HlsTensor,
    dev: &DeviceHls,
    mode: usize,
    factors: &[Matrix],
    out: &mut Matrix,
) -> Result<()> {
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
    let blocks = n_tiles + sp_nnz.div_ceil(per_block);
    if blocks > 0 {
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
        // synchronized) with the extents the counts in `p` describe; the grid covers
        // exactly n_tiles dense blocks plus the sparse batches, as the kernel expects.
        unsafe { builder.launch(cfg) }.map_err(|e| cuda_err("launching the fused kernel", e))?;
        stream
            .context()
            .check_err()
            .map_err(|e| cuda_err("after the fused kernel", e))?;
    }
    let host = stream
        .clone_dtoh(&out_dev)
        .map_err(|e| cuda_err("copying the result back", e))?;
    let n = out.data().len();
    out.data_mut().copy_from_slice(&host[..n]);
    drop(bufs);
    Ok(())
}
