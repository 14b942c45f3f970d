//! `sptmc tune`: measure the tile thresholds of this device, write its profile and the
//! measurements, and optionally time T/2, T and 2T on real tensors.

use super::args::TuneArgs;
use super::engine;
use super::load::load;
use indicatif::{ProgressBar, ProgressStyle};
use sptmc::tools::tune::{TuneOptions, VERIFY_CSV_HEADER, tune as run_tune, verify_threshold};
use sptmc::{Error, Result};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

/// Tunes, saves the profile under `--tuning-dir` and the measurements under `--results`.
pub fn tune(a: TuneArgs) -> Result<ExitCode> {
    let engine = engine(&a.common)?;
    let mut opts = if a.quick {
        TuneOptions::quick()
    } else {
        TuneOptions::default()
    };
    opts.ranks_mttkrp = a.ranks.clone();
    opts.ranks_ttmc = a.ttmc_ranks.clone();
    opts.note = a.note.clone();
    opts.validate()?;
    let bar = ProgressBar::new(1);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template"),
    );
    let report = run_tune(&engine, &opts, &mut |p| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(p.stage.to_string());
    })?;
    bar.finish_and_clear();

    let out = &a.results;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let profile = report.save_profile(&a.tuning_dir)?;
    write(&out.join("profile.toml"), &report.profile_toml())?;
    write(&out.join("table.txt"), &report.table())?;
    write(&out.join("sweep.csv"), &report.csv())?;
    write(&out.join("verify.csv"), &report.verify_csv())?;
    write(&out.join("report.json"), &report.json())?;
    print!("{}", report.table());

    let mut csv = String::from(VERIFY_CSV_HEADER);
    let mut txt = String::new();
    for path in &a.tns {
        let l = load(Some(path), true)?;
        let x = &l.tensor;
        if x.order() != 3 {
            let _ = writeln!(txt, "{}: order {}, no tiles: skipped", l.name, x.order());
            continue;
        }
        let _ = writeln!(txt, "{}: dims {:?}, {} nonzeros", l.name, x.dims(), x.nnz());
        for r in &report.results {
            let t = r.crossover.threshold;
            for v in verify_threshold(&engine, x, &l.name, r.op, r.rank, t, opts.repetitions)? {
                csv += &v.csv_line(r.op, r.rank);
                let _ = writeln!(txt, "  {} rank {:>2} {}", r.op, r.rank, v.text());
            }
        }
    }
    if !a.tns.is_empty() {
        write(&out.join("real.csv"), &csv)?;
        write(&out.join("real.txt"), &txt)?;
        print!("\nreal tensors\n{txt}");
    }
    println!(
        "\nprofile: {}\nresults: {}\nduration: {:.1} s",
        profile.display(),
        out.display(),
        report.duration_s
    );
    Ok(ExitCode::SUCCESS)
}
