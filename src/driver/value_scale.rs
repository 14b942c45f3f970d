//! CP-ALS and Tucker-HOOI on values far from 1. The kernels compute in f32: a tensor
//! whose values are near 1e-38 loses its products with factor entries below f32's
//! normal range (the model collapses to zero or its fit drifts), and one whose values
//! pass 3.4e38 cannot be stored at all. Both models are linear in the values: the run
//! takes the tensor times a power of two that brings its largest magnitude near 1
//! (exact: only exponents change), and the model comes back divided by it (CP's
//! weights, Tucker's core). The fits are relative, so they are the given values' own.

use crate::decomp::cp_apr::units::times_pow2;
use crate::tensor::CooTensor;
use rayon::prelude::*;

/// Largest magnitudes within `[2^-32, 2^32]` run as given: far from where f32's
/// products underflow (2^-126) or overflow (2^128).
const BAND: std::ops::RangeInclusive<f64> = 1.0 / 4_294_967_296.0..=4_294_967_296.0;

/// A run on the tensor's values times `2^power`.
#[derive(Debug, Clone)]
pub struct ScaledValues {
    /// The tensor the run prepares: the given one's values times `2^power`.
    pub tensor: CooTensor,
    /// The power of two (the largest magnitude times it is in `[1, 2)`).
    pub power: i32,
}

impl ScaledValues {
    /// The run `x` needs: `None` where its largest magnitude is within the band (or
    /// not a positive finite number, which the checks downstream name).
    pub fn of(x: &CooTensor) -> Option<Self> {
        let max = x
            .values()
            .par_iter()
            .map(|v| v.abs())
            .reduce(|| 0.0, f64::max);
        let power = power_for(max)?;
        let mut tensor = x.clone();
        tensor.map_values(|v| times_pow2(v, power));
        Some(ScaledValues { tensor, power })
    }

    /// `v` of the run's units in the given ones.
    pub fn back(&self, v: f64) -> f64 {
        times_pow2(v, -self.power)
    }
}

/// The power of two a run on values whose largest magnitude is `max` multiplies them
/// by (`max` times it is in `[1, 2)`): `None` where `max` is within the band the
/// values run as given in, or not a positive finite number (which the checks
/// downstream name). The tensor split over processes takes `max` over all of them.
pub fn power_for(max: f64) -> Option<i32> {
    if !(max.is_finite() && max > 0.0) || BAND.contains(&max) {
        return None;
    }
    // log2 rounds near powers of two: settle the exponent on the product itself.
    let mut power = -(max.log2().floor() as i32);
    while times_pow2(max, power) >= 2.0 {
        power -= 1;
    }
    while times_pow2(max, power) < 1.0 {
        power += 1;
    }
    Some(power)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(values: &[f64]) -> CooTensor {
        let entries: Vec<(Vec<u32>, f64)> = (0..values.len())
            .map(|i| (vec![i as u32, 0], values[i]))
            .collect();
        CooTensor::from_entries(vec![values.len(), 1], entries).unwrap()
    }

    #[test]
    fn only_values_far_from_one_are_scaled_and_exactly() {
        for v in [[1.0, -3.0], [2e-9, 1e-9], [4e9, 1.0], [0.0, 0.0]] {
            assert!(ScaledValues::of(&tensor(&v)).is_none(), "{v:?}");
        }
        for (v, power) in [
            ([1e-38, -3e-39], 127),
            ([5e-324, 0.0], 1074),
            ([1e150, -2.5e149], -498),
            ([f64::MAX, 1.0], -1023),
        ] {
            let s = ScaledValues::of(&tensor(&v)).expect("scaled");
            assert_eq!(s.power, power, "{v:?}");
            let max = s.tensor.values().iter().fold(0.0f64, |m, x| m.max(x.abs()));
            assert!((1.0..2.0).contains(&max), "{v:?}: {max}");
            // Exact both ways: a power of two moves the exponents only.
            for (&given, &run) in v.iter().zip(s.tensor.values()) {
                assert_eq!(s.back(run), given);
            }
        }
    }
}
