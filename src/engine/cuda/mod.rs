//! The CUDA backend: dense HLS tiles on tensor cores and the sparse remainder on CUDA
//! cores, in one fused launch per call (kernels in `kernels/`, DESIGN.md §4–5), or as two
//! launches, one after the other or on two streams at once ([`Launch`]).
//!
//! Factors stay on the device between calls: each call uploads only the factors whose
//! [`crate::matrix::Version`] the device does not hold (in CP-ALS and Tucker-HOOI, the
//! one the previous step updated), clears a reused output buffer on the device and
//! copies the result straight into the caller's matrix. Every call times its launch(es)
//! with device events and counts the bytes it moved ([`RunStats`]);
//! [`Backend::copy_rate`] measures the device-to-device copy rate that effective
//! bandwidth is compared with.
//!
//! Always compiled; whether a device is usable is found out at run time
//! ([`CudaBackend::new`] probes the driver once per process and never panics).
//!
//! - `device`: probing and opening the device;
//! - `kernels`: the device code (embedded by build.rs or compiled by NVRTC at run time);
//! - `nvrtc_dl`: NVRTC loaded by file name (shared with build.rs);
//! - `upload`: device copies of HLS tensors;
//! - `cache`: which factors stay on the device;
//! - `cp`: CP-ALS with the factors in device memory;
//! - `completion`: the tensor-completion session (ALS, CCD++ and SGD kernels) with the
//!   factors and the residual in device memory;
//! - `launch`: launch parameters ([`abi::HlsLaunchParams`]), the launches, the copy back
//!   and the copy-rate measurement.

#[rustfmt::skip]
pub mod abi;
mod cache;
mod completion;
mod cp;
mod device;
pub mod kernels;
mod launch;
pub mod nvrtc_dl;
#[cfg(test)]
mod staging_model;
mod upload;

use super::{
    Backend, BackendKind, BackendTensor, CompletionSession, CopyRate, CpSession, Launch,
    RunOptions, RunStats,
};
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use crate::ops::Op;
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaStream};
use device::cuda_err;
use std::any::Any;
use std::sync::{Arc, Mutex};

pub use kernels::BUILD as KERNEL_BUILD;

/// The CUDA backend on one device.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    side: Arc<CudaStream>,
    name: String,
    capability: (i32, i32),
    sm_count: usize,
    kernels: launch::Kernels,
    kernel_source: String,
    state: Mutex<launch::DeviceState>,
}

impl CudaBackend {
    /// Opens device `ordinal` and loads the kernels. [`crate::Error::NoDevice`] when
    /// there is no driver, no such device or its compute capability is below 8.0;
    /// [`crate::Error::Nvrtc`] / [`crate::Error::Cuda`] when the kernels cannot be
    /// compiled or loaded.
    pub fn new(ordinal: usize) -> Result<Self> {
        let dev = device::open(ordinal)?;
        let (image, output, kernel_source) = kernels::module_image(dev.capability)?;
        let image = match output {
            nvrtc_dl::Output::Cubin => cudarc::nvrtc::Ptx::from_binary(image),
            nvrtc_dl::Output::Ptx => {
                cudarc::nvrtc::Ptx::from_src(String::from_utf8_lossy(&image).into_owned())
            }
        };
        let module = dev
            .ctx
            .load_module(image)
            .map_err(|e| cuda_err("loading the kernel module", e))?;
        let kernels = launch::Kernels::new(module)?;
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
            kernel_source,
            state: Mutex::new(launch::DeviceState::new()),
            sm_count,
            ctx: dev.ctx,
            name: dev.name,
            capability: dev.capability,
        })
    }

    /// Device name as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability (major, minor).
    pub fn capability(&self) -> (i32, i32) {
        self.capability
    }

    /// Where the loaded device code came from (an embedded image or run-time NVRTC).
    pub fn kernel_source(&self) -> &str {
        &self.kernel_source
    }
}

/// A tensor held in device memory by the CUDA backend.
pub struct CudaTensor {
    hls: Arc<HlsTensor>,
    dev: upload::DeviceHls,
}

impl BackendTensor for CudaTensor {
    fn hls(&self) -> &HlsTensor {
        &self.hls
    }
    fn bytes(&self) -> usize {
        self.dev.bytes
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Backend for CudaBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }
    fn describe(&self) -> String {
        format!(
            "CUDA {} (sm_{}{}, {} SMs, device {}; kernels: {})",
            self.name,
            self.capability.0,
            self.capability.1,
            self.sm_count,
            self.ctx.ordinal(),
            self.kernel_source
        )
    }
    fn device_id(&self) -> String {
        format!(
            "cuda:{}:sm_{}{}",
            self.name, self.capability.0, self.capability.1
        )
    }
    fn prepare(&self, hls: Arc<HlsTensor>) -> Result<Box<dyn BackendTensor>> {
        let dev = upload::upload_hls(&self.stream, &hls)?;
        Ok(Box::new(CudaTensor { hls, dev }))
    }
    fn run(
        &self,
        op: Op,
        tensor: &dyn BackendTensor,
        mode: usize,
        factors: &[Matrix],
        // The kernels scale each 16-row tile column themselves.
        opts: &RunOptions<'_>,
        out: &mut Matrix,
    ) -> Result<RunStats> {
        let t = tensor
            .as_any()
            .downcast_ref::<CudaTensor>()
            .ok_or_else(|| {
                crate::Error::InvalidOption(
                    "the tensor was prepared by another backend than CUDA".into(),
                )
            })?;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let dev = launch::Device {
            stream: &self.stream,
            side: &self.side,
            sm_count: self.sm_count,
            kernels: &self.kernels,
        };
        launch::run(
            &dev,
            &mut state,
            opts.launch,
            op,
            &t.hls,
            &t.dev,
            mode,
            factors,
            opts.phi,
            out,
        )
    }
    fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronizing the stream", e))
    }
    /// Dense tiles round each factor entry (and, in TTMc, the intermediate) to fp16 once
    /// after a power-of-two scale: three roundings of 2^-11 at most
    /// (`staging_model.rs` checks the bound).
    fn relative_error(&self) -> f64 {
        2e-3
    }
    fn supports(&self, _launch: Launch) -> bool {
        true
    }
    /// Concurrent: on an H100 (bench/results/2026-11-23-h100-second-run) the two
    /// kernels on two streams beat one fused grid, whose blocks all carry the dense
    /// path's registers and shared memory (50M nonzeros, MTTKRP r32: 3.8 vs 6.5 ms).
    fn default_launch(&self) -> Launch {
        Launch::Concurrent
    }
    fn cp_session<'a>(
        &'a self,
        tensor: &'a dyn BackendTensor,
        factors: &[Matrix],
        launch: Launch,
    ) -> Result<Option<Box<dyn CpSession + 'a>>> {
        let Some(t) = tensor.as_any().downcast_ref::<CudaTensor>() else {
            return Ok(None);
        };
        // SPTMC_CUDA_CP_SESSION=0 keeps the host update, to measure the two side by side.
        if std::env::var("SPTMC_CUDA_CP_SESSION").as_deref() == Ok("0") {
            return Ok(None);
        }
        Ok(cp::CudaCp::new(self, t, launch, factors)?
            .map(|s| Box::new(s) as Box<dyn CpSession + 'a>))
    }
    fn completion_session<'a>(
        &'a self,
        tensor: &'a dyn BackendTensor,
        factors: &[Matrix],
        offset: f32,
    ) -> Result<Box<dyn CompletionSession + 'a>> {
        let t = tensor
            .as_any()
            .downcast_ref::<CudaTensor>()
            .ok_or_else(|| {
                crate::Error::InvalidOption(
                    "the tensor was prepared by another backend than CUDA".into(),
                )
            })?;
        Ok(Box::new(completion::CudaCompletion::new(
            self, t, factors, offset,
        )?))
    }
    fn copy_rate(&self, bytes: usize, reps: usize) -> Result<Option<CopyRate>> {
        launch::copy_rate(&self.stream, bytes, reps).map(Some)
    }
}
