//! Per-column factor scaling, so that f32 accumulation cannot overflow whatever the
//! factors' magnitudes: columns whose largest entry is outside `[2^-32, 2^32]` are
//! scaled by a power of two (exact) to a maximum in `[0.5, 1)`, and the output columns
//! are multiplied back. Factors in the usual range are used as they are, uncopied.

use crate::matrix::Matrix;
use crate::ops::Op;
use rayon::prelude::*;
use std::borrow::Cow;

const LOW: f32 = 1.0 / 4_294_967_296.0;
const HIGH: f32 = 4_294_967_296.0;

/// The factors as the kernel sees them, with the per-column scales applied.
pub(super) struct Rescaled<'a> {
    factors: Cow<'a, [Matrix]>,
    /// `scales[m][r]`: the kernel saw column `r` of factor `m` divided by this.
    scales: Vec<Option<Vec<f32>>>,
}

impl<'a> Rescaled<'a> {
    /// The factors for a kernel on `mode`, scaled where their column maxima (`col_max`,
    /// else scanned here) call for it.
    pub(super) fn new(
        factors: &'a [Matrix],
        mode: usize,
        col_max: Option<&crate::engine::ColumnMax>,
    ) -> Self {
        let mut scales: Vec<Option<Vec<f32>>> = vec![None; factors.len()];
        for (m, f) in factors.iter().enumerate() {
            if m == mode {
                continue;
            }
            let scanned;
            let colmax: &[f32] = match col_max {
                Some(c) => &c.max[m],
                None => {
                    scanned = f.column_max_abs();
                    &scanned
                }
            };
            if colmax.iter().any(|&c| c > HIGH || (c < LOW && c > 0.0)) {
                scales[m] = Some(
                    colmax
                        .iter()
                        .map(|&c| {
                            // An inf column is left as it is: its result is not
                            // finite, and the caller's check names the factor.
                            if c > 0.0 && c.is_finite() {
                                2f32.powi(c.log2().floor() as i32 + 1)
                            } else {
                                1.0
                            }
                        })
                        .collect(),
                );
            }
        }
        let factors = if scales.iter().all(Option::is_none) {
            Cow::Borrowed(factors)
        } else {
            Cow::Owned(
                factors
                    .iter()
                    .zip(&scales)
                    .map(|(f, s)| match s {
                        None => f.clone(),
                        Some(s) => {
                            let mut g = f.clone();
                            for i in 0..g.rows() {
                                for (x, &sc) in g.row_mut(i).iter_mut().zip(s) {
                                    *x /= sc;
                                }
                            }
                            g
                        }
                    })
                    .collect(),
            )
        };
        Rescaled { factors, scales }
    }

    pub(super) fn factors(&self) -> &[Matrix] {
        &self.factors
    }

    /// Whether the factors are the caller's as given (no column rescaled).
    pub(super) fn as_given(&self) -> bool {
        self.scales.iter().all(Option::is_none)
    }

    /// Multiplies the output columns by the scales the kernel divided out and by the
    /// tensor's `value_scale` (the kernel summed the values as stored). The product of
    /// scales is formed in f64 and the multiplication done in f64, so a true result
    /// within f32 range is recovered even when the scaled one was tiny.
    pub(super) fn unscale(&self, op: Op, mode: usize, value_scale: f32, out: &mut Matrix) {
        if self.scales.iter().all(Option::is_none) && value_scale == 1.0 {
            return;
        }
        let cols = out.cols();
        let mut col_scale = vec![f64::from(value_scale); cols];
        match op {
            // Φ is never rescaled (the CPU backend runs it unscaled).
            Op::Mttkrp | Op::Phi | Op::Completion => {
                for s in self.scales.iter().flatten() {
                    for (c, &x) in col_scale.iter_mut().zip(s) {
                        *c *= x as f64;
                    }
                }
            }
            Op::Ttmc => {
                // Column index: Kronecker of the other modes, last fastest.
                let mut len = 1;
                col_scale.truncate(1);
                col_scale[0] = f64::from(value_scale);
                for (m, f) in self.factors.iter().enumerate() {
                    if m == mode {
                        continue;
                    }
                    let r = f.cols();
                    let s: Vec<f64> = match &self.scales[m] {
                        Some(s) => s.iter().map(|&x| x as f64).collect(),
                        None => vec![1.0; r],
                    };
                    let mut next = Vec::with_capacity(len * r);
                    for &a in &col_scale {
                        for &b in &s {
                            next.push(a * b);
                        }
                    }
                    col_scale = next;
                    len *= r;
                }
            }
        }
        out.data_mut()
            .par_chunks_mut(cols.max(1) * 1024)
            .for_each(|rows| {
                for row in rows.chunks_mut(cols.max(1)) {
                    for (x, &s) in row.iter_mut().zip(&col_scale) {
                        *x = (*x as f64 * s) as f32;
                    }
                }
            });
    }
}
