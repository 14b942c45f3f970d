//! Tunes the tile thresholds of a backend on this machine and writes the profile,
//! table, CSVs and JSON.
//!
//! ```text
//! cargo run --release --example tune -- [OUT_DIR] [--backend cpu|cuda|auto] \
//!     [--tuning-dir DIR] [--quick] [--note TEXT] [--tns FILE]...
//! ```
//!
//! Each `--tns` tensor (3rd order; others have no tiles) is timed at `T/2`, `T` and
//! `2T` of every tuned op and rank into `real.csv` and `real.txt`.
//!
//! `OUT_DIR` (default `bench/results/tune`) receives `table.txt`, `sweep.csv`,
//! `verify.csv`, `report.json` and a copy of the profile; the profile itself goes to
//! `tuning/<device>.toml` (or `--tuning-dir`). `RAYON_NUM_THREADS` sets the threads.

use indicatif::{ProgressBar, ProgressStyle};
use sptmc::engine::{BackendChoice, Engine};
use sptmc::tune::run::verify_threshold;
use sptmc::tune::{TuneOptions, tune};
use std::fmt::Write as _;
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
    let mut tns: Vec<PathBuf> = Vec::new();
    let mut tuning = PathBuf::from("tuning");
    let mut opts = TuneOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => opts = TuneOptions::quick(),
            "--tuning-dir" => tuning = args.next().ok_or("--tuning-dir needs a folder")?.into(),
            "--tns" => tns.push(args.next().ok_or("--tns needs a file")?.into()),
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

    let mut csv = String::from(
        "op,rank,tensor,label,threshold,median_s,ratio_to_tuned,min_s,min_ratio_to_tuned,dense_tiles,dense_share\n",
    );
    let mut txt = String::new();
    for path in &tns {
        let (x, _) = sptmc::tensor::tns::read(path)?;
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        if x.order() != 3 {
            writeln!(txt, "{name}: order {}, no tiles: skipped", x.order())?;
            continue;
        }
        writeln!(txt, "{name}: dims {:?}, {} nonzeros", x.dims(), x.nnz())?;
        for r in &report.results {
            let t = r.crossover.threshold;
            for v in verify_threshold(&engine, &x, r.op, r.rank, t, opts.repetitions)? {
                writeln!(
                    csv,
                    "{},{},{name},{},{},{:.6e},{:.4},{:.6e},{:.4},{},{:.4}",
                    r.op,
                    r.rank,
                    v.label,
                    v.timing.threshold,
                    v.timing.median_s,
                    v.ratio_to_tuned,
                    v.timing.min_s,
                    v.min_ratio_to_tuned,
                    v.timing.dense_tiles,
                    v.timing.dense_share
                )?;
                writeln!(
                    txt,
                    "  {} rank {:>2} {:>3} = {:>5}: median {:>9.3} ms x{:.3} of T, min {:>9.3} ms x{:.3} (dense tiles {}, dense share {:.2}%)",
                    r.op,
                    r.rank,
                    v.label,
                    v.timing.threshold,
                    v.timing.median_s * 1e3,
                    v.ratio_to_tuned,
                    v.timing.min_s * 1e3,
                    v.min_ratio_to_tuned,
                    v.timing.dense_tiles,
                    v.timing.dense_share * 100.0
                )?;
            }
        }
    }
    if !tns.is_empty() {
        std::fs::write(out.join("real.csv"), &csv)?;
        std::fs::write(out.join("real.txt"), &txt)?;
        print!("\nreal tensors\n{txt}");
    }
    println!(
        "\nprofile: {}\nresults: {}\nduration: {:.1} s",
        profile.display(),
        out.display(),
        report.duration_s
    );
    Ok(())
}
