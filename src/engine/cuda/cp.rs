//! CP-ALS with the factors in device memory ([`CpSession`]): each mode's MTTKRP runs
//! into a device buffer, `kernels/cp_update.cu` forms the new factor, its column norms,
//! Gram and inner products there, and only `R × R` data crosses the bus: `W` up, the
//! reductions down, the inverse norms up. The factors come back once, at the end.

use super::abi::{
    HLS_BLOCK_THREADS, HLS_CP_MAX_RANK, HLS_CP_TILE_ROWS, HLS_MAX_ORDER, HlsCpParams,
};
use super::device::cuda_err;
use super::kernels;
use super::launch;
use super::{CudaBackend, CudaTensor};
use crate::engine::{CpSession, CpStep, Launch, RunStats, cp_max_norm};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::Op;
use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg};

// SAFETY: HlsCpParams is a plain `repr(C)` struct of integers generated from
// kernels/hls_abi.h, the exact layout the kernels take by value.
unsafe impl DeviceRepr for HlsCpParams {}

/// A CP-ALS session on one tensor of the CUDA backend.
pub struct CudaCp<'a> {
    backend: &'a CudaBackend,
    tensor: &'a CudaTensor,
    launch: Launch,
    rank: usize,
    dims: Vec<usize>,
    factors: Vec<CudaSlice<f32>>,
    /// The MTTKRP result of the current mode (sized for the longest mode).
    m: CudaSlice<f32>,
    /// `W` (R × R), then the inverse norms (R).
    w: CudaSlice<f64>,
    /// Gram (R × R), norms (R), inner products (R).
    acc: CudaSlice<f64>,
    flag: CudaSlice<u32>,
    /// Bytes of the initial factors, counted in the first step.
    pending_up: u64,
}

impl<'a> CudaCp<'a> {
    /// A session starting from `factors`; `None` when the rank or order is outside what
    /// the update kernel handles (the caller then updates on the host).
    pub fn new(
        backend: &'a CudaBackend,
        tensor: &'a CudaTensor,
        launch: Launch,
        factors: &[Matrix],
    ) -> Result<Option<Self>> {
        let rank = factors.first().map_or(0, Matrix::cols);
        let dims: Vec<usize> = tensor.hls.dims().to_vec();
        if rank == 0
            || rank > HLS_CP_MAX_RANK as usize
            || dims.len() > HLS_MAX_ORDER as usize
            || factors.len() != dims.len()
            || factors
                .iter()
                .zip(&dims)
                .any(|(f, &d)| f.shape() != (d, rank))
        {
            return Ok(None);
        }
        let stream = &backend.stream;
        let mut pending_up = 0;
        let mut dev = Vec::with_capacity(factors.len());
        for (m, f) in factors.iter().enumerate() {
            if let Some(bad) = f.data().iter().find(|v| !v.is_finite()) {
                return Err(Error::NonFinite(format!("factor of mode {m} holds {bad}")));
            }
            let mut buf = stream
                .alloc_zeros::<f32>(f.data().len().max(1))
                .map_err(|e| cuda_err("allocating a CP factor", e))?;
            if !f.data().is_empty() {
                stream
                    .memcpy_htod(f.data(), &mut buf)
                    .map_err(|e| cuda_err("uploading a CP factor", e))?;
            }
            pending_up += (f.data().len() * 4) as u64;
            dev.push(buf);
        }
        let longest = dims.iter().copied().max().unwrap_or(1);
        let alloc_f64 = |n: usize, what: &str| {
            stream
                .alloc_zeros::<f64>(n)
                .map_err(|e| cuda_err(&format!("allocating {what}"), e))
        };
        Ok(Some(CudaCp {
            backend,
            tensor,
            launch,
            rank,
            m: stream
                .alloc_zeros::<f32>((longest * rank).max(1))
                .map_err(|e| cuda_err("allocating the CP MTTKRP buffer", e))?,
            w: alloc_f64(rank * rank, "the CP solve matrix")?,
            acc: alloc_f64(rank * rank + 2 * rank, "the CP reductions")?,
            flag: stream
                .alloc_zeros::<u32>(1)
                .map_err(|e| cuda_err("allocating the CP flag", e))?,
            dims,
            factors: dev,
            pending_up,
        }))
    }

    fn ptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        let (p, _sync) = s.device_ptr(&self.backend.stream);
        p
    }

    fn launch_cp(&self, name: &str, p: &HlsCpParams, blocks: u32) -> Result<()> {
        let func = self.backend.kernels.get(name)?;
        let cfg = LaunchConfig {
            grid_dim: (blocks.max(1), 1, 1),
            block_dim: (HLS_BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = self.backend.stream.launch_builder(&func);
        builder.arg(p);
        // SAFETY: the pointers in `p` are this session's live buffers (M of at least
        // rows × rank floats, W of rank² doubles, the factor of rows × rank floats, the
        // reductions of rank² + 2 rank doubles, one flag word), all used on this one
        // stream; the kernels index them within those extents (cp_update.cu).
        unsafe { builder.launch(cfg) }.map_err(|e| cuda_err(&format!("launching {name}"), e))?;
        Ok(())
    }
}

impl CpSession for CudaCp<'_> {
    fn update(
        &mut self,
        mode: usize,
        w: &[f64],
        two_norm: bool,
        with_inner: bool,
    ) -> Result<CpStep> {
        let r = self.rank;
        if mode >= self.dims.len() || w.len() != r * r {
            return Err(Error::InvalidOption(format!(
                "CP update of mode {mode} with a {}-entry W (rank {r}, order {})",
                w.len(),
                self.dims.len()
            )));
        }
        let stream = &self.backend.stream;
        let rows = self.dims[mode];
        let mut stats = RunStats {
            bytes_to_device: std::mem::take(&mut self.pending_up),
            ..RunStats::default()
        };
        // M = MTTKRP of `mode` with the device factors, into the cleared buffer.
        stream
            .memset_zeros(&mut self.m.slice_mut(0..(rows * r).max(1)))
            .map_err(|e| cuda_err("clearing the CP MTTKRP buffer", e))?;
        let mut ptrs = [0u64; HLS_MAX_ORDER as usize];
        for (m, f) in self.factors.iter().enumerate() {
            if m != mode {
                ptrs[m] = self.ptr(f);
            }
        }
        let ranks = vec![r; self.dims.len()];
        let dev = self.backend.device();
        let t = self.tensor;
        let mttkrp_s = launch::launch_op(
            &dev,
            self.launch,
            Op::Mttkrp,
            (&t.hls, &t.dev),
            mode,
            &ranks,
            &ptrs,
            (self.ptr(&self.m), r as u32),
        )?;
        // A = M W with the reductions, on the device.
        stream
            .memcpy_htod(w, &mut self.w)
            .map_err(|e| cuda_err("uploading the CP solve matrix", e))?;
        stream
            .memset_zeros(&mut self.acc)
            .map_err(|e| cuda_err("clearing the CP reductions", e))?;
        stream
            .memset_zeros(&mut self.flag)
            .map_err(|e| cuda_err("clearing the CP flag", e))?;
        stats.bytes_to_device += (w.len() * 8) as u64;
        let mut p = HlsCpParams {
            m: self.ptr(&self.m),
            w: self.ptr(&self.w),
            a: self.ptr(&self.factors[mode]),
            acc: self.ptr(&self.acc),
            flag: self.ptr(&self.flag),
            rows: rows as u64,
            rank: r as u32,
            two_norm: u32::from(two_norm),
            with_inner: u32::from(with_inner),
            pad: 0,
        };
        let tiles = rows.div_ceil(HLS_CP_TILE_ROWS as usize);
        let blocks = tiles.min(self.backend.sm_count * 4) as u32;
        self.launch_cp(kernels::CP_UPDATE_ROWS, &p, blocks)?;
        let mut acc = vec![0f64; r * r + 2 * r];
        let mut flag = [0u32; 1];
        stream
            .memcpy_dtoh(&self.acc, acc.as_mut_slice())
            .map_err(|e| cuda_err("copying the CP reductions back", e))?;
        stream
            .memcpy_dtoh(&self.flag, flag.as_mut_slice())
            .map_err(|e| cuda_err("copying the CP flag back", e))?;
        stream
            .synchronize()
            .map_err(|e| cuda_err("waiting for the CP update", e))?;
        stats.bytes_from_device += (acc.len() * 8 + 4) as u64;
        if flag[0] != 0 {
            return Err(Error::NonFinite(format!(
                "MTTKRP of mode {mode} holds inf or NaN"
            )));
        }
        // Norms and their inverses, as the host update computes them; A divided by them.
        let (gram, rest) = acc.split_at(r * r);
        let (sums, inner) = rest.split_at(r);
        let norms: Vec<f64> = sums
            .iter()
            .map(|&s| if two_norm { s.sqrt() } else { cp_max_norm(s) })
            .collect();
        let inv: Vec<f64> = norms
            .iter()
            .map(|&n| if n > 0.0 { 1.0 / n } else { 1.0 })
            .collect();
        stream
            .memcpy_htod(&inv, &mut self.w.slice_mut(0..r))
            .map_err(|e| cuda_err("uploading the CP norms", e))?;
        stats.bytes_to_device += (r * 8) as u64;
        p.w = self.ptr(&self.w);
        let blocks = (rows * r)
            .div_ceil(HLS_BLOCK_THREADS as usize)
            .min(self.backend.sm_count * 8);
        self.launch_cp(kernels::CP_NORMALIZE, &p, blocks as u32)?;
        stats.kernel_seconds = Some(mttkrp_s);
        Ok(CpStep {
            gram: (0..r * r)
                .map(|k| gram[k] * inv[k / r] * inv[k % r])
                .collect(),
            inner: if with_inner {
                inner.iter().zip(&inv).map(|(x, s)| x * s).collect()
            } else {
                Vec::new()
            },
            norms,
            stats,
        })
    }

    fn factors(&mut self) -> Result<Vec<Matrix>> {
        let stream = &self.backend.stream;
        let mut out = Vec::with_capacity(self.dims.len());
        for (f, &d) in self.factors.iter().zip(&self.dims) {
            let mut data = vec![0f32; d * self.rank];
            if !data.is_empty() {
                stream
                    .memcpy_dtoh(&f.slice(0..data.len()), data.as_mut_slice())
                    .map_err(|e| cuda_err("copying a CP factor back", e))?;
            }
            out.push(Matrix::new(d, self.rank, data)?);
        }
        stream
            .synchronize()
            .map_err(|e| cuda_err("waiting for the CP factors", e))?;
        Ok(out)
    }
}
