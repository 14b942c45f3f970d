//! Step 1 and the whole run: the options, the sweep over tile densities on every path,
//! the crossover per op and rank, then the verification ([`super::verify`]).

use super::crossover::{CostPoint, crossover};
use super::report::{OpRankTuning, SweepRow, TensorSummary, TuneReport};
use super::verify::{all_modes, mixed_block_dense, tiled, verify_threshold};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::hls::{TILE, TILE_CELLS};
use crate::matrix::Matrix;
use crate::ops::Op;
use crate::tools::measure::{Samples, measure_interleaved, utc_now};
use serde::Serialize;
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
    /// median of 7 (a few minutes; each profile under `tuning/` records its duration).
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
        .map(|&(_, r)| Matrix::random_factors(&dims, &[r; 3], opts.seed ^ 0xfac7))
        .collect();
    let both = |t: u32| [(Op::Mttkrp, t), (Op::Ttmc, t)];

    let mut rows: Vec<Vec<SweepRow>> = vec![Vec::new(); workloads.len()];
    let mut sweep_tensors = Vec::with_capacity(densities.len());
    let mut values = crate::hls::ValueType::F16;
    for (i, &t) in densities.iter().enumerate() {
        let x = tiled(&dims, opts.nnz, t, opts.seed.wrapping_add(i as u64))?;
        let dense = engine.prepare_with_thresholds(&x, &both(1))?;
        let sparse = engine.prepare_with_thresholds(&x, &both(u32::MAX))?;
        let tiles = dense.hls(Op::Mttkrp)?.stats().tiles;
        values = dense.hls(Op::Mttkrp)?.value_type();
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
            let paths = [&dense, &sparse];
            let timed = measure_interleaved(opts.repetitions, 2, |k| {
                all_modes(engine, op, paths[k], &factors[w])
            })?;
            let [d, s] = [0, 1].map(|k| timed[k].device_or_wall());
            let per_tile = |s: &Samples| s.median * 1e9 / tiles as f64;
            let row = SweepRow {
                tile_nnz: t,
                tiles,
                dense_ns_per_tile: per_tile(d),
                sparse_ns_per_tile: per_tile(s),
                dense_runs_s: d.runs.clone(),
                sparse_runs_s: s.runs.clone(),
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
        verify_tensor = Some(TensorSummary::of(&x, spread)?);
        for r in &mut results {
            let t = r.crossover.threshold;
            r.verify = verify_threshold(engine, &x, "spread", r.op, r.rank, t, opts.repetitions)?;
            step(TuneStage::Verified {
                op: r.op,
                rank: r.rank,
            });
            // Where the threshold matters most: every tile within a factor 4 of T.
            let lo = (t / 4).max(2);
            let hi = t.saturating_mul(4).clamp(lo, TILE_CELLS as u32);
            let near = geometric_sweep(lo, hi, std::f64::consts::SQRT_2);
            let xn = mixed_block_dense(&dims, opts.verify_nnz, &near, opts.seed ^ u64::from(t))?;
            r.near_tensor = Some(TensorSummary::of(&xn, near)?);
            let near_rows =
                verify_threshold(engine, &xn, "near-T", r.op, r.rank, t, opts.repetitions)?;
            r.verify.extend(near_rows);
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
        date: utc_now()[..10].to_string(),
        options: opts.clone(),
        values,
        results,
        sweep_tensors,
        verify_tensor,
        duration_s: start.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
