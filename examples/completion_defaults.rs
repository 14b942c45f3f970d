//! Completion with its defaults on the grid of generated low-rank problems (truth
//! ranks 3 and 8, offsets 0 and 2, value scales ×0.01, ×1 and ×100, 10 % and 25 % of
//! a 120 × 100 × 80 tensor observed, noise σ = 5 % of the values' spread), every
//! solver, the model's rank = the truth's (or `--rank`) and every other option at its
//! default; and, when the shared data hold it, MovieLens-100k 80/10/10 at rank 16
//! against the bias baseline over three seeds. Writes a Markdown table.
//!
//! ```text
//! cargo run --release --example completion_defaults -- [--out FILE] [--seed 1]
//!     [--threads 2] [--movielens FILE | --no-movielens] [--rank R]
//! ```

#[path = "../tests/support/low_rank.rs"]
mod low_rank;

use clap::Parser;
use low_rank::{Case, draw};
use sptmc::decomp::completion::{Baselines, split};
use sptmc::decomp::{CompletionOptions, Solver, complete};
use sptmc::engine::{CpuOptions, Engine, Workload};
use sptmc::tools::measure::{build_commit, utc_now};
use sptmc::{CooTensor, Op};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(about = "completion defaults on generated low-rank tensors and MovieLens-100k")]
struct Args {
    /// Where to write the Markdown table (default: stdout only).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seed of the generated problems (and of the runs).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// CPU worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// MovieLens-100k as .tns(.gz) (default: the shared data's, when present).
    #[arg(long)]
    movielens: Option<PathBuf>,
    /// The model's rank on the generated tensors (default: the truth's rank).
    #[arg(long)]
    rank: Option<usize>,
    /// Skip MovieLens-100k.
    #[arg(long)]
    no_movielens: bool,
}

/// One run: the model's test RMSE, its λ, epochs and seconds.
fn run(
    engine: &Engine,
    train: &CooTensor,
    validation: &CooTensor,
    test: &CooTensor,
    rank: usize,
    solver: Solver,
    seed: u64,
) -> sptmc::Result<(f64, f64, usize, f64)> {
    let p = engine.prepare(
        train,
        &[Workload {
            op: Op::Completion,
            rank,
        }],
    )?;
    let o = CompletionOptions {
        rank,
        solver,
        seed,
        ..CompletionOptions::default()
    };
    let t = Instant::now();
    let m = complete(engine, &p, validation, &o)?;
    let secs = t.elapsed().as_secs_f64();
    let rmse = m.rmse(test)?.unwrap_or(f64::NAN);
    Ok((rmse, m.lambda, m.epochs.len(), secs))
}

fn main() -> sptmc::Result<()> {
    let a = Args::parse();
    let engine = Engine::cpu_with(CpuOptions {
        threads: Some(a.threads),
        ..CpuOptions::default()
    })?;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Completion with its defaults\n\n{} · commit {} · CPU, {} threads · {} profile · `cargo run{} --example completion_defaults -- {}`\n",
        utc_now(),
        build_commit(),
        a.threads,
        if cfg!(debug_assertions) {
            "dev"
        } else {
            "release"
        },
        if cfg!(debug_assertions) {
            ""
        } else {
            " --release"
        },
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    );
    let model_rank = match a.rank {
        Some(r) => format!("Model rank {r}"),
        None => "Model rank = truth rank".into(),
    };
    let _ = writeln!(
        md,
        "Generated 120 × 100 × 80 tensors: `scale · (CP_R + offset)`, factors uniform in [0, 1), \
         noise σ = 5 % of the values' spread, split 80/10/10. {model_rank}, every other \
         option at its default (λ chosen on validation, SGD's rate from the data, biases). \
         Target: test RMSE ≤ 1.15 σ.\n"
    );
    let _ = writeln!(
        md,
        "| rank | offset | scale | observed | solver | test RMSE / σ | bias baseline / σ | λ chosen | epochs | seconds | ≤ 1.15 σ |\n|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|"
    );
    let (mut pass, mut total) = (0, 0);
    for rank in [3, 8] {
        for offset in [0.0, 2.0] {
            for scale in [0.01, 1.0, 100.0] {
                for observed in [0.1, 0.25] {
                    let case = Case {
                        dims: [120, 100, 80],
                        rank,
                        offset,
                        scale,
                        observed,
                        noise: 0.05,
                    };
                    let p = draw(&case, a.seed);
                    let s = &p.split;
                    let bias = Baselines::fit(&s.train)?
                        .bias_rmse(&s.test)
                        .unwrap_or(f64::NAN);
                    for solver in [Solver::Als, Solver::Ccd, Solver::Sgd] {
                        let (rmse, lambda, epochs, secs) = run(
                            &engine,
                            &s.train,
                            &s.validation,
                            &s.test,
                            a.rank.unwrap_or(rank),
                            solver,
                            a.seed,
                        )?;
                        let ok = rmse <= 1.15 * p.sigma;
                        total += 1;
                        pass += usize::from(ok);
                        let line = format!(
                            "| {rank} | {offset} | ×{scale} | {:.0} % | {solver} | {:.3} | {:.3} | {lambda:.3e} | {epochs} | {secs:.2} | {} |",
                            observed * 100.0,
                            rmse / p.sigma,
                            bias / p.sigma,
                            if ok { "yes" } else { "**no**" }
                        );
                        eprintln!("{line}");
                        let _ = writeln!(md, "{line}");
                    }
                }
            }
        }
    }
    let _ = writeln!(md, "\n{pass} of {total} runs within 1.15 σ.\n");
    let ml = a.movielens.clone().filter(|_| !a.no_movielens).or_else(|| {
        if a.no_movielens {
            return None;
        }
        let p = PathBuf::from("/work/shared/data/movielens-100k.tns.gz");
        p.exists().then_some(p)
    });
    match ml {
        None => {
            let _ = writeln!(md, "MovieLens-100k: not found (skipped).");
        }
        Some(path) => {
            let (x, _) = sptmc::tensor::tns::read(&path)?;
            let _ = writeln!(
                md,
                "## MovieLens-100k ({}), 80/10/10, rank 16, defaults\n\n| seed | solver | test RMSE | bias baseline | gain | λ chosen | epochs | seconds |\n|---:|---|---:|---:|---:|---:|---:|---:|",
                path.display()
            );
            for seed in [1, 2, 3] {
                let s = split(&x, [0.8, 0.1, 0.1], seed)?;
                let bias = Baselines::fit(&s.train)?
                    .bias_rmse(&s.test)
                    .unwrap_or(f64::NAN);
                for solver in [Solver::Als, Solver::Ccd, Solver::Sgd] {
                    let (rmse, lambda, epochs, secs) =
                        run(&engine, &s.train, &s.validation, &s.test, 16, solver, seed)?;
                    let line = format!(
                        "| {seed} | {solver} | {rmse:.4} | {bias:.4} | {:+.1} % | {lambda:.3e} | {epochs} | {secs:.2} |",
                        100.0 * (bias - rmse) / bias
                    );
                    eprintln!("{line}");
                    let _ = writeln!(md, "{line}");
                }
            }
        }
    }
    print!("{md}");
    if let Some(out) = &a.out {
        sptmc::model_io::write_file_atomically(out, |w| w.write_all(md.as_bytes()))?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}
