//! CP-ALS on a `.tns` / `.tns.gz` file with per-iteration timings.
//!
//! `cargo run --release --example cp_als -- FILE [RANK] [ITERS]` (defaults 16 and 20;
//! tolerance 0 so every iteration runs; seed 1).

use flate2::read::GzDecoder;
use sptmc::decomp::{CpOptions, cp_als_with_progress};
use sptmc::engine::{Engine, Workload};
use sptmc::{CooTensor, Op};
use std::io::{BufRead, BufReader, Read};

fn read_tns(path: &str) -> Result<CooTensor, Box<dyn std::error::Error>> {
    let file = std::fs::File::open(path)?;
    let reader: Box<dyn Read> = if path.ends_with(".gz") {
        Box::new(GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut idx: Vec<Vec<u32>> = Vec::new();
    let mut vals = Vec::new();
    for (n, line) in BufReader::new(reader).lines().enumerate() {
        let line = line?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() || fields[0].starts_with('#') {
            continue;
        }
        if idx.is_empty() {
            idx = vec![Vec::new(); fields.len() - 1];
        }
        if fields.len() != idx.len() + 1 {
            return Err(format!("{path}:{}: expected {} fields", n + 1, idx.len() + 1).into());
        }
        for (m, f) in fields[..idx.len()].iter().enumerate() {
            let i: u32 = f.parse()?;
            if i == 0 {
                return Err(format!("{path}:{}: index 0 in a 1-based file", n + 1).into());
            }
            idx[m].push(i - 1);
        }
        vals.push(fields[idx.len()].parse::<f64>()?);
    }
    let dims = idx
        .iter()
        .map(|ix| ix.iter().max().map_or(1, |&i| i as usize + 1))
        .collect();
    let mut t = CooTensor::new(dims, idx, vals)?;
    t.sum_duplicates();
    Ok(t)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args.first().ok_or("usage: cp_als FILE [RANK] [ITERS]")?;
    let rank: usize = args.get(1).map_or(Ok(16), |s| s.parse())?;
    let iters: usize = args.get(2).map_or(Ok(20), |s| s.parse())?;
    let x = read_tns(path)?;
    let engine = Engine::cpu();
    let p = engine.prepare(
        &x,
        &[Workload {
            op: Op::Mttkrp,
            rank,
        }],
    )?;
    println!(
        "{path}: dims {:?}, {} nnz, prepared in {:.3} s on {}",
        x.dims(),
        x.nnz(),
        p.build_time().as_secs_f64(),
        engine.backend().describe()
    );
    let opts = CpOptions {
        rank,
        max_iters: iters,
        tol: 0.0,
        seed: 1,
        init: None,
    };
    let model = cp_als_with_progress(&engine, &p, &opts, &mut |s| {
        println!(
            "iter {:3}  fit {:.6}  delta {:+.2e}  kernel {:.4} s  linalg {:.4} s  other {:.4} s",
            s.iter, s.fit, s.delta, s.seconds_kernel, s.seconds_linalg, s.seconds_other
        )
    })?;
    let n = model.iters.len() as f64;
    let sum = |f: fn(&sptmc::decomp::IterStats) -> f64| model.iters.iter().map(f).sum::<f64>() / n;
    println!(
        "rank {rank}: fit {:.6} after {} iterations; per iteration {:.4} s (kernel {:.4}, linalg {:.4}, other {:.4})",
        model.fit().unwrap_or(f64::NAN),
        model.iters.len(),
        sum(|s| s.seconds_kernel + s.seconds_linalg + s.seconds_other),
        sum(|s| s.seconds_kernel),
        sum(|s| s.seconds_linalg),
        sum(|s| s.seconds_other),
    );
    Ok(())
}
