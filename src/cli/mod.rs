//! What each subcommand does; `args` has the options.

pub mod args;
mod decomp;
mod device;
mod kernel;
mod load;
mod tune;

use args::{BackendArg, Cli, Command, Common};
use sptmc::engine::{BackendChoice, Engine};
use sptmc::{Error, Result};
use std::process::ExitCode;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Cp(a) => decomp::cp(a),
        Command::Tucker(a) => decomp::tucker(a),
        Command::Mttkrp(a) => kernel::kernel(sptmc::Op::Mttkrp, a),
        Command::Ttmc(a) => kernel::kernel(sptmc::Op::Ttmc, a),
        Command::Info(a) => kernel::info(a),
        Command::Selftest(a) => device::selftest(a),
        Command::Bench(a) => device::bench(a),
        Command::Tune(a) => device::tune(a),
    }
}

/// Sets up threads and the backend; prints the engine's notice (e.g. why not CUDA) on
/// stderr unless JSON was asked for.
pub fn engine(common: &Common) -> Result<Engine> {
    if let Some(n) = common.threads {
        if n == 0 {
            return Err(Error::InvalidOption("--threads must be at least 1".into()));
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| Error::InvalidOption(format!("--threads: {e}")))?;
    }
    let choice = match common.backend {
        BackendArg::Auto => BackendChoice::Auto,
        BackendArg::Cpu => BackendChoice::Cpu,
        BackendArg::Cuda => BackendChoice::Cuda,
    };
    let engine = Engine::choose(choice)?;
    if let Some(n) = engine.notice() {
        eprintln!("sptmc: {n}");
    }
    eprintln!("sptmc: backend {}", engine.backend().describe());
    Ok(engine)
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON values serialize")
    );
}
