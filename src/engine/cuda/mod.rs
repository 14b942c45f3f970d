//! The CUDA backend: dense HLS tiles on tensor cores and the sparse remainder on CUDA
//! cores, in one fused launch per call (kernels in `kernels/`: the dense tiles' blocks first,
//! then the sparse batches'), or as two launches, one after the other or on two streams
//! at once ([`Launch`]).
//!
//! Factors stay on the device between calls: each call uploads only the factors whose
//! key in the caller's [`crate::engine::FactorVersions`] the device does not hold (in
//! CP-ALS and Tucker-HOOI, the one the previous step updated; every one where the
//! caller keeps no versions), clears a reused output buffer on the device and
//! copies the result straight into the caller's matrix. Every call times its launch(es)
//! with device events and counts the bytes it moved ([`RunStats`]);
//! [`Backend::copy_rate`](super::Backend::copy_rate) measures the device-to-device copy rate that effective
//! bandwidth is compared with.
//!
//! Always compiled; whether a device is usable is found out at run time
//! ([`CudaBackend::new`] probes the driver once per process and never panics).
//!
//! - `device`: probing and opening the device;
//! - `family`: the kernel families, one `.cu` entry file each (shared with build.rs);
//! - `kernels`: the device code per family (embedded by build.rs or compiled by NVRTC
//!   at run time, where [`KernelSearch`] says) and the entry points' names;
//! - `modules`: each family loaded into its own module on first use;
//! - `nvrtc_dl`: NVRTC loaded by file name (shared with build.rs);
//! - `upload`: device copies of HLS tensors;
//! - `cache`: which factors stay on the device;
//! - `cp`: CP-ALS with the factors in device memory;
//! - `completion`: the tensor-completion session (ALS, CCD++ and SGD kernels) with the
//!   factors and the residual in device memory;
//! - `launch`: one call: factors, output buffer and the copy back;
//! - `launch_op`: launch parameters ([`abi::HlsLaunchParams`]) and the launches of an op;
//! - `grid`: lane layouts, batch sizes and the grids of a call;
//! - `timing`: timing events and the copy-rate measurement.

#[rustfmt::skip]
pub mod abi;
mod cache;
mod completion;
mod cp;
mod device;
pub use device::{count as device_count, for_local_rank as device_for_local_rank};
pub mod family;
mod gcp;
mod grid;
pub mod kernels;
mod launch;
mod launch_op;
mod modules;
pub mod nvrtc_dl;
#[cfg(test)]
mod staging_model;
mod timing;
mod upload;

use super::{CompletionSession, CopyRate, CpSession, CudaOptions, Launch, RunOptions, RunStats};
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use crate::ops::Op;
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaStream};
use device::cuda_err;
use std::sync::{Arc, Mutex};

pub use kernels::{BUILD as KERNEL_BUILD, KernelSearch};

/// The CUDA backend on one device.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    side: Arc<CudaStream>,
    name: String,
    capability: (i32, i32),
    sm_count: usize,
    kernels: modules::Kernels,
    state: Mutex<launch::DeviceState>,
    opts: CudaOptions,
}

impl CudaBackend {
    /// Opens device `opts.ordinal`; each kernel family is compiled (when not embedded,
    /// where `opts.kernels` says) and loaded on its first use. [`crate::Error::NoDevice`]
    /// when there is no driver, no such device or its compute capability is below 8.0.
    /// A family that cannot be compiled or loaded ([`crate::Error::Nvrtc`] /
    /// [`crate::Error::Cuda`], naming it) fails the calls that need it, and only those;
    /// the core family (MTTKRP and TTMc) is loaded here, so that a backend that opens
    /// can run them.
    pub fn new(opts: CudaOptions) -> Result<Self> {
        let dev = device::open(opts.ordinal)?;
        let kernels = modules::Kernels::new(dev.ctx.clone(), dev.capability, opts.kernels.clone());
        kernels.load(kernels::Family::Core)?;
        let sm_count = dev
            .ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| cuda_err("reading the multiprocessor count", e))?
            .max(1) as usize;
        // SAFETY: every buffer of this backend is used on `stream`, except during a
        // concurrent launch, where `side` starts after an event recorded on `stream`
        // behind all uploads and `stream` waits for `side` before anything is copied
        // back or freed (launch::run); no buffer is written by both streams at once
        // other than the output, whose additions are atomic.
        unsafe { dev.ctx.disable_event_tracking() };
        let stream = dev
            .ctx
            .new_stream()
            .map_err(|e| cuda_err("creating a stream", e))?;
        let side = dev
            .ctx
            .new_stream()
            .map_err(|e| cuda_err("creating a second stream", e))?;
        Ok(CudaBackend {
            stream,
            side,
            kernels,
            state: Mutex::new(launch::DeviceState::new()),
            sm_count,
            ctx: dev.ctx,
            name: dev.name,
            capability: dev.capability,
            opts,
        })
    }

    /// The options it was made with.
    pub fn options(&self) -> &CudaOptions {
        &self.opts
    }

    /// The device and its streams, as the launches need them.
    fn device(&self) -> launch::Device<'_> {
        launch::Device {
            stream: &self.stream,
            side: &self.side,
            sm_count: self.sm_count,
            kernels: &self.kernels,
            staging: self.opts.staging,
        }
    }

    /// Device name as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability (major, minor).
    pub fn capability(&self) -> (i32, i32) {
        self.capability
    }

    /// Where each kernel family's device code came from (an embedded image or run-time
    /// NVRTC), or that it is not loaded yet, or why it failed.
    pub fn kernel_source(&self) -> String {
        self.kernels.sources()
    }
}

/// A tensor held in device memory by the CUDA backend, with the host HLS form it was
/// uploaded from (which the engine's passes over the tensor walk on the host).
pub struct CudaTensor {
    hls: Arc<HlsTensor>,
    dev: upload::DeviceHls,
}

impl CudaTensor {
    /// The host-side HLS form it was uploaded from.
    pub fn hls(&self) -> &HlsTensor {
        &self.hls
    }
    /// Bytes of device memory it holds.
    pub fn bytes(&self) -> usize {
        self.dev.bytes
    }
}

impl CudaBackend {
    /// The device in words: name, compute capability, multiprocessors, ordinal and
    /// where the kernels came from.
    pub fn describe(&self) -> String {
        format!(
            "CUDA {} (sm_{}{}, {} SMs, device {}; kernels: {})",
            self.name,
            self.capability.0,
            self.capability.1,
            self.sm_count,
            self.ctx.ordinal(),
            self.kernels.sources()
        )
    }
    /// The identifier tuning profiles are matched against: name and capability.
    pub fn device_id(&self) -> String {
        format!(
            "cuda:{}:sm_{}{}",
            self.name, self.capability.0, self.capability.1
        )
    }
    /// Uploads an HLS tensor.
    pub fn prepare(&self, hls: Arc<HlsTensor>) -> Result<CudaTensor> {
        let dev = upload::upload_hls(&self.stream, &hls)?;
        Ok(CudaTensor { hls, dev })
    }
    /// Runs `op` (see [`super::Backend::run`]); the kernels scale each 16-row tile
    /// column themselves.
    pub fn run(
        &self,
        op: Op,
        t: &CudaTensor,
        mode: usize,
        factors: &[Matrix],
        opts: &RunOptions<'_>,
        out: &mut Matrix,
    ) -> Result<RunStats> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        launch::run(
            &self.device(),
            &mut state,
            opts,
            op,
            &t.hls,
            &t.dev,
            mode,
            factors,
            out,
        )
    }
    /// Waits for the work queued on the stream.
    pub fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronizing the stream", e))
    }
    /// A CP-ALS session with the factors in device memory; `None` when the options
    /// turn it off or the rank or order is outside what the update kernel handles.
    pub(crate) fn cp_session<'a>(
        &'a self,
        t: &'a CudaTensor,
        factors: &[Matrix],
        launch: Launch,
    ) -> Result<Option<Box<dyn CpSession + 'a>>> {
        if !self.opts.cp_session {
            return Ok(None);
        }
        Ok(cp::CudaCp::new(self, t, launch, factors)?
            .map(|s| Box::new(s) as Box<dyn CpSession + 'a>))
    }
    /// A completion session with the factors and the residual in device memory.
    pub(crate) fn completion_session<'a>(
        &'a self,
        t: &'a CudaTensor,
        factors: &[Matrix],
        offset: f32,
    ) -> Result<Box<dyn CompletionSession + 'a>> {
        Ok(Box::new(completion::CudaCompletion::new(
            self, t, factors, offset,
        )?))
    }
    /// The device-to-device copy rate (see [`super::Backend::copy_rate`]).
    pub fn copy_rate(&self, bytes: usize, reps: usize) -> Result<CopyRate> {
        launch::copy_rate(&self.stream, bytes, reps)
    }
}
