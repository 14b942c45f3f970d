//! Bit linearization of coordinates (DESIGN.md §3).
//!
//! Mode `m` gets `b_m = ceil(log2(extent_m))` bits; mode 0 is most significant, so
//! sorting keys sorts coordinates lexicographically. The key of `(x0, …, x_{N-1})` is
//! `Σ x_m << s_m` with `s_m = Σ_{p>m} b_p`: for three modes
//! `(x0 << (b1 + b2)) | (x1 << b2) | x2`. Decoding is a shift and a mask.

use crate::error::{Error, Result};

/// The most bits a linearized key may use: a 64-bit block prefix plus a 32-bit low
/// word (see [`crate::hls::SparsePart`]).
pub const MAX_KEY_BITS: u32 = 96;

/// Per-mode bit widths and shifts of a linearization.
///
/// Invariants: `widths.len() == shifts.len()`, `shifts[m] = Σ_{p>m} widths[p]`,
/// `total_bits = Σ widths ≤ MAX_KEY_BITS`, every width ≤ 32.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    widths: Vec<u32>,
    shifts: Vec<u32>,
    total_bits: u32,
}

/// Bits needed for indices `0..extent`: `ceil(log2(extent))`, 0 for an extent of 1.
pub fn bits_for(extent: usize) -> u32 {
    if extent <= 1 {
        0
    } else {
        usize::BITS - (extent - 1).leading_zeros()
    }
}

impl KeyLayout {
    /// The layout for modes of the given extents.
    pub fn new(extents: &[usize]) -> Result<Self> {
        let widths: Vec<u32> = extents.iter().map(|&e| bits_for(e)).collect();
        if let Some(m) = widths.iter().position(|&w| w > 32) {
            return Err(Error::Unsupported(format!(
                "mode {m} has extent {} > 2^32",
                extents[m]
            )));
        }
        let total_bits: u32 = widths.iter().sum();
        if total_bits > MAX_KEY_BITS {
            return Err(Error::Unsupported(format!(
                "linearized coordinates need {total_bits} bits (extents {extents:?}); at most {MAX_KEY_BITS} are supported"
            )));
        }
        let mut shifts = vec![0; widths.len()];
        let mut s = 0;
        for m in (0..widths.len()).rev() {
            shifts[m] = s;
            s += widths[m];
        }
        Ok(KeyLayout {
            widths,
            shifts,
            total_bits,
        })
    }

    /// Bit width of every mode.
    pub fn widths(&self) -> &[u32] {
        &self.widths
    }

    /// Shift of every mode.
    pub fn shifts(&self) -> &[u32] {
        &self.shifts
    }

    /// Total bits of a key.
    pub fn total_bits(&self) -> u32 {
        self.total_bits
    }

    /// Number of modes.
    pub fn order(&self) -> usize {
        self.widths.len()
    }

    /// The mask of mode `m`'s bits after shifting down.
    pub fn mask(&self, m: usize) -> u64 {
        (1u64 << self.widths[m]) - 1
    }

    /// The key of the coordinates `coord(0), …, coord(N-1)`.
    #[inline]
    pub fn encode_with(&self, coord: impl Fn(usize) -> u32) -> u128 {
        let mut key = 0u128;
        for m in 0..self.widths.len() {
            key |= (coord(m) as u128) << self.shifts[m];
        }
        key
    }

    /// The key of `coords`.
    pub fn encode(&self, coords: &[u32]) -> u128 {
        self.encode_with(|m| coords[m])
    }

    /// Mode `m`'s coordinate in `key`.
    #[inline]
    pub fn decode(&self, key: u128, m: usize) -> u32 {
        ((key >> self.shifts[m]) as u64 & self.mask(m)) as u32
    }

    /// Mode `m`'s coordinate in a key that fits in 64 bits.
    #[inline]
    pub fn decode64(&self, key: u64, m: usize) -> u32 {
        ((key >> self.shifts[m]) & self.mask(m)) as u32
    }

    /// All coordinates of `key` into `out`.
    pub fn decode_all(&self, key: u128, out: &mut [u32]) {
        for (m, o) in out.iter_mut().enumerate() {
            *o = self.decode(key, m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_mode_shifts_follow_the_design() {
        // b = (3, 5, 2): key = x0 << 7 | x1 << 2 | x2 (mode 1 shifted by b2, not b1).
        let l = KeyLayout::new(&[8, 20, 3]).unwrap();
        assert_eq!(l.widths(), &[3, 5, 2]);
        assert_eq!(l.shifts(), &[7, 2, 0]);
        assert_eq!(l.encode(&[5, 17, 2]), (5 << 7) | (17 << 2) | 2);
    }

    #[test]
    fn extent_one_takes_no_bits() {
        let l = KeyLayout::new(&[1, 16, 1]).unwrap();
        assert_eq!(l.total_bits(), 4);
        assert_eq!(l.decode(l.encode(&[0, 9, 0]), 1), 9);
    }

    #[test]
    fn too_many_bits_is_an_error() {
        assert!(KeyLayout::new(&[1 << 32, 1 << 32, 1 << 32, 2]).is_err());
    }
}
