//! What a tuning run measured, and how it is written: a table, CSV for plots, JSON, and
//! a [`Profile`] for `tuning/`.

use super::crossover::Crossover;
use super::sweep::TuneOptions;
use super::verify::ThresholdTiming;
use crate::engine::BackendKind;
use crate::engine::profile::{Profile, ThresholdEntry, parse, profile_path, render};
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::tensor::CooTensor;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One sweep point of one op and rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepRow {
    /// Nonzeros per tile.
    pub tile_nnz: u32,
    /// Non-empty tiles of the test tensor.
    pub tiles: usize,
    /// Median dense-path time per tile, nanoseconds (all modes).
    pub dense_ns_per_tile: f64,
    /// Median sparse-path time per tile, nanoseconds (all modes).
    pub sparse_ns_per_tile: f64,
    /// Every dense-path repetition, seconds for all modes.
    pub dense_runs_s: Vec<f64>,
    /// Every sparse-path repetition, seconds for all modes.
    pub sparse_runs_s: Vec<f64>,
}

/// One threshold of the verification.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerifyRow {
    /// Which tensor: `"spread"` (tiles of 2..2048 nonzeros, shared by every op and
    /// rank) or `"near-T"` (tiles of T/4..4T nonzeros).
    pub tensor: String,
    /// `"T/2"`, `"T"` or `"2T"`.
    pub label: String,
    /// The timings at this threshold.
    pub timing: ThresholdTiming,
    /// Median time over the median time at the tuned threshold (> 1: `T` is faster).
    pub ratio_to_tuned: f64,
    /// The same for the fastest repetitions.
    pub min_ratio_to_tuned: f64,
}

/// The result for one op at one rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpRankTuning {
    /// The op.
    pub op: Op,
    /// The rank (of every factor, for TTMc).
    pub rank: usize,
    /// The sweep, by increasing density.
    pub rows: Vec<SweepRow>,
    /// The chosen threshold and how it was found.
    pub crossover: Crossover,
    /// `T/2`, `T`, `2T` on the spread tensor, then on the near-T tensor (empty when
    /// verification was skipped).
    pub verify: Vec<VerifyRow>,
    /// The near-T verification tensor, if verification ran.
    pub near_tensor: Option<TensorSummary>,
}

/// A test tensor, briefly.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorSummary {
    /// Mode extents.
    pub dims: Vec<usize>,
    /// Nonzeros.
    pub nnz: usize,
    /// Non-empty tiles.
    pub tiles: usize,
    /// The tile densities it was made of.
    pub tile_nnz: Vec<u32>,
}

/// Everything a tuning run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuneReport {
    /// The backend.
    pub backend: BackendKind,
    /// [`crate::engine::Backend::device_id`]: profiles are matched on it.
    pub device_id: String,
    /// The device in words.
    pub description: String,
    /// The sptmc version that measured.
    pub version: String,
    /// UTC date of the run, `YYYY-MM-DD`.
    pub date: String,
    /// What was asked for.
    pub options: TuneOptions,
    /// The type the sweep tensors' values were stored in (the engine's `--values` on
    /// integer counts: fp16 unless f32 was asked for), which the timings are of.
    pub values: crate::hls::ValueType,
    /// Per op and rank.
    pub results: Vec<OpRankTuning>,
    /// The sweep tensors, by increasing density.
    pub sweep_tensors: Vec<TensorSummary>,
    /// The mixed verification tensor, if verification ran.
    pub verify_tensor: Option<TensorSummary>,
    /// Wall-clock seconds of the whole run, generation included.
    pub duration_s: f64,
}

impl TensorSummary {
    /// Extents, nonzeros and non-empty tiles of `x`, made of `tile_nnz` densities.
    pub fn of(x: &CooTensor, tile_nnz: Vec<u32>) -> Result<Self> {
        Ok(TensorSummary {
            dims: x.dims().to_vec(),
            nnz: x.nnz(),
            tiles: crate::hls::HlsBuilder::new(1).build(x)?.stats().tiles,
            tile_nnz,
        })
    }
}

/// The header line of the verification CSV ([`TuneReport::verify_csv`],
/// [`VerifyRow::csv_line`]).
pub const VERIFY_CSV_HEADER: &str = "op,rank,tensor,label,threshold,median_s,ratio_to_tuned,min_s,min_ratio_to_tuned,dense_tiles,dense_share\n";

impl VerifyRow {
    /// This row as a line of the verification CSV, for `op` at `rank`.
    pub fn csv_line(&self, op: Op, rank: usize) -> String {
        let t = &self.timing;
        format!(
            "{op},{rank},{},{},{},{:.6e},{:.4},{:.6e},{:.4},{},{:.4}\n",
            self.tensor,
            self.label,
            t.threshold,
            t.median_s,
            self.ratio_to_tuned,
            t.min_s,
            self.min_ratio_to_tuned,
            t.dense_tiles,
            t.dense_share
        )
    }

    /// This row as a line of text: tensor, label, threshold, times and ratios to `T`.
    pub fn text(&self) -> String {
        let t = &self.timing;
        format!(
            "{:>6} {:>3} = {:>5}: median {:>9.3} ms x{:.3} of T, min {:>9.3} ms x{:.3}  (dense tiles {}, dense share {:.1}%)",
            self.tensor,
            self.label,
            t.threshold,
            t.median_s * 1e3,
            self.ratio_to_tuned,
            t.min_s * 1e3,
            self.min_ratio_to_tuned,
            t.dense_tiles,
            t.dense_share * 100.0
        )
    }
}

impl TuneReport {
    /// The tuned thresholds as a profile for this device.
    pub fn to_profile(&self) -> Profile {
        let o = &self.options;
        let mut tuned = format!(
            "{} by sptmc {} tune: {} densities {:?} nnz/tile in blocks of {}^3 tiles, {} nonzeros over {}^3, median of {}, {:.0} s",
            self.date,
            self.version,
            o.tile_nnz.len(),
            o.tile_nnz,
            super::verify::TILE_BLOCK_SIDE,
            o.nnz,
            o.extent,
            o.repetitions,
            self.duration_s
        );
        if !o.note.is_empty() {
            tuned.push_str("; ");
            tuned.push_str(&o.note);
        }
        Profile {
            backend: self.backend,
            device: self.device_id.clone(),
            description: self.description.clone(),
            tuned,
            threshold: self
                .results
                .iter()
                .map(|r| ThresholdEntry {
                    op: r.op,
                    rank: r.rank,
                    value: r.crossover.threshold,
                    values: self.values,
                })
                .collect(),
        }
    }

    /// The profile as TOML text with a header comment.
    pub fn profile_toml(&self) -> String {
        profile_text(&self.description, &self.to_profile())
    }

    /// Writes the profile to [`profile_path`] under `dir` (created if missing) and
    /// returns the path. Thresholds an earlier run wrote there for this device with the
    /// other value type stay (an f32 run does not erase the fp16 thresholds); a file
    /// there that does not parse is an error, not overwritten.
    pub fn save_profile(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let path = profile_path(dir, &self.device_id);
        let mut profile = self.to_profile();
        if path.exists() {
            let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
            for old in parse(&text, &path)? {
                if old.backend != profile.backend || old.device != profile.device {
                    continue;
                }
                let kept: Vec<ThresholdEntry> = old
                    .threshold
                    .into_iter()
                    .filter(|e| e.values != self.values)
                    .collect();
                if let Some(e) = kept.first() {
                    // What the old text said of this type's run is replaced, not kept.
                    let replaced = format!("; {} thresholds kept: ", self.values);
                    let old_run = old.tuned.split(&replaced).next().unwrap_or_default();
                    profile.tuned =
                        format!("{}; {} thresholds kept: {old_run}", profile.tuned, e.values);
                    profile.threshold.extend(kept);
                }
            }
        }
        let text = profile_text(&self.description, &profile);
        crate::model_io::write_file_atomically(&path, |w| w.write_all(text.as_bytes()))?;
        Ok(path)
    }

    /// A human-readable table: per op and rank the sweep, the threshold and the
    /// verification.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "device: {} ({})", self.description, self.device_id);
        let _ = writeln!(
            s,
            "sptmc {}, {}, {:.1} s; sweep tensors {} nonzeros over {e}x{e}x{e} ({} values), median of {}",
            self.version,
            self.date,
            self.duration_s,
            self.options.nnz,
            self.values,
            self.options.repetitions,
            e = self.options.extent
        );
        for r in &self.results {
            let _ = writeln!(s, "\n{} rank {}", r.op, r.rank);
            let _ = writeln!(
                s,
                "{:>9} {:>8} {:>15} {:>15} {:>13}",
                "nnz/tile", "tiles", "dense ns/tile", "sparse ns/tile", "dense/sparse"
            );
            for row in &r.rows {
                let _ = writeln!(
                    s,
                    "{:>9} {:>8} {:>15.1} {:>15.1} {:>13.3}",
                    row.tile_nnz,
                    row.tiles,
                    row.dense_ns_per_tile,
                    row.sparse_ns_per_tile,
                    row.dense_ns_per_tile / row.sparse_ns_per_tile
                );
            }
            let _ = writeln!(
                s,
                "threshold T = {} ({:?}, regret {:.3})",
                r.crossover.threshold, r.crossover.kind, r.crossover.regret
            );
            for v in &r.verify {
                let _ = writeln!(s, "  {}", v.text());
            }
        }
        s
    }

    /// The sweep as CSV: `op,rank,tile_nnz,dense_ns_per_tile,sparse_ns_per_tile`.
    pub fn csv(&self) -> String {
        let mut s = String::from("op,rank,tile_nnz,dense_ns_per_tile,sparse_ns_per_tile\n");
        for r in &self.results {
            for row in &r.rows {
                let _ = writeln!(
                    s,
                    "{},{},{},{:.3},{:.3}",
                    r.op, r.rank, row.tile_nnz, row.dense_ns_per_tile, row.sparse_ns_per_tile
                );
            }
        }
        s
    }

    /// The verification as CSV:
    /// `op,rank,tensor,label,threshold,median_s,ratio_to_tuned,min_s,min_ratio_to_tuned,dense_tiles,dense_share`.
    pub fn verify_csv(&self) -> String {
        let mut s = String::from(VERIFY_CSV_HEADER);
        for r in &self.results {
            for v in &r.verify {
                s += &v.csv_line(r.op, r.rank);
            }
        }
        s
    }

    /// The whole report as pretty JSON.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a tuning report serializes")
    }
}

/// A profile as TOML text with a header comment naming the value types it was tuned with.
fn profile_text(description: &str, profile: &Profile) -> String {
    let mut types: Vec<String> = profile
        .threshold
        .iter()
        .map(|e| e.values.to_string())
        .collect();
    types.sort();
    types.dedup();
    format!(
        "# Tile thresholds measured by `sptmc tune` on {description}, with {} values.\n# 4097 means: never dense on this device for that op and rank.\n\n{}",
        types.join(" and "),
        render(std::slice::from_ref(profile))
    )
}
