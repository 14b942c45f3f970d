//! Bit linearization of coordinates.
//!
//! Mode `m` gets `b_m = ceil(log2(extent_m))` bits. The modes are stacked in a *level
//! order* `ℓ_0, …, ℓ_{N-1}` (most significant first), so sorting keys sorts coordinates
//! lexicographically in that order: the key of `(x0, …, x_{N-1})` is `Σ x_m << s_m`
//! with `s_{ℓ_k} = Σ_{j>k} b_{ℓ_j}`. [`KeyLayout::new`] uses the mode order, the format's
//! base linearization (three modes: `(x0 << (b1 + b2)) | (x1 << b2) | x2`);
//! [`KeyLayout::by_extent`] puts the shortest mode first, the order MTTKRP forms' sparse
//! parts use (see [`crate::hls::KeyOrder`]): a CSF-like walk over the sorted keys then shares the most work along
//! coordinate prefixes (few long-lived top levels, many short fibers at the bottom),
//! which is SPLATT's choice of CSF mode order too. Decoding is a shift and a mask in
//! any order.

use crate::error::{Error, Result};

/// The most bits a linearized key may use: a 64-bit block prefix plus a 32-bit low
/// word (see [`crate::hls::SparsePart`]).
pub const MAX_KEY_BITS: u32 = 96;

/// Per-mode bit widths and shifts of a linearization.
///
/// Invariants: `widths`, `shifts` and `levels` have one entry per mode; `levels` is a
/// permutation of the modes (most significant first) and
/// `shifts[levels[k]] = Σ_{j>k} widths[levels[j]]`; `total_bits = Σ widths ≤
/// MAX_KEY_BITS`, every width ≤ 32.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    widths: Vec<u32>,
    shifts: Vec<u32>,
    levels: Vec<usize>,
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
    /// The layout for modes of the given extents, mode 0 most significant.
    pub fn new(extents: &[usize]) -> Result<Self> {
        Self::with_levels(extents, &(0..extents.len()).collect::<Vec<_>>())
    }

    /// The layout with the shortest mode most significant and the longest least (ties
    /// in mode order).
    pub fn by_extent(extents: &[usize]) -> Result<Self> {
        let mut levels: Vec<usize> = (0..extents.len()).collect();
        levels.sort_by_key(|&m| extents[m]);
        Self::with_levels(extents, &levels)
    }

    /// The layout with the modes stacked in `levels` order, most significant first.
    pub fn with_levels(extents: &[usize], levels: &[usize]) -> Result<Self> {
        let mut seen = vec![false; extents.len()];
        if levels.len() != extents.len()
            || levels
                .iter()
                .any(|&m| m >= extents.len() || std::mem::replace(&mut seen[m], true))
        {
            return Err(Error::Unsupported(format!(
                "level order {levels:?} is not a permutation of {} modes",
                extents.len()
            )));
        }
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
        for &m in levels.iter().rev() {
            shifts[m] = s;
            s += widths[m];
        }
        Ok(KeyLayout {
            widths,
            shifts,
            levels: levels.to_vec(),
            total_bits,
        })
    }

    /// The modes from most to least significant.
    pub fn levels(&self) -> &[usize] {
        &self.levels
    }

    /// Whether the levels are the mode order (keys sort as coordinates do).
    pub fn is_mode_order(&self) -> bool {
        self.levels.iter().enumerate().all(|(k, &m)| k == m)
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
    fn by_extent_puts_the_shortest_mode_first() {
        // Extents (8, 20, 3): levels 2, 0, 1; key = x2 << 8 | x0 << 5 | x1.
        let l = KeyLayout::by_extent(&[8, 20, 3]).unwrap();
        assert_eq!(l.levels(), &[2, 0, 1]);
        assert_eq!(l.shifts(), &[5, 0, 8]);
        assert_eq!(l.encode(&[5, 17, 2]), (2 << 8) | (5 << 5) | 17);
        assert!(!l.is_mode_order());
        for m in 0..3 {
            assert_eq!(l.decode(l.encode(&[5, 17, 2]), m), [5, 17, 2][m]);
        }
        // Ties keep mode order; the mode order itself is recognized.
        let t = KeyLayout::by_extent(&[4, 4, 9]).unwrap();
        assert_eq!(t.levels(), &[0, 1, 2]);
        assert!(t.is_mode_order());
    }

    #[test]
    fn a_level_order_must_be_a_permutation() {
        assert!(KeyLayout::with_levels(&[4, 4, 4], &[0, 0, 1]).is_err());
        assert!(KeyLayout::with_levels(&[4, 4, 4], &[0, 1]).is_err());
        assert!(KeyLayout::with_levels(&[4, 4, 4], &[0, 1, 3]).is_err());
        assert!(KeyLayout::with_levels(&[4, 4, 4], &[1, 2, 0]).is_ok());
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
