//! Input-side throughput: `.tns` parsing (MB/s of uncompressed text) and in-memory HLS
//! building (nonzeros/s) on the largest shared tensor and a generated power-law one.
//!
//! The shared data folder is `$SPTMC_DATA_DIR` or `../shared/data`; without it the
//! real-data benches are skipped with a visible line.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sptmc::hls::HlsBuilder;
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::tensor::tns;
use sptmc::tools::cases::{shared_data_dir, shared_files};
use std::hint::black_box;
use std::io::Read;
use std::path::PathBuf;

/// The MTTKRP tile threshold of the default profile (the paper's A100 value).
const THRESHOLD: u32 = 78;

fn largest_shared_file() -> Option<PathBuf> {
    let Some(dir) = shared_data_dir() else {
        eprintln!("SKIPPED: no shared data (../shared/data or SPTMC_DATA_DIR)");
        return None;
    };
    shared_files(&dir)
        .ok()?
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".tns.gz"))
        .max_by_key(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
}

fn build_benches(c: &mut Criterion) {
    if let Some(path) = largest_shared_file() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut text = Vec::new();
        flate2::read::MultiGzDecoder::new(std::fs::File::open(&path).unwrap())
            .read_to_end(&mut text)
            .unwrap();
        let mut g = c.benchmark_group("parse");
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function(&name, |b| {
            b.iter(|| tns::parse(black_box(&text), &path).unwrap())
        });
        g.finish();

        let (x, _) = tns::parse(&text, &path).unwrap();
        let mut g = c.benchmark_group("hls_build");
        g.throughput(Throughput::Elements(x.nnz() as u64));
        g.bench_function(&name, |b| {
            b.iter(|| HlsBuilder::new(THRESHOLD).build(black_box(&x)).unwrap())
        });
        g.finish();
    }

    let x = generate(&GenSpec {
        dims: vec![20_000, 30_000, 2_000],
        nnz: 2_000_000,
        pattern: Pattern::PowerLaw { alpha: 1.0 },
        seed: 1,
    })
    .unwrap();
    let mut g = c.benchmark_group("hls_build");
    g.throughput(Throughput::Elements(x.nnz() as u64));
    g.bench_function("powerlaw-2M", |b| {
        b.iter(|| HlsBuilder::new(THRESHOLD).build(black_box(&x)).unwrap())
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = build_benches
}
criterion_main!(benches);
