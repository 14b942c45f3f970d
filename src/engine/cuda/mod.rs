//! The CUDA backend: dense HLS tiles on tensor cores and the sparse remainder on CUDA
//! cores, in one fused launch per call (kernels in `kernels/`, DESIGN.md §4–5).
//!
//! Always compiled; whether a device is usable is found out at run time
//! ([`CudaBackend::new`] probes the driver once per process and never panics).
//!
//! - `device`: probing and opening the device;
//! - `kernels`: the PTX (prebuilt by build.rs or compiled by NVRTC at run time);
//! - `upload`: device copies of HLS tensors and factors (fp16 with column scales);
//! - `launch`: launch parameters ([`abi::HlsLaunchParams`]) and the fused launch.

#[rustfmt::skip]
pub mod abi;
mod device;
mod kernels;
mod launch;
mod upload;

use super::{Backend, BackendKind, BackendTensor};
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use crate::ops::Op;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use device::cuda_err;
use std::any::Any;
use std::sync::Arc;

pub use kernels::BUILD as KERNEL_BUILD;

/// The CUDA backend on one device.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    capability: (i32, i32),
    mttkrp: CudaFunction,
    ttmc: CudaFunction,
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
        Ok(CudaBackend {
            stream: dev.ctx.default_stream(),
            mttkrp: load(kernels::FUSED_MTTKRP)?,
            ttmc: load(kernels::FUSED_TTMC)?,
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
        let func = match op {
            Op::Mttkrp => &self.mttkrp,
            Op::Ttmc => &self.ttmc,
        };
        launch::run(&self.stream, func, op, &t.hls, &t.dev, mode, factors, out)
    }
    fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronizing the stream", e))
    }
}
