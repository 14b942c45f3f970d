//! The rayon CPU backend.
//!
//! Same format and same decomposition of the work as the GPU: the sparse part and the
//! dense tiles are cut into equal shares of nonzeros, one per worker; each worker walks
//! its share in key order (MTTKRP: [`walk`], [`fixed`]; TTMc: [`ttmc`]) into a private
//! output (no locks or atomics), and the private outputs are summed row-parallel at the
//! end. TTMc outputs too wide to copy per worker (at least 1M floats) are instead cut
//! into row ranges of equal nonzero counts, each worker writing its own rows. fp16
//! values are widened to f32 and accumulated in f32, with subnormal results flushed to
//! zero ([`subnormal`]). CP-APR's Φ walks the same shares with its own sink ([`phi`]).
//!
//! MTTKRP runs row by row instead wherever its groups fit in memory ([`mttkrp_rows`]:
//! each mode's nonzeros grouped by row at the first call, no private outputs; faster
//! than the walk on every tensor measured). `SPTMC_CPU_MTTKRP=walk` forces the walk
//! (for measuring one against the other).

mod completion;
mod fixed;
mod kernel;
mod mttkrp_rows;
mod phi;
mod phi_rows;
mod rows;
mod scaled;
mod sgd;
mod subnormal;
mod ttmc;
mod walk;

use super::{Backend, BackendKind, BackendTensor, RunOptions, RunStats};
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use crate::ops::Op;
use std::any::Any;
use std::sync::Arc;

/// The CPU backend: runs on rayon's current pool (`RAYON_NUM_THREADS` applies).
#[derive(Debug, Default)]
pub struct CpuBackend {
    /// Private output buffers kept between calls (see `kernel::run`).
    pool: std::sync::Mutex<Vec<Vec<f32>>>,
}

impl CpuBackend {
    /// A CPU backend.
    pub fn new() -> Self {
        CpuBackend::default()
    }
}

/// A tensor held by the CPU backend.
pub struct CpuTensor {
    hls: Arc<HlsTensor>,
    /// The row-grouped MTTKRP, made at the first MTTKRP call (`None` where the groups
    /// would not fit in memory, or the walk is forced).
    rows: std::sync::OnceLock<Option<mttkrp_rows::RowMttkrp>>,
}

impl CpuTensor {
    /// The row-grouped MTTKRP where it is the kernel for this tensor.
    fn row_mttkrp(&self) -> Option<&mttkrp_rows::RowMttkrp> {
        self.rows
            .get_or_init(|| {
                let walk = std::env::var("SPTMC_CPU_MTTKRP").is_ok_and(|v| v == "walk");
                // Groups that cannot be allocated leave the walk, which needs none.
                (!walk)
                    .then(|| mttkrp_rows::RowMttkrp::new(&self.hls).ok().flatten())
                    .flatten()
            })
            .as_ref()
    }
}

impl BackendTensor for CpuTensor {
    fn hls(&self) -> &HlsTensor {
        &self.hls
    }
    fn bytes(&self) -> usize {
        self.hls.bytes()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Zeroes `out`, in parallel when large: a TTMc output can be hundreds of MB, more than
/// one core clears at memory speed.
fn zero(out: &mut Matrix) {
    use rayon::prelude::*;
    let data = out.data_mut();
    if data.len() >= 1 << 22 {
        data.par_chunks_mut(1 << 16).for_each(|c| c.fill(0.0));
    } else {
        data.fill(0.0);
    }
}

/// The CPU model name from /proc/cpuinfo, if readable.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

impl Backend for CpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }
    fn describe(&self) -> String {
        format!(
            "CPU {} ({} threads)",
            cpu_model(),
            rayon::current_num_threads()
        )
    }
    fn device_id(&self) -> String {
        format!("cpu:{}:{}t", cpu_model(), rayon::current_num_threads())
    }
    fn prepare(&self, hls: Arc<HlsTensor>) -> Result<Box<dyn BackendTensor>> {
        Ok(Box::new(CpuTensor {
            hls,
            rows: std::sync::OnceLock::new(),
        }))
    }
    fn run(
        &self,
        op: Op,
        tensor: &dyn BackendTensor,
        mode: usize,
        factors: &[Matrix],
        opts: &RunOptions<'_>,
        out: &mut Matrix,
    ) -> Result<RunStats> {
        if op == Op::Completion {
            return Err(crate::Error::Unsupported(
                "the completion kernels run in a completion session".into(),
            ));
        }
        if !self.supports(opts.launch) {
            return Err(crate::Error::Unsupported(format!(
                "the CPU backend has no {} launch",
                opts.launch
            )));
        }
        zero(out);
        let hls = tensor.hls();
        if op == Op::Phi {
            let log_term = phi::run(hls, mode, factors, opts.phi, out);
            return Ok(RunStats {
                log_term,
                ..RunStats::default()
            });
        }
        let factors = scaled::Rescaled::new(factors, mode, opts.col_max);
        let rows = (op == Op::Mttkrp)
            .then(|| tensor.as_any().downcast_ref::<CpuTensor>())
            .flatten()
            .and_then(CpuTensor::row_mttkrp);
        // The walk sums stored values and leaves the tensor's scale to the end; the
        // groups hold values already scaled.
        let scale = match rows {
            Some(rows) => {
                rows.run(mode, factors.factors(), out);
                1.0
            }
            None => {
                kernel::run(op, hls, mode, factors.factors(), out, &self.pool);
                hls.scale()
            }
        };
        factors.unscale(op, mode, scale, out);
        Ok(RunStats::default())
    }
    fn phi_session<'a>(
        &'a self,
        tensor: &'a dyn BackendTensor,
        rank: usize,
    ) -> Result<Option<Box<dyn super::PhiSession + 'a>>> {
        Ok(phi_rows::CpuPhi::new(tensor.hls(), rank)?
            .map(|s| Box::new(s) as Box<dyn super::PhiSession + 'a>))
    }
    fn completion_session<'a>(
        &'a self,
        tensor: &'a dyn BackendTensor,
        factors: &[Matrix],
        offset: f32,
    ) -> Result<Box<dyn super::CompletionSession + 'a>> {
        Ok(Box::new(completion::CpuCompletion::new(
            tensor.hls(),
            factors,
            offset,
        )?))
    }
}
