//! The backend enum, the prepared tensor enum and the small types that cross it: which backend, how a call is
//! launched, what a call measured, the device copy rate, the caller's column maxima.

use super::cpu::{CpuBackend, CpuTensor};
use super::cuda::{CudaBackend, CudaTensor};
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use crate::ops::Op;
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
    /// One grid: the first blocks run dense tiles, the rest sparse batches.
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
    /// The caller's versions of the factors (see [`super::Call::versions`]).
    pub versions: Option<&'a super::FactorVersions>,
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

/// A tensor as a backend holds it: on the host for the CPU, in device memory for
/// CUDA (which keeps the host HLS form beside it).
pub enum BackendTensor {
    /// Held by the CPU backend.
    Cpu(CpuTensor),
    /// Held by the CUDA backend (boxed: its device buffers make it the larger).
    Cuda(Box<CudaTensor>),
}

impl BackendTensor {
    /// The host-side HLS form it was made from.
    pub fn hls(&self) -> &HlsTensor {
        match self {
            BackendTensor::Cpu(t) => t.hls(),
            BackendTensor::Cuda(t) => t.hls(),
        }
    }
    /// Bytes the backend holds for it (device memory for CUDA).
    pub fn bytes(&self) -> usize {
        match self {
            BackendTensor::Cpu(t) => t.bytes(),
            BackendTensor::Cuda(t) => t.bytes(),
        }
    }
    /// Bytes of the form a kernel of `op` at rank `rank` reads for target `mode`: the
    /// HLS form, or on the CPU the row groups MTTKRP reads where it runs row by row
    /// (once built, by the first call). What a kernel's memory floor counts.
    pub fn form_bytes(&self, op: Op, mode: usize, rank: usize) -> usize {
        match self {
            BackendTensor::Cpu(t) => t.form_bytes(op, mode, rank),
            BackendTensor::Cuda(t) => t.bytes(),
        }
    }
    /// Which kind of backend holds it.
    pub fn kind(&self) -> BackendKind {
        match self {
            BackendTensor::Cpu(_) => BackendKind::Cpu,
            BackendTensor::Cuda(_) => BackendKind::Cuda,
        }
    }
}

/// [`crate::Error::InvalidOption`] for a tensor handed to a backend of another kind.
pub(crate) fn foreign(backend: BackendKind, tensor: &BackendTensor) -> crate::Error {
    crate::Error::InvalidOption(format!(
        "the tensor was prepared by the {} backend, not by {backend}",
        tensor.kind()
    ))
}

/// A backend of the engine, its options among its fields ([`super::CpuOptions`],
/// [`super::CudaOptions`]). Every call is a match over the variants; what runs on a
/// prepared tensor takes the [`BackendTensor`] of the same variant.
pub enum Backend {
    /// The rayon CPU backend, on its own thread pool.
    Cpu(CpuBackend),
    /// The CUDA backend on one device (boxed: its device state makes it the larger).
    Cuda(Box<CudaBackend>),
}

impl Backend {
    /// Which kind it is.
    pub fn kind(&self) -> BackendKind {
        match self {
            Backend::Cpu(_) => BackendKind::Cpu,
            Backend::Cuda(_) => BackendKind::Cuda,
        }
    }
    /// The device in words: CPU model and thread count, or GPU name and compute
    /// capability. Tuning profiles are matched against [`Backend::device_id`].
    pub fn describe(&self) -> String {
        match self {
            Backend::Cpu(b) => b.describe(),
            Backend::Cuda(b) => b.describe(),
        }
    }
    /// A stable identifier of the device, used to name and match tuning profiles.
    pub fn device_id(&self) -> String {
        match self {
            Backend::Cpu(b) => b.device_id(),
            Backend::Cuda(b) => b.device_id(),
        }
    }
    /// Takes an HLS tensor for this backend (uploads it for a GPU).
    pub fn prepare(&self, hls: Arc<HlsTensor>) -> Result<BackendTensor> {
        match self {
            Backend::Cpu(b) => Ok(BackendTensor::Cpu(b.prepare(hls))),
            Backend::Cuda(b) => Ok(BackendTensor::Cuda(Box::new(b.prepare(hls)?))),
        }
    }
    /// Runs `op` on `mode` into `out`, whose shape the engine has checked (rows = the
    /// mode's length, columns per [`crate::ops`]); every entry of `out` is overwritten.
    /// `factors` have been checked against the tensor's shape, and so has
    /// `opts.col_max` when given. Returns what the call measured.
    pub fn run(
        &self,
        op: Op,
        tensor: &BackendTensor,
        mode: usize,
        factors: &[Matrix],
        opts: &RunOptions<'_>,
        out: &mut Matrix,
    ) -> Result<RunStats> {
        match (self, tensor) {
            (Backend::Cpu(b), BackendTensor::Cpu(t)) => b.run(op, t, mode, factors, opts, out),
            (Backend::Cuda(b), BackendTensor::Cuda(t)) => b.run(op, t, mode, factors, opts, out),
            _ => Err(foreign(self.kind(), tensor)),
        }
    }
    /// Runs `f` where the backend's host work runs: inside the CPU backend's thread
    /// pool (so that every rayon call in `f` uses its workers); on the calling thread
    /// for CUDA.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match self {
            Backend::Cpu(b) => b.install(f),
            Backend::Cuda(_) => f(),
        }
    }
    /// Waits for queued work (a no-op on the CPU); benches call it inside the timing.
    pub fn synchronize(&self) -> Result<()> {
        match self {
            Backend::Cpu(_) => Ok(()),
            Backend::Cuda(b) => b.synchronize(),
        }
    }
    /// A bound on the relative error of one result entry that sums positive terms,
    /// from the backend's arithmetic: callers that cancel results against each other
    /// (the decompositions' residual `‖X‖² + ‖X̂‖² − 2⟨X, X̂⟩`) tolerate twice this
    /// before calling a negative residual an error. The CPU accumulates in f32; CUDA's
    /// dense tiles round each factor entry (and, in TTMc, the intermediate) to fp16
    /// once after a power-of-two scale: three roundings of 2^-11 at most
    /// (`staging_model.rs` checks the bound).
    pub fn relative_error(&self) -> f64 {
        match self {
            Backend::Cpu(_) => 1e-5,
            Backend::Cuda(_) => 2e-3,
        }
    }
    /// Whether [`Backend::run`] accepts `launch` (the CPU only [`Launch::Fused`], its
    /// one way of running a call).
    pub fn supports(&self, launch: Launch) -> bool {
        match self {
            Backend::Cpu(_) => launch == Launch::Fused,
            Backend::Cuda(_) => true,
        }
    }
    /// The launch an engine uses unless told otherwise: the fastest one measured on
    /// this kind of device. CUDA: concurrent; on an H100
    /// (bench/results/2026-11-23-h100-second-run) the two kernels on two streams beat
    /// one fused grid, whose blocks all carry the dense path's registers and shared
    /// memory (50M nonzeros, MTTKRP r32: 3.8 vs 6.5 ms).
    pub fn default_launch(&self) -> Launch {
        match self {
            Backend::Cpu(_) => Launch::Fused,
            Backend::Cuda(_) => Launch::Concurrent,
        }
    }
    /// Measures the device's copy rate by copying `bytes` (rounded down to whole
    /// 4-byte words, at most half the free memory) within device memory `reps` times;
    /// `Ok(None)` for backends without device memory (the CPU).
    pub fn copy_rate(&self, bytes: usize, reps: usize) -> Result<Option<CopyRate>> {
        match self {
            Backend::Cpu(_) => Ok(None),
            Backend::Cuda(b) => b.copy_rate(bytes, reps).map(Some),
        }
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
    /// [`cp_max_norm`] of `max |A[:, r]|`), `A` divided by them (a zero column left as
    /// it is), and `A`'s Gram; with `with_inner` also `Σ_i M[i, r] A[i, r]`.
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

/// CP-ALS's divisor of a column whose largest magnitude is `n`, after the first
/// iteration ([`CpSession::update`] without `two_norm`): `n` itself from 1 up (pyttb's
/// `max(1, n)`), and below 1 the power of two `2^⌈log₂ n⌉`, which brings the largest
/// entry into `(1/2, 1]`.
///
/// pyttb leaves a column whose entries are all below 1 as it is. ALS's models do not
/// depend on the factors' column scales, but the f32 products of the next MTTKRPs do:
/// on a tensor of values near 1e-25 the solved factors' entries were near 1e-25 as
/// well, the next mode's products (value × such entries) underflowed f32, and the model
/// collapsed to zero. A power of two rescales exactly, so the factors are pyttb's
/// times powers of two and the fits are pyttb's, up to rounding (tensors of values
/// times 2^-20 and 2^-84 gave the fits of the unscaled one to 1e-10), wherever pyttb's
/// rule does not underflow. A zero (or NaN) column is divided by 1.
pub fn cp_max_norm(n: f64) -> f64 {
    if n >= 1.0 {
        n
    } else if n > 0.0 {
        // f64's normal range reaches 2^-1022; f32 factors hold nothing smaller.
        2f64.powi((n.log2().ceil() as i32).max(-1022))
    } else {
        1.0
    }
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
