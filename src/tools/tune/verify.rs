//! Steps 3 and after: timing one tensor's kernels at several tile thresholds, side by
//! side — the tuner's check of a chosen threshold `T` against `T/2` and `2T` on mixed
//! tensors, and `sptmc tune --tns` on real ones. A timing is one call of the op on every
//! mode in turn, synchronized ([`all_modes`]); the thresholds are timed interleaved
//! ([`measure_interleaved`]) and the median is reported.

use super::report::VerifyRow;
use crate::engine::{Engine, Prepared};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::Op;
use crate::tensor::CooTensor;
use crate::tensor::generate::{GenSpec, Pattern, generate};
use crate::tools::measure::measure_interleaved;
use serde::Serialize;

/// The timings of one threshold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThresholdTiming {
    /// The tile threshold.
    pub threshold: u32,
    /// Median over the repetitions of the seconds for the op on all modes.
    pub median_s: f64,
    /// Fastest repetition, seconds (less sensitive to other load on a shared machine).
    pub min_s: f64,
    /// Every repetition, in seconds, in the order taken.
    pub runs_s: Vec<f64>,
    /// Tiles made dense at this threshold.
    pub dense_tiles: usize,
    /// Share of the nonzeros in dense tiles.
    pub dense_share: f64,
}

/// The timings of `op` on all modes of `tensor` at `rank` for each threshold, in the
/// order given, with every repetition and the dense share.
pub fn compare_thresholds(
    engine: &Engine,
    tensor: &CooTensor,
    op: Op,
    rank: usize,
    thresholds: &[u32],
    reps: usize,
) -> Result<Vec<ThresholdTiming>> {
    if thresholds.is_empty() {
        return Err(Error::InvalidOption(
            "compare_thresholds needs at least one threshold".into(),
        ));
    }
    if reps == 0 {
        return Err(Error::InvalidOption(
            "repetitions must be at least 1".into(),
        ));
    }
    if let Some(t) = thresholds.iter().find(|&&t| t == 0) {
        return Err(Error::InvalidOption(format!(
            "tile threshold {t}: thresholds must be ≥ 1"
        )));
    }
    if rank == 0 {
        return Err(Error::InvalidRank("tuning needs a rank ≥ 1".into()));
    }
    let factors = Matrix::random_factors(tensor.dims(), &vec![rank; tensor.order()], 0x5eed);
    let prepared: Vec<Prepared> = thresholds
        .iter()
        .map(|&t| engine.prepare_with_thresholds(tensor, &[(op, t)]))
        .collect::<Result<_>>()?;
    let timed = measure_interleaved(reps, prepared.len(), |i| {
        all_modes(engine, op, &prepared[i], &factors)
    })?;
    thresholds
        .iter()
        .zip(&prepared)
        .zip(&timed)
        .map(|((&threshold, p), s)| {
            let stats = p.hls(op)?.stats();
            let s = s.device_or_wall();
            Ok(ThresholdTiming {
                threshold,
                median_s: s.median,
                min_s: s.min,
                runs_s: s.runs.clone(),
                dense_tiles: stats.dense_tiles,
                dense_share: stats.dense_share(),
            })
        })
        .collect()
}

/// One call of `op` on every mode of `p` in turn, synchronized; the kernels' summed
/// device seconds when the backend timed every call (what the tuner compares: on a GPU
/// the copy of the result back costs the same at every threshold).
pub(super) fn all_modes(
    engine: &Engine,
    op: Op,
    p: &Prepared,
    factors: &[Matrix],
) -> Result<Option<f64>> {
    let mut device = Some(0.0);
    let mut out = Matrix::zeros(0, 0);
    for mode in 0..p.order() {
        let stats = engine.run_into(op, p, mode, factors, &mut out)?;
        std::hint::black_box(&out);
        device = device.zip(stats.kernel_seconds).map(|(a, b)| a + b);
    }
    engine.backend().synchronize()?;
    Ok(device)
}

/// Times `op` on `x` (named `tensor` in the rows) at `T/2`, `T` and `2T` and the
/// ratios to `T`.
pub fn verify_threshold(
    engine: &Engine,
    x: &CooTensor,
    tensor: &str,
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
    let timings = compare_thresholds(engine, x, op, rank, &ts, reps)?;
    let (at_t, min_at_t) = (timings[1].median_s, timings[1].min_s);
    Ok(cands
        .iter()
        .zip(timings)
        .map(|(&(label, _), timing)| VerifyRow {
            tensor: tensor.to_string(),
            label: label.to_string(),
            ratio_to_tuned: timing.median_s / at_t,
            min_ratio_to_tuned: timing.min_s / min_at_t,
            timing,
        })
        .collect())
}

/// Tiles per mode in the blocks of neighbouring tiles the tuner's test tensors are made
/// of ([`Pattern::TileBlocks`]): dense regions 64 cells wide, as in block-dense data.
/// (Isolated tiles, used before, cut every fiber at the tile's edge; the CPU walk, which
/// shares work along fibers, then looked slower on the sparse path than it is on real
/// block-dense tensors, and the tuned thresholds put such tensors in tiles.)
pub const TILE_BLOCK_SIDE: usize = 4;

/// `nnz` nonzeros (rounded down to whole tiles) in 16³ tiles of exactly `t` each, the
/// tiles in blocks of [`TILE_BLOCK_SIDE`]³, nothing outside them, with integer counts:
/// the tuner's test tensors.
pub(super) fn tiled(dims: &[usize], nnz: usize, t: u32, seed: u64) -> Result<CooTensor> {
    let x = generate(&GenSpec {
        dims: dims.to_vec(),
        nnz: nnz / t as usize * t as usize,
        pattern: Pattern::TileBlocks {
            tile_nnz: t,
            side: TILE_BLOCK_SIDE,
        },
        seed,
    })?;
    // Counts (1 to 5): what `--values auto` stores in fp16, the format most data runs
    // in; `--values f32` tunes the f32 kernels on the same tensors.
    let (dims, idx, vals) = x.into_parts();
    CooTensor::new(dims, idx, vals.iter().map(|v| v.ceil()).collect())
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
        let part = tiled(dims, part_nnz, t, seed.wrapping_add(i as u64))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_reports_every_threshold_in_order() {
        let x = generate(&GenSpec {
            dims: vec![64, 64, 64],
            nnz: 3000,
            pattern: Pattern::BlockDense {
                tile_nnz: 100,
                dense_share: 0.5,
            },
            seed: 1,
        })
        .unwrap();
        let e = Engine::cpu();
        let r = compare_thresholds(&e, &x, Op::Mttkrp, 4, &[4097, 50, 1], 2).unwrap();
        assert_eq!(
            r.iter().map(|t| t.threshold).collect::<Vec<_>>(),
            [4097, 50, 1]
        );
        assert!(r.iter().all(|t| t.runs_s.len() == 2 && t.median_s > 0.0));
        assert_eq!(r[0].dense_tiles, 0);
        assert!(r[1].dense_tiles >= 15, "{:?}", r[1]);
        assert_eq!(r[2].dense_share, 1.0);
        let short = compare_thresholds(&e, &x, Op::Ttmc, 2, &[8], 1).unwrap();
        assert_eq!(short.len(), 1);
        assert!(compare_thresholds(&e, &x, Op::Ttmc, 2, &[], 1).is_err());
        assert!(compare_thresholds(&e, &x, Op::Ttmc, 2, &[8], 0).is_err());
        assert!(compare_thresholds(&e, &x, Op::Ttmc, 0, &[8], 1).is_err());
        assert!(compare_thresholds(&e, &x, Op::Ttmc, 2, &[0], 1).is_err());
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
}
