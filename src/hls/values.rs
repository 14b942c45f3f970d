//! Storage of tensor values: fp16 or f32, with one tensor-wide power-of-two scale.
//!
//! The scale `2^e` is the smallest power of two with `max|v| / 2^e ≤ 65504` (fp16's
//! largest finite value), so nothing overflows and small values keep as much headroom
//! above fp16's normal range (≥ 2^-14) as the largest value allows. A power of two keeps
//! scaling exact: integer counts such as ratings stay exact.
//!
//! Each tensor stores its values in one [`ValueType`], chosen when it is built
//! ([`ValueChoice`]): fp16 where every value is exact in it after the scale (integer
//! counts up to 2048, values on a coarse grid), else f32. f32 values are stored scaled
//! too: every kernel then treats both types alike (the stored value times the scale),
//! and the scaled values stay within fp16's range, which the GPU's two-term fp16 split
//! of the dense tiles needs. The scale being a power of two, `f32(v / 2^e) · 2^e` is
//! `f32(v)` unless `v / 2^e` falls below f32's normal range.

use crate::error::{Error, Result};
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

/// The precision the values of a tensor are stored in.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ValueType {
    /// IEEE half precision: 2 bytes a value.
    #[default]
    F16,
    /// IEEE single precision: 4 bytes a value.
    F32,
}

impl ValueType {
    /// Bytes of one stored value.
    pub fn bytes(self) -> usize {
        match self {
            ValueType::F16 => 2,
            ValueType::F32 => 4,
        }
    }

    /// `f16` or `f32`.
    pub fn name(self) -> &'static str {
        match self {
            ValueType::F16 => "f16",
            ValueType::F32 => "f32",
        }
    }
}

impl std::fmt::Display for ValueType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a tensor's [`ValueType`] is chosen when it is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueChoice {
    /// fp16 where it holds every value exactly (after the scale), else f32.
    #[default]
    Auto,
    /// fp16 whatever it loses.
    F16,
    /// f32 whatever the values.
    F32,
}

impl ValueChoice {
    /// The type chosen for values whose fp16 form `quant` describes.
    pub fn resolve(self, quant: &QuantReport) -> ValueType {
        match self {
            ValueChoice::F16 => ValueType::F16,
            ValueChoice::F32 => ValueType::F32,
            ValueChoice::Auto if quant.f16_inexact == 0 => ValueType::F16,
            ValueChoice::Auto => ValueType::F32,
        }
    }

    /// The type a build of a tensor with `values` (its duplicates summed) stores them
    /// in: what [`ValueChoice::resolve`] will find, in one pass over them, for a memory
    /// plan made before the build.
    pub fn resolve_values(self, values: &[f64]) -> ValueType {
        use rayon::prelude::*;
        match self {
            ValueChoice::F16 => ValueType::F16,
            ValueChoice::F32 => ValueType::F32,
            ValueChoice::Auto => {
                let max_abs = values.par_iter().map(|v| v.abs()).reduce(|| 0.0, f64::max);
                let scale = choose_scale(max_abs);
                if values
                    .par_iter()
                    .all(|&v| dequantize(quantize(v, scale), scale) == v)
                {
                    ValueType::F16
                } else {
                    ValueType::F32
                }
            }
        }
    }

    /// `auto`, `f16` or `f32`.
    pub fn name(self) -> &'static str {
        match self {
            ValueChoice::Auto => "auto",
            ValueChoice::F16 => "f16",
            ValueChoice::F32 => "f32",
        }
    }
}

impl std::fmt::Display for ValueChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ValueChoice {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(ValueChoice::Auto),
            "f16" => Ok(ValueChoice::F16),
            "f32" => Ok(ValueChoice::F32),
            other => Err(Error::InvalidOption(format!(
                "values must be \"auto\", \"f16\" or \"f32\", got {other:?}"
            ))),
        }
    }
}

/// A stored value type: what the kernels read, generic so that their inner loops are
/// compiled once per type, without a branch per value.
pub trait StoredValue: Copy + Send + Sync + std::fmt::Debug + PartialEq + 'static {
    /// The type's tag.
    const TYPE: ValueType;
    /// `v / scale` rounded to this type.
    fn store(v: f64, scale: f32) -> Self;
    /// The stored value, widened (not scaled).
    fn to_f32(self) -> f32;
    /// The stored value, widened (not scaled).
    fn to_f64(self) -> f64;
    /// Whether it is a normal number of its type (zero is not).
    fn is_normal(self) -> bool;
    /// The values of `v` if they are of this type.
    fn slice(v: &Values) -> Option<&[Self]>;
    /// Values of this type.
    fn wrap(v: Vec<Self>) -> Values;
}

impl StoredValue for f16 {
    const TYPE: ValueType = ValueType::F16;
    #[inline(always)]
    fn store(v: f64, scale: f32) -> Self {
        quantize(v, scale)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn is_normal(self) -> bool {
        f16::is_normal(self)
    }
    fn slice(v: &Values) -> Option<&[Self]> {
        match v {
            Values::F16(v) => Some(v),
            Values::F32(_) => None,
        }
    }
    fn wrap(v: Vec<Self>) -> Values {
        Values::F16(v)
    }
}

impl StoredValue for f32 {
    const TYPE: ValueType = ValueType::F32;
    #[inline(always)]
    fn store(v: f64, scale: f32) -> Self {
        (v / scale as f64) as f32
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn is_normal(self) -> bool {
        f32::is_normal(self)
    }
    fn slice(v: &Values) -> Option<&[Self]> {
        match v {
            Values::F32(v) => Some(v),
            Values::F16(_) => None,
        }
    }
    fn wrap(v: Vec<Self>) -> Values {
        Values::F32(v)
    }
}

/// Stored values of one type (multiply by the tensor's scale for the values).
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// fp16 values.
    F16(Vec<f16>),
    /// f32 values.
    F32(Vec<f32>),
}

impl Default for Values {
    fn default() -> Self {
        Values::F16(Vec::new())
    }
}

impl Values {
    /// Their type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Values::F16(_) => ValueType::F16,
            Values::F32(_) => ValueType::F32,
        }
    }
    /// How many.
    pub fn len(&self) -> usize {
        match self {
            Values::F16(v) => v.len(),
            Values::F32(v) => v.len(),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Value `i` as stored (not scaled), widened to f64.
    #[inline]
    pub fn get(&self, i: usize) -> f64 {
        match self {
            Values::F16(v) => v[i].to_f64(),
            Values::F32(v) => v[i] as f64,
        }
    }
    /// The values as `V` (the caller dispatched on [`Values::value_type`]).
    ///
    /// # Panics
    /// If they are of another type.
    #[inline]
    pub fn typed<V: StoredValue>(&self) -> &[V] {
        V::slice(self).expect("dispatched on the values' own type")
    }
    /// The fp16 values, if that is their type.
    pub fn as_f16(&self) -> Option<&[f16]> {
        f16::slice(self)
    }
    /// The f32 values, if that is their type.
    pub fn as_f32(&self) -> Option<&[f32]> {
        f32::slice(self)
    }
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.len() * self.value_type().bytes()
    }
}

/// Evaluates `$body` with `$v` bound to the typed slice of the [`Values`] `$values`:
/// one monomorphic copy of the body per stored type, the branch taken once.
macro_rules! with_values {
    ($values:expr, |$v:ident| $body:expr) => {
        match $values {
            $crate::hls::values::Values::F16($v) => $body,
            $crate::hls::values::Values::F32($v) => $body,
        }
    };
}
pub(crate) use with_values;

/// What storing values in fp16 costs in precision, and what the stored type kept.
///
/// `f16_inexact` is about fp16 whatever the stored type (what [`ValueChoice::Auto`]
/// decides on); the other figures are about the values as stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct QuantReport {
    /// The tensor-wide scale.
    pub scale: f32,
    /// Nonzero values that fp16 does not hold exactly after the scale.
    pub f16_inexact: usize,
    /// Largest relative error `|v − v̂| / |v|` over nonzero values as stored.
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
    /// Nonzero integer values the stored type does not hold exactly (counts past 2^24
    /// times the scale in f32, past 2^11 in fp16): a count model reads them rounded.
    pub integers_inexact: usize,
}

impl QuantReport {
    /// Accounts for one value and its stored form.
    pub fn record<V: StoredValue>(&mut self, v: f64, h: V) {
        if v == 0.0 {
            return;
        }
        let exact_in_f16 = match V::TYPE {
            ValueType::F16 => h.to_f64() * self.scale as f64 == v,
            ValueType::F32 => dequantize(quantize(v, self.scale), self.scale) == v,
        };
        if !exact_in_f16 {
            self.f16_inexact += 1;
        }
        let a = v.abs();
        if a < KERNEL_TINY {
            self.kernel_tiny += 1;
            if a < f32::MIN_POSITIVE as f64 {
                self.kernel_flushed += 1;
            }
        }
        let back = h.to_f64() * self.scale as f64;
        self.max_rel_err = self.max_rel_err.max((back - v).abs() / v.abs());
        if back != v && v.fract() == 0.0 {
            self.integers_inexact += 1;
        }
        if h.to_f64() == 0.0 {
            self.flushed_to_zero += 1;
        } else if !h.is_normal() {
            self.subnormal += 1;
        }
    }

    /// Combines two reports over disjoint values with the same scale.
    pub fn merge(mut self, o: QuantReport) -> QuantReport {
        self.max_rel_err = self.max_rel_err.max(o.max_rel_err);
        self.f16_inexact += o.f16_inexact;
        self.subnormal += o.subnormal;
        self.flushed_to_zero += o.flushed_to_zero;
        self.kernel_tiny += o.kernel_tiny;
        self.kernel_flushed += o.kernel_flushed;
        self.integers_inexact += o.integers_inexact;
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
