//! The CUDA backend (placeholder until the kernels land): reports no device.

use super::{Backend, BackendTensor};
use crate::error::{Error, Result};

/// The CUDA backend.
pub struct CudaBackend {}

impl CudaBackend {
    /// Opens device `ordinal`.
    pub fn new(_ordinal: usize) -> Result<Self> {
        Err(Error::NoDevice("the CUDA backend is not built yet".into()))
    }
}

impl Backend for CudaBackend {
    fn kind(&self) -> super::BackendKind {
        super::BackendKind::Cuda
    }
    fn describe(&self) -> String {
        unreachable!("never constructed")
    }
    fn device_id(&self) -> String {
        unreachable!("never constructed")
    }
    fn prepare(&self, _: std::sync::Arc<crate::hls::HlsTensor>) -> Result<Box<dyn BackendTensor>> {
        unreachable!("never constructed")
    }
    fn run(
        &self,
        _: crate::ops::Op,
        _: &dyn BackendTensor,
        _: usize,
        _: &[crate::Matrix],
        _: &mut crate::Matrix,
    ) -> Result<()> {
        unreachable!("never constructed")
    }
}
