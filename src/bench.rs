//! Kernel benchmarks behind `sptmc bench`: prepare time and memory, MTTKRP and TTMc on
//! every mode at the usual ranks, with throughput, effective bandwidth and how evenly
//! the modes run (DESIGN.md §9). The criterion benches in `benches/kernels.rs` and the
//! peer comparison (`examples/peer_compare.rs`, [`peers`]) use the same cases.
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
//! fall out of cache are not counted.

pub mod peers;

use crate::engine::{Engine, Prepared, Workload};
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
}

impl Default for BenchOptions {
    /// 5 repetitions, MTTKRP at ranks 16 and 32, TTMc at 8 and 16, outputs up to 256M
    /// floats (1 GiB).
    fn default() -> Self {
        BenchOptions {
            reps: 5,
            mttkrp_ranks: vec![16, 32],
            ttmc_ranks: vec![8, 16],
            max_ttmc_output: 256 << 20,
            seed: 0x5eed,
            threshold: None,
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
            "sptmc {} ({}), {}\ndevice: {} [{}], {} threads, median of {} runs\n",
            self.version,
            self.commit,
            self.date,
            self.device,
            self.backend,
            self.threads,
            self.reps
        );
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
            s += &format!(
                "{:<7} {:>5} {:>4} {:>16} {:>10} {:>10} {:>9} {:>8}\n",
                "op", "rank", "mode", "output", "median ms", "min ms", "Mnnz/s", "GB/s"
            );
            for k in &t.kernels {
                s += &format!(
                    "{:<7} {:>5} {:>4} {:>16} {:>10.3} {:>10.3} {:>9.1} {:>8.2}\n",
                    k.op.name(),
                    k.rank,
                    k.mode,
                    format!("{}×{}", k.output.0, k.output.1),
                    k.median_s * 1e3,
                    k.min_s * 1e3,
                    k.nnz_per_s / 1e6,
                    k.gb_per_s
                );
            }
            for m in &t.summaries {
                s += &format!(
                    "all modes {} r{}: median {:.3} ms, min {:.3} ms, slowest/fastest mode {:.2}\n",
                    m.op,
                    m.rank,
                    m.all_modes_median_s * 1e3,
                    m.all_modes_min_s * 1e3,
                    m.mode_independence
                );
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
    let date = utc_now();
    let mut tensors = Vec::with_capacity(cases.len());
    for case in cases {
        tensors.push(bench_case(engine, case, opts, progress)?);
    }
    Ok(BenchReport {
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: build_commit().to_string(),
        date,
        device: engine.backend().describe(),
        backend: engine.kind().to_string(),
        threads: rayon::current_num_threads(),
        reps: opts.reps,
        tensors,
    })
}

/// Prepares `x` for both ops: MTTKRP with the threshold tuned for the largest MTTKRP
/// rank asked for, TTMc with the one for the smallest TTMc rank (as `sptmc` does), or
/// both with [`BenchOptions::threshold`] when it is set.
pub fn prepare_for(engine: &Engine, x: &CooTensor, opts: &BenchOptions) -> Result<Prepared> {
    if let Some(t) = opts.threshold {
        return engine.prepare_with_thresholds(x, &[(Op::Mttkrp, t), (Op::Ttmc, t)]);
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
                Ok((median_s, min_s)) => {
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
                    };
                    progress(&format!(
                        "{}: {op} r{rank} mode {mode}: {:.3} ms (min {:.3} ms)",
                        case.name,
                        median_s * 1e3,
                        min_s * 1e3
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

/// Median and minimum seconds of `reps` timed runs after one warm-up.
fn time_runs(
    engine: &Engine,
    p: &Prepared,
    op: Op,
    mode: usize,
    factors: &[crate::Matrix],
    reps: usize,
) -> Result<(f64, f64)> {
    let mut out = engine.run(op, p, mode, factors)?;
    engine.backend().synchronize()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        engine.run_into(op, p, mode, factors, &mut out)?;
        engine.backend().synchronize()?;
        times.push(start.elapsed().as_secs_f64());
    }
    Ok((
        median(&times),
        times.iter().cloned().fold(f64::INFINITY, f64::min),
    ))
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
}
