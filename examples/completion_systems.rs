//! Times the CPU's completion ALS systems with biases
//! (`CompletionSession::bias_normal_equations`) per mode, and the loss pass over the
//! entries, on a tensor read from a `.tns` file: random factors in the bias layout,
//! `--calls` calls of each, min and median in µs. A kernel-level figure for the row
//! kernels, free of the solver's other work.
//!
//! ```text
//! cargo run --release --example completion_systems -- FILE [--threads 1] [--rank 16]
//!     [--calls 300]
//! ```

use clap::Parser;
use sptmc::engine::{CpuOptions, Engine};
use sptmc::{Matrix, Op};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(about = "time the CPU's completion ALS systems with biases, per mode")]
struct Args {
    /// The training entries (.tns or .tns.gz).
    file: PathBuf,
    /// CPU worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// CP rank (the systems have `rank + 1` unknowns).
    #[arg(long, default_value_t = 16)]
    rank: usize,
    /// Calls of each kernel.
    #[arg(long, default_value_t = 300)]
    calls: usize,
}

fn main() -> sptmc::Result<()> {
    let a = Args::parse();
    let (x, _) = sptmc::tensor::tns::read(&a.file)?;
    let engine = Engine::cpu_with(CpuOptions {
        threads: Some(a.threads),
        ..CpuOptions::default()
    })?;
    let p = engine.prepare_with_thresholds(&x, &[(Op::Completion, u32::MAX)])?;
    let (order, rank) = (x.order(), a.rank);
    let width = rank + order;
    // The bias layout: CP columns, then one bias column per mode (the mode's own bias
    // there, 1 in every other mode's).
    let mut f = Matrix::random_factors(x.dims(), &vec![width; order], 7);
    for (m, fm) in f.iter_mut().enumerate() {
        for row in fm.data_mut().chunks_exact_mut(width) {
            for (c, v) in row.iter_mut().enumerate().skip(rank) {
                if c != rank + m {
                    *v = 1.0;
                }
            }
        }
    }
    let mut s = engine.completion_session(&p, &f, 3.5)?;
    let (mut out, mut squares) = (Matrix::zeros(1, 1), Vec::new());
    // Every row of every mode, as ALS asks for the rows with entries of a mode.
    let rows: Vec<Vec<u32>> = (x.dims().iter())
        .map(|&d| (0..d).map(|i| i as u32).collect())
        .collect();
    let mut times = vec![Vec::with_capacity(a.calls); order + 1];
    for _ in 0..a.calls {
        for (mode, t) in times.iter_mut().take(order).enumerate() {
            let start = Instant::now();
            s.bias_normal_equations(mode, rank, &rows[mode], &mut out, &mut squares)?;
            t.push(start.elapsed().as_secs_f64() * 1e6);
        }
        let start = Instant::now();
        std::hint::black_box(s.loss()?);
        times[order].push(start.elapsed().as_secs_f64() * 1e6);
    }
    println!(
        "{}: {} nonzeros, rank {rank}, {} threads, {} calls",
        a.file.display(),
        x.nnz(),
        a.threads,
        a.calls
    );
    for (k, t) in times.iter_mut().enumerate() {
        t.sort_by(f64::total_cmp);
        let what = if k < order {
            format!("systems of mode {k}")
        } else {
            "loss pass".to_string()
        };
        println!(
            "{what:>18}: min {:8.0} µs, median {:8.0} µs",
            t[0],
            t[t.len() / 2]
        );
    }
    Ok(())
}
