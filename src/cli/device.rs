//! `sptmc selftest`, `sptmc bench`, `sptmc tune`.

use super::args::{BenchArgs, SelftestArgs};
use super::engine;
use super::load::load;
use sptmc::tools::selftest::{self, SelftestCase};
use sptmc::tools::{bench, cases};
use sptmc::{Error, Result};

pub use super::tune::tune;
use std::process::ExitCode;

/// Every op and mode against the FP64 reference.
pub fn selftest(a: SelftestArgs) -> Result<ExitCode> {
    let engine = engine(&a.common)?;
    if engine.kind() == sptmc::engine::BackendKind::Cuda
        && sptmc::engine::cuda::kernels::embedded().is_empty()
    {
        return Err(Error::Unsupported(format!(
            "this sptmc carries no GPU kernels ({}): build it after scripts/kernel-gate.sh \
             so the sm_80/sm_90 cubins are embedded",
            sptmc::engine::cuda::KERNEL_BUILD
        )));
    }
    let runs = selftest::default_runs();
    let mut cases = selftest::generated_cases(a.dim, a.nnz, &runs)?;
    for f in &a.files {
        let l = load(Some(f), !a.no_cache)?;
        eprintln!("sptmc: {}", l.note);
        // TTMc output grows as rank^(order-1): keep 4th-order and higher at rank 8.
        let runs = if l.tensor.order() > 3 {
            runs.iter()
                .copied()
                .filter(|&(op, r)| op == sptmc::Op::Mttkrp || r <= 8)
                .collect()
        } else {
            runs.clone()
        };
        cases.push(SelftestCase {
            name: l.name,
            tensor: l.tensor,
            runs,
            factors: cases::FactorKind::Uniform,
        });
    }
    let report = selftest::run(&engine, &cases)?;
    if a.common.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.table());
    }
    if report.passed() {
        eprintln!("sptmc: selftest passed");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("sptmc: selftest FAILED");
        Ok(ExitCode::from(3))
    }
}

/// Kernel timings: per op, rank and mode, on the given files, on one generated tensor
/// (`--gen-nnz`) or on generated tensors of every regime; on CUDA also kernel-only
/// times and the device copy rate.
pub fn bench(a: BenchArgs) -> Result<ExitCode> {
    if a.reps == 0 {
        return Err(Error::InvalidOption("--reps must be at least 1".into()));
    }
    let engine = engine(&a.common)?;
    // Refuses an unsupported launch before minutes of generating or reading.
    let engine = match a.launch {
        None => engine,
        Some(l) => engine.with_launch(l.into())?,
    };
    let cases = if let Some(nnz) = a.gen_nnz {
        eprintln!(
            "sptmc: generating {nnz} nonzeros ({}, dims {:?}, seed {})",
            a.gen_layout, a.gen_dims, a.gen_seed
        );
        vec![cases::generated_case(
            nnz,
            a.gen_seed,
            &a.gen_dims,
            a.gen_layout,
        )?]
    } else if a.files.is_empty() {
        bench::default_cases()?
    } else {
        a.files
            .iter()
            .map(|f| cases::Case::from_file(f))
            .collect::<Result<Vec<_>>>()?
    };
    let opts = bench::BenchOptions {
        reps: a.reps,
        threshold: a.threshold,
        mttkrp_ranks: a.ranks,
        ttmc_ranks: if a.no_ttmc { Vec::new() } else { a.ttmc_ranks },
        copy_bytes: a.copy_bytes,
        ..Default::default()
    };
    let report = bench::run(&engine, &cases, &opts, &mut |msg| eprintln!("sptmc: {msg}"))?;
    if a.common.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.table());
    }
    Ok(ExitCode::SUCCESS)
}
