//! The backends' behaviour switches as typed options, set once where an engine is
//! made (the command line's flags, Python's keywords, or the environment read in one
//! place: [`crate::environment`]); nothing under the engine reads the environment.

use crate::error::{Error, Result};

/// Which kernel the CPU backend runs MTTKRP (and TTMc) with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MttkrpKernel {
    /// Row by row over each mode's nonzeros grouped by row at the first call, where
    /// the groups fit in memory (the walk otherwise): faster than the walk on every
    /// tensor measured. TTMc's groups are its own, ordered within each row.
    #[default]
    Rows,
    /// The walk over the HLS form's shares with private outputs summed at the end
    /// (the kernel Φ uses; TTMc's keyed walk too), for measuring one against the other.
    Walk,
}

/// Which vector instructions the CPU backend's blocked kernels use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuVectors {
    /// The widest the CPU has: AVX-512 where it has AVX-512F (the per-row ALS systems
    /// of completion accumulate 16 columns per instruction), AVX2 elsewhere.
    #[default]
    Widest,
    /// AVX2 (the build's baseline) even where the CPU has AVX-512, for measuring one
    /// against the other and for testing both.
    Avx2,
}

/// How the CPU backend computes CP-APR's Φ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PhiKernel {
    /// In f64 row sessions ([`super::PhiRun`]) that keep the other modes' Khatri-Rao
    /// rows between the inner iterations, where their buffers fit in memory (per call
    /// otherwise).
    #[default]
    Session,
    /// [`crate::Op::Phi`] per call, in f32, as a backend without sessions (CUDA) runs
    /// it: to test that path on the CPU and to measure one against the other.
    PerCall,
}

/// Options of the CPU backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuOptions {
    /// Worker threads of the backend's own thread pool (at least 1); `None`: as many
    /// as the rayon pool the backend is made in has, or outside any pool rayon's
    /// default (`RAYON_NUM_THREADS`, else one per core).
    pub threads: Option<usize>,
    /// The MTTKRP kernel.
    pub mttkrp: MttkrpKernel,
    /// The vector instructions of the blocked kernels.
    pub vectors: CpuVectors,
    /// How CP-APR's Φ runs.
    pub phi: PhiKernel,
    /// Make the thread that creates the backend one of its workers (worker 0), so that
    /// a call from that thread starts on it at once instead of waking a worker: for a
    /// program that calls the engine from one thread (the command line). Ignored on a
    /// thread that already belongs to a thread pool.
    pub use_current_thread: bool,
}

/// Most worker threads per core the CPU backend takes: more only wait for the cores
/// (and thousands of them take minutes to start and join).
pub const THREADS_PER_CORE: usize = 4;

/// The most worker threads the CPU backend takes on this machine
/// ([`THREADS_PER_CORE`] per core), and its cores.
pub fn most_cpu_threads() -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (THREADS_PER_CORE * cores, cores)
}

impl CpuOptions {
    /// [`Error::InvalidOption`] unless the thread count is from 1 to
    /// [`most_cpu_threads`]: the same rule from every front end.
    pub fn check(&self) -> Result<()> {
        match self.threads {
            Some(0) => Err(Error::InvalidOption(
                "the CPU backend needs at least 1 thread, got 0".into(),
            )),
            Some(n) if n > most_cpu_threads().0 => {
                let (most, cores) = most_cpu_threads();
                Err(Error::InvalidOption(format!(
                    "the CPU backend takes at most {most} threads ({THREADS_PER_CORE} per core; this machine has {cores}), got {n}: more threads only wait for the cores"
                )))
            }
            _ => Ok(()),
        }
    }
}

/// Options of the CUDA backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaOptions {
    /// The device to open.
    pub ordinal: usize,
    /// CP-ALS keeps its factors in device memory and updates them there
    /// ([`super::CpSession`]); off, it updates them on the host (to measure the two
    /// side by side).
    pub cp_session: bool,
    /// Large outputs come back through a page-locked staging buffer; off, straight
    /// into the caller's matrix (to measure the two side by side).
    pub staging: bool,
    /// Where kernel families without an embedded image are compiled from at run time
    /// (NVRTC, the CUDA headers), or that they may not be.
    pub kernels: super::cuda::KernelSearch,
}

impl Default for CudaOptions {
    /// Device 0, the CP session and staging on, NVRTC and the CUDA headers looked for
    /// in the standard places.
    fn default() -> Self {
        CudaOptions {
            ordinal: 0,
            cp_session: true,
            staging: true,
            kernels: Default::default(),
        }
    }
}

/// The options of every backend, for a caller that lets [`super::Engine::choose_with`]
/// pick one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineOptions {
    /// Used when the engine runs on the CPU.
    pub cpu: CpuOptions,
    /// Used when the engine runs on CUDA.
    pub cuda: CudaOptions,
}
