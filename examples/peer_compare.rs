//! All-mode sparse MTTKRP, sptmc (CPU engine) beside pyttb on the same `.tns` files and
//! the same factors, with SPLATT's figures from the shared BASELINES.md quoted next to
//! them (SPLATT is not run here). `scripts/compare-peers.sh` runs this with 2 threads.
//!
//! ```text
//! cargo run --release --example peer_compare -- [--rank 32] [--reps 5] [--pyttb-reps 3]
//!     [--seed 1] [--out DIR] [--python PY] FILE.tns[.gz]...
//! ```
//!
//! Per file it prints and writes (`DIR/results.md`, `DIR/results.json`): our median
//! all-mode seconds (sum of every mode's MTTKRP, one untimed warm-up first), pyttb's
//! median, their ratio, the worst SMAPE over modes of ours against pyttb (FP64), our
//! prepared bytes over COO bytes, our slowest/fastest mode, and SPLATT's figure.

use clap::Parser;
use sptmc::accuracy::compare;
use sptmc::engine::{Engine, Workload};
use sptmc::tools::bench::peers;
use sptmc::tools::cases::Case;
use sptmc::tools::measure::{Samples, build_commit, measure_interleaved, utc_now};
use sptmc::{Matrix, Op};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Parser)]
#[command(about = "sptmc vs pyttb all-mode MTTKRP on .tns files")]
struct Args {
    /// FROSTT .tns or .tns.gz files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Rank of every factor.
    #[arg(long, default_value_t = 32)]
    rank: usize,
    /// Timed all-mode repetitions of ours.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Timed all-mode repetitions of pyttb.
    #[arg(long, default_value_t = 3)]
    pyttb_reps: usize,
    /// Seed of the random factors.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where results.md and results.json go.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Python with pyttb (default: .venv/bin/python, then python3).
    #[arg(long)]
    python: Option<PathBuf>,
}

/// SPLATT v2.0.0 all-mode MTTKRP at rank 32, 2 threads, seconds (low, high), from the
/// shared BASELINES.md table for this machine kind.
fn splatt_r32(name: &str) -> Option<(f64, f64)> {
    Some(match name {
        "movielens-100k" => (0.0020, 0.0020),
        "movielens-latest-small-4d" => (0.0060, 0.0060),
        "movielens-10m-tags-4d" => (0.0215, 0.0215),
        "uboot-commitwords-3d" => (0.090, 0.109),
        "atp-matches-4d" => (0.083, 0.086),
        "powerlaw-10m" => (0.87, 0.96),
        "blocky-10m" => (0.10, 0.15),
        _ => return None,
    })
}

#[derive(serde::Serialize)]
struct Row {
    tensor: String,
    dims: Vec<usize>,
    nnz: usize,
    rank: usize,
    prepare_s: f64,
    bytes_vs_coo: f64,
    dense_share: f64,
    ours_median_s: f64,
    ours_min_s: f64,
    ours_per_mode_median_s: Vec<f64>,
    mode_independence: f64,
    pyttb_median_s: Option<f64>,
    pyttb_min_s: Option<f64>,
    pyttb_over_ours: Option<f64>,
    worst_smape_percent: Option<f64>,
    worst_rel_frobenius: Option<f64>,
    splatt_r32_s: Option<(f64, f64)>,
    splatt_over_ours: Option<(f64, f64)>,
    pyttb_error: Option<String>,
}

fn main() {
    // As `sptmc` does: the main thread is one of the pool's threads, so each kernel
    // call starts on it directly (see src/cli/mod.rs).
    let _ = rayon::ThreadPoolBuilder::new()
        .use_current_thread()
        .build_global();
    if let Err(e) = run(Args::parse()) {
        eprintln!("peer_compare: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> sptmc::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = match args.python.clone() {
        Some(p) => Ok(p),
        None => peers::find_python(root),
    };
    if let Err(why) = &python {
        eprintln!("pyttb not available, running ours only: {why}");
    }
    let script = root.join("scripts/peer_mttkrp.py");
    let engine = Engine::cpu();
    let work = tempfile::tempdir().map_err(|e| sptmc::Error::io(std::env::temp_dir(), e))?;
    let started = utc_now();
    eprintln!(
        "{}; rank {}; ours median of {}, pyttb median of {}",
        engine.backend().describe(),
        args.rank,
        args.reps,
        args.pyttb_reps
    );
    let mut rows = Vec::new();
    for file in &args.files {
        let case = Case::from_file(file)?;
        let x = &case.tensor;
        let t = Instant::now();
        let p = engine.prepare(
            x,
            &[Workload {
                op: Op::Mttkrp,
                rank: args.rank,
            }],
        )?;
        let prepare_s = t.elapsed().as_secs_f64();
        let factors = Matrix::random_factors(x.dims(), &vec![args.rank; x.order()], args.seed);

        // Ours: one warm-up pass, then `reps` timed all-mode passes, the modes of a pass
        // in turn. Each mode's output is reused across passes (`run_into`, as CP-ALS
        // calls the kernel): a fresh output per call adds the first-touch page faults
        // of its allocation (bench/results/2026-11-22-cpu-call-overheads).
        let mut outs: Vec<Matrix> = vec![Matrix::zeros(0, 0); x.order()];
        let per_mode = measure_interleaved(args.reps.max(1), x.order(), |m| {
            engine.run_into(Op::Mttkrp, &p, m, &factors, &mut outs[m])?;
            engine.backend().synchronize()?;
            Ok(None)
        })?;
        let totals = Samples::of(
            (0..args.reps.max(1))
                .map(|r| per_mode.iter().map(|s| s.runs[r]).sum())
                .collect(),
        );
        let (ours_median_s, ours_min_s) = (totals.median, totals.min);
        let per_mode_med: Vec<f64> = per_mode.iter().map(|s| s.median).collect();
        let slow = per_mode_med.iter().cloned().fold(0.0, f64::max);
        let fast = per_mode_med.iter().cloned().fold(f64::INFINITY, f64::min);
        let stats = p.hls(Op::Mttkrp)?.stats().clone();

        let mut row = Row {
            tensor: case.name.clone(),
            dims: x.dims().to_vec(),
            nnz: x.nnz(),
            rank: args.rank,
            prepare_s,
            bytes_vs_coo: p.bytes() as f64 / x.coo_bytes() as f64,
            dense_share: stats.dense_share(),
            ours_median_s,
            ours_min_s,
            ours_per_mode_median_s: per_mode_med,
            mode_independence: slow / fast,
            pyttb_median_s: None,
            pyttb_min_s: None,
            pyttb_over_ours: None,
            worst_smape_percent: None,
            worst_rel_frobenius: None,
            splatt_r32_s: None,
            splatt_over_ours: None,
            pyttb_error: None,
        };
        if args.rank == 32 {
            row.splatt_r32_s = splatt_r32(&case.name);
            row.splatt_over_ours = row
                .splatt_r32_s
                .map(|(lo, hi)| (lo / ours_median_s, hi / ours_median_s));
        }
        if let Ok(py) = &python {
            let res = peers::run_pyttb_mttkrp(
                py,
                &script,
                file,
                &factors,
                args.rank,
                args.seed,
                args.pyttb_reps,
                &work.path().join(&case.name),
            )
            .and_then(|run| {
                let mut worst = (0f64, 0f64);
                for (want, got) in run.results.iter().zip(&outs) {
                    let a = compare(want, got)?;
                    worst = (worst.0.max(a.smape_percent), worst.1.max(a.rel_frobenius));
                }
                Ok((run, worst))
            });
            match res {
                Ok((run, (smape, frob))) => {
                    row.pyttb_median_s = Some(run.all_modes_median_s);
                    row.pyttb_min_s = Some(run.all_modes_min_s);
                    row.pyttb_over_ours = Some(run.all_modes_median_s / ours_median_s);
                    row.worst_smape_percent = Some(smape);
                    row.worst_rel_frobenius = Some(frob);
                }
                Err(e) => row.pyttb_error = Some(e.to_string()),
            }
        }
        eprintln!("{}", line(&row));
        rows.push(row);
    }
    let md = markdown(&rows, &engine.backend().describe(), &started);
    println!("{md}");
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).map_err(|e| sptmc::Error::io(out, e))?;
        let write = |name: &str, text: String| {
            let path = out.join(name);
            std::fs::write(&path, text).map_err(|e| sptmc::Error::io(&path, e))
        };
        write("results.md", md)?;
        let json = serde_json::json!({
            "date": started,
            "device": engine.backend().describe(),
            "threads": rayon::current_num_threads(),
            "commit": build_commit(),
            "rank": args.rank,
            "seed": args.seed,
            "ours_reps": args.reps,
            "pyttb_reps": args.pyttb_reps,
            "splatt_source": "SPLATT (BASELINES.md, measured on an AMD EPYC machine): v2.0.0, `splatt bench X.tns -a csf -r 32 -t 2 -i 5`; not run here",
            "rows": rows,
        });
        write(
            "results.json",
            serde_json::to_string_pretty(&json).expect("plain data serializes"),
        )?;
    }
    Ok(())
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".to_string(), f)
}

fn range(v: Option<(f64, f64)>, digits: usize) -> String {
    match v {
        None => "-".into(),
        Some((a, b)) if (a - b).abs() < 1e-12 => format!("{a:.digits$}"),
        Some((a, b)) => format!("{a:.digits$}–{b:.digits$}"),
    }
}

fn line(r: &Row) -> String {
    format!(
        "{}: ours {:.4} s, pyttb {} s, SMAPE {}%, SPLATT {} s",
        r.tensor,
        r.ours_median_s,
        opt(r.pyttb_median_s, |v| format!("{v:.3}")),
        opt(r.worst_smape_percent, |v| format!("{v:.2e}")),
        range(r.splatt_r32_s, 4)
    )
}

fn markdown(rows: &[Row], device: &str, date: &str) -> String {
    let mut s = format!(
        "All-mode sparse MTTKRP, rank {}, {date}, {device}.\n\
         ours = sptmc CPU engine, median over runs of the sum of every mode (each mode's output buffer reused across runs); pyttb = `sptensor.mttkrp` \
         on the same factors; SPLATT = SPLATT (BASELINES.md, measured on an AMD EPYC machine), not run here.\n\n",
        rows.first().map_or(0, |r| r.rank)
    );
    s += "| tensor | nnz | ours s | pyttb s | pyttb/ours | SMAPE % (worst mode) | SPLATT s | SPLATT/ours | bytes/COO | dense share | slowest/fastest mode |\n";
    s += "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for r in rows {
        s += &format!(
            "| {} | {} | {:.4} | {} | {} | {} | {} | {} | {:.1}% | {:.1}% | {:.2} |\n",
            r.tensor,
            r.nnz,
            r.ours_median_s,
            opt(r.pyttb_median_s, |v| format!("{v:.3}")),
            opt(r.pyttb_over_ours, |v| format!("{v:.1}×")),
            opt(r.worst_smape_percent, |v| format!("{v:.2e}")),
            range(r.splatt_r32_s, 4),
            range(r.splatt_over_ours, 2),
            100.0 * r.bytes_vs_coo,
            100.0 * r.dense_share,
            r.mode_independence
        );
    }
    for r in rows {
        if let Some(e) = &r.pyttb_error {
            s += &format!("\npyttb failed on {}: {e}\n", r.tensor);
        }
    }
    s
}
