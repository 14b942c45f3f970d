//! The kernel benchmark of `sptmc::bench` on the synthetic cases and the shared tensors,
//! printed as a table (and written as JSON with `--json FILE`); what `sptmc bench` will
//! print once the command line has the subcommand.
//!
//! ```text
//! RAYON_NUM_THREADS=2 cargo run --release --example bench_report -- [--reps 5]
//!     [--only NAME]... [--no-synthetic] [--no-shared] [--json FILE]
//! ```

use clap::Parser;
use sptmc::bench::{BenchOptions, default_cases, run, shared_cases, shared_data_dir};
use sptmc::engine::{BackendChoice, Engine};

#[derive(Parser)]
#[command(about = "MTTKRP and TTMc on every mode: time, throughput, bandwidth, mode evenness")]
struct Args {
    /// Timed repetitions per op, rank and mode.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Only the cases with these names (repeatable).
    #[arg(long)]
    only: Vec<String>,
    /// Leave out the synthetic cases.
    #[arg(long)]
    no_synthetic: bool,
    /// Leave out the shared tensors.
    #[arg(long)]
    no_shared: bool,
    /// Also write the report as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Backend: cpu, cuda or auto.
    #[arg(long, default_value = "cpu")]
    backend: String,
}

fn main() {
    if let Err(e) = go(Args::parse()) {
        eprintln!("bench_report: {e}");
        std::process::exit(1);
    }
}

fn go(args: Args) -> sptmc::Result<()> {
    let choice = match args.backend.as_str() {
        "cpu" => BackendChoice::Cpu,
        "cuda" => BackendChoice::Cuda,
        "auto" => BackendChoice::Auto,
        b => return Err(sptmc::Error::InvalidOption(format!("unknown backend {b}"))),
    };
    let engine = Engine::choose(choice)?;
    if let Some(n) = engine.notice() {
        eprintln!("{n}");
    }
    let mut cases = Vec::new();
    if !args.no_synthetic {
        cases.extend(default_cases()?);
    }
    if !args.no_shared {
        match shared_data_dir() {
            Some(dir) => cases.extend(shared_cases(&dir)?),
            None => eprintln!("SKIPPED shared tensors: no ../shared/data and no SPTMC_DATA_DIR"),
        }
    }
    if !args.only.is_empty() {
        cases.retain(|c| args.only.contains(&c.name));
    }
    let opts = BenchOptions {
        reps: args.reps,
        ..BenchOptions::default()
    };
    let report = run(&engine, &cases, &opts, &mut |line| eprintln!("{line}"))?;
    println!("{}", report.table());
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json()).map_err(|e| sptmc::Error::io(path, e))?;
    }
    Ok(())
}
