//! Accuracy metrics against the FP64 reference (the accuracy contract: SMAPE ≤ 0.1%
//! for MTTKRP and TTMc on every mode; NaN or inf is a failure, never a number).
//!
//! - SMAPE = (100% / n) Σ |x − x̂| / (|x| + |x̂|), terms where both are zero count as 0.
//! - Max relative error: max |x − x̂| / |x| over entries with |x| ≥ 1e-6 · max|x|
//!   (entries near zero are judged by SMAPE and the Frobenius error instead).
//! - Relative Frobenius error: ‖x − x̂‖ / ‖x‖ (0 when both are zero), with both norms
//!   summed over entries divided by the largest magnitude, so squares of tiny or huge
//!   entries neither underflow to 0 nor overflow to inf.
//!
//! NaN or Inf anywhere in the result is a failure ([`Error::NonFinite`]), never a number.

use crate::error::{Error, Result};
use crate::matrix::Matrix;

/// The contract's SMAPE bound for MTTKRP and TTMc, in percent.
pub const SMAPE_TARGET_PERCENT: f64 = 0.1;

/// How close a result is to the reference.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Accuracy {
    /// Symmetric mean absolute percentage error, in percent.
    pub smape_percent: f64,
    /// Largest relative error of an entry that is not near zero.
    pub max_rel_err: f64,
    /// Relative Frobenius-norm error.
    pub rel_frobenius: f64,
    /// Number of entries compared.
    pub entries: usize,
}

impl Accuracy {
    /// Whether SMAPE is within the contract's bound.
    pub fn within_contract(&self) -> bool {
        self.smape_percent <= SMAPE_TARGET_PERCENT
    }
}

/// Compares `got` to the reference `want` entry by entry.
pub fn compare<T: Copy + Default + Into<f64>>(
    want: &Matrix<f64>,
    got: &Matrix<T>,
) -> Result<Accuracy> {
    if want.shape() != got.shape() {
        return Err(Error::shape(
            "result",
            format!("{:?}", want.shape()),
            format!("{:?}", got.shape()),
        ));
    }
    compare_slices(want.data(), got.data())
}

/// Compares two equally long slices; see the module docs for the metrics.
pub fn compare_slices<T: Copy + Into<f64>>(want: &[f64], got: &[T]) -> Result<Accuracy> {
    if want.len() != got.len() {
        return Err(Error::shape("result", want.len(), got.len()));
    }
    if let Some(p) = want.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite(format!(
            "reference entry {p} is {}",
            want[p]
        )));
    }
    if let Some(p) = got.iter().position(|&y| !y.into().is_finite()) {
        return Err(Error::NonFinite(format!(
            "result entry {p} is {}",
            got[p].into()
        )));
    }
    let max_abs = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let floor = 1e-6 * max_abs;
    // The Frobenius sums are taken over entries divided by the largest magnitude of
    // either side.
    let big = got.iter().fold(max_abs, |m, &y| m.max(y.into().abs()));
    let unit = if big > 0.0 { big } else { 1.0 };
    let (mut smape, mut max_rel, mut diff_sq, mut norm_sq) = (0f64, 0f64, 0f64, 0f64);
    for (&x, &y) in want.iter().zip(got) {
        let y: f64 = y.into();
        let d = (x - y).abs();
        let s = x.abs() + y.abs();
        if s > 0.0 {
            smape += d / s;
        }
        if x.abs() >= floor && x != 0.0 {
            max_rel = max_rel.max(d / x.abs());
        }
        diff_sq += (d / unit) * (d / unit);
        norm_sq += (x / unit) * (x / unit);
    }
    let n = want.len().max(1) as f64;
    let rel_frobenius = if norm_sq > 0.0 {
        (diff_sq / norm_sq).sqrt()
    } else if diff_sq > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    Ok(Accuracy {
        smape_percent: 100.0 * smape / n,
        max_rel_err: max_rel,
        rel_frobenius,
        entries: want.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    #[test]
    fn smape_matches_its_definition() {
        // |1-1|/2 = 0, |2-1|/3, both zero -> 0, |-4-(-2)|/6
        let a = compare_slices(&[1.0, 2.0, 0.0, -4.0], &[1.0f64, 1.0, 0.0, -2.0]).unwrap();
        assert_relative_eq!(
            a.smape_percent,
            25.0 * (1.0 / 3.0 + 2.0 / 6.0),
            epsilon = 1e-12
        );
        assert_relative_eq!(a.max_rel_err, 0.5, epsilon = 1e-12);
        assert_relative_eq!(a.rel_frobenius, (5.0f64 / 21.0).sqrt(), epsilon = 1e-12);
    }

    #[test]
    fn frobenius_error_survives_tiny_and_huge_entries() {
        for scale in [1e-300, 1e-170, 1e-40, 1.0, 1e170, 1e300] {
            let a = compare_slices(&[scale, 2.0 * scale], &[0.0f64, 0.0]).unwrap();
            assert_relative_eq!(a.rel_frobenius, 1.0, epsilon = 1e-12);
            let b = compare_slices(&[scale, 2.0 * scale], &[scale, scale]).unwrap();
            assert_relative_eq!(b.rel_frobenius, (1.0f64 / 5.0).sqrt(), epsilon = 1e-12);
        }
    }

    #[test]
    fn nan_is_a_failure() {
        assert!(matches!(
            compare_slices(&[1.0], &[f64::NAN]),
            Err(Error::NonFinite(_))
        ));
        assert!(matches!(
            compare_slices(&[1.0], &[f32::INFINITY]),
            Err(Error::NonFinite(_))
        ));
    }
}
