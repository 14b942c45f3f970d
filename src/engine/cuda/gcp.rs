//! GCP's sampled model values and gradient on the device (kernels/gcp.cu; what they
//! compute: [`crate::engine::gcp`]). The sample and the factors are uploaded per call
//! (a sample is new at every step), the results copied back; the host turns the values
//! into the loss derivatives between the two launches.

use super::CudaBackend;
use super::device::cuda_err;
use super::kernels::{GCP_GRADIENT, GCP_VALUES};
use super::launch_op::ptr;
use crate::engine::GcpSample;
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits};

/// The kernels' parameters (`HlsGcpParams` in kernels/gcp.cu, field for field).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct HlsGcpParams {
    coords: u64,
    values: u64,
    y: u64,
    factor: [u64; MAX_ORDER],
    grad: [u64; MAX_ORDER],
    n: u64,
    order: u32,
    rank: u32,
}

// SAFETY: plain old data of the layout the kernels read (repr(C), integers only).
unsafe impl DeviceRepr for HlsGcpParams {}

const MAX_ORDER: usize = super::abi::HLS_MAX_ORDER as usize;
const THREADS: u32 = super::abi::HLS_BLOCK_THREADS;

impl CudaBackend {
    fn upload<T: DeviceRepr>(&self, data: &[T], what: &str) -> Result<CudaSlice<T>> {
        self.stream
            .clone_htod(data)
            .map_err(|e| cuda_err(&format!("uploading {what}"), e))
    }

    fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize, what: &str) -> Result<CudaSlice<T>> {
        self.stream
            .alloc_zeros::<T>(n.max(1))
            .map_err(|e| cuda_err(&format!("allocating {what}"), e))
    }

    /// Launches `name` over `work` items (grid-stride, at most 32 blocks per SM).
    fn launch_gcp(&self, name: &str, p: &HlsGcpParams, work: u64) -> Result<()> {
        let func = self.kernels.get(name)?;
        let blocks = work
            .div_ceil(u64::from(THREADS))
            .clamp(1, self.sm_count as u64 * 32) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = self.stream.launch_builder(&func);
        builder.arg(p);
        // SAFETY: every pointer in `p` is a live buffer of the caller on this stream,
        // with the extents `n`, `order` and `rank` describe (coordinates n × order,
        // values and y n, factor and gradient m dims[m] × rank); the kernels stride
        // over the grid and index within them.
        unsafe { builder.launch(cfg) }.map_err(|e| cuda_err(&format!("launching {name}"), e))?;
        Ok(())
    }

    /// The sample's coordinates and the factors on the device, and the parameters
    /// pointing at them.
    fn gcp_inputs(
        &self,
        sample: &GcpSample,
        factors: &[Matrix<f64>],
        rank: usize,
    ) -> Result<(CudaSlice<u32>, Vec<CudaSlice<f64>>, HlsGcpParams)> {
        let order = sample.dims().len();
        if order > MAX_ORDER {
            return Err(Error::Unsupported(format!(
                "GCP on CUDA handles tensors of order at most {MAX_ORDER}, got {order}"
            )));
        }
        let coords = self.upload(sample.coords(), "a GCP sample")?;
        let dev: Vec<CudaSlice<f64>> = factors
            .iter()
            .map(|f| self.upload(f.data(), "a GCP factor"))
            .collect::<Result<_>>()?;
        let mut p = HlsGcpParams {
            coords: ptr(&coords, &self.stream),
            n: sample.len() as u64,
            order: order as u32,
            rank: rank as u32,
            ..HlsGcpParams::default()
        };
        for (m, f) in dev.iter().enumerate() {
            p.factor[m] = ptr(f, &self.stream);
        }
        Ok((coords, dev, p))
    }

    /// The model value at every entry of `sample` into `out` (its length).
    pub(crate) fn gcp_values(
        &self,
        sample: &GcpSample,
        factors: &[Matrix<f64>],
        rank: usize,
        out: &mut [f64],
    ) -> Result<()> {
        if sample.is_empty() {
            return Ok(());
        }
        let (_coords, _factors, mut p) = self.gcp_inputs(sample, factors, rank)?;
        let values = self.zeros::<f64>(sample.len(), "GCP model values")?;
        p.values = ptr(&values, &self.stream);
        self.launch_gcp(GCP_VALUES, &p, p.n)?;
        self.stream
            .memcpy_dtoh(&values.slice(0..sample.len()), out)
            .map_err(|e| cuda_err("copying GCP model values back", e))
    }

    /// `grads[m] = Σ_k y_k Π_{j≠m} F_j[i_kj, :]` at rows `i_km` (every entry
    /// overwritten).
    pub(crate) fn gcp_gradient(
        &self,
        sample: &GcpSample,
        factors: &[Matrix<f64>],
        rank: usize,
        y: &[f64],
        grads: &mut [Matrix<f64>],
    ) -> Result<()> {
        let (_coords, _factors, mut p) = self.gcp_inputs(sample, factors, rank)?;
        let dev_y = self.upload(y, "GCP loss derivatives")?;
        p.y = ptr(&dev_y, &self.stream);
        let dev_grads: Vec<CudaSlice<f64>> = grads
            .iter()
            .map(|g| self.zeros::<f64>(g.data().len(), "a GCP gradient"))
            .collect::<Result<_>>()?;
        for (m, g) in dev_grads.iter().enumerate() {
            p.grad[m] = ptr(g, &self.stream);
        }
        if !sample.is_empty() {
            self.launch_gcp(GCP_GRADIENT, &p, p.n * u64::from(p.rank))?;
        }
        for (g, d) in grads.iter_mut().zip(&dev_grads) {
            let n = g.data().len();
            self.stream
                .memcpy_dtoh(&d.slice(0..n), g.data_mut())
                .map_err(|e| cuda_err("copying a GCP gradient back", e))?;
        }
        Ok(())
    }
}
