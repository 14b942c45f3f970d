//! The `sptmc` command line: CP and Tucker models of sparse tensors, the raw kernels
//! with an accuracy check, tensor statistics, self-test, benchmarks and tuning.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // A bug must not print a backtrace at a user: one line, and a non-zero exit.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("sptmc: internal error: {info}");
    }));
    let args = cli::args::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sptmc: error: {e}");
            ExitCode::from(1)
        }
    }
}
