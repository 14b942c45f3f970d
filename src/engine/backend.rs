//! The backend trait and the small types that cross it: which backend, how a call is
//! launched, what a call measured, the device copy rate, the caller's column maxima.

use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use crate::ops::Op;
use std::any::Any;
use std::sync::Arc;

/// Which kind of backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The rayon CPU backend.
    Cpu,
    /// The CUDA backend (tensor cores for dense tiles).
    Cuda,
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        })
    }
}

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// CUDA when usable, else CPU.
    #[default]
    Auto,
    /// The CPU backend.
    Cpu,
    /// The CUDA backend; an error when no device is usable.
    Cuda,
}

/// How a GPU backend launches one call's dense tiles and sparse batches.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Launch {
    /// One grid: the first blocks run dense tiles, the rest sparse batches (DESIGN.md §4).
    #[default]
    Fused,
    /// Two launches on one stream, the dense tiles first, then the sparse batches: the
    /// baseline the fused grid is measured against.
    Sequential,
    /// The dense tiles and the sparse batches as two launches on two streams that may
    /// run at the same time, each kernel with only the resources its part needs.
    Concurrent,
}

impl Launch {
    /// Every launch mode, in the order benchmarks list them.
    pub const ALL: [Launch; 3] = [Launch::Fused, Launch::Sequential, Launch::Concurrent];
}

impl std::fmt::Display for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Launch::Fused => "fused",
            Launch::Sequential => "sequential",
            Launch::Concurrent => "concurrent",
        })
    }
}

/// Per-call options of [`Backend::run`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions<'a> {
    /// How a GPU launches the call (backends with one way accept only the default).
    pub launch: Launch,
    /// The caller's column maxima of the factors, when it knows them without a scan
    /// (see [`ColumnMax`]).
    pub col_max: Option<&'a ColumnMax>,
    /// What [`Op::Phi`] needs besides the factors (other ops ignore it).
    pub phi: PhiParams,
}

/// The parameters of [`Op::Phi`] (see [`crate::ops`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhiParams {
    /// The floor `ε` of the model value: each nonzero weighs `x / max(μ, ε)`. Finite
    /// and positive (the engine checks).
    pub eps: f32,
    /// Also sum `x · ln max(μ, ε)` over the nonzeros into [`RunStats::log_term`]: the
    /// data term of the Poisson log-likelihood of the model the factors describe. Off
    /// by default (a logarithm per nonzero costs more than the rest of the call).
    pub log_term: bool,
}

impl PhiParams {
    /// pyttb's and the MATLAB Tensor Toolbox's `epsDivZero`.
    pub const DEFAULT_EPS: f32 = 1e-10;
}

impl Default for PhiParams {
    /// `ε` = [`PhiParams::DEFAULT_EPS`], no log term.
    fn default() -> Self {
        PhiParams {
            eps: Self::DEFAULT_EPS,
            log_term: false,
        }
    }
}

/// What one [`Backend::run`] call measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct RunStats {
    /// Device seconds of the kernel launch(es) alone, without uploads or the copy back,
    /// when the backend measures them (CUDA: events around the launches); `None` on the
    /// CPU, where a call is all kernel.
    pub kernel_seconds: Option<f64>,
    /// Bytes copied from host to device by the call (changed factors).
    pub bytes_to_device: u64,
    /// Bytes copied from device to host by the call (the output).
    pub bytes_from_device: u64,
    /// [`Op::Phi`] with [`PhiParams::log_term`]: `Σ x · ln max(μ, ε)` over the
    /// nonzeros, summed in f64; `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_term: Option<f64>,
}

/// A measured device-to-device copy rate (the bandwidth a kernel can hope for).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CopyRate {
    /// Bytes copied per repetition (each is read once and written once).
    pub bytes: u64,
    /// Timed repetitions (after one untimed warm-up).
    pub reps: usize,
    /// Median seconds of one copy, timed with device events.
    pub median_s: f64,
    /// Bytes read plus bytes written per second at the median: `2 × bytes / median_s`.
    pub bytes_per_s: f64,
}

/// The median of `xs` (the mean of the middle two for an even count; NaN when empty):
/// the statistic every repeated measurement reports, the copy rate's and the tools'.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// A tensor as a backend holds it (on the host for the CPU, in device memory for CUDA).
pub trait BackendTensor: Send + Sync {
    /// The host-side HLS form it was made from.
    fn hls(&self) -> &HlsTensor;
    /// Bytes the backend holds for it (device memory for CUDA).
    fn bytes(&self) -> usize;
    /// For the backend to get its own type back.
    fn as_any(&self) -> &dyn Any;
}

/// A backend of the engine. Implementations: [`super::cpu::CpuBackend`],
/// [`super::cuda::CudaBackend`].
pub trait Backend: Send + Sync {
    /// Which kind it is.
    fn kind(&self) -> BackendKind;
    /// The device in words: CPU model and thread count, or GPU name and compute
    /// capability. Tuning profiles are matched against [`Backend::device_id`].
    fn describe(&self) -> String;
    /// A stable identifier of the device, used to name and match tuning profiles.
    fn device_id(&self) -> String;
    /// Takes an HLS tensor for this backend (uploads it for a GPU).
    fn prepare(&self, hls: Arc<HlsTensor>) -> Result<Box<dyn BackendTensor>>;
    /// Runs `op` on `mode` into `out`, whose shape the engine has checked (rows = the
    /// mode's length, columns per [`crate::ops`]); every entry of `out` is overwritten.
    /// `factors` have been checked against the tensor's shape, and so has
    /// `opts.col_max` when given. Returns what the call measured.
    fn run(
        &self,
        op: Op,
        tensor: &dyn BackendTensor,
        mode: usize,
        factors: &[Matrix],
        opts: &RunOptions<'_>,
        out: &mut Matrix,
    ) -> Result<RunStats>;
    /// Waits for queued work (a no-op on the CPU); benches call it inside the timing.
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    /// A bound on the relative error of one result entry that sums positive terms,
    /// from the backend's arithmetic: callers that cancel results against each other
    /// (the decompositions' residual `‖X‖² + ‖X̂‖² − 2⟨X, X̂⟩`) tolerate twice this
    /// before calling a negative residual an error. The CPU accumulates in f32.
    fn relative_error(&self) -> f64 {
        1e-5
    }
    /// Whether [`Backend::run`] accepts `launch` (the CPU only [`Launch::Fused`], its
    /// one way of running a call).
    fn supports(&self, launch: Launch) -> bool {
        launch == Launch::Fused
    }
    /// The launch an engine uses unless told otherwise: the fastest one measured on
    /// this kind of device.
    fn default_launch(&self) -> Launch {
        Launch::Fused
    }
    /// A CP-ALS session that keeps the factors where the kernels run and updates them
    /// there ([`CpSession`]), starting from `factors` (one per mode, all of one rank),
    /// its MTTKRPs launched with `launch`; `None` where the backend has no such path or
    /// not for this shape (the CPU: the decomposition updates its factors on the host).
    fn cp_session<'a>(
        &'a self,
        tensor: &'a dyn BackendTensor,
        factors: &[Matrix],
        launch: Launch,
    ) -> Result<Option<Box<dyn CpSession + 'a>>> {
        let _ = (tensor, factors, launch);
        Ok(None)
    }
    /// A tensor-completion session on `tensor` (prepared for [`Op::Completion`])
    /// starting from `factors` (checked by the engine: one per mode, all of one rank,
    /// finite), modelling `offset + CP` ([`super::completion`]).
    fn completion_session<'a>(
        &'a self,
        tensor: &'a dyn BackendTensor,
        factors: &[Matrix],
        offset: f32,
    ) -> Result<Box<dyn super::CompletionSession + 'a>> {
        let _ = (tensor, factors, offset);
        Err(crate::Error::Unsupported(format!(
            "the {} backend has no completion kernels",
            self.kind()
        )))
    }
    /// A Φ session on `tensor` for factors of rank `rank` ([`super::phi`]); `None` where
    /// the backend has no such path or its buffers would not fit in memory.
    fn phi_session<'a>(
        &'a self,
        tensor: &'a dyn BackendTensor,
        rank: usize,
    ) -> Result<Option<Box<dyn super::PhiSession + 'a>>> {
        let _ = (tensor, rank);
        Ok(None)
    }
    /// Measures the device's copy rate by copying `bytes` (rounded down to whole
    /// 4-byte words, at most half the free memory) within device memory `reps` times;
    /// `Ok(None)` for backends without device memory (the CPU).
    fn copy_rate(&self, bytes: usize, reps: usize) -> Result<Option<CopyRate>> {
        let _ = (bytes, reps);
        Ok(None)
    }
}

/// What one [`CpSession::update`] gives back: everything CP-ALS needs of the new
/// factor, `R × R` at most.
#[derive(Debug, Clone, PartialEq)]
pub struct CpStep {
    /// The column norms divided out of the new factor (the new `λ`).
    pub norms: Vec<f64>,
    /// `AᵀA` of the new, normalized factor, row-major `R × R`.
    pub gram: Vec<f64>,
    /// `Σ_i M[i, r] A[i, r]` with the normalized factor (empty unless asked for).
    pub inner: Vec<f64>,
    /// What the step measured and moved.
    pub stats: RunStats,
}

/// CP-ALS with the factors kept by the backend (on a GPU: in device memory), so that
/// an iteration moves `R × R` matrices, not factors, between host and device.
pub trait CpSession {
    /// Mode `mode`'s update: its MTTKRP `M` with the current factors, then `A = M W`
    /// (`w`: row-major `R × R`, the inverse of the Hadamard product of the other
    /// factors' Grams), the column norms (2-norms when `two_norm`, else
    /// `max(1, max |A[:, r]|)`), `A` divided by them (a zero column left as it is), and
    /// `A`'s Gram; with `with_inner` also `Σ_i M[i, r] A[i, r]`.
    /// [`crate::Error::NonFinite`] when `M` holds inf or NaN.
    fn update(
        &mut self,
        mode: usize,
        w: &[f64],
        two_norm: bool,
        with_inner: bool,
    ) -> Result<CpStep>;
    /// The factors as they are now, copied back.
    fn factors(&mut self) -> Result<Vec<Matrix>>;
}

/// The largest magnitude in every column of every factor, `max[m][r] = max_i |F_m[i,
/// r]|`, for a caller that knows it without a scan (CP-ALS normalizes its columns and
/// sees every entry as it does). The backends scale each factor column by a power of
/// two chosen from it so that f32 accumulation can neither overflow nor underflow; a
/// bound that is too large or too small costs accuracy, never safety, but an exact one
/// gives the same results as [`super::Engine::run_into`]'s own scan.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ColumnMax {
    /// One vector per mode, one entry per column (the target mode's is not read).
    pub max: Vec<Vec<f32>>,
}

impl ColumnMax {
    /// Scans `factors` (what a backend does when it is not given bounds).
    pub fn of(factors: &[Matrix]) -> Self {
        ColumnMax {
            max: factors.iter().map(Matrix::column_max_abs).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
