//! The CUDA backend: dense HLS tiles on tensor cores and the sparse remainder on CUDA
//! cores, in one fused launch per call (kernels in `kernels/`, DESIGN.md §4–5), or in
//! two sequential launches ([`Launch::Sequential`], the baseline for benchmarks).
//!
//! Every call times its launch(es) with device events ([`Backend::last_kernel_seconds`]),
//! and [`Backend::copy_rate`] measures the device-to-device copy rate that effective
//! bandwidth is compared with.
//!
//! Always compiled; whether a device is usable is found out at run time
//! ([`CudaBackend::new`] probes the driver once per process and never panics).
//!
//! - `device`: probing and opening the device;
//! - `kernels`: the PTX (prebuilt by build.rs or compiled by NVRTC at run time);
//! - `upload`: device copies of HLS tensors and factors (fp16 with column scales);
//! - `launch`: launch parameters ([`abi::HlsLaunchParams`]), the launches and the
//!   copy-rate measurement.

#[rustfmt::skip]
pub mod abi;
mod device;
mod kernels;
mod launch;
mod upload;

use super::{Backend, BackendKind, BackendTensor, CopyRate, Launch};
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use crate::ops::Op;
use cudarc::driver::{CudaContext, CudaStream};
use device::cuda_err;
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub use kernels::BUILD as KERNEL_BUILD;

/// The CUDA backend on one device.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    capability: (i32, i32),
    kernels: launch::Kernels,
    sequential: AtomicBool,
    last_kernel: Mutex<Option<f64>>,
}

impl CudaBackend {
    /// Opens device `ordinal` and loads the kernels. [`crate::Error::NoDevice`] when
    /// there is no driver, no such device or its compute capability is below 8.0;
    /// [`crate::Error::Nvrtc`] / [`crate::Error::Cuda`] when the kernels cannot be
    /// compiled or loaded.
    pub fn new(ordinal: usize) -> Result<Self> {
        let dev = device::open(ordinal)?;
        let ptx = kernels::ptx()?;
        let module = dev
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(|e| cuda_err("loading the kernel module", e))?;
        let load = |name: &str| {
            module
                .load_function(name)
                .map_err(|e| cuda_err(&format!("loading kernel {name}"), e))
        };
        let kernels = launch::Kernels {
            fused_mttkrp: load(kernels::FUSED_MTTKRP)?,
            fused_ttmc: load(kernels::FUSED_TTMC)?,
            dense_mttkrp: load(kernels::DENSE_MTTKRP)?,
            dense_ttmc: load(kernels::DENSE_TTMC)?,
            sparse: load(kernels::SPARSE)?,
        };
        Ok(CudaBackend {
            stream: dev.ctx.default_stream(),
            kernels,
            sequential: AtomicBool::new(false),
            last_kernel: Mutex::new(None),
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
            "CUDA {} (sm_{}{}, device {}; kernels: {})",
            self.name,
            self.capability.0,
            self.capability.1,
            self.ctx.ordinal(),
            KERNEL_BUILD
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
        // The fp16 upload scans each factor as it converts it anyway.
        _col_max: Option<&super::ColumnMax>,
        out: &mut Matrix,
    ) -> Result<()> {
        let t = tensor
            .as_any()
            .downcast_ref::<CudaTensor>()
            .ok_or_else(|| {
                crate::Error::InvalidOption(
                    "the tensor was prepared by another backend than CUDA".into(),
                )
            })?;
        *self.last_kernel.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let seconds = launch::run(
            &self.stream,
            &self.kernels,
            self.launch(),
            op,
            &t.hls,
            &t.dev,
            mode,
            factors,
            out,
        )?;
        *self.last_kernel.lock().unwrap_or_else(|e| e.into_inner()) = Some(seconds);
        Ok(())
    }
    fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronizing the stream", e))
    }
    fn last_kernel_seconds(&self) -> Option<f64> {
        *self.last_kernel.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn set_launch(&self, launch: Launch) -> Result<()> {
        self.sequential
            .store(launch == Launch::Sequential, Ordering::Relaxed);
        Ok(())
    }
    fn launch(&self) -> Launch {
        if self.sequential.load(Ordering::Relaxed) {
            Launch::Sequential
        } else {
            Launch::Fused
        }
    }
    fn copy_rate(&self, bytes: usize, reps: usize) -> Result<Option<CopyRate>> {
        launch::copy_rate(&self.stream, bytes, reps).map(Some)
    }
}
