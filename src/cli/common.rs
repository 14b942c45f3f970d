//! The options every computing command shares (backend, threads, output form, how
//! values are stored).

use clap::{Args, ValueEnum};
use sptmc::engine::{THREADS_PER_CORE, most_cpu_threads};
use sptmc::hls::ValueChoice;

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
    /// Worker threads of the CPU backend (default: all cores, or RAYON_NUM_THREADS);
    /// at most 4 per core.
    #[arg(long, value_parser = parse_threads)]
    pub threads: Option<usize>,
    /// Machine-readable JSON on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// How the tensor's values are stored: auto (fp16 where it holds every value
    /// exactly, else f32), f16 (smallest and fastest, rounds to 11 bits) or f32.
    #[arg(long, default_value_t = ValueChoice::Auto)]
    pub values: ValueChoice,
}

/// `--threads`: from 1 to [`most_cpu_threads`] (the CPU backend's own rule, told here
/// as the option's error).
fn parse_threads(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    let (most, cores) = most_cpu_threads();
    match n {
        0 => Err("must be at least 1".into()),
        n if n > most => Err(format!(
            "at most {most} ({THREADS_PER_CORE} per core; this machine has {cores}): more threads only wait for the cores"
        )),
        n => Ok(n),
    }
}
