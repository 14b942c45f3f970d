//! Tunes the tile thresholds of a backend on this machine and writes the profile,
//! table, CSVs and JSON.
//!
//! ```text
//! cargo run --release --example tune -- [OUT_DIR] [--backend cpu|cuda|auto] \
//!     [--tuning-dir DIR] [--quick] [--note TEXT]
//! ```
//!
//! `OUT_DIR` (default `bench/results/tune`) receives `table.txt`, `sweep.csv`,
//! `verify.csv`, `report.json` and a copy of the profile; the profile itself goes to
//! `tuning/<device>.toml` (or `--tuning-dir`). `RAYON_NUM_THREADS` sets the threads.

use indicatif::{ProgressBar, ProgressStyle};
use sptmc::engine::{BackendChoice, Engine};
use sptmc::tune::{TuneOptions, tune};
use std::path::PathBuf;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut out = PathBuf::from("bench/results/tune");
    let mut backend = BackendChoice::Cpu;
    let mut tuning = PathBuf::from("tuning");
    let mut opts = TuneOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => opts = TuneOptions::quick(),
            "--tuning-dir" => tuning = args.next().ok_or("--tuning-dir needs a folder")?.into(),
            "--note" => opts.note = args.next().ok_or("--note needs text")?,
            "--backend" => {
                backend = match args.next().as_deref() {
                    Some("cpu") => BackendChoice::Cpu,
                    Some("cuda") => BackendChoice::Cuda,
                    Some("auto") => BackendChoice::Auto,
                    other => return Err(format!("--backend cpu|cuda|auto, got {other:?}").into()),
                }
            }
            _ if a.starts_with("--") => return Err(format!("unknown option {a}").into()),
            _ => out = a.into(),
        }
    }
    let engine = Engine::choose(backend)?;
    if let Some(n) = engine.notice() {
        eprintln!("{n}");
    }
    eprintln!("tuning {}", engine.backend().describe());
    let bar = ProgressBar::new(1);
    bar.set_style(ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} {msg}",
    )?);
    let report = tune(&engine, &opts, &mut |p| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(p.stage.to_string());
    })?;
    bar.finish_and_clear();

    std::fs::create_dir_all(&out)?;
    let profile = report.save_profile(&tuning)?;
    std::fs::write(out.join("profile.toml"), report.profile_toml())?;
    std::fs::write(out.join("table.txt"), report.table())?;
    std::fs::write(out.join("sweep.csv"), report.csv())?;
    std::fs::write(out.join("verify.csv"), report.verify_csv())?;
    std::fs::write(out.join("report.json"), report.json())?;
    print!("{}", report.table());
    println!(
        "\nprofile: {}\nresults: {}\nduration: {:.1} s",
        profile.display(),
        out.display(),
        report.duration_s
    );
    Ok(())
}
