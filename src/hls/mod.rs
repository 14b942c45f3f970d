//! The Hybrid Linear Storage (HLS) format.
//!
//! A sparse tensor is split in two parts by a tile threshold `T`:
//! - [`DenseTiles`] (HLS-D, 3rd-order tensors): 16×16×16 tiles holding at least `T`
//!   nonzeros, each as a 4096-bit bitmap (64 × u64) plus its values in bitmap order
//!   (the geometry of tiles, of any order, is [`tile`]'s);
//! - [`SparsePart`] (HLS-S, any order): the remaining nonzeros as sorted linearized
//!   keys ([`KeyLayout`]) and values.
//!
//! Values are fp16 or f32 ([`ValueType`], one per tensor) with one tensor-wide
//! power-of-two scale ([`values`]).
//! [`HlsBuilder`] makes an [`HlsTensor`] from a [`crate::tensor::CooTensor`].

mod builder;
pub mod layout;
mod stats;
pub mod tile;
pub mod values;

pub use builder::{HlsBuilder, KeyOrder};
pub use layout::KeyLayout;
pub use stats::{HlsStats, ValueReport};
pub use values::{StoredValue, ValueChoice, ValueType, Values};

use crate::tensor::CooTensor;
use values::with_values;

pub use tile::{TILE, TILE_BITS, TILE_ORDER};

/// The geometry of the dense tiles that are built ([`TILE_ORDER`]).
pub type DenseTile = tile::Tile<TILE_ORDER>;
/// Cells (and bits) in a dense tile.
pub const TILE_CELLS: usize = DenseTile::CELLS;
/// u64 words in a dense tile's bitmap.
pub const BITMAP_WORDS: usize = DenseTile::BITMAP_WORDS;
/// Bits of a sparse key kept per nonzero; the bits above form the block prefix.
pub const LOW_KEY_BITS: u32 = 32;
/// How many nonzeros ahead [`HlsTensor::par_sum_nonzeros_ahead`] shows its look-ahead:
/// enough to cover a memory access's latency with the work of the nonzeros between.
pub const SUM_AHEAD: usize = 48;
/// What [`HlsTensor::par_sum_nonzeros_ahead`] calls with the coordinates of a nonzero
/// ahead.
pub type LookAhead<'a> = &'a (dyn Fn(&[u32]) + Sync);

/// One dense tile's occupancy: bit [`tile::Tile::bit_position`] of each nonzero's
/// in-tile offsets (word `p / 64`, bit `p % 64`).
pub type Bitmap = [u64; BITMAP_WORDS];

/// The dense part: tiles with at least `T` nonzeros.
///
/// Invariants: `keys` strictly increasing (tile keys under `layout`, over tile extents
/// `ceil(I_m / 16)`); `bitmaps.len() == keys.len()`; `offsets.len() == keys.len() + 1`,
/// `offsets[0] == 0`, `offsets[t+1] − offsets[t] == popcount(bitmaps[t])`;
/// `values.len() == offsets[last]`, the values of tile `t` in increasing bit order.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseTiles {
    layout: KeyLayout,
    keys: Vec<u64>,
    bitmaps: Vec<Bitmap>,
    offsets: Vec<u32>,
    values: Values,
}

impl DenseTiles {
    /// The linearization of tile coordinates.
    pub fn layout(&self) -> &KeyLayout {
        &self.layout
    }
    /// Number of dense tiles.
    pub fn len(&self) -> usize {
        self.keys.len()
    }
    /// Whether there are no dense tiles.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
    /// Sorted tile keys.
    pub fn keys(&self) -> &[u64] {
        &self.keys
    }
    /// Tile bitmaps, one per key.
    pub fn bitmaps(&self) -> &[Bitmap] {
        &self.bitmaps
    }
    /// Exclusive prefix sums of the tiles' nonzero counts.
    pub fn offsets(&self) -> &[u32] {
        &self.offsets
    }
    /// All dense values, tile after tile, each in bitmap order.
    pub fn values(&self) -> &Values {
        &self.values
    }
    /// Number of nonzeros in the dense part.
    pub fn nnz(&self) -> usize {
        self.values.len()
    }
    /// The coordinates of tile `t`'s first cell (tile coordinate × 16).
    #[inline]
    pub fn tile_origin(&self, t: usize) -> [u32; TILE_ORDER] {
        DenseTile::origin(tile::decode_key(&self.layout, self.keys[t]))
    }
    /// Where tile `t`'s values lie in [`DenseTiles::values`].
    #[inline]
    pub fn tile_range(&self, t: usize) -> std::ops::Range<usize> {
        self.offsets[t] as usize..self.offsets[t + 1] as usize
    }
    /// Calls `f(coords, value)` for every nonzero of tile `t`, in bitmap order, with
    /// `vals` the dense values (of their stored type `V`, not scaled).
    #[inline(always)]
    pub fn for_each_in_tile<V: StoredValue>(
        &self,
        vals: &[V],
        t: usize,
        mut f: impl FnMut(&[u32; TILE_ORDER], V),
    ) {
        let vals = &vals[self.tile_range(t)];
        let mut v = 0;
        DenseTile::walk_cells(self.tile_origin(t), &self.bitmaps[t], |c| {
            f(&c, vals[v]);
            v += 1;
        });
    }
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.keys.len() * DenseTile::META_BYTES + 4 + self.values.bytes()
    }
}

/// The sparse part: nonzeros as linearized keys, split into blocks by the key's upper
/// bits (BLCO-style), so each nonzero stores only its low 32 bits.
///
/// Invariants: `block_prefix` strictly increasing; `block_offsets.len() ==
/// block_prefix.len() + 1`, starting at 0 and ending at `keys.len()`; within a block
/// `keys` strictly increasing; the full key of entry `p` of block `b` is
/// `(block_prefix[b] << 32) | keys[p]`; `values.len() == keys.len()`. So the whole
/// part is in key order: lexicographic in the layout's level order
/// ([`KeyLayout::levels`]; see [`KeyOrder`] for which order each op gets).
#[derive(Debug, Clone, PartialEq)]
pub struct SparsePart {
    layout: KeyLayout,
    block_prefix: Vec<u64>,
    block_offsets: Vec<u64>,
    keys: Vec<u32>,
    values: Values,
}

impl SparsePart {
    /// The linearization of coordinates.
    pub fn layout(&self) -> &KeyLayout {
        &self.layout
    }
    /// Number of nonzeros.
    pub fn nnz(&self) -> usize {
        self.keys.len()
    }
    /// Block prefixes (key bits above [`LOW_KEY_BITS`]).
    pub fn block_prefix(&self) -> &[u64] {
        &self.block_prefix
    }
    /// Start of every block in `keys`, plus the end.
    pub fn block_offsets(&self) -> &[u64] {
        &self.block_offsets
    }
    /// Low 32 bits of every key.
    pub fn keys(&self) -> &[u32] {
        &self.keys
    }
    /// Values, one per key.
    pub fn values(&self) -> &Values {
        &self.values
    }
    /// The full key of entry `p` in block `b`.
    #[inline]
    pub fn full_key(&self, b: usize, p: usize) -> u128 {
        ((self.block_prefix[b] as u128) << LOW_KEY_BITS) | self.keys[p] as u128
    }
    /// The block holding entry `p`.
    pub fn block_of(&self, p: usize) -> usize {
        self.block_offsets.partition_point(|&o| o as usize <= p) - 1
    }
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        // 4-byte low key + the value per nonzero; 8-byte prefix and offset per block.
        self.keys.len() * 4
            + self.values.bytes()
            + self.block_prefix.len() * 8
            + self.block_offsets.len() * 8
    }
}

/// A tensor in HLS form, ready for the kernels.
#[derive(Debug, Clone, PartialEq)]
pub struct HlsTensor {
    dims: Vec<usize>,
    threshold: u32,
    scale: f32,
    dense: Option<DenseTiles>,
    sparse: SparsePart,
    stats: HlsStats,
}

impl HlsTensor {
    /// Mode extents.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }
    /// Number of modes.
    pub fn order(&self) -> usize {
        self.dims.len()
    }
    /// The tile threshold it was built with.
    pub fn threshold(&self) -> u32 {
        self.threshold
    }
    /// Stored values times this give the tensor's values.
    pub fn scale(&self) -> f32 {
        self.scale
    }
    /// The type its values are stored in (both parts alike).
    pub fn value_type(&self) -> ValueType {
        self.sparse.values.value_type()
    }
    /// The dense tiles (`None` for tensors whose order is not 3).
    pub fn dense(&self) -> Option<&DenseTiles> {
        self.dense.as_ref()
    }
    /// The sparse remainder.
    pub fn sparse(&self) -> &SparsePart {
        &self.sparse
    }
    /// Build statistics.
    pub fn stats(&self) -> &HlsStats {
        &self.stats
    }
    /// Nonzeros held.
    pub fn nnz(&self) -> usize {
        self.sparse.nnz() + self.dense.as_ref().map_or(0, DenseTiles::nnz)
    }
    /// Bytes held by both parts.
    pub fn bytes(&self) -> usize {
        self.sparse.bytes() + self.dense.as_ref().map_or(0, DenseTiles::bytes)
    }

    /// Calls `f(coords, value)` for every stored nonzero: the sparse part in key
    /// order, then the dense tiles in tile and bitmap order. Values are as stored,
    /// times the scale (the tensor's values as the kernels see them), in f64.
    pub fn for_each_nonzero(&self, mut f: impl FnMut(&[u32], f64)) {
        let scale = f64::from(self.scale);
        let mut c = vec![0u32; self.order()];
        let layout = self.sparse.layout();
        with_values!(&self.sparse.values, |vals| {
            for b in 0..self.sparse.block_prefix.len() {
                let (s, e) = (
                    self.sparse.block_offsets[b] as usize,
                    self.sparse.block_offsets[b + 1] as usize,
                );
                for (p, v) in (s..e).zip(&vals[s..e]) {
                    layout.decode_all(self.sparse.full_key(b, p), &mut c);
                    f(&c, v.to_f64() * scale);
                }
            }
        });
        if let Some(d) = &self.dense {
            with_values!(&d.values, |vals| {
                for t in 0..d.len() {
                    d.for_each_in_tile(vals, t, |c, v| f(c, v.to_f64() * scale));
                }
            });
        }
    }

    /// `Σ f(scratch, coords, value)` over every stored nonzero, in parallel, in f64,
    /// for `K` sums at once; `scratch` makes each chunk's working memory once; values
    /// as [`HlsTensor::for_each_nonzero`] gives them. The nonzeros are cut into fixed
    /// chunks whose partial sums are added in order, so the result does not depend on
    /// the number of threads.
    pub fn par_sum_nonzeros<S, const K: usize>(
        &self,
        scratch: impl Fn() -> S + Sync,
        f: impl Fn(&mut S, &[u32], f64) -> [f64; K] + Sync,
    ) -> [f64; K] {
        self.par_sum_nonzeros_ahead(scratch, None, f)
    }

    /// [`HlsTensor::par_sum_nonzeros`] that also calls `ahead` with the coordinates of
    /// the sparse part's nonzero [`SUM_AHEAD`] places on, so that `f`'s gathers from
    /// rows far apart (factor rows beyond the cache) can be prefetched: a pass over
    /// the nonzeros in key order is otherwise bound by one miss's latency at a time.
    pub fn par_sum_nonzeros_ahead<S, const K: usize>(
        &self,
        scratch: impl Fn() -> S + Sync,
        ahead: Option<LookAhead<'_>>,
        f: impl Fn(&mut S, &[u32], f64) -> [f64; K] + Sync,
    ) -> [f64; K] {
        let (sparse, dense) = (&self.sparse.values, self.dense.as_ref().map(|d| &d.values));
        match (sparse, dense) {
            (Values::F16(s), Some(Values::F16(d))) => self.par_sum_as(s, d, scratch, ahead, f),
            (Values::F32(s), Some(Values::F32(d))) => self.par_sum_as(s, d, scratch, ahead, f),
            (Values::F16(s), _) => self.par_sum_as(s, &[], scratch, ahead, f),
            (Values::F32(s), _) => self.par_sum_as(s, &[], scratch, ahead, f),
        }
    }

    /// [`HlsTensor::par_sum_nonzeros_ahead`] over values of type `V` (`dense` empty when
    /// there are no dense tiles).
    fn par_sum_as<V: StoredValue, S, const K: usize>(
        &self,
        sparse_values: &[V],
        dense_values: &[V],
        scratch: impl Fn() -> S + Sync,
        ahead: Option<LookAhead<'_>>,
        f: impl Fn(&mut S, &[u32], f64) -> [f64; K] + Sync,
    ) -> [f64; K] {
        use rayon::prelude::*;
        const CHUNK: usize = 1 << 14;
        const TILES: usize = 16;
        let order = self.order();
        let scale = f64::from(self.scale);
        let sp = &self.sparse;
        let add = |sum: &mut [f64; K], t: [f64; K]| {
            for (s, t) in sum.iter_mut().zip(t) {
                *s += t;
            }
        };
        let sparse: Vec<[f64; K]> = (0..sp.nnz().div_ceil(CHUNK))
            .into_par_iter()
            .map(|c| {
                let (s, e) = (c * CHUNK, ((c + 1) * CHUNK).min(sp.nnz()));
                let mut coords = vec![0u32; order];
                let mut b = sp.block_of(s);
                // The look-ahead cursor: nonzero `p + SUM_AHEAD` and its block.
                let mut later = vec![0u32; order];
                let mut bl = sp.block_of((s + SUM_AHEAD).min(sp.nnz() - 1));
                let mut sum = [0.0; K];
                let mut st = scratch();
                for (p, v) in (s..e).zip(&sparse_values[s..e]) {
                    while sp.block_offsets[b + 1] as usize <= p {
                        b += 1;
                    }
                    if let Some(ahead) = ahead
                        && p + SUM_AHEAD < e
                    {
                        let q = p + SUM_AHEAD;
                        while sp.block_offsets[bl + 1] as usize <= q {
                            bl += 1;
                        }
                        sp.layout.decode_all(sp.full_key(bl, q), &mut later);
                        ahead(&later);
                    }
                    sp.layout.decode_all(sp.full_key(b, p), &mut coords);
                    let x = v.to_f64() * scale;
                    add(&mut sum, f(&mut st, &coords, x));
                }
                sum
            })
            .collect();
        let dense: Vec<[f64; K]> = match &self.dense {
            None => Vec::new(),
            Some(d) => (0..d.len().div_ceil(TILES))
                .into_par_iter()
                .map(|c| {
                    let mut sum = [0.0; K];
                    let mut st = scratch();
                    for t in c * TILES..((c + 1) * TILES).min(d.len()) {
                        d.for_each_in_tile(dense_values, t, |c, v| {
                            add(&mut sum, f(&mut st, c, v.to_f64() * scale))
                        });
                    }
                    sum
                })
                .collect(),
        };
        let mut total = [0.0; K];
        for &t in sparse.iter().chain(&dense) {
            add(&mut total, t);
        }
        total
    }

    /// Back to COO, sorted lexicographically, with the values as stored. Converting
    /// a COO tensor to HLS and back gives the same coordinates.
    pub fn to_coo(&self) -> CooTensor {
        let n = self.order();
        // Mode order (the sparse part's own order is by level).
        let layout = KeyLayout::new(&self.dims).expect("the sparse layout fits, so this does");
        let mut entries: Vec<(u128, f64)> = Vec::with_capacity(self.nnz());
        self.for_each_nonzero(|c, v| entries.push((layout.encode(c), v)));
        entries.sort_unstable_by_key(|e| e.0);
        let mut indices = vec![Vec::with_capacity(entries.len()); n];
        let mut vals = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            for (m, ix) in indices.iter_mut().enumerate() {
                ix.push(layout.decode(k, m));
            }
            vals.push(v);
        }
        CooTensor::new(self.dims.clone(), indices, vals)
            .expect("HLS invariants guarantee a valid COO tensor")
    }
}
