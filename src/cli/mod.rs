//! What each subcommand does; `args` has the options.

pub mod args;
mod common;
mod complete;
mod cp_apr;
mod decomp;
mod device;
mod dist;
mod gcp;
mod kernel;
mod load;
mod output;
mod tune;

use args::{BackendArg, Cli, Command, Common};
use sptmc::driver::sig5;
use sptmc::driver::{Events, Preparation};
use sptmc::engine::profile::Profiles;
use sptmc::engine::{BackendChoice, Engine, Prepared};
use sptmc::{Error, Result};
use std::ops::ControlFlow;
use std::process::ExitCode;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Cp(a) => decomp::cp(a),
        Command::Tucker(a) => decomp::tucker(a),
        Command::CpApr(a) => cp_apr::cp_apr(a),
        Command::Gcp(a) => gcp::gcp(a),
        Command::Mttkrp(a) => kernel::kernel(sptmc::Op::Mttkrp, a),
        Command::Ttmc(a) => kernel::kernel(sptmc::Op::Ttmc, a),
        Command::Phi(a) => kernel::kernel(sptmc::Op::Phi, a),
        Command::Info(a) => kernel::info(a),
        Command::Selftest(a) => device::selftest(a),
        Command::Bench(a) => device::bench(a),
        Command::Tune(a) => device::tune(a),
        Command::Convert(a) => kernel::convert(a),
        Command::Complete(a) => complete::complete(a),
        Command::Predict(a) => complete::predict(a),
    }
}

/// Sets up the backend (its switches from the environment, the CPU's threads from
/// `--threads`); prints the engine's notice (e.g. why not CUDA) on stderr unless JSON
/// was asked for.
pub fn engine(common: &Common) -> Result<Engine> {
    if common.threads == Some(0) {
        return Err(Error::InvalidOption("--threads must be at least 1".into()));
    }
    let mut opts = sptmc::environment::engine_options();
    // Without --threads, RAYON_NUM_THREADS or the core count. The main thread joins the
    // CPU backend's pool (so `--threads 2` is the main thread and one worker): a kernel
    // call then starts on the calling thread at once instead of being handed to a
    // worker that may be asleep, whose wake-up can cost as much as a small kernel
    // (bench/results/2026-11-22-cpu-call-overheads).
    opts.cpu.threads = common.threads;
    opts.cpu.use_current_thread = true;
    let choice = match common.backend {
        BackendArg::Auto => BackendChoice::Auto,
        BackendArg::Cpu => BackendChoice::Cpu,
        BackendArg::Cuda => BackendChoice::Cuda,
    };
    let engine = Engine::choose_with(choice, &opts)?
        .with_profiles(profiles())
        .with_values(common.values);
    if let Some(n) = engine.notice() {
        eprintln!("sptmc: {n}");
    }
    eprintln!("sptmc: backend {}", engine.backend().describe());
    Ok(engine)
}

/// The tuning profiles every front end reads ([`sptmc::driver::tuning::profiles`]), a
/// file that cannot be read or parsed skipped with a warning naming it.
fn profiles() -> Profiles {
    let (profiles, skipped) = sptmc::driver::tuning::profiles();
    for why in skipped {
        eprintln!("sptmc: warning: tuning profile skipped: {why}");
    }
    profiles
}

/// Says which tile threshold each op of `p` got and where it came from.
pub fn say_thresholds(p: &sptmc::engine::Prepared) {
    for (op, c) in p.thresholds() {
        eprintln!("sptmc: {op} tile threshold {} ({})", c.threshold, c.source);
    }
}

/// What a model's command tells on stderr while the driver runs it: the thresholds
/// and precision of the preparation, then `header` (given the prepared tensor), then
/// `line` of every step unless `quiet` (the output is JSON).
pub struct Told<'a, S> {
    /// No step lines.
    pub quiet: bool,
    /// The line saying what runs on what, after the preparation.
    pub header: &'a dyn Fn(&Prepared) -> String,
    /// The progress line of a step.
    pub line: fn(&S) -> String,
}

impl<S> Events<S> for Told<'_, S> {
    fn prepared(&mut self, p: &Preparation) {
        say_thresholds(&p.prepared);
        if let Ok(stats) = p.stats() {
            load::report_precision(stats);
        }
        let values = p.stats().map_or_else(
            |_| String::new(),
            |s| format!(", values {} ({})", s.values, s.value_note()),
        );
        eprintln!("sptmc: {}{values}", (self.header)(&p.prepared));
    }

    fn step(&mut self, s: &S) -> ControlFlow<()> {
        if !self.quiet {
            eprintln!("{}", (self.line)(s));
        }
        ControlFlow::Continue(())
    }
}

/// Prints `value` as pretty JSON on stdout; an object gets the run's planned memory
/// (`planned_bytes`, the largest plan checked) and its peak resident memory so far
/// (`peak_rss_bytes`, where the system tells it).
pub fn print_json(value: &serde_json::Value) {
    let mut value = value.clone();
    if let Some(o) = value.as_object_mut() {
        o.insert(
            "planned_bytes".into(),
            sptmc::memplan::largest_checked().into(),
        );
        if let Some(peak) = sptmc::memplan::peak_rss() {
            o.insert("peak_rss_bytes".into(), peak.into());
        }
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&value).expect("JSON values serialize")
    );
}
