//! What the data say about `λ` and SGD's rate ([`Scale`]), and the short warm-started
//! path over `λ` that picks it on the validation entries ([`path`]).

use super::bias::Layout;
use super::epochs::{Best, Fitter};
use super::model::PathPoint;
use super::{CompletionOptions, EpochStats, Solver};
use crate::engine::Anchor;
use crate::error::Result;
use crate::matrix::Matrix;
use crate::tensor::CooTensor;
use std::ops::ControlFlow;

/// Most points of the λ path.
pub const PATH_POINTS: usize = 16;
/// Most epochs at one point of the path.
pub const PATH_EPOCHS: usize = 15;
/// Epochs without a lower validation RMSE that end one point of the path.
pub const PATH_PATIENCE: usize = 2;
/// A point must lower the best validation RMSE by this share to count as better.
const PATH_GAIN: f64 = 1e-3;
/// The path stops after this many points in a row that were not better (once one
/// after the first was).
const PATH_WORSE: usize = 3;
/// A CP component counts as shrunk away (and restarts from its initial values at the
/// next point) below this share of its initial weight: ALS and CCD++.
const DEAD: f64 = 1e-2;
/// The same for SGD, higher. Zero is a saddle of the CP part (every gradient of a
/// component holds the product of its other modes' rows), and a gradient step leaves
/// its neighbourhood at a speed that falls with the component's size to the power
/// `N − 1`: a component that the large λ at the top of the path shrank to a few per
/// cent of its weight grows back too slowly for the epochs of a point, whereas ALS and
/// CCD++ leave it in one exact solve. With [`DEAD`] alone, SGD could end the path with
/// every component at ~4 % of its initial weight and the model at the bias terms
/// (train RMSE ten times the noise).
const DEAD_SGD: f64 = 1e-1;

/// The scales of a completion problem, from its training entries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// `c̄`: the geometric mean over modes of the entries per nonempty row.
    pub entries_per_row: f64,
    /// `s`: the training values' spread about `μ` (root mean square).
    pub spread: f64,
    /// `κ = (s²/R)^((N−1)/N)`: a Khatri-Rao entry's square when the CP part has spread
    /// `s` with balanced factors.
    pub kr: f64,
    /// The rank `R`.
    pub rank: usize,
}

impl Scale {
    /// The scales of entries counted per row in `counts`, `nnz` of them, of spread
    /// `spread`, for rank `rank`.
    pub fn of(counts: &[Vec<u32>], nnz: f64, spread: f64, rank: usize) -> Self {
        let n = counts.len() as f64;
        let log_mean: f64 = counts
            .iter()
            .map(|c| {
                let rows = c.iter().filter(|&&k| k > 0).count().max(1) as f64;
                (nnz / rows).max(1.0).ln()
            })
            .sum::<f64>()
            / n;
        let s = if spread > 0.0 && spread.is_finite() {
            spread
        } else {
            1.0
        };
        Scale {
            entries_per_row: log_mean.exp(),
            spread: s,
            kr: (s * s / rank as f64).powf((n - 1.0) / n),
            rank,
        }
    }

    /// The top of the λ grid: `c̄ κ`, where the mean row is shrunk by half.
    pub fn lambda_top(&self) -> f64 {
        self.entries_per_row * self.kr
    }

    /// The `k`-th λ of the grid: `c̄ κ / √10^k`.
    pub fn lambda(&self, k: usize) -> f64 {
        self.lambda_top() * 10f64.powf(-(k as f64) / 2.0)
    }

    /// SGD's initial rate: `0.1 / (R κ)` (a step moves a row by a tenth of the way to
    /// its own least-squares fit of one entry).
    pub fn learning_rate(&self) -> f64 {
        0.1 / (self.rank as f64 * self.kr)
    }

    /// The biases' SGD rate over the factors': `R κ` (a bias's gradient has no factor
    /// product in it).
    pub fn bias_rate(&self) -> f64 {
        self.rank as f64 * self.kr
    }
}

/// The context modes of an order-`N ≥ 3` problem and their anchors: the `N − 2` modes
/// with the most training entries per nonempty row (`counts`, `nnz` entries; ties to
/// the earlier mode) start at and are shrunk toward `value` instead of 0, with `λ`
/// weighted by their entries per row over `c̃`, the geometric mean of the two other
/// modes' (≥ 1, since they have more); every other mode gets [`Anchor::ZERO`]. Order
/// 2: none anchored.
///
/// Why: with `λ Σ_n ‖A⁽ⁿ⁾‖²`, rescaling a component's factors is free, so the penalty
/// acts on a component of size `σ` like `N λ σ^(2/N)`. For `N = 2` that is matrix
/// factorization's soft threshold; for `N ≥ 3` it shrinks small components away and
/// leaves large ones nearly free, so the λ path jumps from "no CP part" to
/// "overfitted" (MovieLens-100k, user × item × week: λ ≥ 13 gave the bias model, every
/// lower λ overfitted from its first epoch, 0.1 % below the bias baseline). A context
/// mode held near a constant turns the CP part into a matrix factorization of the two
/// free modes, modulated per context row where the data say so; its rows, with
/// thousands of entries each, are shrunk as strongly relative to their data as the
/// free modes' (the weight), so that scale does not drift into them.
pub(super) fn anchors(counts: &[Vec<u32>], nnz: f64, value: f64) -> Vec<Anchor> {
    let order = counts.len();
    if order < 3 {
        return Vec::new();
    }
    let per_row: Vec<f64> = counts
        .iter()
        .map(|c| {
            let rows = c.iter().filter(|&&k| k > 0).count().max(1) as f64;
            (nnz / rows).max(1.0)
        })
        .collect();
    let mut modes: Vec<usize> = (0..order).collect();
    // Most entries per row first; a stable sort keeps ties in mode order.
    modes.sort_by(|&a, &b| per_row[b].total_cmp(&per_row[a]));
    let free = &modes[order - 2..];
    let typical = (per_row[free[0]] * per_row[free[1]]).sqrt();
    let mut out = vec![Anchor::ZERO; order];
    for &m in &modes[..order - 2] {
        out[m] = Anchor {
            value: value as f32,
            weight: (per_row[m] / typical).max(1.0) as f32,
        };
    }
    out
}

/// The λ path: from the grid's top down, each point warm-started from the previous
/// point's best factors (a CP component that a large λ shrank away, below [`DEAD`] or,
/// for SGD, [`DEAD_SGD`] of its initial weight, restarted from `init`) and run for at most [`PATH_EPOCHS`] epochs (patience
/// [`PATH_PATIENCE`]); it stops after [`PATH_WORSE`] points in a row no better than the
/// best (once a point after the first was better), after [`PATH_POINTS`], or when
/// `control` breaks. Returns
/// the best point's λ, every point, and its best epoch.
pub(super) fn path(
    fitter: &mut Fitter<'_>,
    scale: &Scale,
    init: &[Matrix],
    opts: &CompletionOptions,
    validation: &CooTensor,
    control: &mut dyn FnMut(&EpochStats) -> ControlFlow<()>,
) -> Result<(f64, Vec<PathPoint>, Best)> {
    let layout: Layout = fitter.layout.clone();
    let epochs = PATH_EPOCHS.min(opts.max_epochs);
    let patience = PATH_PATIENCE.min(opts.patience);
    let mut points = Vec::new();
    let mut best: Option<(f64, Best)> = None;
    let mut best_k = 0;
    let mut worse = 0;
    for k in 0..PATH_POINTS {
        let lambda = scale.lambda(k);
        let mut f = fitter.session.factors()?;
        let dead = if opts.solver == Solver::Sgd {
            DEAD_SGD
        } else {
            DEAD
        };
        if k > 0 && layout.revive(&mut f, init, dead) > 0 {
            fitter.set_factors(&f)?;
            fitter.lr = fitter.lr_start;
        }
        let first = fitter.epochs.len();
        let Some(b) = fitter.phase(lambda, epochs, patience, validation, control)? else {
            break;
        };
        points.push(PathPoint {
            lambda,
            validation_rmse: b.rmse,
            epochs: fitter.epochs.len() - first,
        });
        fitter.set_factors(&b.factors)?;
        let better = best
            .as_ref()
            .is_none_or(|(_, bb)| b.rmse < bb.rmse * (1.0 - PATH_GAIN));
        if better {
            best = Some((lambda, b));
            best_k = k;
            worse = 0;
        } else {
            worse += 1;
            if best_k > 0 && worse >= PATH_WORSE {
                break;
            }
        }
        if fitter.stopped {
            break;
        }
    }
    let (lambda, best) = best.expect("the first point runs an epoch");
    Ok((lambda, points, best))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows per mode and entries: a tensor of `nnz` entries spread evenly over `rows`.
    fn even(rows: &[usize], nnz: u32) -> Vec<Vec<u32>> {
        rows.iter().map(|&r| vec![nnz / r as u32; r]).collect()
    }

    #[test]
    fn the_modes_with_the_most_entries_per_row_are_anchored() {
        // Matrices: no context mode.
        assert!(anchors(&even(&[50, 40], 2000), 2000.0, 0.5).is_empty());
        // Users, items, weeks: 80, 40 and 320 entries per row; the weeks anchored
        // with weight 320 / √(80 · 40) = 5.657.
        let a = anchors(&even(&[100, 200, 25], 8000), 8000.0, 0.5);
        assert_eq!(a[0], Anchor::ZERO);
        assert_eq!(a[1], Anchor::ZERO);
        assert_eq!(a[2].value, 0.5);
        assert!((a[2].weight - 5.65685).abs() < 1e-4, "{:?}", a[2]);
        // Order 4: the two modes with the most entries per row; empty rows do not
        // count (mode 0 has 10 nonempty rows of 400 entries each).
        let mut c = even(&[1000, 400, 20, 50], 4000);
        c[0] = [vec![400; 10], vec![0; 990]].concat();
        let a = anchors(&c, 4000.0, 1.0);
        assert!(a[0].weight > 1.0 && a[2].weight > 1.0, "{a:?}");
        assert_eq!((a[1], a[3]), (Anchor::ZERO, Anchor::ZERO));
        // Equal entries per row: the earliest mode anchored, with weight 1.
        let a = anchors(&even(&[30, 30, 30], 900), 900.0, 2.0);
        assert_eq!(a[1..], [Anchor::ZERO, Anchor::ZERO]);
        assert_eq!(
            a[0],
            Anchor {
                value: 2.0,
                weight: 1.0
            }
        );
    }
}
