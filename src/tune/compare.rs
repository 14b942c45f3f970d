//! Timing one tensor's kernels at several tile thresholds, side by side.
//!
//! Used by the tuner to check a chosen threshold `T` against `T/2` and `2T`, and by
//! `sptmc tune --verify` on real tensors. A timing is one call of the op on every mode
//! in turn, with the backend synchronized inside the timed region; repetitions are
//! interleaved over the thresholds (so drift of the machine hits them all alike) after
//! one untimed warm-up call each, and the median is reported.

use crate::engine::{Engine, Prepared};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::Op;
use crate::tensor::CooTensor;
pub use crate::timing::median;
use serde::Serialize;
use std::time::Instant;

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

/// Median seconds of `op` on all modes of `tensor` at `rank` for each threshold, in
/// the order given: `(threshold, seconds)`.
pub fn compare_thresholds(
    engine: &Engine,
    tensor: &CooTensor,
    op: Op,
    rank: usize,
    thresholds: &[u32],
    reps: usize,
) -> Result<Vec<(u32, f64)>> {
    Ok(
        compare_thresholds_detailed(engine, tensor, op, rank, thresholds, reps)?
            .into_iter()
            .map(|t| (t.threshold, t.median_s))
            .collect(),
    )
}

/// Like [`compare_thresholds`], keeping every repetition and the dense share.
pub fn compare_thresholds_detailed(
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
    let factors = factors_for(tensor.dims(), rank, 0x5eed)?;
    let prepared: Vec<Prepared> = thresholds
        .iter()
        .map(|&t| engine.prepare_with_thresholds(tensor, &[(op, t)]))
        .collect::<Result<_>>()?;
    for p in &prepared {
        time_all_modes(engine, op, p, &factors)?;
    }
    let mut runs = vec![Vec::with_capacity(reps); thresholds.len()];
    for _ in 0..reps {
        for (p, r) in prepared.iter().zip(runs.iter_mut()) {
            r.push(time_all_modes(engine, op, p, &factors)?);
        }
    }
    thresholds
        .iter()
        .zip(prepared.iter())
        .zip(runs)
        .map(|((&threshold, p), runs_s)| {
            let stats = p.hls(op)?.stats();
            Ok(ThresholdTiming {
                threshold,
                median_s: median(&runs_s),
                min_s: runs_s.iter().copied().fold(f64::INFINITY, f64::min),
                runs_s,
                dense_tiles: stats.dense_tiles,
                dense_share: stats.dense_share(),
            })
        })
        .collect()
}

/// Seeded random factors of `rank` columns for every mode of a tensor of extents `dims`.
pub(crate) fn factors_for(dims: &[usize], rank: usize, seed: u64) -> Result<Vec<Matrix>> {
    if rank == 0 {
        return Err(Error::InvalidRank("tuning needs a rank ≥ 1".into()));
    }
    Ok(dims
        .iter()
        .enumerate()
        .map(|(m, &d)| Matrix::random(d, rank, seed.wrapping_add(m as u64)))
        .collect())
}

/// Seconds for `op` on every mode of `p` in turn: the kernels' device time where the
/// backend measures it (a GPU: the copy of the result back costs the same at every
/// threshold and would only blur the comparison), else the synchronized wall clock.
pub(crate) fn time_all_modes(
    engine: &Engine,
    op: Op,
    p: &Prepared,
    factors: &[Matrix],
) -> Result<f64> {
    let start = Instant::now();
    let mut device = Some(0.0);
    let mut out = Matrix::zeros(0, 0);
    for mode in 0..p.order() {
        let stats = engine.run_into(op, p, mode, factors, &mut out)?;
        std::hint::black_box(&out);
        device = device.zip(stats.kernel_seconds).map(|(a, b)| a + b);
    }
    engine.backend().synchronize()?;
    Ok(device.unwrap_or_else(|| start.elapsed().as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::generate::{GenSpec, Pattern, generate};

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
        let r = compare_thresholds_detailed(&e, &x, Op::Mttkrp, 4, &[4097, 50, 1], 2).unwrap();
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
}
