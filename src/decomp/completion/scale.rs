//! Completion at any scale of values: the training and validation values multiplied by
//! a power of two before the run, the model divided by it after.
//!
//! The engine sums the normal equations, the residuals and SGD's steps in f32, with
//! the factors at the model's own scale (entries of `(t / √R)^(1/N)` for values of
//! spread `t`). Far from 1 that leaves f32's range: at `t = 1e-24` (order 3, rank 16) a
//! right-hand side term `x · k` is about 1e-40, below f32's smallest normal value, and
//! the CPU kernels flush it to zero, so the run quietly returned the bias model; at
//! `t = 1e20` the sums overflow ([`super::check_spread`] refuses it). Every quantity of
//! the problem has a fixed degree in the values' scale, so the problem on the values
//! times `s = 2^(eN)` is the same problem: each factor times `2^e`, the offset, biases
//! and RMSEs times `s`, the objective times `s²`, `λ` times `s^((2N−2)/N)` (a penalty
//! term `λ ‖a‖²` grows as `s²` when `a` grows as `s^(1/N)`), SGD's rate divided by it
//! (a step must grow as `s^(1/N)`, the gradient grows as `s^((2N−1)/N)`), and `λ_b`,
//! a count of pseudo-entries, unchanged. Powers of two make the products exact, so
//! the model divided back is the run on the given values up to f32's rounding at the
//! scale where it has all its bits.
//!
//! Values whose spread is within `BAND` powers of two of 1 run as given.

use super::model::PathPoint;
use super::{CompletionModel, CompletionOptions, EpochStats};
use crate::decomp::rms_about;
use crate::error::{Error, Result};
use crate::tensor::CooTensor;

/// Values whose spread (RMS about the offset) lies in `[2^−BAND, 2^BAND]` run as
/// given: there a right-hand side term of an order-5, rank-256 problem is above
/// 2⁻⁷⁰ and a row of 10⁹ entries sums below 2⁹⁰, well inside f32.
pub const BAND: i32 = 32;

/// The most powers of two one factor is multiplied by: the model's factors are f32, so
/// values whose factors would need more than 2^±60 beyond O(1) entries (spreads past
/// about `2^(±60 N)`, 1e±36 at order 2) cannot be held by the model.
const MOST_EXPONENT: i32 = 60;

/// The power of two a completion run multiplies the values by: `2^(e N)`, each factor
/// by `2^e`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueScale {
    /// `e`: each factor's power of two.
    pub exponent: i32,
    /// `N`: the tensor's order.
    pub order: usize,
}

impl ValueScale {
    /// The scale a run on `train` needs (`center`: the model adds the training mean),
    /// `None` when the values' spread is within `BAND` powers of two of 1, is zero,
    /// or is not finite (the run refuses those in its own words). An error when even a
    /// power of two cannot bring them into f32's range (see `MOST_EXPONENT`).
    pub fn of(train: &CooTensor, center: bool) -> Result<Option<Self>> {
        let values = train.values();
        if values.is_empty() {
            return Ok(None);
        }
        let offset = if center {
            values.iter().sum::<f64>() / values.len() as f64
        } else {
            0.0
        };
        let t = rms_about(values, offset);
        if !(t > 0.0 && t.is_finite()) {
            return Ok(None);
        }
        let log2 = t.log2();
        if log2.abs() <= f64::from(BAND) {
            return Ok(None);
        }
        let order = train.order();
        let exponent = (-log2 / order as f64).round() as i32;
        // λ's power, `e (2N − 2)`, must be an f64 too.
        let lambda_power = i64::from(exponent.abs()) * (2 * order as i64 - 2);
        if exponent.abs() > MOST_EXPONENT || lambda_power > 1000 {
            return Err(Error::InvalidTensor(format!(
                "the training values spread {t:.3e} (RMS about {offset:.3e}): a completion \
                 model of order {order} at that scale needs factor entries near {:.1e}, \
                 beyond its f32 factors' range; multiply the values by a power of ten \
                 (the RMSEs scale with them)",
                2f64.powi(-exponent)
            )));
        }
        Ok(Some(ValueScale { exponent, order }))
    }

    /// `2^k` (|k| ≤ 1000 by [`Self::of`]: a normal f64).
    fn pow2(k: i32) -> f64 {
        2f64.powi(k)
    }

    /// The values' factor `s = 2^(eN)`: its power of two.
    pub fn values_power(&self) -> i32 {
        self.exponent * self.order as i32
    }

    /// `λ`'s power of two: `s^((2N−2)/N)`.
    fn lambda_power(&self) -> i32 {
        self.exponent * (2 * self.order as i32 - 2)
    }

    /// `x` with every value times `s` (indices and extents as they are).
    pub fn tensor(&self, x: &CooTensor) -> Result<CooTensor> {
        let s = Self::pow2(self.values_power());
        let indices = (0..x.order()).map(|m| x.indices(m).to_vec()).collect();
        let values = x.values().iter().map(|v| v * s).collect();
        CooTensor::new(x.dims().to_vec(), indices, values)
    }

    /// The options of the run on the scaled values: `λ` times `s^((2N−2)/N)`, SGD's
    /// rate divided by it, the initial factors times `2^e`.
    pub fn options(&self, opts: &CompletionOptions) -> CompletionOptions {
        let mut o = opts.clone();
        o.lambda = opts.lambda.map(|l| l * Self::pow2(self.lambda_power()));
        o.learning_rate = opts
            .learning_rate
            .map(|r| r * Self::pow2(-self.lambda_power()));
        let f = Self::pow2(self.exponent) as f32;
        o.init = opts
            .init
            .as_ref()
            .map(|init| init.iter().map(|m| m.map(|v| v * f)).collect());
        o
    }

    /// An epoch of the run on the scaled values, in the given values' units.
    pub fn epoch(&self, e: &EpochStats) -> EpochStats {
        let back = Self::pow2(-self.values_power());
        EpochStats {
            lambda: e.lambda * Self::pow2(-self.lambda_power()),
            train_rmse: e.train_rmse * back,
            validation_rmse: e.validation_rmse * back,
            objective: e.objective * back * back,
            learning_rate: e.learning_rate.map(|r| r * Self::pow2(self.lambda_power())),
            ..*e
        }
    }

    /// The model fitted on the scaled values, on the given ones: each factor divided by
    /// `2^e`, the offset and biases by `s`, `λ`, the rate and every epoch back.
    pub fn model(&self, m: CompletionModel) -> CompletionModel {
        let back = Self::pow2(-self.values_power());
        let f = Self::pow2(-self.exponent) as f32;
        let lambda_back = Self::pow2(-self.lambda_power());
        CompletionModel {
            offset: m.offset * back,
            factors: m.factors.iter().map(|a| a.map(|v| v * f)).collect(),
            biases: (m.biases.iter())
                .map(|b| b.iter().map(|v| v * back).collect())
                .collect(),
            lambda: m.lambda * lambda_back,
            learning_rate: m.learning_rate.map(|r| r * Self::pow2(self.lambda_power())),
            lambda_path: (m.lambda_path.iter())
                .map(|p| PathPoint {
                    lambda: p.lambda * lambda_back,
                    validation_rmse: p.validation_rmse * back,
                    epochs: p.epochs,
                })
                .collect(),
            epochs: m.epochs.iter().map(|e| self.epoch(e)).collect(),
            ..m
        }
    }

    /// A line saying what the run did to the values.
    pub fn note(&self) -> String {
        format!(
            "completion runs on the values times 2^{} (each factor times 2^{}) to keep its \
             f32 sums in range, and reports the model and every RMSE in the given units",
            self.values_power(),
            self.exponent
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Matrix;

    fn tensor(values: Vec<f64>) -> CooTensor {
        let n = values.len() as u32;
        let idx = vec![(0..n).collect(), (0..n).map(|i| i % 3).collect()];
        CooTensor::new(vec![n as usize, 3], idx, values).unwrap()
    }

    /// Spreads within the band run as given; outside it the power brings the spread
    /// to within `2^(N/2)` of 1; past the f32 factors' range the run is refused with the
    /// spread named.
    #[test]
    fn only_spreads_far_from_one_are_scaled_and_land_near_one() {
        for t in [1.0, 1e-9, 1e9, 3.0] {
            let x = tensor(vec![t, -t, 2.0 * t, 0.5 * t]);
            assert_eq!(ValueScale::of(&x, true).unwrap(), None, "spread {t}");
        }
        for t in [1e-30, 1e-12, 1e12, 1e30] {
            let x = tensor(vec![t, -t, 2.0 * t, 0.5 * t, 7.0 * t]);
            let s = ValueScale::of(&x, true).unwrap().expect("scaled");
            let y = s.tensor(&x).unwrap();
            let mean = y.values().iter().sum::<f64>() / 5.0;
            let after = rms_about(y.values(), mean);
            assert!(
                (after.log2()).abs() <= 1.0 + 1e-9,
                "spread {t} → {after} (exponent {})",
                s.exponent
            );
            // Exact: a power of two.
            for (a, b) in x.values().iter().zip(y.values()) {
                assert_eq!(b / a, 2f64.powi(s.exponent * 2));
            }
        }
        let err = ValueScale::of(&tensor(vec![1e-300, 3e-300, 0.0]), false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("beyond its f32 factors' range"), "{err}");
    }

    /// The spread does not overflow or underflow on its way: values near f64's ends.
    #[test]
    fn spread_holds_at_the_ends_of_f64() {
        let big = rms_about(&[1e300, -1e300], 0.0);
        assert!((big / 1e300 - 1.0).abs() < 1e-12, "{big}");
        let small = rms_about(&[3e-300, -3e-300], 0.0);
        assert!((small / 3e-300 - 1.0).abs() < 1e-12, "{small}");
        assert_eq!(rms_about(&[2.0, 2.0], 2.0), 0.0);
    }

    /// Options go to the scaled run and the model comes back by the degrees the module
    /// documents: a round trip is the identity (powers of two, exact).
    #[test]
    fn options_and_model_scale_by_their_degrees_and_round_trip() {
        let s = ValueScale {
            exponent: -7,
            order: 3,
        };
        let opts = CompletionOptions {
            lambda: Some(0.5),
            learning_rate: Some(0.01),
            init: Some(vec![Matrix::from_fn(2, 2, |i, j| (i + j) as f32 + 0.5); 3]),
            ..CompletionOptions::default()
        };
        let o = s.options(&opts);
        assert_eq!(o.lambda, Some(0.5 * 2f64.powi(-28)));
        assert_eq!(o.learning_rate, Some(0.01 * 2f64.powi(28)));
        let init = o.init.as_ref().unwrap();
        assert_eq!(init[1].get(1, 1), 2.5 * 2f32.powi(-7));
        let e = EpochStats {
            epoch: 3,
            lambda: o.lambda.unwrap(),
            train_rmse: 2f64.powi(-21),
            validation_rmse: 3.0 * 2f64.powi(-21),
            objective: 2f64.powi(-42),
            learning_rate: o.learning_rate,
            undone: false,
            seconds_kernel: 0.1,
            seconds: 0.2,
        };
        let back = s.epoch(&e);
        assert_eq!(back.lambda, 0.5);
        assert_eq!(back.learning_rate, Some(0.01));
        assert_eq!((back.train_rmse, back.validation_rmse), (1.0, 3.0));
        assert_eq!(back.objective, 1.0);
        assert_eq!((back.epoch, back.seconds), (3, 0.2));
        let model = CompletionModel {
            offset: 2f64.powi(-21),
            biases: vec![vec![2f64.powi(-20)]; 3],
            lambda: o.lambda.unwrap(),
            learning_rate: o.learning_rate,
            lambda_path: vec![PathPoint {
                lambda: o.lambda.unwrap(),
                validation_rmse: 2f64.powi(-21),
                epochs: 4,
            }],
            epochs: vec![e],
            ..CompletionModel::from_parts(super::super::Solver::Als, 0.0, init.clone(), vec![])
                .unwrap()
        };
        let m = s.model(model);
        assert_eq!(m.offset, 1.0);
        assert_eq!(m.biases[2], vec![2.0]);
        assert_eq!(m.factors[0].get(1, 0), 1.5);
        assert_eq!(m.lambda, 0.5);
        assert_eq!(m.learning_rate, Some(0.01));
        assert_eq!(m.lambda_path[0].lambda, 0.5);
        assert_eq!(m.lambda_path[0].validation_rmse, 1.0);
        assert_eq!(m.epochs[0], back);
    }
}
