//! Command-line arguments.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Sparse MTTKRP / TTM-chain on tensor cores (HLS format), CP-ALS and Tucker-HOOI.
#[derive(Debug, Parser)]
#[command(name = "sptmc", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Backend choice on the command line.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum BackendArg {
    /// CUDA when a device is usable, else CPU.
    Auto,
    /// The rayon CPU backend.
    Cpu,
    /// The CUDA backend (fails without a device).
    Cuda,
}

/// Options every command that computes shares.
#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Backend.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Worker threads of the CPU backend (default: all cores, or RAYON_NUM_THREADS).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Machine-readable JSON on stdout instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// CP decomposition by alternating least squares.
    Cp(CpArgs),
    /// Tucker decomposition by higher-order orthogonal iteration.
    Tucker(TuckerArgs),
    /// One sparse MTTKRP, optionally checked against the FP64 reference.
    Mttkrp(KernelArgs),
    /// One sparse TTM-chain, optionally checked against the FP64 reference.
    Ttmc(KernelArgs),
    /// Dimensions, nonzeros, density and HLS statistics of a tensor.
    Info(InfoArgs),
    /// Every kernel on every mode against the FP64 reference; non-zero exit on failure.
    Selftest(SelftestArgs),
    /// Kernel timings per op, mode and rank, as a table or JSON.
    Bench(BenchArgs),
    /// Measure this device's tile thresholds and write a profile under tuning/.
    Tune(TuneArgs),
}

/// Options `sptmc cp` and `sptmc tucker` share.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// Stop when the fit changes by less than this (0: run every iteration).
    #[arg(long, default_value_t = 1e-5)]
    pub tol: f64,
    /// Seed of the random initial factors.
    #[arg(long, default_value_t = 1, conflicts_with = "init")]
    pub seed: u64,
    /// Folder with initial factors factor-<m>.txt (as written by --out).
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// Write the model (factors, and CP weights or the Tucker core) as
    /// numpy.loadtxt-readable text, plus model.json, into this folder.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
}

/// `sptmc cp`.
#[derive(Debug, Args)]
pub struct CpArgs {
    /// Tensor file (.tns, .tns.gz, .sptb); omitted: a built-in generated tensor.
    pub file: Option<PathBuf>,
    /// Rank of the model.
    #[arg(long, short = 'r', default_value_t = 16)]
    pub rank: usize,
    /// Maximum iterations.
    #[arg(long, short = 'i', default_value_t = 50)]
    pub iters: usize,
    /// Options of both decompositions.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// `sptmc tucker`.
#[derive(Debug, Args)]
pub struct TuckerArgs {
    /// Tensor file (.tns, .tns.gz, .sptb); omitted: a built-in generated tensor.
    pub file: Option<PathBuf>,
    /// Ranks per mode, e.g. 8,8,8 (one per mode).
    #[arg(long, value_delimiter = ',', default_value = "8,8,8")]
    pub ranks: Vec<usize>,
    /// Maximum iterations.
    #[arg(long, short = 'i', default_value_t = 20)]
    pub iters: usize,
    /// Options of both decompositions.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// `sptmc mttkrp` and `sptmc ttmc`.
#[derive(Debug, Args)]
pub struct KernelArgs {
    /// Tensor file (.tns, .tns.gz, .sptb); omitted: a built-in generated tensor.
    pub file: Option<PathBuf>,
    /// Target mode (0-based).
    #[arg(long, short = 'm', default_value_t = 0)]
    pub mode: usize,
    /// Rank of every factor.
    #[arg(long, short = 'r', default_value_t = 16, conflicts_with = "ranks")]
    pub rank: usize,
    /// Ranks per mode (TTMc; the target mode's entry is ignored).
    #[arg(long, value_delimiter = ',')]
    pub ranks: Option<Vec<usize>>,
    /// Seed of the random factors.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Tile threshold (default: the device's tuning profile).
    #[arg(long)]
    pub threshold: Option<u32>,
    /// Repetitions to time.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Compare with the FP64 reference (SMAPE, max relative and Frobenius error).
    #[arg(long)]
    pub check: bool,
    /// Write the result matrix (numpy.loadtxt-readable) to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
}

/// `sptmc info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Tensor file (.tns, .tns.gz, .sptb); omitted: a built-in generated tensor.
    pub file: Option<PathBuf>,
    /// Tile threshold for the HLS statistics.
    #[arg(long, short = 't', default_value_t = 78)]
    pub threshold: u32,
    /// Machine-readable JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `sptmc selftest`.
#[derive(Debug, Args)]
pub struct SelftestArgs {
    /// Extra tensor files to test besides the generated ones.
    pub files: Vec<PathBuf>,
    /// Edge length of the generated 3rd-order tensors.
    #[arg(long, default_value_t = 200)]
    pub dim: usize,
    /// Nonzeros of each generated tensor.
    #[arg(long, default_value_t = 200_000)]
    pub nnz: usize,
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
}

/// `sptmc bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Tensor files to time (default: generated tensors of every regime).
    pub files: Vec<PathBuf>,
    /// Repetitions per measurement.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Tile threshold for every op instead of the tuned ones: 1 = every non-empty tile
    /// dense (HLS-D only), 4097 = no tile dense (HLS-S only, all on CUDA cores).
    #[arg(long)]
    pub threshold: Option<u32>,
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
}

/// `sptmc tune`.
#[derive(Debug, Args)]
pub struct TuneArgs {
    /// MTTKRP ranks to tune.
    #[arg(long, value_delimiter = ',', default_value = "16,32")]
    pub ranks: Vec<usize>,
    /// TTMc ranks to tune (every other mode at that rank).
    #[arg(long, value_delimiter = ',', default_value = "8,16")]
    pub ttmc_ranks: Vec<usize>,
    /// Folder the profile is written to, as <device>.toml.
    #[arg(long, default_value = "tuning")]
    pub tuning_dir: PathBuf,
    /// Folder for the table, sweep CSV, verification CSV and JSON report.
    #[arg(long, default_value = "bench/results/tune")]
    pub results: PathBuf,
    /// A smaller, faster sweep (for a first look; less reliable).
    #[arg(long)]
    pub quick: bool,
    /// Real 3rd-order tensors on which to time T/2, T and 2T after tuning.
    #[arg(long = "tns")]
    pub tns: Vec<PathBuf>,
    /// Free text recorded in the profile (commit, command, conditions).
    #[arg(long, default_value = "")]
    pub note: String,
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
}
