//! One call on the device: the factors the kernels need (from the device cache,
//! uploading only those that changed), the output buffer, the op's launch
//! ([`launch_op`](super::launch_op)), and the copy of the result straight into the
//! caller's matrix, through page-locked memory when it is large.

use super::abi::HLS_MAX_ORDER;
use super::cache::FactorCache;
use super::device::cuda_err;
use super::modules::Kernels;
use super::upload::DeviceHls;
use crate::engine::{RunOptions, RunStats};
use crate::error::{Error, Result};
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use crate::ops::Op;
use cudarc::driver::{CudaSlice, CudaStream};
use rayon::prelude::*;
use std::sync::Arc;

use super::launch_op::{check_call, launch_op_with};
pub use super::launch_op::{launch_op, ptr, tensor_params};
pub use super::timing::{copy_rate, seconds_between, timing_event};

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
    /// The second stream of [`Launch::Concurrent`](crate::engine::Launch::Concurrent) (the dense tiles).
    pub side: &'a Arc<CudaStream>,
    /// Multiprocessors of the device.
    pub sm_count: usize,
    /// The kernels.
    pub kernels: &'a Kernels,
    /// Whether large outputs come back through the staging buffer.
    pub staging: bool,
}

/// Runs `op` on `mode` of the uploaded tensor into `out` (shape checked), every entry
/// overwritten, with the launch mode of `opts`. Factors come from `state`'s cache,
/// uploading only those whose key in the caller's versions (`opts.versions`) it does not
/// hold, and every one where the caller keeps none; the output buffer is reused, cleared on
/// the device and copied straight into `out`. Returns the device seconds of the
/// launch(es) alone and the bytes moved each way.
#[allow(clippy::too_many_arguments)]
pub fn run(
    dev: &Device<'_>,
    state: &mut DeviceState,
    opts: &RunOptions<'_>,
    op: Op,
    hls: &HlsTensor,
    tensor: &DeviceHls,
    mode: usize,
    factors: &[Matrix],
    out: &mut Matrix,
) -> Result<RunStats> {
    let (launch, phi, versions) = (opts.launch, opts.phi, opts.versions);
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
            versions.map(|v| v.key(m)),
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
