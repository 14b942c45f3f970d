//! The engine: one API for SpMTTKRP and SpTTMc over HLS, whatever the backend.
//!
//! Prepare a tensor once ([`Engine::prepare`]: builds its HLS form with the device's
//! tuned thresholds and hands it to the backend, which uploads it if it is a GPU), then
//! call [`Engine::mttkrp`] / [`Engine::ttmc`] any number of times with f32 factors.
//! [`Engine::auto`] picks CUDA when a device is usable and the CPU otherwise, and says
//! which.

mod backend;
pub mod completion;
pub mod cpu;
pub mod cuda;
mod factors;
pub mod gcp;
mod options;
mod passes;
pub mod phi;
mod prepared;
pub mod profile;
mod session;

pub use backend::{
    Backend, BackendChoice, BackendKind, BackendTensor, ColumnMax, CopyRate, CpSession, CpStep,
    Launch, PhiParams, RunOptions, RunStats, cp_max_norm, median,
};
pub use completion::{Anchor, CompletionSession, SgdBias, SgdStep};
pub use factors::{FactorKey, FactorVersions};
pub use gcp::{EntryLoss, GcpSample, GcpSpread};
pub use options::{
    CpuOptions, CpuVectors, CudaOptions, EngineOptions, MttkrpKernel, PhiKernel, THREADS_PER_CORE,
    most_cpu_threads,
};
pub use passes::{ResidualSums, RowCounts, ValueCensus};
pub use phi::{PhiRun, PhiSession};
pub use prepared::Prepared;
pub use session::{CompletionKind, CpKind, PhiKind, SessionKind};

use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::{Op, output_shape};
use profile::{ProfileChoice, Profiles};
use rayon::prelude::*;

/// Options of one [`Engine::run_into_with`] call.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The factors' column maxima, when the caller knows them (see [`ColumnMax`]).
    pub col_max: Option<&'a ColumnMax>,
    /// Whether to scan the result for inf and NaN ([`Error::NonFinite`]); callers that
    /// scan it anyway (the decompositions, while widening it) turn this off.
    pub check_finite: bool,
    /// The parameters of [`Op::Phi`] (ignored by the other ops).
    pub phi: PhiParams,
    /// Which factors are unchanged since an earlier call that passed the same set
    /// ([`FactorVersions`], made by this engine), so that a backend keeping device
    /// copies uploads only the others; `None` uploads every factor the call reads.
    pub versions: Option<&'a FactorVersions>,
}

impl Default for Call<'_> {
    fn default() -> Self {
        Call {
            col_max: None,
            check_finite: true,
            phi: PhiParams::default(),
            versions: None,
        }
    }
}

/// One op with the rank it will run at, for choosing its tile threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// The op.
    pub op: Op,
    /// The rank (MTTKRP) or the largest rank of the other modes (TTMc).
    pub rank: usize,
}

/// The unified engine.
pub struct Engine {
    backend: Backend,
    profiles: Profiles,
    notice: Option<String>,
    launch: Launch,
    /// How [`Engine::prepare`] stores a tensor's values.
    values: crate::hls::ValueChoice,
    /// Numbers the [`FactorVersions`] sets this engine makes.
    factor_sets: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Engine {
    /// An engine over `backend` with the compiled-in tuning profiles
    /// ([`Profiles::builtin`]; [`Engine::with_profiles`] replaces them). Reads no file
    /// and prints nothing.
    pub fn new(backend: Backend) -> Self {
        let launch = backend.default_launch();
        Engine {
            backend,
            profiles: Profiles::builtin(),
            notice: None,
            launch,
            values: Default::default(),
            factor_sets: Default::default(),
        }
    }

    /// The CPU backend with the default options (a thread pool of rayon's default
    /// size). Panics only if the operating system cannot start the threads;
    /// [`Engine::cpu_with`] returns that as an error.
    pub fn cpu() -> Self {
        Self::cpu_with(CpuOptions::default())
            .unwrap_or_else(|e| panic!("starting the CPU backend: {e}"))
    }

    /// The CPU backend with `opts`.
    pub fn cpu_with(opts: CpuOptions) -> Result<Self> {
        Ok(Self::new(Backend::Cpu(cpu::CpuBackend::new(opts)?)))
    }

    /// The CUDA backend on device 0 with the default options; an error when none is
    /// usable.
    pub fn cuda() -> Result<Self> {
        Self::cuda_with(CudaOptions::default())
    }

    /// The CUDA backend with `opts`; an error when the device is not usable.
    pub fn cuda_with(opts: CudaOptions) -> Result<Self> {
        Ok(Self::new(Backend::Cuda(Box::new(cuda::CudaBackend::new(
            opts,
        )?))))
    }

    /// CUDA when a device is usable, else the CPU; [`Engine::notice`] says why.
    pub fn auto() -> Self {
        match Self::cuda() {
            Ok(e) => e,
            Err(err) => {
                let mut e = Self::cpu();
                e.notice = Some(format!("using the CPU backend ({err})"));
                e
            }
        }
    }

    /// The backend the user chose, with the default options.
    pub fn choose(choice: BackendChoice) -> Result<Self> {
        Self::choose_with(choice, &EngineOptions::default())
    }

    /// The backend the user chose, with the options of whichever it is.
    pub fn choose_with(choice: BackendChoice, opts: &EngineOptions) -> Result<Self> {
        opts.cpu.check()?;
        match choice {
            BackendChoice::Auto => match Self::cuda_with(opts.cuda.clone()) {
                Ok(e) => Ok(e),
                Err(err) => {
                    let mut e = Self::cpu_with(opts.cpu)?;
                    e.notice = Some(format!("using the CPU backend ({err})"));
                    Ok(e)
                }
            },
            BackendChoice::Cpu => Self::cpu_with(opts.cpu),
            BackendChoice::Cuda => Self::cuda_with(opts.cuda.clone()),
        }
    }

    /// Runs `f` where the backend's host work runs: inside the CPU backend's thread
    /// pool, on the calling thread for CUDA. For a caller whose own parallel work
    /// around the engine's calls (a decomposition's) should use the same workers.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.backend.install(f)
    }

    /// The worker threads of the backend's host work ([`Engine::install`]).
    pub fn workers(&self) -> usize {
        self.install(rayon::current_num_threads)
    }

    /// A fresh [`FactorVersions`] for `modes` factors, for the caller to keep and pass
    /// with its calls ([`Call::versions`]).
    pub fn factor_versions(&self, modes: usize) -> FactorVersions {
        FactorVersions::new(&self.factor_sets, modes)
    }

    /// Replaces the tuning profiles (e.g. with ones read from another folder).
    pub fn with_profiles(mut self, profiles: Profiles) -> Self {
        self.profiles = profiles;
        self
    }

    /// Prepares every later tensor with its values stored as `values` chooses (the
    /// default is [`crate::hls::ValueChoice::Auto`]: fp16 where it is exact, else f32).
    pub fn with_values(mut self, values: crate::hls::ValueChoice) -> Self {
        self.values = values;
        self
    }

    /// How this engine stores the values of the tensors it prepares.
    pub fn values(&self) -> crate::hls::ValueChoice {
        self.values
    }

    /// Runs every later call with `launch`; [`Error::Unsupported`] when the backend has
    /// no such launch (only CUDA has more than [`Launch::Fused`]).
    pub fn with_launch(mut self, launch: Launch) -> Result<Self> {
        if !self.backend.supports(launch) {
            return Err(Error::Unsupported(format!(
                "the {} backend has no {launch} launch (only CUDA has)",
                self.backend.kind()
            )));
        }
        self.launch = launch;
        Ok(self)
    }

    /// How calls are launched (see [`Engine::with_launch`]).
    pub fn launch(&self) -> Launch {
        self.launch
    }

    /// A one-line note about how the backend was chosen (e.g. why not CUDA).
    pub fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    /// The backend.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Which backend kind.
    pub fn kind(&self) -> BackendKind {
        self.backend.kind()
    }

    /// The tuning profiles in use.
    pub fn profiles(&self) -> &Profiles {
        &self.profiles
    }

    /// The tile threshold for `w` on this engine's device, and where it came from (for
    /// an op that runs on another op's form, that op's: [`Op::form`]).
    pub fn threshold(&self, w: Workload) -> ProfileChoice {
        self.threshold_for(w, crate::hls::ValueType::F16)
    }

    /// [`Engine::threshold`] for values stored as `values` (dense tiles of f32 values
    /// take more MMAs, so their crossover is tuned apart).
    pub fn threshold_for(&self, w: Workload, values: crate::hls::ValueType) -> ProfileChoice {
        self.profiles.threshold(
            self.backend.kind(),
            &self.backend.device_id(),
            w.op.form(),
            w.rank,
            values,
        )
    }

    /// `op` on `mode` (see [`crate::ops`] for definitions and output shapes);
    /// [`Error::NonFinite`] when the result holds inf or NaN.
    pub fn run(&self, op: Op, p: &Prepared, mode: usize, factors: &[Matrix]) -> Result<Matrix> {
        let (rows, cols) = output_shape(op, &p.dims, mode, factors)?;
        crate::matrix::check_alloc(&format!("{op} output"), rows, cols, 4)?;
        let mut out = Matrix::zeros(rows, cols);
        self.run_into_with(op, p, mode, factors, &Call::default(), &mut out)?;
        Ok(out)
    }

    /// `op` on `mode` into `out`, reusing its allocation (resized only on a new shape):
    /// the form for loops that call a kernel many times, since a fresh large output
    /// costs page faults on every call. Returns what the call measured;
    /// [`Error::NonFinite`] when the result holds inf or NaN.
    pub fn run_into(
        &self,
        op: Op,
        p: &Prepared,
        mode: usize,
        factors: &[Matrix],
        out: &mut Matrix,
    ) -> Result<RunStats> {
        self.run_into_with(op, p, mode, factors, &Call::default(), out)
    }

    /// [`Engine::run_into`] with the factors' column maxima given by the caller (see
    /// [`ColumnMax`]), so the backend need not scan the factors on every call.
    pub fn run_into_with_max(
        &self,
        op: Op,
        p: &Prepared,
        mode: usize,
        factors: &[Matrix],
        col_max: &ColumnMax,
        out: &mut Matrix,
    ) -> Result<RunStats> {
        let call = Call {
            col_max: Some(col_max),
            ..Call::default()
        };
        self.run_into_with(op, p, mode, factors, &call, out)
    }

    /// [`Engine::run_into`] with the options of [`Call`].
    pub fn run_into_with(
        &self,
        op: Op,
        p: &Prepared,
        mode: usize,
        factors: &[Matrix],
        call: &Call<'_>,
        out: &mut Matrix,
    ) -> Result<RunStats> {
        self.install(|| self.run_into_here(op, p, mode, factors, call, out))
    }

    /// [`Engine::run_into_with`] on the current thread's pool.
    fn run_into_here(
        &self,
        op: Op,
        p: &Prepared,
        mode: usize,
        factors: &[Matrix],
        call: &Call<'_>,
        out: &mut Matrix,
    ) -> Result<RunStats> {
        if op == Op::Phi {
            phi::check_eps(call.phi.eps)?;
        }
        if let Some(v) = call.versions
            && (!v.made_by(&self.factor_sets) || v.modes() != factors.len())
        {
            return Err(Error::InvalidOption(format!(
                "factor versions for {} modes from {} engine, for a call with {} factors",
                v.modes(),
                if v.made_by(&self.factor_sets) {
                    "this"
                } else {
                    "another"
                },
                factors.len()
            )));
        }
        if let Some(col_max) = call.col_max {
            let fits = col_max.max.len() == factors.len()
                && col_max
                    .max
                    .iter()
                    .zip(factors)
                    .enumerate()
                    .all(|(m, (c, f))| m == mode || c.len() == f.cols());
            if !fits {
                return Err(Error::shape(
                    "column maxima",
                    format!(
                        "one per factor column, {:?}",
                        factors.iter().map(Matrix::cols).collect::<Vec<_>>()
                    ),
                    format!("{:?}", col_max.max.iter().map(Vec::len).collect::<Vec<_>>()),
                ));
            }
        }
        let stats = self.run_into_checked(op, p, mode, factors, call, out)?;
        if let Some(t) = stats.log_term.filter(|t| !t.is_finite()) {
            return Err(Error::NonFinite(format!(
                "Φ of mode {mode} gave a log term of {t}: the factors or the tensor's values \
                 are too large for f32"
            )));
        }
        if call.check_finite
            && let Some(k) = first_non_finite(out.data())
        {
            let cols = out.cols().max(1);
            let at = format!(
                "{op} of mode {mode} gave {} at ({}, {})",
                out.data()[k],
                k / cols,
                k % cols
            );
            // A factor that holds inf or NaN itself is named; else the values overflowed.
            let bad_factor = (factors.iter().enumerate()).find_map(|(m, f)| {
                let c = f.cols().max(1);
                (m != mode)
                    .then(|| first_non_finite(f.data()))
                    .flatten()
                    .map(|i| format!("factor {m} holds {} at ({}, {})", f.data()[i], i / c, i % c))
            });
            return Err(Error::NonFinite(match bad_factor {
                Some(why) => format!("{at}: {why}"),
                None => format!("{at}: the factors or the tensor's values are too large for f32"),
            }));
        }
        Ok(stats)
    }

    /// Checks the shapes and sizes `out` (reallocating only for a larger output), then runs
    /// the backend, which overwrites every entry.
    fn run_into_checked(
        &self,
        op: Op,
        p: &Prepared,
        mode: usize,
        factors: &[Matrix],
        call: &Call<'_>,
        out: &mut Matrix,
    ) -> Result<RunStats> {
        let (rows, cols) = output_shape(op, &p.dims, mode, factors)?;
        if out.shape() != (rows, cols) {
            // A buffer that held a larger output keeps its allocation: one buffer
            // serves every mode of a run, allocated (and its pages touched) once. One
            // too small is freed before the new one is weighed and allocated.
            if !out.holds(rows, cols) {
                *out = Matrix::zeros(0, 0);
                crate::matrix::check_alloc(&format!("{op} output"), rows, cols, 4)?;
            }
            out.reshape_for_overwrite(rows, cols);
        }
        let opts = RunOptions {
            launch: self.launch,
            col_max: call.col_max,
            phi: call.phi,
            versions: call.versions,
        };
        self.backend.run(op, p.part(op)?, mode, factors, &opts, out)
    }

    /// A CP-ALS session on `p` (prepared for MTTKRP) starting from `factors`, where the
    /// backend keeps the factors itself ([`CpSession`]); `None` where it has no such
    /// path (the CPU) or not for this rank.
    pub fn cp_session<'a>(
        &'a self,
        p: &'a Prepared,
        factors: &[Matrix],
    ) -> Result<Option<Box<dyn CpSession + 'a>>> {
        self.session::<CpKind>(p, factors)
    }

    /// Sparse MTTKRP on `mode`: `I_n × R`.
    pub fn mttkrp(&self, p: &Prepared, mode: usize, factors: &[Matrix]) -> Result<Matrix> {
        self.run(Op::Mttkrp, p, mode, factors)
    }

    /// Sparse TTM-chain on `mode`: `I_n × Π_{m≠n} R_m`.
    pub fn ttmc(&self, p: &Prepared, mode: usize, factors: &[Matrix]) -> Result<Matrix> {
        self.run(Op::Ttmc, p, mode, factors)
    }

    /// CP-APR's `Φ` on `mode` (see [`crate::ops`]): `I_n × R`, with `factors[mode]` as
    /// `B` and the floor `eps`; with it `Σ x · ln max(μ, ε)` over the nonzeros, the data
    /// term of the model's Poisson log-likelihood. Runs on the form prepared for
    /// [`Op::Mttkrp`] (or [`Op::Phi`]).
    pub fn phi(
        &self,
        p: &Prepared,
        mode: usize,
        factors: &[Matrix],
        eps: f32,
    ) -> Result<(Matrix, f64)> {
        let (rows, cols) = output_shape(Op::Phi, &p.dims, mode, factors)?;
        crate::matrix::check_alloc("phi output", rows, cols, 4)?;
        let mut out = Matrix::zeros(rows, cols);
        let call = Call {
            phi: PhiParams {
                eps,
                log_term: true,
            },
            ..Call::default()
        };
        let stats = self.run_into_with(Op::Phi, p, mode, factors, &call, &mut out)?;
        Ok((out, stats.log_term.unwrap_or(0.0)))
    }
}

/// The index of the first inf or NaN in `data`. Chunks are scanned in parallel, each
/// by a branch-free reduction over the exponent bits that vectorizes; only a chunk that
/// holds one is searched element by element. (A per-element parallel search cost as
/// many instructions as the MTTKRP walk itself on outputs of millions of rows.)
fn first_non_finite(data: &[f32]) -> Option<usize> {
    const CHUNK: usize = 1 << 14;
    const EXP: u32 = 0x7f80_0000;
    let chunk = data.par_chunks(CHUNK).position_first(|c| {
        c.iter()
            .fold(0u32, |bad, v| bad | u32::from(v.to_bits() & EXP == EXP))
            != 0
    })?;
    let start = chunk * CHUNK;
    data[start..]
        .iter()
        .position(|v| !v.is_finite())
        .map(|k| start + k)
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::generate::{GenSpec, Pattern, generate};

    #[test]
    fn the_first_non_finite_entry_is_found_in_any_chunk() {
        let n = (1 << 14) * 3 + 77;
        let mut v = vec![1.5f32; n];
        v[5] = f32::MAX;
        v[6] = f32::MIN_POSITIVE / 8.0;
        v[7] = -0.0;
        assert_eq!(first_non_finite(&v), None);
        for (at, bad) in [
            (0, f32::NAN),
            (1 << 14, f32::INFINITY),
            ((1 << 14) * 2 + 3, f32::NEG_INFINITY),
            (n - 1, -f32::NAN),
        ] {
            let mut w = v.clone();
            w[at] = bad;
            w[n - 1] = if at == n - 1 { bad } else { f32::NAN };
            assert_eq!(first_non_finite(&w), Some(at), "{bad} at {at}");
        }
        assert_eq!(first_non_finite(&[]), None);
    }

    #[test]
    fn the_cpu_backend_times_no_kernels_has_one_launch_and_no_copy_rate() {
        let e = Engine::cpu();
        let x = generate(&GenSpec {
            dims: vec![20, 30, 40],
            nnz: 500,
            pattern: Pattern::Uniform,
            seed: 1,
        })
        .unwrap();
        let p = e.prepare_with_thresholds(&x, &[(Op::Mttkrp, 78)]).unwrap();
        let f = Matrix::random_factors(x.dims(), &[4; 3], 1);
        let mut out = Matrix::zeros(1, 1);
        let stats = e.run_into(Op::Mttkrp, &p, 0, &f, &mut out).unwrap();
        assert_eq!(
            stats,
            RunStats::default(),
            "the CPU times no kernels, copies nothing"
        );
        assert_eq!(e.launch(), Launch::Fused);
        for launch in [Launch::Sequential, Launch::Concurrent] {
            assert!(matches!(
                Engine::cpu().with_launch(launch),
                Err(Error::Unsupported(_))
            ));
        }
        assert!(Engine::cpu().with_launch(Launch::Fused).is_ok());
        assert_eq!(e.backend().copy_rate(1 << 20, 3).unwrap(), None);
        assert_eq!(Launch::default(), Launch::Fused);
        assert_eq!(Launch::Sequential.to_string(), "sequential");
        assert_eq!(
            serde_json::to_string(&Launch::Sequential).unwrap(),
            "\"sequential\""
        );
    }
}
