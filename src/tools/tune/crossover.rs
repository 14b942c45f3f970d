//! Where the dense-tile cost curve crosses the sparse one.
//!
//! Input: per tile density `t` (nonzeros per 16³ tile), the measured cost of a tile on
//! the dense path and on the sparse path. The dense path costs about the same for any
//! `t` (it walks a 4096-bit bitmap with the tile's factor rows in cache); the sparse
//! path grows with `t`. The tile threshold `T` is the density from which on the dense
//! path is the cheaper one: tiles with `nnz ≥ T` go dense.
//!
//! Between two measured densities the crossing is interpolated linearly in
//! `(ln t, ln(dense / sparse))`. Measured curves are noisy and may cross more than once,
//! so every candidate — each upward crossing, [`ALWAYS_DENSE`] and [`NEVER_DENSE`] — is
//! scored by the relative cost it would add over the better path summed over the
//! measured densities, and the cheapest wins (ties: the smaller threshold).

use crate::error::{Error, Result};
use serde::Serialize;

/// The threshold that makes every non-empty tile dense.
pub const ALWAYS_DENSE: u32 = 1;
/// The threshold that makes no tile dense: one more than a tile's 4096 cells.
pub const NEVER_DENSE: u32 = 4097;

/// One measured density: the cost of a tile on each path (any unit, the same for both).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostPoint {
    /// Nonzeros per tile.
    pub tile_nnz: u32,
    /// Cost of one tile on the dense path.
    pub dense: f64,
    /// Cost of one tile on the sparse path.
    pub sparse: f64,
}

/// How a threshold was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrossingKind {
    /// The curves cross between two measured densities (or at one).
    Interpolated,
    /// The dense path was cheaper at every measured density: threshold 1.
    AlwaysDense,
    /// The sparse path was cheaper at every measured density: threshold 4097.
    NeverDense,
}

/// The chosen threshold and how it was found.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Crossover {
    /// Tiles with at least this many nonzeros should be dense; in `[1, 4097]`.
    pub threshold: u32,
    /// How it was found.
    pub kind: CrossingKind,
    /// The relative cost the threshold adds over always taking the better path, summed
    /// over the measured densities (0 when the curves cross exactly once).
    pub regret: f64,
}

/// Finds the crossover threshold of the measured cost curves.
///
/// Points may come in any order; points with a non-finite or non-positive cost are an
/// error (a timer that read 0 means the tensor was too small to measure).
pub fn crossover(points: &[CostPoint]) -> Result<Crossover> {
    if points.is_empty() {
        return Err(Error::InvalidOption(
            "no measured tile densities to find a crossover in".into(),
        ));
    }
    if let Some(p) = points.iter().find(|p| {
        !(p.dense.is_finite() && p.sparse.is_finite() && p.dense > 0.0 && p.sparse > 0.0)
            || p.tile_nnz == 0
    }) {
        return Err(Error::InvalidOption(format!(
            "unusable measurement at {} nonzeros per tile: dense {}, sparse {} (costs must be finite and > 0)",
            p.tile_nnz, p.dense, p.sparse
        )));
    }
    let mut pts = points.to_vec();
    pts.sort_by_key(|p| p.tile_nnz);

    // Candidates: always dense, every upward crossing, never dense.
    let mut candidates: Vec<(u32, CrossingKind)> = vec![(ALWAYS_DENSE, CrossingKind::AlwaysDense)];
    for w in pts.windows(2) {
        let (a, b) = (w[0], w[1]);
        let (ya, yb) = (log_ratio(&a), log_ratio(&b));
        // Sparse no worse at a, dense strictly better at b.
        if ya >= 0.0 && yb < 0.0 {
            let (xa, xb) = ((a.tile_nnz as f64).ln(), (b.tile_nnz as f64).ln());
            let x = xa + ya * (xb - xa) / (ya - yb);
            candidates.push((to_threshold(x.exp()), CrossingKind::Interpolated));
        }
    }
    candidates.push((NEVER_DENSE, CrossingKind::NeverDense));

    let mut best: Option<Crossover> = None;
    for (threshold, kind) in candidates {
        let regret = regret(&pts, threshold);
        if best.is_none_or(|b| regret < b.regret) {
            best = Some(Crossover {
                threshold,
                kind,
                regret,
            });
        }
    }
    Ok(best.expect("there are always two candidates"))
}

/// `ln(dense / sparse)`: negative where the dense path is cheaper.
fn log_ratio(p: &CostPoint) -> f64 {
    (p.dense / p.sparse).ln()
}

/// The smallest whole threshold at or above `v`, in `[1, 4097]` (values within rounding
/// noise of a whole number count as that number).
fn to_threshold(v: f64) -> u32 {
    let r = v.round();
    let t = if (v - r).abs() <= 1e-9 * v.max(1.0) {
        r
    } else {
        v.ceil()
    };
    t.clamp(ALWAYS_DENSE as f64, NEVER_DENSE as f64) as u32
}

/// Relative extra cost of `threshold` over the cheaper path, summed over `pts`.
fn regret(pts: &[CostPoint], threshold: u32) -> f64 {
    pts.iter()
        .map(|p| {
            let chosen = if p.tile_nnz >= threshold {
                p.dense
            } else {
                p.sparse
            };
            chosen / p.dense.min(p.sparse) - 1.0
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(
        ts: &[u32],
        dense: impl Fn(f64) -> f64,
        sparse: impl Fn(f64) -> f64,
    ) -> Vec<CostPoint> {
        ts.iter()
            .map(|&t| CostPoint {
                tile_nnz: t,
                dense: dense(t as f64),
                sparse: sparse(t as f64),
            })
            .collect()
    }

    const SWEEP: [u32; 11] = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048];

    #[test]
    fn crossing_on_a_measured_point_is_found_exactly() {
        // Dense costs 640 per tile, sparse 10 per nonzero: equal at t = 64.
        let c = crossover(&curve(&SWEEP, |_| 640.0, |t| 10.0 * t)).unwrap();
        assert_eq!(c.threshold, 64);
        assert_eq!(c.kind, CrossingKind::Interpolated);
        assert_eq!(c.regret, 0.0);
    }

    #[test]
    fn crossing_between_points_is_interpolated_in_log_space() {
        // Power laws are straight lines in log-log: dense = 1000, sparse = 10 t, equal
        // at t = 100, between the measured 64 and 128.
        let c = crossover(&curve(&SWEEP, |_| 1000.0, |t| 10.0 * t)).unwrap();
        assert_eq!(c.threshold, 100);
        // Dense with a slope too: 50 t^0.5 = 2 t ⇒ t^0.5 = 25 ⇒ t = 625.
        let c = crossover(&curve(&SWEEP, |t| 50.0 * t.sqrt(), |t| 2.0 * t)).unwrap();
        assert_eq!(c.threshold, 625);
        // A non-whole crossing rounds up: 10 t = 1005 ⇒ t = 100.5 ⇒ 101.
        let c = crossover(&curve(&SWEEP, |_| 1005.0, |t| 10.0 * t)).unwrap();
        assert_eq!(c.threshold, 101);
    }

    #[test]
    fn curves_that_never_cross_give_the_ends() {
        let c = crossover(&curve(&SWEEP, |_| 1.0, |t| 10.0 * t)).unwrap();
        assert_eq!(
            (c.threshold, c.kind),
            (ALWAYS_DENSE, CrossingKind::AlwaysDense)
        );
        let c = crossover(&curve(&SWEEP, |_| 1e9, |t| 10.0 * t)).unwrap();
        assert_eq!(
            (c.threshold, c.kind),
            (NEVER_DENSE, CrossingKind::NeverDense)
        );
    }

    #[test]
    fn a_crossing_beyond_the_sweep_is_clamped() {
        // Crossing at t = 6000, past the measured 2048 and past 4096 cells: the sparse
        // path wins everywhere measured, so "never dense".
        let c = crossover(&curve(&SWEEP, |_| 60_000.0, |t| 10.0 * t)).unwrap();
        assert_eq!(c.threshold, NEVER_DENSE);
        // A sweep that reaches 8192 and crosses at 6000 is clamped to 4097.
        let c = crossover(&curve(&[2048, 8192], |_| 60_000.0, |t| 10.0 * t)).unwrap();
        assert_eq!(
            (c.threshold, c.kind),
            (NEVER_DENSE, CrossingKind::Interpolated)
        );
    }

    #[test]
    fn noise_picks_the_crossing_with_the_least_regret() {
        // True crossing at 64, with one noisy point at 8 where dense looks 1% better.
        let mut pts = curve(&SWEEP, |_| 640.0, |t| 10.0 * t);
        pts[2].dense = pts[2].sparse * 0.99;
        let c = crossover(&pts).unwrap();
        assert_eq!(c.threshold, 64, "{c:?}");
        assert!(c.regret > 0.0);
        // Order of the points does not matter.
        pts.reverse();
        assert_eq!(crossover(&pts).unwrap().threshold, 64);
    }

    #[test]
    fn unusable_measurements_are_errors_not_panics() {
        assert!(crossover(&[]).is_err());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let p = CostPoint {
                tile_nnz: 4,
                dense: bad,
                sparse: 1.0,
            };
            let e = crossover(&[p]).unwrap_err().to_string();
            assert!(e.contains("4 nonzeros per tile"), "{e}");
        }
    }
}
