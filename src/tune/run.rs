//! The tuning procedure: measure where a dense tile becomes cheaper than its nonzeros
//! on the sparse path, per op and rank, on whatever backend the engine runs.
//!
//! 1. **Sweep.** For each tile density `t` of [`TuneOptions::tile_nnz`] generate a
//!    3rd-order block-dense tensor whose nonzeros all sit in 16³ tiles of exactly `t`
//!    nonzeros (same extents and about the same nonzero count for every `t`). Prepare
//!    it twice — threshold 1 (every tile dense) and `u32::MAX` (every nonzero sparse) —
//!    and time the op on all modes on each, interleaved, [`TuneOptions::repetitions`]
//!    times after a warm-up. The median divided by the number of tiles is the cost of a
//!    tile on each path.
//! 2. **Crossover.** The threshold is where the two per-tile cost curves cross
//!    ([`super::crossover`]), in `[1, 4097]`; 4097 means the dense path never pays.
//! 3. **Verification.** On one mixed tensor whose tiles span the whole density range,
//!    time the op at `T/2`, `T` and `2T` ([`super::compare`]) and record the ratios.
//!
//! Every measurement is kept in the [`TuneReport`], not only the winner; the report
//! renders as a table, as CSV for plots, as JSON, and as a [`Profile`] for `tuning/`.

use super::compare::{
    ThresholdTiming, compare_thresholds_detailed, factors_for, median, time_all_modes,
};
use super::crossover::{CostPoint, Crossover, crossover};
use crate::engine::profile::{Profile, ThresholdEntry, profile_path, render};
use crate::engine::{BackendKind, Engine};
use crate::error::{Error, Result};
use crate::hls::{TILE, TILE_CELLS};
use crate::ops::Op;
use crate::tensor::CooTensor;
use crate::tensor::generate::{GenSpec, Pattern, generate};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What to measure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuneOptions {
    /// Ranks to tune MTTKRP at (default `[16, 32]`).
    pub ranks_mttkrp: Vec<usize>,
    /// Ranks to tune TTMc at, the same rank for every mode (default `[8, 16]`).
    pub ranks_ttmc: Vec<usize>,
    /// Nonzeros per test tensor (rounded down to a whole number of tiles per density).
    pub nnz: usize,
    /// Extent of every mode of the cubic test tensors.
    pub extent: usize,
    /// Tile densities (nonzeros per tile, 1..=4096) to sweep.
    pub tile_nnz: Vec<u32>,
    /// Timed repetitions per measurement (the median is used).
    pub repetitions: usize,
    /// Seed of the generated tensors and factors.
    pub seed: u64,
    /// Nonzeros of the mixed verification tensor; 0 skips the verification.
    pub verify_nnz: usize,
    /// Free text recorded in the profile's `tuned` field (e.g. commit and command).
    pub note: String,
}

impl Default for TuneOptions {
    /// The full run: densities 2, 4, …, 2048 on tensors of 2²⁰ nonzeros over 2048³,
    /// median of 7 (about 2 minutes on 2 CPU threads).
    fn default() -> Self {
        TuneOptions {
            ranks_mttkrp: vec![16, 32],
            ranks_ttmc: vec![8, 16],
            nnz: 1 << 20,
            extent: 2048,
            tile_nnz: geometric_sweep(2, 2048, 2.0),
            repetitions: 7,
            seed: 2026,
            verify_nnz: 1 << 20,
            note: String::new(),
        }
    }
}

impl TuneOptions {
    /// A run small enough for tests and smoke checks (seconds, not minutes); its
    /// thresholds are not worth keeping.
    pub fn quick() -> Self {
        TuneOptions {
            ranks_mttkrp: vec![4],
            ranks_ttmc: vec![2],
            nnz: 1 << 12,
            extent: 256,
            tile_nnz: vec![2, 16, 128, 1024],
            repetitions: 1,
            seed: 7,
            verify_nnz: 1 << 12,
            note: String::new(),
        }
    }

    /// Every (op, rank) pair to tune, MTTKRP first.
    pub fn workloads(&self) -> Vec<(Op, usize)> {
        self.ranks_mttkrp
            .iter()
            .map(|&r| (Op::Mttkrp, r))
            .chain(self.ranks_ttmc.iter().map(|&r| (Op::Ttmc, r)))
            .collect()
    }

    /// Checks the options; the error names the offending one.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidOption(m));
        if self.ranks_mttkrp.is_empty() && self.ranks_ttmc.is_empty() {
            return bad("tuning needs at least one MTTKRP or TTMc rank".into());
        }
        if self.workloads().iter().any(|w| w.1 == 0) {
            return Err(Error::InvalidRank("tuning ranks must be ≥ 1".into()));
        }
        if self.repetitions == 0 {
            return bad("tuning repetitions must be ≥ 1".into());
        }
        if self.tile_nnz.is_empty() {
            return bad("tuning needs at least one tile density".into());
        }
        if let Some(t) = self
            .tile_nnz
            .iter()
            .find(|&&t| t == 0 || t as usize > TILE_CELLS)
        {
            return bad(format!(
                "tile density {t} is outside 1..={TILE_CELLS} nonzeros per tile"
            ));
        }
        if self.extent < TILE {
            return bad(format!(
                "tuning extent {} is smaller than a tile ({TILE})",
                self.extent
            ));
        }
        let max_t = *self.tile_nnz.iter().max().expect("not empty") as usize;
        if self.nnz < max_t {
            return bad(format!(
                "{} nonzeros per test tensor cannot fill one tile of {max_t}",
                self.nnz
            ));
        }
        // The sparsest sweep point must leave at least half the tile grid free, so the
        // generator finds free tiles quickly.
        let grid = (self.extent / TILE).pow(3);
        let min_t = *self.tile_nnz.iter().min().expect("not empty") as usize;
        if self.nnz / min_t > grid / 2 {
            return bad(format!(
                "{} nonzeros in tiles of {min_t} need {} tiles; an extent of {} has only {grid} (use a larger extent or fewer nonzeros)",
                self.nnz,
                self.nnz / min_t,
                self.extent
            ));
        }
        Ok(())
    }
}

/// `lo, lo·f, lo·f², …` up to `hi`, rounded to whole numbers without repeats.
pub fn geometric_sweep(lo: u32, hi: u32, factor: f64) -> Vec<u32> {
    let mut v = Vec::new();
    if lo == 0 || hi < lo || factor.is_nan() || factor <= 1.0 {
        return v;
    }
    let mut x = lo as f64;
    while x.round() <= hi as f64 {
        let t = x.round() as u32;
        if v.last() != Some(&t) {
            v.push(t);
        }
        x *= factor;
    }
    v
}

/// Where the tuner is, for a progress display.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneProgress {
    /// Steps finished.
    pub done: usize,
    /// Steps in the whole run.
    pub total: usize,
    /// What was just finished.
    pub stage: TuneStage,
}

/// A step of the tuner.
#[derive(Debug, Clone, PartialEq)]
pub enum TuneStage {
    /// A sweep tensor was generated and prepared on both paths.
    Prepared {
        /// Its tile density.
        tile_nnz: u32,
        /// Its non-empty tiles.
        tiles: usize,
    },
    /// One sweep point was measured.
    Measured {
        /// The op.
        op: Op,
        /// The rank.
        rank: usize,
        /// The tile density.
        tile_nnz: u32,
        /// Dense path, nanoseconds per tile.
        dense_ns_per_tile: f64,
        /// Sparse path, nanoseconds per tile.
        sparse_ns_per_tile: f64,
    },
    /// A threshold was chosen (before verification).
    Chosen {
        /// The op.
        op: Op,
        /// The rank.
        rank: usize,
        /// The threshold.
        threshold: u32,
    },
    /// A chosen threshold was timed against its half and double.
    Verified {
        /// The op.
        op: Op,
        /// The rank.
        rank: usize,
    },
}

impl std::fmt::Display for TuneStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TuneStage::Prepared { tile_nnz, tiles } => {
                write!(f, "prepared {tiles} tiles of {tile_nnz} nonzeros")
            }
            TuneStage::Measured {
                op,
                rank,
                tile_nnz,
                dense_ns_per_tile,
                sparse_ns_per_tile,
            } => write!(
                f,
                "{op} rank {rank}, {tile_nnz} nnz/tile: dense {dense_ns_per_tile:.0} ns/tile, sparse {sparse_ns_per_tile:.0} ns/tile"
            ),
            TuneStage::Chosen {
                op,
                rank,
                threshold,
            } => write!(f, "{op} rank {rank}: threshold {threshold}"),
            TuneStage::Verified { op, rank } => write!(f, "{op} rank {rank}: verified"),
        }
    }
}

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
    /// Per op and rank.
    pub results: Vec<OpRankTuning>,
    /// The sweep tensors, by increasing density.
    pub sweep_tensors: Vec<TensorSummary>,
    /// The mixed verification tensor, if verification ran.
    pub verify_tensor: Option<TensorSummary>,
    /// Wall-clock seconds of the whole run, generation included.
    pub duration_s: f64,
}

/// Tunes the tile thresholds of `engine`'s device; `progress` hears of every step.
pub fn tune(
    engine: &Engine,
    opts: &TuneOptions,
    progress: &mut dyn FnMut(TuneProgress),
) -> Result<TuneReport> {
    opts.validate()?;
    let start = Instant::now();
    let workloads = opts.workloads();
    let mut densities = opts.tile_nnz.clone();
    densities.sort_unstable();
    densities.dedup();
    let verify = opts.verify_nnz > 0;
    let total =
        densities.len() * (1 + workloads.len()) + workloads.len() * (1 + 2 * usize::from(verify));
    let mut done = 0;
    let mut step = |stage: TuneStage| {
        done += 1;
        progress(TuneProgress { done, total, stage });
    };
    let dims = vec![opts.extent; 3];
    let factors: Vec<_> = workloads
        .iter()
        .map(|&(_, r)| factors_for(&dims, r, opts.seed ^ 0xfac7))
        .collect::<Result<_>>()?;
    let both = |t: u32| [(Op::Mttkrp, t), (Op::Ttmc, t)];

    let mut rows: Vec<Vec<SweepRow>> = vec![Vec::new(); workloads.len()];
    let mut sweep_tensors = Vec::with_capacity(densities.len());
    for (i, &t) in densities.iter().enumerate() {
        let nnz = opts.nnz / t as usize * t as usize;
        let x = generate(&GenSpec {
            dims: dims.clone(),
            nnz,
            pattern: Pattern::BlockDense {
                tile_nnz: t,
                dense_share: 1.0,
            },
            seed: opts.seed.wrapping_add(i as u64),
        })?;
        let dense = engine.prepare_with_thresholds(&x, &both(1))?;
        let sparse = engine.prepare_with_thresholds(&x, &both(u32::MAX))?;
        let tiles = dense.hls(Op::Mttkrp)?.stats().tiles;
        if tiles == 0 {
            return Err(Error::InvalidTensor(format!(
                "the sweep tensor of {t} nonzeros per tile has no tiles"
            )));
        }
        sweep_tensors.push(TensorSummary {
            dims: dims.clone(),
            nnz: x.nnz(),
            tiles,
            tile_nnz: vec![t],
        });
        step(TuneStage::Prepared { tile_nnz: t, tiles });
        for (w, &(op, rank)) in workloads.iter().enumerate() {
            let f = &factors[w];
            time_all_modes(engine, op, &dense, f)?;
            time_all_modes(engine, op, &sparse, f)?;
            let mut dense_runs_s = Vec::with_capacity(opts.repetitions);
            let mut sparse_runs_s = Vec::with_capacity(opts.repetitions);
            for _ in 0..opts.repetitions {
                dense_runs_s.push(time_all_modes(engine, op, &dense, f)?);
                sparse_runs_s.push(time_all_modes(engine, op, &sparse, f)?);
            }
            let per_tile = |runs: &[f64]| median(runs) * 1e9 / tiles as f64;
            let row = SweepRow {
                tile_nnz: t,
                tiles,
                dense_ns_per_tile: per_tile(&dense_runs_s),
                sparse_ns_per_tile: per_tile(&sparse_runs_s),
                dense_runs_s,
                sparse_runs_s,
            };
            step(TuneStage::Measured {
                op,
                rank,
                tile_nnz: t,
                dense_ns_per_tile: row.dense_ns_per_tile,
                sparse_ns_per_tile: row.sparse_ns_per_tile,
            });
            rows[w].push(row);
        }
    }

    let mut results = Vec::with_capacity(workloads.len());
    for (&(op, rank), rows) in workloads.iter().zip(rows) {
        let points: Vec<CostPoint> = rows
            .iter()
            .map(|r| CostPoint {
                tile_nnz: r.tile_nnz,
                dense: r.dense_ns_per_tile,
                sparse: r.sparse_ns_per_tile,
            })
            .collect();
        let crossover = crossover(&points)?;
        step(TuneStage::Chosen {
            op,
            rank,
            threshold: crossover.threshold,
        });
        results.push(OpRankTuning {
            op,
            rank,
            rows,
            crossover,
            verify: Vec::new(),
            near_tensor: None,
        });
    }

    let mut verify_tensor = None;
    if verify {
        let spread = geometric_sweep(2, 2048, std::f64::consts::SQRT_2);
        let x = mixed_block_dense(&dims, opts.verify_nnz, &spread, opts.seed ^ 0x0123_4567)?;
        verify_tensor = Some(summarize(&x, spread)?);
        for r in &mut results {
            let t = r.crossover.threshold;
            for row in verify_threshold(engine, &x, r.op, r.rank, t, opts.repetitions)? {
                r.verify.push(VerifyRow {
                    tensor: "spread".into(),
                    ..row
                });
            }
            step(TuneStage::Verified {
                op: r.op,
                rank: r.rank,
            });
            // Where the threshold matters most: every tile within a factor 4 of T.
            let lo = (t / 4).max(2);
            let hi = t.saturating_mul(4).clamp(lo, TILE_CELLS as u32);
            let near = geometric_sweep(lo, hi, std::f64::consts::SQRT_2);
            let xn = mixed_block_dense(&dims, opts.verify_nnz, &near, opts.seed ^ u64::from(t))?;
            r.near_tensor = Some(summarize(&xn, near)?);
            for row in verify_threshold(engine, &xn, r.op, r.rank, t, opts.repetitions)? {
                r.verify.push(VerifyRow {
                    tensor: "near-T".into(),
                    ..row
                });
            }
            step(TuneStage::Verified {
                op: r.op,
                rank: r.rank,
            });
        }
    }

    let backend = engine.backend();
    Ok(TuneReport {
        backend: backend.kind(),
        device_id: backend.device_id(),
        description: backend.describe(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        date: utc_date(std::time::SystemTime::now()),
        options: opts.clone(),
        results,
        sweep_tensors,
        verify_tensor,
        duration_s: start.elapsed().as_secs_f64(),
    })
}

/// Times `op` on `x` at `T/2`, `T` and `2T` and the ratios to `T` (with an empty
/// [`VerifyRow::tensor`] for the caller to name).
pub fn verify_threshold(
    engine: &Engine,
    x: &CooTensor,
    op: Op,
    rank: usize,
    threshold: u32,
    reps: usize,
) -> Result<Vec<VerifyRow>> {
    let cands = [
        ("T/2", (threshold / 2).max(1)),
        ("T", threshold.max(1)),
        ("2T", threshold.saturating_mul(2)),
    ];
    let ts: Vec<u32> = cands.iter().map(|c| c.1).collect();
    let timings = compare_thresholds_detailed(engine, x, op, rank, &ts, reps)?;
    let (at_t, min_at_t) = (timings[1].median_s, timings[1].min_s);
    Ok(cands
        .iter()
        .zip(timings)
        .map(|(&(label, _), timing)| VerifyRow {
            tensor: String::new(),
            label: label.to_string(),
            ratio_to_tuned: timing.median_s / at_t,
            min_ratio_to_tuned: timing.min_s / min_at_t,
            timing,
        })
        .collect())
}

fn summarize(x: &CooTensor, tile_nnz: Vec<u32>) -> Result<TensorSummary> {
    Ok(TensorSummary {
        dims: x.dims().to_vec(),
        nnz: x.nnz(),
        tiles: crate::hls::HlsBuilder::new(1).build(x)?.stats().tiles,
        tile_nnz,
    })
}

/// A tensor whose tiles span several densities: for each of
/// `tile_nnz`, an equal share of `nnz` in block-dense tiles of that many nonzeros (tiles
/// drawn independently, so a few overlap and add up), duplicates summed.
pub fn mixed_block_dense(
    dims: &[usize],
    nnz: usize,
    tile_nnz: &[u32],
    seed: u64,
) -> Result<CooTensor> {
    if tile_nnz.is_empty() {
        return Err(Error::InvalidOption(
            "a mixed tensor needs at least one tile density".into(),
        ));
    }
    let share = nnz / tile_nnz.len();
    let mut idx: Vec<Vec<u32>> = vec![Vec::with_capacity(nnz); dims.len()];
    let mut vals = Vec::with_capacity(nnz);
    for (i, &t) in tile_nnz.iter().enumerate() {
        let part_nnz = (share / t as usize).max(1) * t as usize;
        let part = generate(&GenSpec {
            dims: dims.to_vec(),
            nnz: part_nnz,
            pattern: Pattern::BlockDense {
                tile_nnz: t,
                dense_share: 1.0,
            },
            seed: seed.wrapping_add(i as u64),
        })?;
        let (_, pidx, pvals) = part.into_parts();
        for (all, p) in idx.iter_mut().zip(pidx) {
            all.extend(p);
        }
        vals.extend(pvals);
    }
    let mut x = CooTensor::new(dims.to_vec(), idx, vals)?;
    x.sum_duplicates();
    Ok(x)
}

impl TuneReport {
    /// The tuned thresholds as a profile for this device.
    pub fn to_profile(&self) -> Profile {
        let o = &self.options;
        let mut tuned = format!(
            "{} by sptmc {} tune: {} densities {:?} nnz/tile, {} nonzeros over {}^3, median of {}, {:.0} s",
            self.date,
            self.version,
            o.tile_nnz.len(),
            o.tile_nnz,
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
                })
                .collect(),
        }
    }

    /// The profile as TOML text with a header comment.
    pub fn profile_toml(&self) -> String {
        format!(
            "# Tile thresholds measured by `sptmc tune` on {}.\n# 4097 means: never dense on this device for that op and rank.\n\n{}",
            self.description,
            render(&[self.to_profile()])
        )
    }

    /// Writes the profile to [`profile_path`] under `dir` (created if missing) and
    /// returns the path.
    pub fn save_profile(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let path = profile_path(dir, &self.device_id);
        std::fs::write(&path, self.profile_toml()).map_err(|e| Error::io(&path, e))?;
        Ok(path)
    }

    /// A human-readable table: per op and rank the sweep, the threshold and the
    /// verification.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "device: {} ({})", self.description, self.device_id);
        let _ = writeln!(
            s,
            "sptmc {}, {}, {:.1} s; sweep tensors {} nonzeros over {e}x{e}x{e}, median of {}",
            self.version,
            self.date,
            self.duration_s,
            self.options.nnz,
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
                let _ = writeln!(
                    s,
                    "  {:>6} {:>3} = {:>5}: median {:>9.3} ms x{:.3} of T, min {:>9.3} ms x{:.3}  (dense tiles {}, dense share {:.1}%)",
                    v.tensor,
                    v.label,
                    v.timing.threshold,
                    v.timing.median_s * 1e3,
                    v.ratio_to_tuned,
                    v.timing.min_s * 1e3,
                    v.min_ratio_to_tuned,
                    v.timing.dense_tiles,
                    v.timing.dense_share * 100.0
                );
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
        let mut s = String::from(
            "op,rank,tensor,label,threshold,median_s,ratio_to_tuned,min_s,min_ratio_to_tuned,dense_tiles,dense_share\n",
        );
        for r in &self.results {
            for v in &r.verify {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{:.6e},{:.4},{:.6e},{:.4},{},{:.4}",
                    r.op,
                    r.rank,
                    v.tensor,
                    v.label,
                    v.timing.threshold,
                    v.timing.median_s,
                    v.ratio_to_tuned,
                    v.timing.min_s,
                    v.min_ratio_to_tuned,
                    v.timing.dense_tiles,
                    v.timing.dense_share
                );
            }
        }
        s
    }

    /// The whole report as pretty JSON.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a tuning report serializes")
    }
}

/// `YYYY-MM-DD` (UTC) of `t`.
fn utc_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut days = secs / 86_400;
    let mut year = 1970u64;
    loop {
        let len = if is_leap(year) { 366 } else { 365 };
        if days < len {
            break;
        }
        days -= len;
        year += 1;
    }
    let feb = if is_leap(year) { 29 } else { 28 };
    let months = [31, feb, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let mut month = 1;
    for len in months {
        if days < len {
            break;
        }
        days -= len;
        month += 1;
    }
    format!("{year:04}-{month:02}-{:02}", days + 1)
}

fn is_leap(y: u64) -> bool {
    (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn sweeps_are_geometric_without_repeats() {
        assert_eq!(
            geometric_sweep(2, 2048, 2.0),
            [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
        );
        assert_eq!(geometric_sweep(2, 8, 1.2), [2, 3, 4, 5, 6, 7]);
        assert!(geometric_sweep(2, 8, 1.0).is_empty());
        assert!(geometric_sweep(0, 8, 2.0).is_empty());
    }

    #[test]
    fn utc_dates() {
        let at = |s| utc_date(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01");
        assert_eq!(at(951_782_400), "2000-02-29");
        assert_eq!(at(1_795_314_000), "2026-11-22");
    }

    #[test]
    fn options_are_validated() {
        assert!(TuneOptions::default().validate().is_ok());
        assert!(TuneOptions::quick().validate().is_ok());
        let bad = [
            TuneOptions {
                ranks_mttkrp: vec![],
                ranks_ttmc: vec![],
                ..TuneOptions::quick()
            },
            TuneOptions {
                ranks_ttmc: vec![0],
                ..TuneOptions::quick()
            },
            TuneOptions {
                repetitions: 0,
                ..TuneOptions::quick()
            },
            TuneOptions {
                tile_nnz: vec![4097],
                ..TuneOptions::quick()
            },
            TuneOptions {
                extent: 8,
                ..TuneOptions::quick()
            },
            TuneOptions {
                nnz: 100,
                ..TuneOptions::quick()
            },
            TuneOptions {
                extent: 32,
                ..TuneOptions::quick()
            },
        ];
        for o in bad {
            assert!(tune(&Engine::cpu(), &o, &mut |_| {}).is_err(), "{o:?}");
        }
    }

    #[test]
    fn mixed_tensor_holds_every_density() {
        let x = mixed_block_dense(&[256, 256, 256], 4000, &[2, 50, 900], 3).unwrap();
        let h = crate::hls::HlsBuilder::new(900).build(&x).unwrap();
        // 1 tile of 900 (maybe plus an overlap); most nonzeros elsewhere.
        assert!(h.stats().dense_tiles >= 1);
        let h = crate::hls::HlsBuilder::new(50).build(&x).unwrap();
        assert!(h.stats().dense_tiles >= 27, "{:?}", h.stats());
        assert!(mixed_block_dense(&[64, 64, 64], 10, &[], 1).is_err());
    }

    #[test]
    fn quick_run_reports_every_measurement_and_a_usable_profile() {
        let e = Engine::cpu();
        let opts = TuneOptions::quick();
        let mut seen = Vec::new();
        let r = tune(&e, &opts, &mut |p| seen.push(p)).unwrap();
        // Steps: 4 densities × (prepare + 2 workloads) + 2 × (choose + 2 verifications).
        assert_eq!(seen.len(), 18);
        assert!(seen.iter().all(|p| p.total == 18));
        assert_eq!(seen.last().unwrap().done, 18);
        assert_eq!(r.device_id, e.backend().device_id());
        assert_eq!(r.results.len(), 2);
        for res in &r.results {
            assert_eq!(res.rows.len(), 4);
            assert!((1..=4097).contains(&res.crossover.threshold));
            assert_eq!(
                res.verify
                    .iter()
                    .map(|v| format!("{} {}", v.tensor, v.label))
                    .collect::<Vec<_>>(),
                [
                    "spread T/2",
                    "spread T",
                    "spread 2T",
                    "near-T T/2",
                    "near-T T",
                    "near-T 2T"
                ]
            );
            assert_eq!(res.verify[1].ratio_to_tuned, 1.0);
            assert_eq!(res.verify[4].ratio_to_tuned, 1.0);
            let near = res.near_tensor.as_ref().unwrap();
            assert!(near.tile_nnz.iter().all(|&t| (2..=4096).contains(&t)));
            for row in &res.rows {
                assert_eq!(row.dense_runs_s.len(), 1);
                assert!(row.tiles >= 4096 / row.tile_nnz as usize);
            }
        }
        // The profile parses back and names this device.
        let text = r.profile_toml();
        let back = crate::engine::profile::parse(&text, Path::new("t.toml")).unwrap();
        assert_eq!(back, vec![r.to_profile()]);
        assert_eq!(back[0].device, e.backend().device_id());
        // CSV: a header and one line per op, rank and density.
        assert_eq!(r.csv().lines().count(), 1 + 2 * 4);
        assert_eq!(r.verify_csv().lines().count(), 1 + 2 * 6);
        assert!(r.table().contains("threshold T ="));
        let json: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(json["results"][0]["op"], "mttkrp");
    }
}
