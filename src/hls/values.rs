//! fp16 storage of tensor values with one tensor-wide power-of-two scale.
//!
//! The scale `2^e` is the smallest power of two with `max|v| / 2^e ≤ 65504` (fp16's
//! largest finite value), so nothing overflows and small values keep as much headroom
//! above fp16's normal range (≥ 2^-14) as the largest value allows. A power of two keeps
//! scaling exact: integer counts such as ratings stay exact.

use half::f16;

/// fp16's largest finite value.
pub const F16_MAX: f64 = 65504.0;
/// fp16's smallest positive normal value.
pub const F16_MIN_NORMAL: f64 = 6.103_515_625e-5;
/// fp16's unit roundoff (2^-11): the relative error bound of rounding a normal value.
pub const F16_UNIT_ROUNDOFF: f64 = 1.0 / 2048.0;

/// The tensor-wide scale for values whose largest magnitude is `max_abs`.
pub fn choose_scale(max_abs: f64) -> f32 {
    if max_abs == 0.0 || !max_abs.is_finite() {
        return 1.0;
    }
    let mut e = (max_abs / F16_MAX).log2().ceil() as i32;
    // log2 may round; make sure the bound holds exactly.
    while max_abs / 2f64.powi(e) > F16_MAX {
        e += 1;
    }
    while e > -126 && max_abs / 2f64.powi(e - 1) <= F16_MAX {
        e -= 1;
    }
    2f32.powi(e.clamp(-126, 127))
}

/// `v / scale` rounded to fp16.
#[inline]
pub fn quantize(v: f64, scale: f32) -> f16 {
    f16::from_f64(v / scale as f64)
}

/// The value an fp16 entry stands for.
#[inline]
pub fn dequantize(h: f16, scale: f32) -> f64 {
    h.to_f64() * scale as f64
}

/// What storing values in fp16 cost in precision.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct QuantReport {
    /// The tensor-wide scale.
    pub scale: f32,
    /// Largest relative error `|v − v̂| / |v|` over nonzero values.
    pub max_rel_err: f64,
    /// Nonzero values that landed in fp16's subnormal range (reduced precision).
    pub subnormal: usize,
    /// Nonzero values that rounded to zero (lost).
    pub flushed_to_zero: usize,
}

impl QuantReport {
    /// Accounts for one value and its stored form.
    pub fn record(&mut self, v: f64, h: f16) {
        if v == 0.0 {
            return;
        }
        let back = dequantize(h, self.scale);
        self.max_rel_err = self.max_rel_err.max((back - v).abs() / v.abs());
        if h.to_f64() == 0.0 {
            self.flushed_to_zero += 1;
        } else if !h.is_normal() {
            self.subnormal += 1;
        }
    }

    /// Combines two reports over disjoint values with the same scale.
    pub fn merge(mut self, o: QuantReport) -> QuantReport {
        self.max_rel_err = self.max_rel_err.max(o.max_rel_err);
        self.subnormal += o.subnormal;
        self.flushed_to_zero += o.flushed_to_zero;
        self
    }

    /// Whether any value lost more than fp16 rounding of a normal number.
    pub fn lost_precision(&self) -> bool {
        self.subnormal > 0 || self.flushed_to_zero > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_is_tight_power_of_two() {
        let s = choose_scale(5.0);
        assert!(5.0 / s as f64 <= F16_MAX);
        assert!(5.0 / (s as f64 / 2.0) > F16_MAX);
        assert_eq!(s.log2().fract(), 0.0);
        // Integer counts stay exact.
        for v in [1.0, 2.0, 3.0, 4.0, 5.0] {
            assert_eq!(dequantize(quantize(v, s), s), v);
        }
        let big = choose_scale(1e9);
        assert!(quantize(1e9, big).is_finite());
    }
}
