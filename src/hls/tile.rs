//! Tile geometry: the one place that knows how a dense tile sits in a tensor.
//!
//! An order-`N` tile covers `16^N` cells. Coordinate `i` of a mode lies in tile
//! `i >> 4` at offset `i & 15`. The cell at in-tile offsets `(e_0, …, e_{N-1})` is bit
//! `p = Σ_m e_m << 4(N−1−m)` of the tile's bitmap (mode 0 most significant; word
//! `p / 64`, bit `p % 64` of it), and a tile's values are stored in increasing bit
//! order. Tile coordinates are linearized into a 64-bit tile key by a [`KeyLayout`]
//! over the tile extents `ceil(I_m / 16)`, mode 0 most significant.
//!
//! [`Tile`] is generic over the order; dense tiles are built for order
//! [`TILE_ORDER`] only, the other orders keeping every nonzero in the sparse part.
//! `kernels/hls_tile.cuh` is the device-side mirror of this module, and
//! `HlsLaunchParams::tile_order` tells the kernels which order the tiles have.

use super::layout::KeyLayout;
use crate::error::Result;

/// log2 of the tile edge.
pub const TILE_BITS: u32 = 4;
/// Tile edge in every mode.
pub const TILE: usize = 1 << TILE_BITS;
/// The order dense tiles are built for; tensors of other orders are all sparse.
pub const TILE_ORDER: usize = 3;

/// The tile coordinate holding coordinate `i` of a mode.
#[inline(always)]
pub fn tile_index(i: u32) -> u32 {
    i >> TILE_BITS
}

/// The geometry of order-`N` tiles: coordinates to tiles and in-tile offsets, offsets to
/// bit positions and back, and the walk over a bitmap's set bits.
#[derive(Debug, Clone, Copy)]
pub struct Tile<const N: usize>;

impl<const N: usize> Tile<N> {
    /// Bits of a bit position (`log2` of the cell count).
    pub const CELL_BITS: u32 = TILE_BITS * N as u32;
    /// Cells (and bits) of a tile.
    pub const CELLS: usize = 1 << Self::CELL_BITS;
    /// u64 words of a tile's bitmap.
    pub const BITMAP_WORDS: usize = Self::CELLS.div_ceil(64);
    /// Bytes one dense tile takes besides its values: its key (8), its bitmap and its
    /// entry of the value offsets (4).
    pub const META_BYTES: usize = 8 + 8 * Self::BITMAP_WORDS + 4;

    /// The tile coordinates holding `coords`.
    #[inline(always)]
    pub fn tile_of(coords: [u32; N]) -> [u32; N] {
        coords.map(tile_index)
    }

    /// The in-tile offsets of `coords`.
    #[inline(always)]
    pub fn offsets_of(coords: [u32; N]) -> [u32; N] {
        coords.map(|i| i & (TILE as u32 - 1))
    }

    /// The coordinates of the first cell of the tile at tile coordinates `tile`.
    #[inline(always)]
    pub fn origin(tile: [u32; N]) -> [u32; N] {
        tile.map(|t| t << TILE_BITS)
    }

    /// The shift of mode `m`'s offset in a bit position.
    #[inline(always)]
    const fn shift(m: usize) -> u32 {
        TILE_BITS * (N - 1 - m) as u32
    }

    /// The bit of in-tile offsets `offsets` (each below [`TILE`]).
    #[inline(always)]
    pub fn bit_position(offsets: [u32; N]) -> u32 {
        let mut p = 0;
        for (m, &e) in offsets.iter().enumerate() {
            p |= e << Self::shift(m);
        }
        p
    }

    /// The in-tile offsets of bit `p` (below [`Tile::CELLS`]).
    #[inline(always)]
    pub fn offsets(p: u32) -> [u32; N] {
        std::array::from_fn(|m| (p >> Self::shift(m)) & (TILE as u32 - 1))
    }

    /// The coordinates of bit `p` of the tile whose first cell is `origin`.
    #[inline(always)]
    pub fn cell(origin: [u32; N], p: u32) -> [u32; N] {
        let e = Self::offsets(p);
        std::array::from_fn(|m| origin[m] + e[m])
    }

    /// Calls `f(p)` for every set bit `p` of `bitmap`, in increasing order; the `k`-th
    /// call is the cell of the tile's `k`-th value.
    #[inline(always)]
    pub fn walk(bitmap: &[u64], mut f: impl FnMut(u32)) {
        for (w, &word) in bitmap.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                f((w as u32) * 64 + bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
    }

    /// Calls `f(coords)` for every set bit of `bitmap` in increasing bit order, with
    /// the coordinates of its cell in the tile whose first cell is `origin`.
    #[inline(always)]
    pub fn walk_cells(origin: [u32; N], bitmap: &[u64], mut f: impl FnMut([u32; N])) {
        Self::walk(bitmap, |p| f(Self::cell(origin, p)));
    }
}

/// Tile extents of a tensor of extents `dims`: `ceil(I_m / 16)`.
pub fn tile_extents(dims: &[usize]) -> Vec<usize> {
    dims.iter().map(|&d| d.div_ceil(TILE)).collect()
}

/// The layout of the tile keys of a tensor of extents `dims` (mode 0 most significant).
pub fn key_layout(dims: &[usize]) -> Result<KeyLayout> {
    KeyLayout::new(&tile_extents(dims))
}

/// Whether tiles of tensors of this order can be keyed by `layout` with the bit
/// position beside the key in one u64 (what the builder sorts by).
pub fn keys_fit<const N: usize>(layout: &KeyLayout) -> bool {
    layout.total_bits() + Tile::<N>::CELL_BITS <= 64
}

/// The key of the tile at tile coordinates `tile` under `layout` (which must fit in 64
/// bits, [`keys_fit`]).
#[inline(always)]
pub fn encode_key<const N: usize>(layout: &KeyLayout, tile: [u32; N]) -> u64 {
    let mut key = 0u64;
    for (m, &t) in tile.iter().enumerate() {
        key |= (t as u64) << layout.shifts()[m];
    }
    key
}

/// The tile coordinates of tile key `key` under `layout`.
#[inline(always)]
pub fn decode_key<const N: usize>(layout: &KeyLayout, key: u64) -> [u32; N] {
    std::array::from_fn(|m| layout.decode64(key, m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// Random seeds, printed so that a failure can be replayed.
    fn seed() -> u64 {
        let s = rand::random();
        eprintln!("seed {s}");
        s
    }

    /// Brute-force reference: the cells of a tile enumerated by nested counting in
    /// mode order (mode `N − 1` fastest), so the `p`-th cell is bit `p`.
    fn cells_in_order<const N: usize>() -> Vec<[u32; N]> {
        let mut out = Vec::with_capacity(Tile::<N>::CELLS);
        let mut e = [0u32; N];
        for _ in 0..Tile::<N>::CELLS {
            out.push(e);
            for m in (0..N).rev() {
                e[m] += 1;
                if e[m] < TILE as u32 {
                    break;
                }
                e[m] = 0;
            }
        }
        out
    }

    fn bit_position_matches_the_enumeration<const N: usize>() {
        for (p, e) in cells_in_order::<N>().into_iter().enumerate() {
            assert_eq!(Tile::<N>::bit_position(e), p as u32, "order {N}, {e:?}");
            assert_eq!(Tile::<N>::offsets(p as u32), e, "order {N}, bit {p}");
        }
    }

    #[test]
    fn bit_positions_and_offsets_enumerate_the_cells_in_mode_order() {
        bit_position_matches_the_enumeration::<1>();
        bit_position_matches_the_enumeration::<2>();
        bit_position_matches_the_enumeration::<3>();
        bit_position_matches_the_enumeration::<4>();
        assert_eq!(Tile::<3>::CELLS, 4096);
        assert_eq!(Tile::<3>::BITMAP_WORDS, 64);
        assert_eq!(Tile::<3>::META_BYTES, 524);
    }

    fn coords_split_and_join<const N: usize>(rng: &mut StdRng) {
        for _ in 0..1000 {
            let c: [u32; N] = std::array::from_fn(|_| rng.random_range(0..100_000));
            let (t, e) = (Tile::<N>::tile_of(c), Tile::<N>::offsets_of(c));
            for m in 0..N {
                // Reference: division and remainder by the edge.
                assert_eq!(t[m], c[m] / TILE as u32);
                assert_eq!(e[m], c[m] % TILE as u32);
                assert_eq!(Tile::<N>::origin(t)[m], c[m] - c[m] % TILE as u32);
            }
            let p = Tile::<N>::bit_position(e);
            assert_eq!(Tile::<N>::cell(Tile::<N>::origin(t), p), c);
        }
    }

    #[test]
    fn coordinates_split_into_tile_and_offset_and_join_again() {
        let mut rng = StdRng::seed_from_u64(seed());
        coords_split_and_join::<1>(&mut rng);
        coords_split_and_join::<2>(&mut rng);
        coords_split_and_join::<3>(&mut rng);
        coords_split_and_join::<5>(&mut rng);
    }

    fn keys_round_trip<const N: usize>(rng: &mut StdRng) {
        for _ in 0..200 {
            let dims: Vec<usize> = (0..N).map(|_| rng.random_range(1..5000)).collect();
            let layout = key_layout(&dims).unwrap();
            let ext = tile_extents(&dims);
            assert!(keys_fit::<N>(&layout));
            for _ in 0..20 {
                let t: [u32; N] = std::array::from_fn(|m| rng.random_range(0..ext[m] as u32));
                let key = encode_key(&layout, t);
                // Reference: the general (u128) linearization of the tile extents.
                assert_eq!(key as u128, KeyLayout::new(&ext).unwrap().encode(&t));
                assert_eq!(decode_key::<N>(&layout, key), t);
            }
        }
    }

    #[test]
    fn tile_keys_encode_and_decode_like_the_key_layout() {
        let mut rng = StdRng::seed_from_u64(seed());
        keys_round_trip::<2>(&mut rng);
        keys_round_trip::<3>(&mut rng);
        keys_round_trip::<4>(&mut rng);
    }

    fn walk_matches_a_scan<const N: usize>(rng: &mut StdRng) {
        for _ in 0..50 {
            let density: f64 = rng.random();
            let mut bitmap = vec![0u64; Tile::<N>::BITMAP_WORDS];
            for p in 0..Tile::<N>::CELLS {
                bitmap[p / 64] |= u64::from(rng.random_bool(density)) << (p % 64);
            }
            let origin: [u32; N] = std::array::from_fn(|_| rng.random_range(0..1000) * 16);
            // Reference: every cell tested in order.
            let want: Vec<[u32; N]> = cells_in_order::<N>()
                .into_iter()
                .enumerate()
                .filter(|&(p, _)| bitmap[p / 64] >> (p % 64) & 1 == 1)
                .map(|(_, e)| std::array::from_fn(|m| origin[m] + e[m]))
                .collect();
            let mut got = Vec::new();
            Tile::<N>::walk_cells(origin, &bitmap, |c| got.push(c));
            assert_eq!(got, want, "order {N}, density {density}");
        }
    }

    #[test]
    fn the_walk_visits_the_set_cells_in_bit_order() {
        let mut rng = StdRng::seed_from_u64(seed());
        walk_matches_a_scan::<2>(&mut rng);
        walk_matches_a_scan::<3>(&mut rng);
        // Order 1: 16 cells in the low bits of one word.
        walk_matches_a_scan::<1>(&mut rng);
    }
}
