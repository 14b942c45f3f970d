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
/// Magnitudes below this lose products in the f32 kernels: they flush results under
/// 2^-126 (f32's smallest normal value) to zero, so a value of 2^-100 times factor
/// entries whose product is below 2^-26 contributes nothing.
pub const KERNEL_TINY: f64 = 7.888_609_052_210_118e-31;
/// fp16's unit roundoff (2^-11): the relative error bound of rounding a normal value.
pub const F16_UNIT_ROUNDOFF: f64 = 1.0 / 2048.0;

/// The tensor-wide scale for values whose largest magnitude is `max_abs`: a power of
/// two between 2^-126 and 2^127 (the normal f32 powers of two).
pub fn choose_scale(max_abs: f64) -> f32 {
    if max_abs == 0.0 || !max_abs.is_finite() {
        return 1.0;
    }
    // Start inside the exponent range the result is clamped to, so both searches take
    // a few steps whatever the value. (A subnormal f64 made `max_abs / F16_MAX` zero,
    // its log2 -inf and the start i32::MIN: minutes of counting up.)
    let mut e = (max_abs.log2() - F16_MAX.log2())
        .ceil()
        .clamp(-126.0, 127.0) as i32;
    // log2 may round; make sure the bound holds exactly.
    while e < 127 && max_abs / 2f64.powi(e) > F16_MAX {
        e += 1;
    }
    while e > -126 && max_abs / 2f64.powi(e - 1) <= F16_MAX {
        e -= 1;
    }
    2f32.powi(e)
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
    /// Nonzero values of magnitude below [`KERNEL_TINY`]: their products with factor
    /// entries may fall below f32's normal range, which the kernels flush to zero.
    pub kernel_tiny: usize,
    /// Of those, the values below f32's smallest normal value (2^-126 ≈ 1.2e-38): the
    /// kernels drop them entirely, whatever the factors.
    pub kernel_flushed: usize,
}

impl QuantReport {
    /// Accounts for one value and its stored form.
    pub fn record(&mut self, v: f64, h: f16) {
        if v == 0.0 {
            return;
        }
        let a = v.abs();
        if a < KERNEL_TINY {
            self.kernel_tiny += 1;
            if a < f32::MIN_POSITIVE as f64 {
                self.kernel_flushed += 1;
            }
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
        self.kernel_tiny += o.kernel_tiny;
        self.kernel_flushed += o.kernel_flushed;
        self
    }

    /// Whether any value lost more than fp16 rounding of a normal number.
    pub fn lost_precision(&self) -> bool {
        self.subnormal > 0 || self.flushed_to_zero > 0
    }

    /// Whether some values are small enough for the f32 kernels to lose their
    /// contributions ([`QuantReport::kernel_tiny`]).
    pub fn kernel_underflow(&self) -> bool {
        self.kernel_tiny > 0
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

    #[test]
    fn scale_stays_within_the_f32_powers_of_two() {
        assert_eq!(choose_scale(1e-320), 2f32.powi(-126));
        assert_eq!(choose_scale(f64::MIN_POSITIVE), 2f32.powi(-126));
        assert_eq!(choose_scale(1e300), 2f32.powi(127));
        assert_eq!(KERNEL_TINY, 2f64.powi(-100));
    }
}
