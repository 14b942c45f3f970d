//! The row groups MTTKRP reads, packed into the narrowest types that hold them exactly.
//!
//! Row by row and in the streamed order alike, MTTKRP reads a mode's whole row groups
//! once per call: per nonzero the other modes' indices and the value. Where the kernel
//! runs at memory speed (a long mode's factor streamed, or its output written) these
//! bytes are a share of the time, so they are kept as narrow as the tensor allows:
//! - the indices as `u16` where every other mode has at most 65536 rows, else `u32`;
//! - the values as the tensor stores them (fp16 where every value is exact in it
//!   after the tensor's power-of-two scale, see [`crate::hls::values`]) with the scale
//!   applied in the kernel, else as `f32` with it applied.
//!
//! For a 3rd-order tensor whose short modes fit in 16 bits and whose values are fp16,
//! that is 6 bytes per nonzero instead of 12. The kernels see the same `f32` value
//! (`stored · scale`, one rounding-free multiplication by a power of two) and the same
//! indices, so their results are unchanged.

use super::rows::RowGroups;
use crate::hls::StoredValue;
use half::f16;

/// An index of a packed group, widened where it is used.
pub(super) trait Index: Copy + Send + Sync + 'static {
    /// The index as a row number.
    fn at(self) -> usize;
}

impl Index for u16 {
    #[inline(always)]
    fn at(self) -> usize {
        self as usize
    }
}

impl Index for u32 {
    #[inline(always)]
    fn at(self) -> usize {
        self as usize
    }
}

/// The other modes' indices of every nonzero.
pub(super) enum Indices {
    U16(Vec<u16>),
    U32(Vec<u32>),
}

/// The values of every nonzero.
pub(super) enum Values {
    /// As the tensor stores them; the kernel multiplies each by [`Packed::scale`].
    F16(Vec<f16>),
    /// With the tensor's scale applied.
    F32(Vec<f32>),
}

/// One mode's nonzeros grouped by row (as [`RowGroups`]), packed.
pub(super) struct Packed {
    /// Row `i`'s nonzeros are `ptr[i]..ptr[i + 1]`.
    ptr: Vec<usize>,
    others: Indices,
    values: Values,
    /// What each stored value is multiplied by: the tensor's scale for fp16 values, 1
    /// for f32 ones (stored with it).
    scale: f32,
}

impl Packed {
    /// `groups` packed: indices in 16 bits where every one of them is below 65536,
    /// values in fp16 where every one, divided by `scale` (the tensor's power-of-two
    /// scale), is exact in it.
    pub(super) fn new(groups: RowGroups, scale: f32) -> Self {
        let (ptr, others, values) = groups.into_parts();
        let others = if others.iter().all(|&i| i <= u32::from(u16::MAX)) {
            Indices::U16(others.iter().map(|&i| i as u16).collect())
        } else {
            Indices::U32(others)
        };
        let exact = |v: f32| {
            let h = f16::from_f32(v / scale);
            h.to_f32() * scale == v
        };
        let (values, scale) = if scale.is_normal() && values.iter().all(|&v| exact(v)) {
            let h = values.iter().map(|&v| f16::from_f32(v / scale)).collect();
            (Values::F16(h), scale)
        } else {
            (Values::F32(values), 1.0)
        };
        Packed {
            ptr,
            others,
            values,
            scale,
        }
    }

    /// The rows' nonzero ranges: row `i`'s nonzeros are `ptr()[i]..ptr()[i + 1]`.
    pub(super) fn ptr(&self) -> &[usize] {
        &self.ptr
    }

    /// What each stored value is multiplied by.
    pub(super) fn scale(&self) -> f32 {
        self.scale
    }

    /// Bytes it holds: offsets, indices and values.
    pub(super) fn bytes(&self) -> usize {
        let idx = match &self.others {
            Indices::U16(v) => 2 * v.len(),
            Indices::U32(v) => 4 * v.len(),
        };
        let vals = match &self.values {
            Values::F16(v) => 2 * v.len(),
            Values::F32(v) => 4 * v.len(),
        };
        self.ptr.len() * std::mem::size_of::<usize>() + idx + vals
    }

    /// Whether its indices are 16-bit and its values fp16 (for tests).
    #[cfg(test)]
    pub(super) fn narrow(&self) -> (bool, bool) {
        (
            matches!(self.others, Indices::U16(_)),
            matches!(self.values, Values::F16(_)),
        )
    }

    /// Calls `f` with the indices and values at their types.
    #[inline(always)]
    pub(super) fn with<R>(&self, f: impl Typed<R>) -> R {
        match (&self.others, &self.values) {
            (Indices::U16(i), Values::F16(v)) => f.call(i.as_slice(), v.as_slice()),
            (Indices::U16(i), Values::F32(v)) => f.call(i.as_slice(), v.as_slice()),
            (Indices::U32(i), Values::F16(v)) => f.call(i.as_slice(), v.as_slice()),
            (Indices::U32(i), Values::F32(v)) => f.call(i.as_slice(), v.as_slice()),
        }
    }
}

/// Work on a packed group's indices and values at their types ([`Packed::with`]).
pub(super) trait Typed<R> {
    /// Runs with `others` (the other modes' indices of every nonzero) and `values`.
    fn call<I: Index, V: StoredValue>(self, others: &[I], values: &[V]) -> R;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hls::{HlsBuilder, HlsTensor};
    use crate::tensor::generate::{GenSpec, Pattern, generate};

    fn hls(dims: &[usize], nnz: usize, counts: bool) -> HlsTensor {
        let x = generate(&GenSpec {
            dims: dims.to_vec(),
            nnz,
            pattern: Pattern::Uniform,
            seed: 5,
        })
        .unwrap();
        let x = if counts {
            // Whole counts: fp16 holds them exactly.
            let idx = (0..x.order()).map(|m| x.indices(m).to_vec()).collect();
            let vals = x.values().iter().map(|v| (v.abs() * 7.0).round() + 1.0);
            crate::tensor::CooTensor::new(dims.to_vec(), idx, vals.collect()).unwrap()
        } else {
            x
        };
        HlsBuilder::new(u32::MAX).build(&x).unwrap()
    }

    /// Collects what a packed group holds, widened: indices and `value · scale`.
    struct Widen;
    impl Typed<(Vec<u32>, Vec<f32>)> for Widen {
        fn call<I: Index, V: StoredValue>(self, o: &[I], v: &[V]) -> (Vec<u32>, Vec<f32>) {
            (
                o.iter().map(|&i| i.at() as u32).collect(),
                v.iter().map(|&x| x.to_f32()).collect(),
            )
        }
    }

    /// Narrow types where they hold every index and value exactly, wide ones else; the
    /// same indices and values as the groups it packed either way, and fewer bytes.
    #[test]
    fn packing_keeps_every_index_and_value_and_narrows_where_exact() {
        use super::super::kernel::shares;
        for (dims, counts, want) in [
            (vec![300, 200, 100], true, [(true, true); 3]),
            (vec![300, 200, 100], false, [(true, false); 3]),
            // Mode 0 has over 65536 rows: the groups of the other modes index it.
            (
                vec![70_000, 20, 10],
                true,
                [(true, true), (false, true), (false, true)],
            ),
        ] {
            let h = hls(&dims, 4000, counts);
            let groups = RowGroups::build(&h, &shares(&h, 2), 0.0).unwrap();
            let plain = RowGroups::build(&h, &shares(&h, 2), 0.0).unwrap();
            for (m, (g, p)) in groups.into_iter().zip(&plain).enumerate() {
                let bytes = 8 * g.ptr().len() + 4 * (g.others().len() + g.values().len());
                let packed = Packed::new(g, h.scale());
                assert_eq!(packed.narrow(), want[m], "{dims:?} mode {m}");
                assert_eq!(packed.ptr(), p.ptr());
                let (o, v) = packed.with(Widen);
                assert_eq!(o, p.others());
                let scaled: Vec<f32> = v.iter().map(|&x| x * packed.scale()).collect();
                assert_eq!(scaled, p.values());
                assert!(packed.bytes() < bytes, "{dims:?} mode {m}");
            }
        }
    }
}
