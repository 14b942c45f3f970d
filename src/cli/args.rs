//! Command-line arguments.
//!
//! Every subcommand with numeric options takes negative numbers as values
//! (`allow_negative_numbers`): `--tol -1` reaches the check that names the option,
//! instead of clap suggesting to write it after `--`.

pub use super::common::{BackendArg, Common};
use clap::{Args, Parser, Subcommand, ValueEnum};
use sptmc::engine::Launch;
use sptmc::hls::ValueChoice;
use sptmc::tools::cases::GenLayout;
use std::path::PathBuf;

/// Sparse MTTKRP / TTM-chain on tensor cores (HLS format), CP-ALS and Tucker-HOOI.
#[derive(Debug, Parser)]
#[command(
    name = "sptmc",
    version = concat!(env!("CARGO_PKG_VERSION"), " (kernels: ", env!("SPTMC_KERNEL_BUILD"), ")"),
    about
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// CP decomposition by alternating least squares.
    Cp(CpArgs),
    /// Tucker decomposition by higher-order orthogonal iteration.
    Tucker(TuckerArgs),
    /// Nonnegative Poisson CP of a count tensor (CP-APR, multiplicative updates).
    CpApr(CpAprArgs),
    /// Generalized CP under a chosen loss (GCP: stochastic gradients or L-BFGS-B).
    Gcp(super::gcp::GcpArgs),
    /// One sparse MTTKRP, optionally checked against the FP64 reference.
    Mttkrp(KernelArgs),
    /// One sparse TTM-chain, optionally checked against the FP64 reference.
    Ttmc(KernelArgs),
    /// One CP-APR Φ (the target's factor is random too), optionally checked against the
    /// FP64 reference.
    Phi(KernelArgs),
    /// Dimensions, nonzeros, density and HLS statistics of a tensor.
    Info(InfoArgs),
    /// Every kernel on every mode against the FP64 reference; non-zero exit on failure.
    Selftest(SelftestArgs),
    /// Kernel timings per op, mode and rank, as a table or JSON.
    Bench(BenchArgs),
    /// Measure this device's tile thresholds and write a profile under tuning/.
    Tune(TuneArgs),
    /// Copy a tensor into another format: OUT.sptb (binary), OUT.tns or OUT.tns.gz.
    Convert(ConvertArgs),
    /// Tensor completion: fit the observed entries (missing = unknown), report train,
    /// validation and test RMSE against simple baselines.
    Complete(CompleteArgs),
    /// Predict entries with a model written by `sptmc complete --out`.
    Predict(PredictArgs),
}

/// The completion solver on the command line.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum SolverArg {
    /// Alternating least squares (per-row R×R systems).
    Als,
    /// CCD++ (rank-one column updates).
    Ccd,
    /// Stochastic gradient descent (bold-driver learning rate).
    Sgd,
}

/// `sptmc complete`.
#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct CompleteArgs {
    /// Tensor file whose entries are split (.tns, .tns.gz, .sptb); or give --train and
    /// --test instead.
    #[arg(required_unless_present = "train", conflicts_with = "train")]
    pub file: Option<PathBuf>,
    /// Rank of the model.
    #[arg(long, short = 'r', default_value_t = 16)]
    pub rank: usize,
    /// The solver.
    #[arg(long, value_enum, default_value_t = SolverArg::Als)]
    pub solver: SolverArg,
    /// Train, validation and test fractions of FILE's entries (seeded shuffle).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0.8,0.1,0.1",
        conflicts_with = "train"
    )]
    pub split: Vec<f64>,
    /// Training entries (with --test): no split of a single file.
    #[arg(long, requires = "test")]
    pub train: Option<PathBuf>,
    /// Test entries (with --train).
    #[arg(long, requires = "train")]
    pub test: Option<PathBuf>,
    /// Validation entries (with --train); without it, 1/9 of --train's entries are held
    /// out for validation by --seed.
    #[arg(long, requires = "train")]
    pub validation: Option<PathBuf>,
    /// Seed of the split, the initial factors and SGD's order.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Regularization λ of λ·Σ‖A‖² (default: chosen on the validation entries by a
    /// short warm-started path over a grid derived from the entries per row and the
    /// values' spread; the choice is reported).
    #[arg(long)]
    pub lambda: Option<f64>,
    /// Most epochs of the fit at the final λ (where λ is chosen, each point of the path
    /// before it runs at most 15 or this many, the fewer).
    #[arg(long, default_value_t = 100)]
    pub epochs: usize,
    /// Stop after this many epochs without a lower validation RMSE.
    #[arg(long, default_value_t = 5)]
    pub patience: usize,
    /// SGD's initial learning rate (default: from the values' spread and the rank; the
    /// bold driver adapts it every epoch).
    #[arg(long)]
    pub learning_rate: Option<f64>,
    /// CCD++'s sweeps over the modes per column.
    #[arg(long, default_value_t = 1)]
    pub ccd_inner: usize,
    /// Fit a pure CP model (μ = 0) instead of the training mean plus CP.
    #[arg(long)]
    pub no_center: bool,
    /// Fit no bias terms (by default every row of every mode has one, learned with the
    /// factors).
    #[arg(long)]
    pub no_biases: bool,
    /// Regularization of the biases, in pseudo-entries (a row's bias shrinks like a mean
    /// with this many extra entries at its mode's mean bias).
    #[arg(long, default_value_t = 5.0)]
    pub bias_lambda: f64,
    /// Write the model (factor-*.txt and model.json, read by `sptmc predict`) into this
    /// folder.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Read a text tensor without the binary cache, and write no cache entry.
    #[arg(long)]
    pub no_cache: bool,
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
}

/// `sptmc predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// Model folder written by `sptmc complete --out`.
    pub model: PathBuf,
    /// Coordinates, one entry a line: the 1-based indices, optionally followed by the
    /// true value (then the RMSE is reported); `#` lines and blank lines are skipped.
    pub coords: PathBuf,
    /// Write the predictions (the indices, then the predicted value, as .tns lines)
    /// into this file instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// A JSON summary on stdout (predictions only with --out).
    #[arg(long)]
    pub json: bool,
}

/// `sptmc convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The tensor to read (.tns, .tns.gz, .sptb).
    pub file: PathBuf,
    /// Where to write it; the format follows the name (.sptb, .tns, .tns.gz).
    pub out: PathBuf,
    /// Replace OUT if it exists.
    #[arg(long)]
    pub force: bool,
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
    /// Folder with initial factors factor-<m>.txt (as written by --out; for CP its
    /// weights.txt, when there, is multiplied into the first factor; for Tucker the
    /// factors' widths are the ranks unless --ranks is given).
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// Write the model (factors, and CP weights or the Tucker core) as
    /// numpy.loadtxt-readable text, plus model.json, into this folder.
    ///
    /// Written whole or not at all (filled beside it under a hidden `.sptmc-tmp-PID-…`
    /// name, then swapped in); what a killed writer leaves there is removed by the next
    /// write once its writer is gone.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Read a text tensor without the binary cache, and write no cache entry.
    #[arg(long)]
    pub no_cache: bool,
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
}

/// `sptmc cp`.
#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct CpArgs {
    /// Tensor file (.tns, .tns.gz, .sptb); omitted: a built-in generated tensor.
    pub file: Option<PathBuf>,
    /// Rank of the model.
    #[arg(long, short = 'r', default_value_t = 16)]
    pub rank: usize,
    /// Maximum iterations.
    #[arg(long, short = 'i', default_value_t = 50)]
    pub iters: usize,
    /// Under mpirun (`--features mpi`): how the ranks split the work (default medium).
    #[arg(long, value_enum)]
    pub grain: Option<super::dist::GrainArg>,
    /// Options of both decompositions.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// `sptmc cp-apr`. Defaults are pyttb's `cp_apr(algorithm="mu")`.
#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct CpAprArgs {
    /// Tensor file (.tns, .tns.gz, .sptb) of counts; omitted: a built-in generated tensor.
    pub file: Option<PathBuf>,
    /// Rank of the model.
    #[arg(long, short = 'r', default_value_t = 16)]
    pub rank: usize,
    /// Maximum outer iterations (pyttb maxiters).
    #[arg(long, short = 'i', default_value_t = 1000)]
    pub iters: usize,
    /// Maximum multiplicative updates per mode and outer iteration (pyttb maxinneriters).
    #[arg(long, default_value_t = 10)]
    pub inner: usize,
    /// KKT-violation tolerance (pyttb stoptol; 0 runs every iteration).
    #[arg(long, default_value_t = 1e-4)]
    pub tol: f64,
    /// Stop after the iteration that ends this many seconds after the start (pyttb
    /// stoptime).
    #[arg(long, default_value_t = 1e6)]
    pub stoptime: f64,
    /// Floor of the model value in x / max(m, eps) (pyttb epsDivZero).
    #[arg(long, default_value_t = 1e-10)]
    pub eps: f64,
    /// Added to inadmissible zeros (pyttb kappa).
    #[arg(long, default_value_t = 0.01)]
    pub kappa: f64,
    /// Entries below this with a positive Φ are inadmissible zeros (pyttb kappatol).
    #[arg(long, default_value_t = 1e-10)]
    pub kappa_tol: f64,
    /// Under mpirun (`--features mpi`): how the ranks split the work (default medium).
    #[arg(long, value_enum)]
    pub grain: Option<super::dist::GrainArg>,
    /// Values that are not integers: a warning, or an error.
    #[arg(long, value_enum, default_value_t = NonIntegerArg::Warn)]
    pub non_integer: NonIntegerArg,
    /// Seed of the random initial factors.
    #[arg(long, default_value_t = 1, conflicts_with = "init")]
    pub seed: u64,
    /// Folder with nonnegative initial factors factor-<m>.txt (as written by --out; its
    /// weights.txt, when there, is multiplied into the first factor, so the run resumes
    /// that model).
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// Write the model (factors, weights.txt) as numpy.loadtxt-readable text, plus
    /// model.json, into this folder.
    ///
    /// Written whole or not at all (filled beside it under a hidden `.sptmc-tmp-PID-…`
    /// name, then swapped in); what a killed writer leaves there is removed by the next
    /// write once its writer is gone.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Read a text tensor without the binary cache, and write no cache entry.
    #[arg(long)]
    pub no_cache: bool,
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
}

/// What `sptmc cp-apr` does with values that are not integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NonIntegerArg {
    /// Run, and say how many there are.
    Warn,
    /// Refuse the tensor.
    Error,
}

/// `sptmc tucker`.
#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct TuckerArgs {
    /// Tensor file (.tns, .tns.gz, .sptb); omitted: a built-in generated tensor.
    pub file: Option<PathBuf>,
    /// Ranks per mode, e.g. 8,8,8, or one rank for every mode (default: 8 for every
    /// mode, lowered where a mode is shorter). `--rank` and `-r` are the same option.
    #[arg(long, short = 'r', visible_alias = "rank", value_delimiter = ',')]
    pub ranks: Option<Vec<usize>>,
    /// Maximum iterations.
    #[arg(long, short = 'i', default_value_t = 20)]
    pub iters: usize,
    /// Options of both decompositions.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// `sptmc mttkrp` and `sptmc ttmc`.
#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct KernelArgs {
    /// Tensor file (.tns, .tns.gz, .sptb); omitted: a built-in generated tensor.
    pub file: Option<PathBuf>,
    /// Target mode (0-based).
    #[arg(long, short = 'm', default_value_t = 0)]
    pub mode: usize,
    /// Rank of every factor.
    #[arg(long, short = 'r', default_value_t = 16, conflicts_with = "ranks")]
    pub rank: usize,
    /// Ranks per mode (TTMc; the target mode's entry is ignored), or one rank for every
    /// mode.
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
    ///
    /// Written whole or not at all (filled beside it under a hidden `.sptmc-tmp-PID-…`
    /// name, then swapped in); what a killed writer leaves there is removed by the next
    /// write once its writer is gone.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Read a text tensor without the binary cache, and write no cache entry.
    #[arg(long)]
    pub no_cache: bool,
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
}

/// `sptmc info`.
#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct InfoArgs {
    /// Tensor file (.tns, .tns.gz, .sptb); omitted: a built-in generated tensor.
    pub file: Option<PathBuf>,
    /// Tile threshold for the HLS statistics.
    #[arg(long, short = 't', default_value_t = 78)]
    pub threshold: u32,
    /// How the values are stored: auto (fp16 where exact, else f32), f16 or f32.
    #[arg(long, default_value_t = ValueChoice::Auto)]
    pub values: ValueChoice,
    /// Machine-readable JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Read a text tensor without the binary cache, and write no cache entry.
    #[arg(long)]
    pub no_cache: bool,
}

/// `sptmc selftest`.
#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct SelftestArgs {
    /// Extra tensor files to test besides the generated ones.
    pub files: Vec<PathBuf>,
    /// Edge length of the generated 3rd-order tensors.
    #[arg(long, default_value_t = 200)]
    pub dim: usize,
    /// Nonzeros of each generated tensor.
    #[arg(long, default_value_t = 200_000)]
    pub nnz: usize,
    /// Read a text tensor without the binary cache, and write no cache entry.
    #[arg(long)]
    pub no_cache: bool,
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
}

/// How the CUDA backend launches each call, on the command line.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Default)]
pub enum LaunchArg {
    /// One grid for the dense tiles and the sparse batches.
    #[default]
    Fused,
    /// Two launches: the dense tiles, then the sparse batches.
    Sequential,
    /// Two launches on two streams that may run at the same time.
    Concurrent,
}

impl From<LaunchArg> for Launch {
    fn from(l: LaunchArg) -> Launch {
        match l {
            LaunchArg::Fused => Launch::Fused,
            LaunchArg::Sequential => Launch::Sequential,
            LaunchArg::Concurrent => Launch::Concurrent,
        }
    }
}

/// `sptmc bench`.
#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct BenchArgs {
    /// Tensor files to time (.tns, .tns.gz, .sptb; default: generated tensors of every regime).
    pub files: Vec<PathBuf>,
    /// Repetitions per measurement.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Tile threshold for every op instead of the tuned ones: 1 = every non-empty tile
    /// dense (HLS-D only), 4097 = no tile dense (HLS-S only, all on CUDA cores).
    #[arg(long)]
    pub threshold: Option<u32>,
    /// How the CUDA kernels are launched: one fused grid, the dense tiles and then the
    /// sparse batches as two sequential launches, or the two on two streams at once
    /// (default: the backend's own, concurrent on CUDA, fused on the CPU).
    #[arg(long, value_enum)]
    pub launch: Option<LaunchArg>,
    /// MTTKRP ranks to time.
    #[arg(long, value_delimiter = ',', default_value = "16,32")]
    pub ranks: Vec<usize>,
    /// TTMc ranks to time (every other mode at that rank).
    #[arg(long, value_delimiter = ',', default_value = "8,16")]
    pub ttmc_ranks: Vec<usize>,
    /// Time no TTMc (and do not prepare the tensor for it).
    #[arg(long, conflicts_with = "ttmc_ranks")]
    pub no_ttmc: bool,
    /// Instead of the built-in cases, one generated tensor of this many nonzeros
    /// (e.g. 50000000; see --gen-seed, --gen-dims, --gen-layout).
    #[arg(long, conflicts_with = "files")]
    pub gen_nnz: Option<usize>,
    /// Seed of the --gen-nnz tensor.
    #[arg(long, default_value_t = 1, requires = "gen_nnz")]
    pub gen_seed: u64,
    /// Extents of the --gen-nnz tensor.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "4096,4096,4096",
        requires = "gen_nnz"
    )]
    pub gen_dims: Vec<usize>,
    /// Layout of the --gen-nnz tensor.
    #[arg(long, value_enum, default_value_t = GenLayout::BlockDense, requires = "gen_nnz")]
    pub gen_layout: GenLayout,
    /// Bytes of the copy whose rate the memory floors use (device; host: ≤ 256 MiB); 0: none.
    #[arg(long, default_value_t = 1 << 30)]
    pub copy_bytes: usize,
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
}

/// `sptmc tune`.
#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(args: &[&str]) -> BenchArgs {
        let mut v = vec!["sptmc", "bench"];
        v.extend_from_slice(args);
        match Cli::try_parse_from(v).unwrap().command {
            Command::Bench(b) => b,
            other => panic!("not bench: {other:?}"),
        }
    }

    #[test]
    fn bench_defaults_are_fused_builtin_cases_and_a_gib_copy() {
        let b = bench(&[]);
        assert_eq!(b.launch, None);
        assert_eq!(b.ranks, vec![16, 32]);
        assert_eq!(b.ttmc_ranks, vec![8, 16]);
        assert_eq!(b.gen_nnz, None);
        assert_eq!(b.copy_bytes, 1 << 30);
        assert!(!b.no_ttmc);
        let b = bench(&["--ranks", "8,64", "--ttmc-ranks", "4", "a.tns", "b.tns"]);
        assert_eq!((b.ranks, b.ttmc_ranks), (vec![8, 64], vec![4]));
        assert_eq!(b.files.len(), 2);
    }

    #[test]
    fn bench_parses_launch_generated_case_and_ranks() {
        let b = bench(&[
            "--launch",
            "sequential",
            "--gen-nnz",
            "50000000",
            "--gen-seed",
            "7",
            "--gen-dims",
            "100,200,300",
            "--gen-layout",
            "uniform",
            "--ranks",
            "32",
            "--no-ttmc",
        ]);
        assert_eq!(b.launch, Some(LaunchArg::Sequential));
        assert_eq!(b.gen_nnz, Some(50_000_000));
        assert_eq!(b.gen_seed, 7);
        assert_eq!(b.gen_dims, vec![100, 200, 300]);
        assert_eq!(b.gen_layout, GenLayout::Uniform);
        assert_eq!(b.ranks, vec![32]);
        assert!(b.no_ttmc);
        let b = bench(&["--gen-nnz", "1000"]);
        assert_eq!((b.gen_seed, b.gen_layout), (1, GenLayout::BlockDense));
        assert_eq!(b.gen_dims, vec![4096; 3]);
    }

    #[test]
    fn bench_refuses_bad_combinations() {
        for bad in [
            &["--launch", "both"][..],
            &["--gen-nnz", "10", "x.tns"],
            &["--gen-seed", "3"],
            &["--no-ttmc", "--ttmc-ranks", "8"],
        ] {
            let mut v = vec!["sptmc", "bench"];
            v.extend_from_slice(bad);
            assert!(Cli::try_parse_from(v).is_err(), "{bad:?}");
        }
    }
}
