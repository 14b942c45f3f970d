//! Kernel benches: one criterion entry, a module per kernel (MTTKRP at ranks 16 and 32,
//! TTMc at 8 and 16 on every other mode), every mode, on the synthetic cases of
//! `sptmc::tools::bench::default_cases` and on every shared `.tns(.gz)` tensor.
//!
//! - Backend: `SPTMC_BACKEND=cpu|cuda|auto` (default `cpu`); the device is printed.
//! - Shared tensors: `$SPTMC_DATA_DIR`, else `../shared/data`; skipped with a visible
//!   line when absent.
//! - TTMc outputs over `SPTMC_BENCH_TTMC_CAP` floats (default 32M, 128 MiB) are skipped
//!   with a visible line (4th-order tensors at 16×16×16 columns).
//! - Throughput is nonzeros per second; the backend is synchronized inside the timing.
//! - Short by default (the machines are small): 10 samples, 2 s measurement each.
//!   Filter as usual, e.g. `cargo bench --bench kernels -- mttkrp/r32`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sptmc::Matrix;
use sptmc::engine::{BackendChoice, Engine, Prepared};
use sptmc::tools::bench::{BenchOptions, default_cases, prepare_for};
use sptmc::tools::cases::{shared_cases, shared_data_dir};
use std::time::Duration;

/// A tensor prepared once for both kernels.
struct Case {
    name: String,
    dims: Vec<usize>,
    nnz: u64,
    prepared: Prepared,
}

fn engine() -> Engine {
    let choice = match std::env::var("SPTMC_BACKEND").as_deref() {
        Ok("cuda") => BackendChoice::Cuda,
        Ok("auto") => BackendChoice::Auto,
        Ok("cpu") | Err(_) => BackendChoice::Cpu,
        Ok(other) => panic!("SPTMC_BACKEND must be cpu, cuda or auto, not {other:?}"),
    };
    let e = Engine::choose(choice).unwrap_or_else(|e| panic!("SPTMC_BACKEND={choice:?}: {e}"));
    if let Some(n) = e.notice() {
        eprintln!("{n}");
    }
    eprintln!("kernels bench on {}", e.backend().describe());
    e
}

fn cases(engine: &Engine) -> Vec<Case> {
    let mut all = default_cases().expect("synthetic cases generate");
    match shared_data_dir() {
        Some(dir) => all.extend(shared_cases(&dir).expect("shared tensors read")),
        None => eprintln!("SKIPPED shared tensors: no ../shared/data and no SPTMC_DATA_DIR"),
    }
    let opts = BenchOptions::default();
    all.into_iter()
        .map(|c| Case {
            dims: c.tensor.dims().to_vec(),
            nnz: c.tensor.nnz() as u64,
            prepared: prepare_for(engine, &c.tensor, &opts).expect("tensor prepares"),
            name: c.name,
        })
        .collect()
}

/// Sparse MTTKRP, ranks 16 and 32, every mode.
mod mttkrp {
    use super::*;

    pub fn bench(c: &mut Criterion, engine: &Engine, cases: &[Case]) {
        for rank in [16, 32] {
            let mut g = c.benchmark_group(format!("mttkrp/r{rank}"));
            for case in cases {
                g.throughput(Throughput::Elements(case.nnz));
                let factors = Matrix::random_factors(&case.dims, &vec![rank; case.dims.len()], 7);
                for mode in 0..case.dims.len() {
                    let id = BenchmarkId::new(&case.name, format!("mode{mode}"));
                    g.bench_function(id, |b| {
                        b.iter(|| {
                            let out = engine.mttkrp(&case.prepared, mode, &factors).unwrap();
                            engine.backend().synchronize().unwrap();
                            out
                        })
                    });
                }
            }
            g.finish();
        }
    }
}

/// Sparse TTMc, rank 8 and 16 on every other mode, every mode.
mod ttmc {
    use super::*;

    pub fn bench(c: &mut Criterion, engine: &Engine, cases: &[Case]) {
        let cap: usize = std::env::var("SPTMC_BENCH_TTMC_CAP")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(32 << 20);
        for rank in [8, 16] {
            let mut g = c.benchmark_group(format!("ttmc/r{rank}"));
            for case in cases {
                g.throughput(Throughput::Elements(case.nnz));
                let factors = Matrix::random_factors(&case.dims, &vec![rank; case.dims.len()], 7);
                for mode in 0..case.dims.len() {
                    let cols = rank.pow(case.dims.len() as u32 - 1);
                    if case.dims[mode] * cols > cap {
                        eprintln!(
                            "SKIPPED ttmc/r{rank}/{}/mode{mode}: output {}×{cols} over SPTMC_BENCH_TTMC_CAP={cap} floats",
                            case.name, case.dims[mode]
                        );
                        continue;
                    }
                    let id = BenchmarkId::new(&case.name, format!("mode{mode}"));
                    g.bench_function(id, |b| {
                        b.iter(|| {
                            let out = engine.ttmc(&case.prepared, mode, &factors).unwrap();
                            engine.backend().synchronize().unwrap();
                            out
                        })
                    });
                }
            }
            g.finish();
        }
    }
}

fn kernels(c: &mut Criterion) {
    let engine = engine();
    let cases = cases(&engine);
    mttkrp::bench(c, &engine, &cases);
    ttmc::bench(c, &engine, &cases);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = kernels
}
criterion_main!(benches);
