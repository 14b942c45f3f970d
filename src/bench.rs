//! Kernel benchmarks behind `sptmc bench`: prepare time and memory, MTTKRP and TTMc on
//! every mode at the usual ranks, with throughput, effective bandwidth and how evenly
//! the modes run (DESIGN.md §9). The criterion benches in `benches/kernels.rs` and the
//! peer comparison (`examples/peer_compare.rs`, [`peers`]) use the same cases.
//! [`generated_case`] makes one large seeded tensor instead (`sptmc bench --gen-nnz`).
//!
//! # What is timed
//!
//! Each run is one [`Engine::run_into`] call into an output kept from the warm-up
//! (zeroing included, allocation not: that is how CP-ALS and Tucker-HOOI call the
//! kernels, once per mode and iteration) followed by
//! [`crate::engine::Backend::synchronize`], inside the timer. A fresh allocation per
//! run would add the first-touch page faults of the output, which on a VM cost as much
//! as the kernel on 100k-nonzero tensors and vary with the output's size, not the
//! kernel's work. One untimed warm-up run precedes the `reps` timed ones; the report
//! keeps their median and minimum.
//!
//! On a backend that times its kernels on the device
//! ([`crate::engine::Backend::last_kernel_seconds`]: CUDA, with events around the
//! launches) the same runs also give the kernel-only median and minimum, without the
//! factor uploads, output allocation and copy back that the wall-clock time includes.
//! [`BenchOptions::launch`] picks the fused grid or sequential dense-then-sparse
//! launches ([`Launch`]).
//!
//! # Bandwidth model
//!
//! Effective bandwidth = bytes that must move / median time, where the bytes are read
//! or written once each:
//! - the prepared tensor's bytes for that op ([`crate::engine::BackendTensor::bytes`]);
//! - the factor rows the tensor touches: for every other mode, the number of distinct
//!   indices that occur in it times that mode's columns times 4 bytes (at most the
//!   factor's bytes);
//! - the output, `rows × cols × 4` bytes.
//!
//! It is a floor on the traffic, not a measurement of it: re-reads of factor rows that
//! fall out of cache are not counted. The same bytes over the kernel-only median give
//! the kernel-only bandwidth, which is also shown as a share of the device's measured
//! copy rate ([`crate::engine::Backend::copy_rate`], bytes read + written per second)
//! when the backend has one.

pub mod peers;

use crate::engine::{CopyRate, Engine, Launch, Prepared, Workload};
use crate::error::{Error, Result};
use crate::ops::{Op, output_shape};
use crate::selftest::random_factors;
use crate::tensor::CooTensor;
use crate::tensor::generate::{GenSpec, Pattern, generate};
pub use crate::timing::median;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One tensor to benchmark.
#[derive(Debug, Clone)]
pub struct BenchCase {
    /// Name shown in the report (a file's stem for shared tensors).
    pub name: String,
    /// The tensor.
    pub tensor: CooTensor,
}

impl BenchCase {
    /// Reads a FROSTT `.tns` file (plain or gzipped, with [`crate::tensor::tns::read`])
    /// and names the case after the file's stem (without `.tns` / `.tns.gz`).
    pub fn from_file(path: &Path) -> Result<Self> {
        Ok(BenchCase {
            name: case_name(path),
            tensor: crate::tensor::tns::read(path)?.0,
        })
    }
}

/// What to run and how often.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchOptions {
    /// Timed repetitions per op, rank and mode (≥ 1).
    pub reps: usize,
    /// MTTKRP ranks.
    pub mttkrp_ranks: Vec<usize>,
    /// TTMc ranks; each is used for every other mode (8 gives 8×8 columns for a
    /// 3rd-order tensor, 8×8×8 for a 4th-order one).
    pub ttmc_ranks: Vec<usize>,
    /// Largest TTMc output, in floats, that is run; larger ones are skipped with a note.
    pub max_ttmc_output: usize,
    /// Seed of the random factors.
    pub seed: u64,
    /// One tile threshold for every op instead of the device's tuned ones: 1 puts
    /// every non-empty tile of a 3rd-order tensor on the dense path (HLS-D only),
    /// [`crate::tune::crossover::NEVER_DENSE`] every nonzero on the sparse one (HLS-S only).
    pub threshold: Option<u32>,
    /// Bytes of the device copy-rate measurement (ignored by backends without device
    /// memory; 0 skips it).
    pub copy_bytes: usize,
}

/// Timed repetitions of the device copy-rate measurement.
pub const COPY_REPS: usize = 10;

impl Default for BenchOptions {
    /// 5 repetitions, MTTKRP at ranks 16 and 32, TTMc at 8 and 16, outputs up to 256M
    /// floats (1 GiB), the fused launch, a 1 GiB copy for the copy rate.
    fn default() -> Self {
        BenchOptions {
            reps: 5,
            mttkrp_ranks: vec![16, 32],
            ttmc_ranks: vec![8, 16],
            max_ttmc_output: 256 << 20,
            seed: 0x5eed,
            threshold: None,
            copy_bytes: 1 << 30,
        }
    }
}

/// Preparing one tensor: time and memory.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PrepareRow {
    /// Wall time of [`Engine::prepare`] (HLS build for both ops and hand-over).
    pub seconds: f64,
    /// Bytes the backend holds for the tensor, shared parts counted once (two HLS
    /// forms when the ops' thresholds differ; see [`PartRow`] for each).
    pub bytes: usize,
    /// Bytes of COO with u32 indices and f32 values.
    pub coo_bytes: usize,
    /// `bytes / coo_bytes`.
    pub bytes_vs_coo: f64,
    /// Per op: tile threshold, share of nonzeros in dense tiles, HLS bytes.
    pub parts: Vec<PartRow>,
}

/// The HLS form one op runs on.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PartRow {
    /// The op.
    pub op: Op,
    /// Tile threshold it was built with.
    pub threshold: u32,
    /// Share of nonzeros in dense tiles.
    pub dense_share: f64,
    /// Bytes of the HLS form.
    pub bytes: usize,
    /// `bytes` over the COO bytes: the memory one op's prepared tensor takes.
    pub bytes_vs_coo: f64,
}

/// One op at one rank on one mode.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KernelRow {
    /// The op.
    pub op: Op,
    /// Rank (MTTKRP) or rank of every other mode (TTMc).
    pub rank: usize,
    /// Target mode.
    pub mode: usize,
    /// Output shape `(rows, cols)`.
    pub output: (usize, usize),
    /// Median seconds of the timed runs.
    pub median_s: f64,
    /// Fastest timed run, seconds.
    pub min_s: f64,
    /// Nonzeros per second at the median.
    pub nnz_per_s: f64,
    /// Bytes that must move (see the module docs).
    pub bytes_moved: u64,
    /// `bytes_moved / median_s`, GB/s (10⁹ bytes).
    pub gb_per_s: f64,
    /// Median device seconds of the kernel launch(es) alone, when the backend measures
    /// them (CUDA events); `null` on the CPU.
    pub kernel_median_s: Option<f64>,
    /// Fastest kernel-only run, seconds.
    pub kernel_min_s: Option<f64>,
    /// `bytes_moved / kernel_median_s`, GB/s (10⁹ bytes).
    pub kernel_gb_per_s: Option<f64>,
    /// Kernel-only bandwidth as a percentage of the measured device copy rate
    /// ([`BenchReport::copy_rate`]).
    pub kernel_pct_of_copy: Option<f64>,
}

/// One op at one rank over all modes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OpSummary {
    /// The op.
    pub op: Op,
    /// Rank (MTTKRP) or rank of every other mode (TTMc).
    pub rank: usize,
    /// Modes that ran.
    pub modes: usize,
    /// Sum over modes of the median seconds.
    pub all_modes_median_s: f64,
    /// Sum over modes of the fastest seconds.
    pub all_modes_min_s: f64,
    /// Slowest mode's median over the fastest mode's median (1 = perfectly even).
    pub mode_independence: f64,
    /// Sum over modes of the kernel-only medians, when every mode has one.
    pub all_modes_kernel_median_s: Option<f64>,
}

/// Everything measured on one tensor.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TensorReport {
    /// Case name.
    pub name: String,
    /// Mode extents.
    pub dims: Vec<usize>,
    /// Nonzeros.
    pub nnz: usize,
    /// Preparation.
    pub prepare: PrepareRow,
    /// One row per op, rank and mode.
    pub kernels: Vec<KernelRow>,
    /// One row per op and rank whose modes all ran.
    pub summaries: Vec<OpSummary>,
    /// Runs skipped or failed, and why.
    pub notes: Vec<String>,
}

/// A whole benchmark run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BenchReport {
    /// sptmc's version.
    pub version: String,
    /// `git rev-parse --short HEAD` when the crate was built, or "unknown".
    pub commit: String,
    /// When the run started, UTC (`YYYY-MM-DDTHH:MM:SSZ`).
    pub date: String,
    /// The backend's device in words.
    pub device: String,
    /// The backend kind (`cpu` / `cuda`).
    pub backend: String,
    /// Worker threads of the CPU pool.
    pub threads: usize,
    /// Timed repetitions per run.
    pub reps: usize,
    /// How the GPU kernels were launched (`fused` / `sequential`; always `fused` on the
    /// CPU).
    pub launch: Launch,
    /// The device's measured copy rate, `null` on the CPU.
    pub copy_rate: Option<CopyRate>,
    /// One entry per case.
    pub tensors: Vec<TensorReport>,
}

impl BenchReport {
    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data serializes")
    }

    /// A human-readable table: a header, then per tensor its preparation, one line per
    /// op/rank/mode and the all-mode summaries.
    pub fn table(&self) -> String {
        let mut s = format!(
            "sptmc {} ({}), {}\ndevice: {} [{}], {} threads, median of {} runs, {} launch\n",
            self.version,
            self.commit,
            self.date,
            self.device,
            self.backend,
            self.threads,
            self.reps,
            self.launch
        );
        if let Some(c) = &self.copy_rate {
            s += &format!(
                "device copy rate: {:.1} GB/s read+written ({} bytes copied, median of {})\n",
                c.bytes_per_s / 1e9,
                c.bytes,
                c.reps
            );
        }
        for t in &self.tensors {
            let dims: Vec<String> = t.dims.iter().map(|d| d.to_string()).collect();
            s += &format!(
                "\n== {} ({}, {} nnz)\nprepare {:.3} s, {} bytes = {:.1}% of COO ({} bytes)",
                t.name,
                dims.join("×"),
                t.nnz,
                t.prepare.seconds,
                t.prepare.bytes,
                100.0 * t.prepare.bytes_vs_coo,
                t.prepare.coo_bytes
            );
            for p in &t.prepare.parts {
                s += &format!(
                    "; {} T={} dense {:.1}% {:.1}% of COO",
                    p.op,
                    p.threshold,
                    100.0 * p.dense_share,
                    100.0 * p.bytes_vs_coo
                );
            }
            s += "\n";
            let kernel_cols = t.kernels.iter().any(|k| k.kernel_median_s.is_some());
            s += &format!(
                "{:<7} {:>5} {:>4} {:>16} {:>10} {:>10} {:>9} {:>8}",
                "op", "rank", "mode", "output", "median ms", "min ms", "Mnnz/s", "GB/s"
            );
            if kernel_cols {
                s += &format!(" {:>10} {:>9} {:>6}", "kernel ms", "kern GB/s", "%copy");
            }
            s += "\n";
            for k in &t.kernels {
                s += &format!(
                    "{:<7} {:>5} {:>4} {:>16} {:>10.3} {:>10.3} {:>9.1} {:>8.2}",
                    k.op.name(),
                    k.rank,
                    k.mode,
                    format!("{}×{}", k.output.0, k.output.1),
                    k.median_s * 1e3,
                    k.min_s * 1e3,
                    k.nnz_per_s / 1e6,
                    k.gb_per_s
                );
                if kernel_cols {
                    let opt = |v: Option<f64>, scale: f64, prec: usize, width: usize| {
                        v.map_or_else(
                            || format!("{:>width$}", "-"),
                            |v| format!("{:>width$.prec$}", v * scale),
                        )
                    };
                    s += &format!(
                        " {} {} {}",
                        opt(k.kernel_median_s, 1e3, 3, 10),
                        opt(k.kernel_gb_per_s, 1.0, 2, 9),
                        opt(k.kernel_pct_of_copy, 1.0, 1, 6)
                    );
                }
                s += "\n";
            }
            for m in &t.summaries {
                s += &format!(
                    "all modes {} r{}: median {:.3} ms, min {:.3} ms, slowest/fastest mode {:.2}",
                    m.op,
                    m.rank,
                    m.all_modes_median_s * 1e3,
                    m.all_modes_min_s * 1e3,
                    m.mode_independence
                );
                if let Some(k) = m.all_modes_kernel_median_s {
                    s += &format!(", kernels only {:.3} ms", k * 1e3);
                }
                s += "\n";
            }
            for n in &t.notes {
                s += &format!("note: {n}\n");
            }
        }
        s
    }
}

/// The synthetic cases of [`run`] and the criterion benches, all seeded:
///
/// | name | dims | nonzeros drawn | pattern |
/// |---|---|---|---|
/// | `uniform-1m` | 4096³ | 1,000,000 | uniform (no dense tiles) |
/// | `power-law-1m` | 20000 × 20000 × 2000 | 1,000,000 | power law, α = 1.1 (repeats summed: fewer) |
/// | `block-dense-1m` | 1024³ | 1,000,000 | 70% in tiles of 400 nonzeros, rest uniform |
/// | `uniform-4d-500k` | 1000⁴ | 500,000 | uniform, 4th order (sparse part only) |
pub fn default_cases() -> Result<Vec<BenchCase>> {
    let specs = [
        ("uniform-1m", vec![4096; 3], 1_000_000, Pattern::Uniform),
        (
            "power-law-1m",
            vec![20_000, 20_000, 2000],
            1_000_000,
            Pattern::PowerLaw { alpha: 1.1 },
        ),
        (
            "block-dense-1m",
            vec![1024; 3],
            1_000_000,
            Pattern::BlockDense {
                tile_nnz: 400,
                dense_share: 0.7,
            },
        ),
        ("uniform-4d-500k", vec![1000; 4], 500_000, Pattern::Uniform),
    ];
    specs
        .into_iter()
        .enumerate()
        .map(|(k, (name, dims, nnz, pattern))| {
            Ok(BenchCase {
                name: name.to_string(),
                tensor: generate(&GenSpec {
                    dims,
                    nnz,
                    pattern,
                    seed: 0xbe4c + k as u64,
                })?,
            })
        })
        .collect()
}

/// Where a [`generated_case`] puts its nonzeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GenLayout {
    /// 70% of the nonzeros in 16³ tiles of 400 each, the rest uniform (as
    /// `block-dense-1m` of [`default_cases`]): dense tiles exist at any tuned threshold
    /// up to 400.
    #[default]
    BlockDense,
    /// Uniform over all cells (as `benches/torch_peer.py --gen-nnz` draws them).
    Uniform,
}

impl std::fmt::Display for GenLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GenLayout::BlockDense => "block-dense",
            GenLayout::Uniform => "uniform",
        })
    }
}

/// The default extents of a [`generated_case`]: 4096³, as `benches/torch_peer.py
/// --gen-nnz` uses; at 50M nonzeros the uniform 30% adds about one nonzero per tile, so
/// the dense tiles are the block-dense ones.
pub const GEN_DIMS: [usize; 3] = [4096, 4096, 4096];

/// One seeded generated tensor of `nnz` drawn nonzeros (repeats summed: a few fewer)
/// over `dims`, named `gen-<layout>-<nnz>-s<seed>`, for `sptmc bench --gen-nnz`.
pub fn generated_case(
    nnz: usize,
    seed: u64,
    dims: &[usize],
    layout: GenLayout,
) -> Result<BenchCase> {
    let pattern = match layout {
        GenLayout::BlockDense => Pattern::BlockDense {
            tile_nnz: 400,
            dense_share: 0.7,
        },
        GenLayout::Uniform => Pattern::Uniform,
    };
    Ok(BenchCase {
        name: format!("gen-{layout}-{nnz}-s{seed}"),
        tensor: generate(&GenSpec {
            dims: dims.to_vec(),
            nnz,
            pattern,
            seed,
        })?,
    })
}

/// The shared real tensors: every `*.tns` / `*.tns.gz` file in `dir`, sorted by name.
pub fn shared_cases(dir: &Path) -> Result<Vec<BenchCase>> {
    shared_files(dir)?
        .iter()
        .map(|p| BenchCase::from_file(p))
        .collect()
}

/// The `*.tns` / `*.tns.gz` files in `dir`, sorted by name.
pub fn shared_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.to_string_lossy();
            n.ends_with(".tns") || n.ends_with(".tns.gz")
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Where the shared data sets are: `$SPTMC_DATA_DIR` when set, else `../shared/data`
/// beside the crate's source folder; `None` when that folder does not exist.
pub fn shared_data_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("SPTMC_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    dir.is_dir().then_some(dir)
}

/// The commit the crate was built from (`git rev-parse --short HEAD`, set by build.rs
/// or by `SPTMC_GIT_COMMIT` at build time), or "unknown".
pub fn build_commit() -> &'static str {
    option_env!("SPTMC_GIT_COMMIT")
        .filter(|c| !c.is_empty())
        .unwrap_or("unknown")
}

/// Benchmarks every case with `engine` (see the module docs for what is timed and the
/// bandwidth model); `progress` gets one line per finished step. Preparing a tensor
/// that fails stops the run; a single kernel run that fails becomes a note.
pub fn run(
    engine: &Engine,
    cases: &[BenchCase],
    opts: &BenchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<BenchReport> {
    if opts.reps == 0 {
        return Err(Error::InvalidOption(
            "bench needs at least 1 repetition".into(),
        ));
    }
    if let Some(r) = opts
        .mttkrp_ranks
        .iter()
        .chain(&opts.ttmc_ranks)
        .find(|&&r| r == 0)
    {
        return Err(Error::InvalidRank(format!("bench rank {r}")));
    }
    if opts.mttkrp_ranks.is_empty() && opts.ttmc_ranks.is_empty() {
        return Err(Error::InvalidOption(
            "bench needs at least one MTTKRP or TTMc rank".into(),
        ));
    }
    let copy_rate = if opts.copy_bytes > 0 {
        let c = engine.backend().copy_rate(opts.copy_bytes, COPY_REPS)?;
        if let Some(c) = &c {
            progress(&format!(
                "device copy rate {:.1} GB/s read+written ({} bytes, median of {})",
                c.bytes_per_s / 1e9,
                c.bytes,
                c.reps
            ));
        }
        c
    } else {
        None
    };
    let date = utc_now();
    let mut tensors = Vec::with_capacity(cases.len());
    for case in cases {
        tensors.push(bench_case(
            engine,
            case,
            opts,
            copy_rate.as_ref(),
            progress,
        )?);
    }
    Ok(BenchReport {
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: build_commit().to_string(),
        date,
        device: engine.backend().describe(),
        backend: engine.kind().to_string(),
        threads: rayon::current_num_threads(),
        reps: opts.reps,
        launch: engine.launch(),
        copy_rate,
        tensors,
    })
}

/// Prepares `x` for both ops: MTTKRP with the threshold tuned for the largest MTTKRP
/// rank asked for, TTMc with the one for the smallest TTMc rank (as `sptmc` does), or
/// both with [`BenchOptions::threshold`] when it is set; an op without ranks is not
/// prepared.
pub fn prepare_for(engine: &Engine, x: &CooTensor, opts: &BenchOptions) -> Result<Prepared> {
    if let Some(t) = opts.threshold {
        let mut with = Vec::new();
        if !opts.mttkrp_ranks.is_empty() {
            with.push((Op::Mttkrp, t));
        }
        if !opts.ttmc_ranks.is_empty() {
            with.push((Op::Ttmc, t));
        }
        return engine.prepare_with_thresholds(x, &with);
    }
    let mut w = Vec::new();
    if let Some(&r) = opts.mttkrp_ranks.iter().max() {
        w.push(Workload {
            op: Op::Mttkrp,
            rank: r,
        });
    }
    if let Some(&r) = opts.ttmc_ranks.iter().min() {
        w.push(Workload {
            op: Op::Ttmc,
            rank: r,
        });
    }
    engine.prepare(x, &w)
}

fn bench_case(
    engine: &Engine,
    case: &BenchCase,
    opts: &BenchOptions,
    copy_rate: Option<&CopyRate>,
    progress: &mut dyn FnMut(&str),
) -> Result<TensorReport> {
    let x = &case.tensor;
    let start = Instant::now();
    let p = prepare_for(engine, x, opts)?;
    engine.backend().synchronize()?;
    let seconds = start.elapsed().as_secs_f64();
    let coo_bytes = x.coo_bytes();
    let mut parts = Vec::new();
    for op in Op::ALL {
        if let Ok(part) = p.part(op) {
            let st = part.hls().stats();
            parts.push(PartRow {
                op,
                threshold: st.threshold,
                dense_share: st.dense_share(),
                bytes: part.bytes(),
                bytes_vs_coo: part.bytes() as f64 / coo_bytes.max(1) as f64,
            });
        }
    }
    let prepare = PrepareRow {
        seconds,
        bytes: p.bytes(),
        coo_bytes,
        bytes_vs_coo: p.bytes() as f64 / coo_bytes.max(1) as f64,
        parts,
    };
    progress(&format!(
        "{}: prepared in {:.3} s, {:.1}% of COO bytes",
        case.name,
        seconds,
        100.0 * prepare.bytes_vs_coo
    ));
    let touched = distinct_per_mode(x);
    let mut kernels = Vec::new();
    let mut summaries = Vec::new();
    let mut notes = Vec::new();
    let runs: Vec<(Op, usize)> = opts
        .mttkrp_ranks
        .iter()
        .map(|&r| (Op::Mttkrp, r))
        .chain(opts.ttmc_ranks.iter().map(|&r| (Op::Ttmc, r)))
        .collect();
    for (op, rank) in runs {
        let factors = random_factors(x.dims(), rank, opts.seed ^ rank as u64);
        let mut rows = Vec::new();
        for mode in 0..x.order() {
            let (out_rows, out_cols) = output_shape(op, x.dims(), mode, &factors)?;
            if op == Op::Ttmc && out_rows.saturating_mul(out_cols) > opts.max_ttmc_output {
                notes.push(format!(
                    "ttmc r{rank} mode {mode} skipped: output {out_rows}×{out_cols} is over the cap of {} floats",
                    opts.max_ttmc_output
                ));
                continue;
            }
            match time_runs(engine, &p, op, mode, &factors, opts.reps) {
                Ok(t) => {
                    let (median_s, min_s) = (t.median_s, t.min_s);
                    let factor_bytes: u64 = (0..x.order())
                        .filter(|&m| m != mode)
                        .map(|m| touched[m] as u64 * factors[m].cols() as u64 * 4)
                        .sum();
                    let bytes_moved = p.part(op)?.bytes() as u64
                        + factor_bytes
                        + (out_rows * out_cols) as u64 * 4;
                    let row = KernelRow {
                        op,
                        rank,
                        mode,
                        output: (out_rows, out_cols),
                        median_s,
                        min_s,
                        nnz_per_s: x.nnz() as f64 / median_s,
                        bytes_moved,
                        gb_per_s: bytes_moved as f64 / median_s / 1e9,
                        kernel_median_s: t.kernel.map(|k| k.0),
                        kernel_min_s: t.kernel.map(|k| k.1),
                        kernel_gb_per_s: None,
                        kernel_pct_of_copy: None,
                    };
                    let row = with_kernel_bandwidth(row, copy_rate);
                    progress(&format!(
                        "{}: {op} r{rank} mode {mode}: {:.3} ms (min {:.3} ms){}",
                        case.name,
                        median_s * 1e3,
                        min_s * 1e3,
                        row.kernel_median_s
                            .map_or(String::new(), |k| format!(", kernels {:.3} ms", k * 1e3))
                    ));
                    rows.push(row);
                }
                Err(e) => notes.push(format!("{op} r{rank} mode {mode} failed: {e}")),
            }
        }
        if rows.len() == x.order() {
            summaries.push(summarize(op, rank, &rows));
        }
        kernels.extend(rows);
    }
    Ok(TensorReport {
        name: case.name.clone(),
        dims: x.dims().to_vec(),
        nnz: x.nnz(),
        prepare,
        kernels,
        summaries,
        notes,
    })
}

/// What [`time_runs`] measured.
struct Timing {
    median_s: f64,
    min_s: f64,
    /// Kernel-only (median, min), when the backend reported it for every run.
    kernel: Option<(f64, f64)>,
}

/// Median and minimum seconds of `reps` timed runs after one warm-up, wall-clock and,
/// when the backend measures it, kernel-only.
fn time_runs(
    engine: &Engine,
    p: &Prepared,
    op: Op,
    mode: usize,
    factors: &[crate::Matrix],
    reps: usize,
) -> Result<Timing> {
    let mut out = engine.run(op, p, mode, factors)?;
    engine.backend().synchronize()?;
    let mut times = Vec::with_capacity(reps);
    let mut kernel = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        let stats = engine.run_into(op, p, mode, factors, &mut out)?;
        engine.backend().synchronize()?;
        times.push(start.elapsed().as_secs_f64());
        kernel.extend(stats.kernel_seconds);
    }
    let min = |v: &[f64]| v.iter().cloned().fold(f64::INFINITY, f64::min);
    Ok(Timing {
        median_s: median(&times),
        min_s: min(&times),
        kernel: (kernel.len() == reps).then(|| (median(&kernel), min(&kernel))),
    })
}

/// Fills in a row's kernel-only bandwidth and its share of the copy rate.
fn with_kernel_bandwidth(mut row: KernelRow, copy: Option<&CopyRate>) -> KernelRow {
    row.kernel_gb_per_s = row
        .kernel_median_s
        .filter(|&k| k > 0.0)
        .map(|k| row.bytes_moved as f64 / k / 1e9);
    row.kernel_pct_of_copy = match (row.kernel_gb_per_s, copy) {
        (Some(gb), Some(c)) if c.bytes_per_s > 0.0 => Some(100.0 * gb * 1e9 / c.bytes_per_s),
        _ => None,
    };
    row
}

/// Summary of one op/rank's per-mode rows.
fn summarize(op: Op, rank: usize, rows: &[KernelRow]) -> OpSummary {
    let slowest = rows.iter().map(|r| r.median_s).fold(0.0, f64::max);
    let fastest = rows
        .iter()
        .map(|r| r.median_s)
        .fold(f64::INFINITY, f64::min);
    OpSummary {
        op,
        rank,
        modes: rows.len(),
        all_modes_median_s: rows.iter().map(|r| r.median_s).sum(),
        all_modes_min_s: rows.iter().map(|r| r.min_s).sum(),
        mode_independence: if fastest > 0.0 {
            slowest / fastest
        } else {
            1.0
        },
        all_modes_kernel_median_s: rows.iter().map(|r| r.kernel_median_s).sum(),
    }
}

/// Distinct indices occurring in each mode (the factor rows a kernel must read).
fn distinct_per_mode(x: &CooTensor) -> Vec<usize> {
    (0..x.order())
        .map(|m| {
            let mut seen = vec![false; x.dims()[m]];
            x.indices(m).iter().for_each(|&i| seen[i as usize] = true);
            seen.iter().filter(|&&s| s).count()
        })
        .collect()
}

/// The current time in UTC as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_utc(secs)
}

/// Formats seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic
/// Gregorian calendar, days-from-civil inverted).
fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Shift the epoch to 0000-03-01 so leap days fall at the end of a 400-year era.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn case_name(path: &Path) -> String {
    let n = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    n.trim_end_matches(".gz")
        .trim_end_matches(".tns")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_format_as_utc() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_795_320_000 + 3_723), "2026-11-22T05:02:03Z");
    }

    #[test]
    fn cases_are_named_after_the_file() {
        let dir = std::env::temp_dir().join(format!("sptmc-bench-case-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("small.tns");
        std::fs::write(&plain, "1 2 3 1.5\n2 1 1 -2\n").unwrap();
        let case = BenchCase::from_file(&plain).unwrap();
        assert_eq!(case.name, "small");
        assert_eq!(case.tensor.nnz(), 2);
        assert_eq!(
            case_name(Path::new("/x/movielens-100k.tns.gz")),
            "movielens-100k"
        );
        assert_eq!(shared_files(&dir).unwrap(), vec![plain]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn run_reports_every_mode_skips_large_ttmc_and_serializes() {
        let x = generate(&GenSpec {
            dims: vec![40, 30, 20],
            nnz: 3000,
            pattern: Pattern::BlockDense {
                tile_nnz: 300,
                dense_share: 0.5,
            },
            seed: 3,
        })
        .unwrap();
        let cases = [BenchCase {
            name: "small".into(),
            tensor: x,
        }];
        let opts = BenchOptions {
            reps: 2,
            mttkrp_ranks: vec![4, 8],
            ttmc_ranks: vec![2, 4],
            // 40 rows × 16 columns = 640 floats: mode 0 of TTMc r4 is over the cap.
            max_ttmc_output: 600,
            seed: 1,
            threshold: None,
            copy_bytes: 1 << 30,
        };
        let mut lines = 0;
        let report = run(&Engine::cpu(), &cases, &opts, &mut |_| lines += 1).unwrap();
        let t = &report.tensors[0];
        assert_eq!(t.kernels.len(), 3 + 3 + 3 + 2);
        assert_eq!(lines, 1 + t.kernels.len());
        assert_eq!(t.summaries.len(), 3, "TTMc r4 lacks a mode");
        assert_eq!(t.notes.len(), 1);
        assert!(t.notes[0].contains("ttmc r4 mode 0 skipped"));
        for k in &t.kernels {
            assert!(k.min_s <= k.median_s && k.min_s > 0.0);
            let part = t.prepare.parts.iter().find(|p| p.op == k.op).unwrap();
            assert!(k.bytes_moved as usize > part.bytes);
            assert!(part.bytes <= t.prepare.bytes);
            assert_eq!(
                part.bytes_vs_coo,
                part.bytes as f64 / t.prepare.coo_bytes as f64
            );
        }
        for s in &t.summaries {
            assert!(s.mode_independence >= 1.0);
        }
        assert_eq!(t.prepare.coo_bytes, 16 * t.nnz);
        assert!(report.table().contains("all modes mttkrp r8"));
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["tensors"][0]["kernels"].as_array().unwrap().len(), 11);
        assert!(matches!(
            run(
                &Engine::cpu(),
                &cases,
                &BenchOptions { reps: 0, ..opts },
                &mut |_| {}
            ),
            Err(Error::InvalidOption(_))
        ));
    }

    #[test]
    fn the_cpu_reports_no_kernel_only_time_no_copy_rate_and_a_fused_launch() {
        let cases = [generated_case(3000, 2, &[64, 48, 32], GenLayout::BlockDense).unwrap()];
        let opts = BenchOptions {
            reps: 2,
            mttkrp_ranks: vec![32],
            ttmc_ranks: vec![],
            ..Default::default()
        };
        let report = run(&Engine::cpu(), &cases, &opts, &mut |_| {}).unwrap();
        assert_eq!(report.launch, Launch::Fused);
        assert!(report.copy_rate.is_none());
        let t = &report.tensors[0];
        assert_eq!(t.prepare.parts.len(), 1, "TTMc was not asked for");
        assert_eq!(t.kernels.len(), 3);
        for k in &t.kernels {
            assert_eq!(k.op, Op::Mttkrp);
            assert!(k.kernel_median_s.is_none() && k.kernel_min_s.is_none());
            assert!(k.kernel_gb_per_s.is_none() && k.kernel_pct_of_copy.is_none());
        }
        assert!(t.summaries[0].all_modes_kernel_median_s.is_none());
        let table = report.table();
        assert!(table.contains("fused launch") && !table.contains("kernel ms"));
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["launch"], "fused");
        assert!(json["copy_rate"].is_null());
        let k = &json["tensors"][0]["kernels"][0];
        for field in [
            "kernel_median_s",
            "kernel_min_s",
            "kernel_gb_per_s",
            "kernel_pct_of_copy",
        ] {
            assert!(k.get(field).is_some_and(|v| v.is_null()), "{field}: {k}");
        }
        assert!(k["median_s"].as_f64().unwrap() > 0.0);
        let nothing = BenchOptions {
            mttkrp_ranks: vec![],
            ..opts
        };
        assert!(matches!(
            run(&Engine::cpu(), &cases, &nothing, &mut |_| {}),
            Err(Error::InvalidOption(_))
        ));
    }

    #[test]
    fn kernel_rows_and_tables_show_kernel_bandwidth_against_the_copy_rate() {
        let row = KernelRow {
            op: Op::Mttkrp,
            rank: 32,
            mode: 0,
            output: (10, 32),
            median_s: 2e-3,
            min_s: 1.5e-3,
            nnz_per_s: 1e9,
            bytes_moved: 1_000_000_000,
            gb_per_s: 500.0,
            kernel_median_s: Some(1e-3),
            kernel_min_s: Some(0.9e-3),
            kernel_gb_per_s: None,
            kernel_pct_of_copy: None,
        };
        let copy = CopyRate {
            bytes: 1 << 30,
            reps: 10,
            median_s: 1e-3,
            bytes_per_s: 2.5e12,
        };
        let r = with_kernel_bandwidth(row.clone(), Some(&copy));
        assert!((r.kernel_gb_per_s.unwrap() - 1000.0).abs() < 1e-9);
        assert!((r.kernel_pct_of_copy.unwrap() - 40.0).abs() < 1e-9);
        let no_copy = with_kernel_bandwidth(row.clone(), None);
        assert!(no_copy.kernel_gb_per_s.is_some() && no_copy.kernel_pct_of_copy.is_none());
        let report = BenchReport {
            version: "v".into(),
            commit: "c".into(),
            date: "d".into(),
            device: "gpu".into(),
            backend: "cuda".into(),
            threads: 1,
            reps: 5,
            launch: Launch::Sequential,
            copy_rate: Some(copy),
            tensors: vec![TensorReport {
                name: "t".into(),
                dims: vec![10, 10, 10],
                nnz: 5,
                prepare: PrepareRow {
                    seconds: 0.0,
                    bytes: 0,
                    coo_bytes: 0,
                    bytes_vs_coo: 0.0,
                    parts: vec![],
                },
                kernels: vec![r.clone()],
                summaries: vec![summarize(Op::Mttkrp, 32, &[r])],
                notes: vec![],
            }],
        };
        let table = report.table();
        assert!(table.contains("sequential launch"), "{table}");
        assert!(table.contains("device copy rate: 2500.0 GB/s"), "{table}");
        assert!(
            table.contains("kernel ms") && table.contains("40.0"),
            "{table}"
        );
        assert!(table.contains("kernels only 1.000 ms"), "{table}");
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["launch"], "sequential");
        assert_eq!(json["copy_rate"]["bytes_per_s"], 2.5e12);
        assert_eq!(json["tensors"][0]["kernels"][0]["kernel_pct_of_copy"], 40.0);
        assert_eq!(
            json["tensors"][0]["summaries"][0]["all_modes_kernel_median_s"],
            1e-3
        );
    }

    #[test]
    fn generated_cases_are_seeded_named_and_hold_dense_tiles() {
        let a = generated_case(20_000, 1, &GEN_DIMS, GenLayout::BlockDense).unwrap();
        assert_eq!(a.name, "gen-block-dense-20000-s1");
        assert_eq!(a.tensor.dims(), &GEN_DIMS);
        assert!(a.tensor.nnz() > 19_900 && a.tensor.nnz() <= 20_000);
        let b = generated_case(20_000, 1, &GEN_DIMS, GenLayout::BlockDense).unwrap();
        assert_eq!(a.tensor, b.tensor);
        // 14,000 nonzeros in 35 tiles of 400; the uniform 6,000 almost never share a tile.
        let h = crate::hls::HlsBuilder::new(100).build(&a.tensor).unwrap();
        assert_eq!(h.stats().dense_tiles, 35, "{:?}", h.stats());
        let u = generated_case(5000, 2, &[100, 100, 100], GenLayout::Uniform).unwrap();
        assert_eq!(u.name, "gen-uniform-5000-s2");
        assert_eq!(
            crate::hls::HlsBuilder::new(100)
                .build(&u.tensor)
                .unwrap()
                .stats()
                .dense_tiles,
            0
        );
        assert!(generated_case(0, 1, &GEN_DIMS, GenLayout::Uniform).is_err());
    }
}
