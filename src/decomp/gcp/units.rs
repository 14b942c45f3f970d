//! GCP at any scale of values: the values divided by a power of two for the run, the
//! model multiplied back after it.
//!
//! Adam's defaults (GenTen's: rate 1e-3, ε 1e-8) assume values near 1. Its step moves
//! each factor entry by about `rate`, whatever the entries' size, and ε sits beside
//! the root of the squared gradient. Factor entries grow as `t^(1/N)` for values of
//! RMS `t`. So at `t = 1e30` (order 3) the steps are 1e-10 of the entries and a
//! hundred epochs left the model where it started. At `t = 1e-30` the gradients are
//! far below ε and nothing moved either. Both runs reported an unchanged loss.
//! L-BFGS-B's tests assume it too: its relative-decrease test divides by
//! `max(|F|, 1)`, and at `t = 1e30` the Gamma loss carries `log t` for every cell, a
//! constant beside which the first iteration's decrease already looked negligible
//! (one iteration, against 19 at unit scale).
//!
//! For the losses whose problem keeps its form when values and model are both
//! multiplied by `c`, the run on `X / c` is the same problem. These are Gaussian,
//! Huber with `Δ / c`, Poisson (identity link), Gamma, Rayleigh and the β-divergence,
//! but for their floor ε = 1e-10, which is fixed in the given units. Both methods run
//! on `X / c` with `c = 2^(eN)`, where `e` rounds `log2(t) / N`, and multiply each
//! factor by `2^e` after the run; there ε is far below the values, as the peers'
//! formulas assume. The losses they report are those of the given values under the
//! given units' model (`c·x` and `c·m` are exactly the given value and model value):
//! for values far below ε, such as 1e-30, the logarithms and powers of the
//! nonnegative losses then sum mostly `ε` over the zero cells and hardly move while
//! the fit, judged on the divided values, does.
//! The binary losses, the log-link Poisson and the negative binomial model counts or
//! odds at the scale given, and run as given.
//!
//! Values whose RMS is within [`BAND`] powers of two of 1 run as given, as the peers
//! run them. At the band's edge, for order 3, Adam's relative step is about 10 times
//! its size at `t = 1`: one `decay` (0.1) of the step.

use super::Loss;
use crate::decomp::rms_about;
use crate::matrix::Matrix;
use crate::tensor::CooTensor;

/// Values whose RMS lies in `[2^−BAND, 2^BAND]` run as given.
pub const BAND: i32 = 10;

/// The power of two a run divides the values by: `2^(e N)`, each factor by `2^e`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueScale {
    /// `e`: each factor's power of two.
    pub exponent: i32,
    /// `N`: the tensor's order.
    pub order: usize,
}

impl ValueScale {
    /// The scale a run of `loss` on `x` takes: `None` for a loss that runs as
    /// given, for values whose RMS is within [`BAND`] powers of two of 1, and for
    /// values with an RMS that is zero or not finite.
    pub fn of(x: &CooTensor, loss: &Loss) -> Option<Self> {
        let equivariant = degree(loss).is_some();
        let t = rms_about(x.values(), 0.0);
        if !(equivariant && t > 0.0 && t.is_finite()) || t.log2().abs() <= f64::from(BAND) {
            return None;
        }
        let order = x.order();
        let exponent = (t.log2() / order as f64).round() as i32;
        (exponent != 0).then_some(ValueScale { exponent, order })
    }

    /// `c = 2^(e N)`, the values' divisor.
    pub fn values(&self) -> f64 {
        2f64.powi(self.exponent * self.order as i32)
    }

    /// `2^e`, each factor's multiplier after the run.
    pub fn factor(&self) -> f64 {
        2f64.powi(self.exponent)
    }

    /// Each factor divided by `2^e`: a given start in the run's units.
    pub fn divide_factors(&self, factors: &mut [Matrix<f64>]) {
        let down = 1.0 / self.factor();
        for f in factors {
            f.data_mut().iter_mut().for_each(|v| *v *= down);
        }
    }

    /// Each factor multiplied by `2^e`: the run's model in the given units.
    pub fn multiply_factors(&self, factors: &mut [Matrix<f64>]) {
        let up = self.factor();
        for f in factors {
            f.data_mut().iter_mut().for_each(|v| *v *= up);
        }
    }

    /// What a gradient of the divided problem is multiplied by to be the given one's:
    /// `c^k / 2^e`, with `k` the loss's [`degree`].
    pub fn gradient(&self, loss: &Loss) -> f64 {
        // A loss of no degree has no scale; 0 keeps the expression total.
        let k = degree(loss).unwrap_or(0.0);
        let e = f64::from(self.exponent);
        2f64.powf(k * e * self.order as f64 - e)
    }

    /// `loss` on the values divided by `c`: Huber's threshold divided by it, the
    /// others as they are.
    pub fn loss(&self, loss: Loss) -> Loss {
        match loss {
            Loss::Huber { threshold } => Loss::Huber {
                threshold: threshold / self.values(),
            },
            other => other,
        }
    }
}

/// `k` where `f(c x, c m) = c^k f(x, m) + const(x)` (ε aside), for the losses whose
/// problem keeps its form under a change of units: 2 for the Gaussian and Huber
/// losses (Huber's threshold scaled too), 1 for Poisson, 0 for Gamma and Rayleigh and
/// β for the β-divergence; `None` for the others.
pub fn degree(loss: &Loss) -> Option<f64> {
    match *loss {
        Loss::Gaussian | Loss::Huber { .. } => Some(2.0),
        Loss::Poisson => Some(1.0),
        Loss::Gamma | Loss::Rayleigh => Some(0.0),
        Loss::Beta { b } => Some(b),
        Loss::BernoulliLogit
        | Loss::BernoulliOdds
        | Loss::PoissonLog
        | Loss::NegativeBinomial { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(scale: f64) -> CooTensor {
        CooTensor::new(
            vec![3, 2, 2],
            vec![vec![0, 1, 2], vec![0, 1, 1], vec![1, 0, 1]],
            vec![1.0 * scale, 2.0 * scale, 3.0 * scale],
        )
        .unwrap()
    }

    #[test]
    fn values_near_one_and_count_losses_run_as_given() {
        assert_eq!(ValueScale::of(&tensor(1.0), &Loss::Gaussian), None);
        assert_eq!(ValueScale::of(&tensor(300.0), &Loss::Gaussian), None);
        assert_eq!(ValueScale::of(&tensor(1e30), &Loss::PoissonLog), None);
        assert_eq!(ValueScale::of(&tensor(1e-30), &Loss::BernoulliOdds), None);
    }

    #[test]
    fn far_values_are_brought_within_a_factor_of_the_order_of_one() {
        for scale in [1e30, 1e-30, 1e300, 1e-300, 4096.0] {
            let x = tensor(scale);
            let s = ValueScale::of(&x, &Loss::Gamma).expect("a scale");
            let t = rms_about(x.values(), 0.0) / s.values();
            // `e` rounds log2(t)/N: the remaining RMS is within 2^(N/2) of 1.
            assert!(t.log2().abs() <= 1.5, "{scale}: RMS {t} after scaling");
            assert_eq!(s.factor().powi(3), s.values());
        }
        let s = ValueScale::of(&tensor(1e30), &Loss::Gaussian).unwrap();
        assert_eq!(
            s.gradient(&Loss::Gaussian),
            s.values() * s.values() / s.factor()
        );
        assert_eq!(s.gradient(&Loss::Gamma), 1.0 / s.factor());
        let s = ValueScale::of(&tensor(1e30), &Loss::Huber { threshold: 1e30 }).unwrap();
        assert_eq!(
            s.loss(Loss::Huber { threshold: 1e30 }),
            Loss::Huber {
                threshold: 1e30 / s.values()
            }
        );
    }
}
