//! One op's launch on the device: the launch parameters ([`HlsLaunchParams`]) of the
//! tensor, the factors and the output, the entry points of the op's family for the
//! chosen lane layout, and the grid(s) launched and timed with events.

use super::abi::{
    HLS_BLOCK_THREADS, HLS_BLOCK_WARPS, HLS_MAX_ORDER, HLS_OP_MTTKRP, HLS_OP_PHI, HLS_OP_TTMC,
    HLS_SPARSE_TTMC_MAX_RANK, HLS_TILE_ORDER, HLS_TTMC_MAX_RANK, HlsLaunchParams,
};
use super::device::cuda_err;
use super::grid::{Part, grids, sparse_batch, sparse_layout};
use super::kernels;
use super::launch::Device;
use super::timing::{seconds_between, timing_event};
use super::upload::DeviceHls;
use crate::engine::{Launch, PhiParams};
use crate::error::{Error, Result};
use crate::hls::{HlsTensor, TILE_ORDER};
use crate::matrix::Matrix;
use crate::ops::Op;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg};

// SAFETY: HlsLaunchParams is a plain `repr(C)` struct of integers and floats generated
// from kernels/hls_abi.h, the exact layout the kernels take by value.
unsafe impl DeviceRepr for HlsLaunchParams {}

// The kernels are compiled for tiles of the order the builder makes.
const _: () = assert!(HLS_TILE_ORDER as usize == TILE_ORDER);

/// Device pointer of a slice (the slice outlives the launch; the stream orders uses).
pub fn ptr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}

/// Checks what the kernels assume of a call before anything is launched.
pub(super) fn check_call(
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
    p.value_type = match hls.value_type() {
        crate::hls::ValueType::F16 => super::abi::HLS_VALUES_F16,
        crate::hls::ValueType::F32 => super::abi::HLS_VALUES_F32,
    };
}

/// [`launch_op`] with Φ's floor `ε` and the device address of the double its log term
/// is added into (`phi.1`, 0: not wanted); for Φ, `factors[mode]` is `B`.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_op_with(
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

    // The entries for the tensor's value type (kernels/hls_common.cuh).
    let values = hls.value_type();
    let fused = dev.kernels.get(&kernels::entry_name(
        true, op_name, sl.vec, sl.slots, values,
    ))?;
    let sparse = dev.kernels.get(&kernels::entry_name(
        false, op_name, sl.vec, sl.slots, values,
    ))?;
    let dense = match op {
        Op::Mttkrp => dev
            .kernels
            .get(&kernels::dense_entry_name(kernels::DENSE_MTTKRP, values))?,
        Op::Ttmc => dev
            .kernels
            .get(&kernels::dense_entry_name(kernels::DENSE_TTMC, values))?,
        Op::Completion => return Err(completion_refused()),
        // Φ's dense entry has the sparse part's lane layout (kernels/phi.cu).
        Op::Phi => dev
            .kernels
            .get(&kernels::dense_phi_entry_name(sl.vec, sl.slots, values))?,
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
