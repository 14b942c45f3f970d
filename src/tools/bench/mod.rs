//! Kernel benchmarks behind `sptmc bench`: prepare time and memory, MTTKRP and TTMc on
//! every mode at the usual ranks, with throughput, effective bandwidth and how evenly
//! the modes run (ratios are measured side by side, never quoted), on the catalog's cases, files or one generated tensor
//! ([`super::cases`]); the criterion benches in `benches/kernels.rs` and the peer
//! comparison (`examples/peer_compare.rs`, [`peers`]) use the same cases.
//!
//! # What is timed
//!
//! Each run ([`super::measure::measure`]: one untimed warm-up, then `reps` timed runs)
//! is one [`Engine::run_into_with`] call into an output kept from the warm-up (zeroing
//! included, allocation not) followed by [`crate::engine::Backend::synchronize`]: the
//! call CP-ALS and Tucker-HOOI make, once per mode and iteration. MTTKRP is given the
//! factors' column maxima ([`ColumnMax`], taken once before timing), as CP-ALS keeps
//! them up to date and gives them to every call, so the backend does not scan the
//! factors; TTMc, as in Tucker-HOOI, is not, and scans them. Neither call scans its
//! output for inf and NaN: the decompositions do that themselves after the call (while
//! widening it, in CP-ALS), and here it is done once after the timed runs. (On a tensor
//! with a long mode a scan reads as many bytes as the kernel itself: a factor of 1.5 M
//! rows at rank 32 is 192 MB.) A fresh
//! allocation per run would add the first-touch page faults of the output, which can
//! cost as much as the kernel and vary with the output's size, not the kernel's work
//! (bench/results/2026-11-22-cpu-call-overheads).
//!
//! On a backend that times its kernels on the device
//! ([`crate::engine::RunStats::kernel_seconds`]: CUDA, with events around the
//! launches) the same runs also give the kernel-only median and minimum, without the
//! factor uploads, output allocation and copy back that the wall-clock time includes.
//! [`Engine::with_launch`] picks how the GPU kernels are launched.
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
//!
//! # Memory floor
//!
//! Every kernel is also set against its memory floor ([`floor`]): the prepared form it
//! reads for the mode, every factor but the target's and the output, each moved once
//! at the measured copy rate, and reported as a fraction of it (floor seconds over
//! median seconds). On a GPU the rate is the device's copy, measured once per run. On
//! the CPU the host copy's buffers are kept ([`floor::HostCopy`]) and
//! [`COPIES_BESIDE`] copies are timed just before each kernel's untimed run and as
//! many just after its timed runs; that kernel's floor is taken at the median of those
//! copies, so that both are measured within seconds of each other. (A rate measured
//! once before all runs swung from 11 to 19 GB/s between runs of the bench on a shared
//! VM.) No copy runs between timed runs: it would flush the caches a small tensor's
//! kernel keeps warm, as CP-ALS does. The run's rate in the header is the copy
//! measured before the first tensor.

pub mod floor;
pub mod peers;
mod report;

pub use floor::FloorBytes;
pub use report::{BenchReport, KernelRow, OpSummary, PartRow, PrepareRow, TensorReport};

use super::cases::Case;
use super::measure::{build_commit, measure, utc_now};
use crate::engine::{Call, ColumnMax, CopyRate, Engine, Prepared, Workload};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::{Op, output_shape};
use crate::tensor::CooTensor;
use report::{summarize, with_kernel_bandwidth};
use std::time::Instant;

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
    /// [`super::tune::crossover::NEVER_DENSE`] every nonzero on the sparse one (HLS-S only).
    pub threshold: Option<u32>,
    /// Bytes of the copy-rate measurement the floors are taken at (device memory on a
    /// GPU; on the CPU at most [`floor::HOST_COPY_MAX_BYTES`]); 0 skips it, and the
    /// floors with it.
    pub copy_bytes: usize,
}

/// The built-in cases of `sptmc bench` and the criterion benches: the catalog
/// ([`super::cases::generated`]) at 1024³ with 1,000,000 nonzeros drawn each.
pub fn default_cases() -> Result<Vec<Case>> {
    super::cases::generated(1024, 1_000_000, 0xbe4c)
}

/// Timed repetitions of the device copy-rate measurement.
pub const COPY_REPS: usize = 10;

/// Host copies timed before each kernel's runs, and as many after, for its floor (on
/// the CPU; see the module docs).
pub const COPIES_BESIDE: usize = 3;

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

/// Benchmarks every case with `engine` (see the module docs for what is timed and the
/// bandwidth model); `progress` gets one line per finished step. Preparing a tensor
/// that fails stops the run; a single kernel run that fails becomes a note.
pub fn run(
    engine: &Engine,
    cases: &[Case],
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
    // On the CPU the copy's buffers are kept, and a copy is timed beside every kernel
    // run (see the module docs).
    let mut host_copy = None;
    let copy_rate = if opts.copy_bytes > 0 {
        let c = match engine.backend().copy_rate(opts.copy_bytes, COPY_REPS)? {
            Some(c) => c,
            None => {
                let (copy, c) = engine
                    .backend()
                    .install(|| floor::HostCopy::measured(opts.copy_bytes, COPY_REPS))?;
                host_copy = Some(copy);
                c
            }
        };
        progress(&format!(
            "device copy rate {:.1} GB/s read+written ({} bytes, median of {})",
            c.bytes_per_s / 1e9,
            c.bytes,
            c.reps
        ));
        Some(c)
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
            host_copy.as_mut(),
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
    let w: Vec<Workload> = [
        (Op::Mttkrp, opts.mttkrp_ranks.iter().max()),
        (Op::Ttmc, opts.ttmc_ranks.iter().min()),
    ]
    .into_iter()
    .filter_map(|(op, rank)| Some(Workload { op, rank: *rank? }))
    .collect();
    match opts.threshold {
        Some(t) => {
            let with: Vec<(Op, u32)> = w.iter().map(|w| (w.op, t)).collect();
            engine.prepare_with_thresholds(x, &with)
        }
        None => engine.prepare(x, &w),
    }
}

fn bench_case(
    engine: &Engine,
    case: &Case,
    opts: &BenchOptions,
    copy_rate: Option<&CopyRate>,
    mut host_copy: Option<&mut floor::HostCopy>,
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
        let factors =
            Matrix::random_factors(x.dims(), &vec![rank; x.order()], opts.seed ^ rank as u64);
        // CP-ALS keeps its factors' column maxima up to date and gives them to every
        // MTTKRP call; Tucker-HOOI gives none to TTMc (the backend scans the factors).
        let col_max = (op == Op::Mttkrp).then(|| ColumnMax::of(&factors));
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
            let mut out = Matrix::zeros(0, 0);
            let call = Call {
                col_max: col_max.as_ref(),
                check_finite: false,
                ..Call::default()
            };
            // Copies before the untimed run and after the timed ones (see the module
            // docs); none between timed runs, which would flush the caches.
            let mut copies = Vec::new();
            let mut time_copies = |copies: &mut Vec<f64>| {
                if let Some(copy) = host_copy.as_deref_mut() {
                    engine
                        .backend()
                        .install(|| copies.extend((0..COPIES_BESIDE).map(|_| copy.time_once())));
                }
            };
            time_copies(&mut copies);
            let timed = measure(opts.reps, || {
                let stats = engine.run_into_with(op, &p, mode, &factors, &call, &mut out)?;
                engine.backend().synchronize()?;
                Ok(stats.kernel_seconds)
            })
            .and_then(|t| check_finite(op, mode, &out).map(|()| t));
            time_copies(&mut copies);
            let timed = timed.and_then(|t| {
                let beside = match &host_copy {
                    Some(copy) => Some(copy.rate(&copies)?),
                    None => None,
                };
                Ok((t, beside))
            });
            match timed {
                Ok((t, beside)) => {
                    // The floor at the copies timed beside this kernel where there are
                    // some, else at the run's copy rate.
                    let copy_rate = beside.as_ref().or(copy_rate);
                    let (median_s, min_s) = (t.median, t.min);
                    let factor_bytes: u64 = (0..x.order())
                        .filter(|&m| m != mode)
                        .map(|m| touched[m] as u64 * factors[m].cols() as u64 * 4)
                        .sum();
                    let bytes_moved = p.part(op)?.bytes() as u64
                        + factor_bytes
                        + (out_rows * out_cols) as u64 * 4;
                    let floor_bytes = FloorBytes::new(
                        p.part(op)?.form_bytes(op, mode, rank),
                        x.dims(),
                        &factors.iter().map(|f| f.cols()).collect::<Vec<_>>(),
                        mode,
                        (out_rows, out_cols),
                    );
                    let floor_s = copy_rate.and_then(|c| floor_bytes.seconds(c));
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
                        kernel_median_s: t.kernel.as_ref().map(|k| k.median),
                        kernel_min_s: t.kernel.as_ref().map(|k| k.min),
                        kernel_gb_per_s: None,
                        kernel_pct_of_copy: None,
                        floor_bytes,
                        floor_copy: copy_rate.copied(),
                        floor_s,
                        floor_fraction: floor_s.map(|f| f / median_s),
                    };
                    let row = with_kernel_bandwidth(row, copy_rate);
                    progress(&format!(
                        "{}: {op} r{rank} mode {mode}: {:.3} ms (min {:.3} ms){}{}",
                        case.name,
                        median_s * 1e3,
                        min_s * 1e3,
                        row.kernel_median_s
                            .map_or(String::new(), |k| format!(", kernels {:.3} ms", k * 1e3)),
                        row.floor_fraction.map_or(String::new(), |f| format!(
                            ", {:.0}% of the floor",
                            100.0 * f
                        ))
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

/// [`Error::NonFinite`] where `out`, the result of `op` on `mode`, holds inf or NaN (the
/// check the decompositions make after each call, outside the kernel's time).
fn check_finite(op: Op, mode: usize, out: &Matrix) -> Result<()> {
    match out.data().iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(k) => Err(Error::NonFinite(format!(
            "{op} of mode {mode} gave {} at ({}, {})",
            out.data()[k],
            k / out.cols().max(1),
            k % out.cols().max(1)
        ))),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Launch;
    use crate::tensor::generate::{GenSpec, Pattern, generate};
    use crate::tools::cases::{GenLayout, generated_case};

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
        let cases = [Case {
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
            copy_bytes: 1 << 22,
        };
        let mut lines = 0;
        let report = run(&Engine::cpu(), &cases, &opts, &mut |_| lines += 1).unwrap();
        let t = &report.tensors[0];
        assert_eq!(t.kernels.len(), 3 + 3 + 3 + 2);
        // The copy rate, the prepare and one line per kernel.
        assert_eq!(lines, 2 + t.kernels.len());
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
    fn the_cpu_reports_no_kernel_only_time_a_host_copy_rate_and_a_fused_launch() {
        let cases = [generated_case(3000, 2, &[64, 48, 32], GenLayout::BlockDense).unwrap()];
        let opts = BenchOptions {
            reps: 2,
            mttkrp_ranks: vec![32],
            ttmc_ranks: vec![],
            copy_bytes: 1 << 22,
            ..Default::default()
        };
        let report = run(&Engine::cpu(), &cases, &opts, &mut |_| {}).unwrap();
        assert_eq!(report.launch, Launch::Fused);
        let copy = report
            .copy_rate
            .expect("the CPU measures the host's copy rate");
        assert_eq!(copy.bytes, 1 << 22);
        let t = &report.tensors[0];
        assert_eq!(t.prepare.parts.len(), 1, "TTMc was not asked for");
        assert_eq!(t.kernels.len(), 3);
        for k in &t.kernels {
            assert_eq!(k.op, Op::Mttkrp);
            // MTTKRP runs row by row: its floor reads the mode's row groups (offsets,
            // the other two indices and the value per nonzero), not the HLS form.
            let groups = (t.dims[k.mode] + 1) * 8 + t.nnz * 3 * 4;
            assert_eq!(k.floor_bytes.form, groups as u64);
            let dims = &t.dims;
            let others: usize = (0..3).filter(|&m| m != k.mode).map(|m| dims[m]).sum();
            assert_eq!(k.floor_bytes.factors, (others * 32 * 4) as u64);
            assert_eq!(k.floor_bytes.output, (dims[k.mode] * 32 * 4) as u64);
            // Its floor is at the copies timed just before and after its own runs.
            let beside = k.floor_copy.expect("copies timed beside the kernel");
            assert_eq!((beside.bytes, beside.reps), (1 << 22, 2 * COPIES_BESIDE));
            assert_eq!(
                beside.bytes_per_s,
                2.0 * beside.bytes as f64 / beside.median_s
            );
            let floor = k.floor_s.unwrap();
            assert_eq!(floor, k.floor_bytes.total() as f64 / beside.bytes_per_s);
            assert_eq!(k.floor_fraction, Some(floor / k.median_s));
            assert!(k.kernel_median_s.is_none() && k.kernel_min_s.is_none());
            assert!(k.kernel_gb_per_s.is_none() && k.kernel_pct_of_copy.is_none());
        }
        assert!(t.summaries[0].all_modes_kernel_median_s.is_none());
        let table = report.table();
        assert!(table.contains("fused launch") && !table.contains("kernel ms"));
        assert!(
            table.contains("%floor") && table.contains("copy GB/s"),
            "{table}"
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["launch"], "fused");
        assert_eq!(json["copy_rate"]["bytes"], 1 << 22);
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
        assert!(k["floor_fraction"].as_f64().unwrap() > 0.0);
        assert_eq!(k["floor_copy"]["reps"], 2 * COPIES_BESIDE);
        let nothing = BenchOptions {
            mttkrp_ranks: vec![],
            ..opts
        };
        assert!(matches!(
            run(&Engine::cpu(), &cases, &nothing, &mut |_| {}),
            Err(Error::InvalidOption(_))
        ));
    }
}
