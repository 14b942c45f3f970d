//! What `sptmc bench` reports: rows per preparation, op, rank and mode, the all-mode
//! summaries, and their rendering as a table or JSON (see [`super`] for what is timed
//! and the bandwidth model).

use crate::engine::{CopyRate, Launch};
use crate::ops::Op;

/// Preparing one tensor: time and memory.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PrepareRow {
    /// Wall time of [`crate::engine::Engine::prepare`] (HLS build for both ops and hand-over).
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
    /// The bytes of its memory floor (see [`super::floor`]).
    pub floor_bytes: super::FloorBytes,
    /// The copy rate the floor is taken at: on the CPU, the median of the copies timed
    /// one after each of this kernel's runs (see [`super::floor::HostCopy`]); on a GPU,
    /// the run's ([`BenchReport::copy_rate`]); `null` without one.
    pub floor_copy: Option<CopyRate>,
    /// Seconds to move `floor_bytes` once at `floor_copy`; `null` without one.
    pub floor_s: Option<f64>,
    /// `floor_s / median_s`: the fraction of the floor the kernel runs at (1 = at it).
    pub floor_fraction: Option<f64>,
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
    /// Sum over modes of the floor seconds, when every mode has one.
    pub all_modes_floor_s: Option<f64>,
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
    /// The measured copy rate the floors are taken at: device to device on a GPU, host
    /// memory on the CPU; `null` when not measured (a copy size of 0).
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
            let floor_cols = t.kernels.iter().any(|k| k.floor_s.is_some());
            s += &format!(
                "{:<7} {:>5} {:>4} {:>16} {:>10} {:>10} {:>9} {:>8}",
                "op", "rank", "mode", "output", "median ms", "min ms", "Mnnz/s", "GB/s"
            );
            if kernel_cols {
                s += &format!(" {:>10} {:>9} {:>6}", "kernel ms", "kern GB/s", "%copy");
            }
            if floor_cols {
                s += &format!(
                    " {:>9} {:>9} {:>9} {:>6}",
                    "copy GB/s", "floor MB", "floor ms", "%floor"
                );
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
                let opt = |v: Option<f64>, scale: f64, prec: usize, width: usize| {
                    v.map_or_else(
                        || format!("{:>width$}", "-"),
                        |v| format!("{:>width$.prec$}", v * scale),
                    )
                };
                if kernel_cols {
                    s += &format!(
                        " {} {} {}",
                        opt(k.kernel_median_s, 1e3, 3, 10),
                        opt(k.kernel_gb_per_s, 1.0, 2, 9),
                        opt(k.kernel_pct_of_copy, 1.0, 1, 6)
                    );
                }
                if floor_cols {
                    s += &format!(
                        " {} {:>9.1} {} {}",
                        opt(k.floor_copy.map(|c| c.bytes_per_s), 1e-9, 1, 9),
                        k.floor_bytes.total() as f64 / 1e6,
                        opt(k.floor_s, 1e3, 3, 9),
                        opt(k.floor_fraction, 100.0, 1, 6)
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
                if let Some(f) = m.all_modes_floor_s {
                    s += &format!(
                        ", floor {:.3} ms ({:.1}% of it)",
                        f * 1e3,
                        100.0 * f / m.all_modes_median_s
                    );
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

/// Fills in a row's kernel-only bandwidth and its share of the copy rate.
pub(super) fn with_kernel_bandwidth(mut row: KernelRow, copy: Option<&CopyRate>) -> KernelRow {
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
pub(super) fn summarize(op: Op, rank: usize, rows: &[KernelRow]) -> OpSummary {
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
        all_modes_floor_s: rows.iter().map(|r| r.floor_s).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            floor_bytes: super::super::FloorBytes::new(
                400_000_000,
                &[10, 10],
                &[32, 32],
                0,
                (10, 32),
            ),
            floor_copy: None,
            floor_s: Some(0.2e-3),
            floor_fraction: Some(0.1),
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
        assert!(
            table.contains("%floor") && table.contains(" 10.0\n"),
            "{table}"
        );
        assert!(table.contains("floor 0.200 ms (10.0% of it)"), "{table}");
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["launch"], "sequential");
        assert_eq!(json["copy_rate"]["bytes_per_s"], 2.5e12);
        assert_eq!(json["tensors"][0]["kernels"][0]["kernel_pct_of_copy"], 40.0);
        assert_eq!(
            json["tensors"][0]["summaries"][0]["all_modes_kernel_median_s"],
            1e-3
        );
    }
}
