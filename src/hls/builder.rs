//! COO → HLS.
//!
//! 1. Sort coordinates lexicographically and sum duplicates (skipped when the input is
//!    already sorted and unique, as `.tns` readers and the generator leave it).
//! 2. 3rd-order tensors: the nonzeros of one 16-row slab of mode 0 are contiguous in
//!    that order, so each slab is sorted by (tile, bit position) on its own, in
//!    parallel, and its tiles counted. Tiles with at least `T` nonzeros become dense:
//!    a bitmap (built with `bitvec`) and their values in bitmap order.
//! 3. Every other nonzero goes to the sparse part in key order ([`KeyOrder`]: for
//!    MTTKRP the shortest mode most significant, so the keys are sorted once more unless
//!    that is the mode order; for TTMc the mode order), split into blocks by the key
//!    bits above the low 32.
//!
//! Several thresholds can share steps 1 and 2 ([`HlsBuilder::build_many`]), so a tensor
//! is prepared for both MTTKRP's and TTMc's thresholds without reading it twice.

use super::layout::KeyLayout;
use super::stats::HlsStats;
use super::tile::{self, tile_index};
use super::values::{
    QuantReport, StoredValue, ValueChoice, ValueType, Values, choose_scale, with_values,
};
use super::{Bitmap, DenseTile, DenseTiles, HlsTensor, LOW_KEY_BITS, SparsePart, TILE_ORDER};
use crate::error::{Error, Result};
use crate::tensor::CooTensor;
use bitvec::prelude::*;
use half::f16;
use rayon::prelude::*;
use std::borrow::Cow;

/// Which order the sparse part's keys stack the modes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyOrder {
    /// Shortest mode most significant ([`KeyLayout::by_extent`]): what MTTKRP walks
    /// best, its Hadamard products being indifferent to the order of the modes.
    #[default]
    ByExtent,
    /// Mode 0 most significant ([`KeyLayout::new`]): what TTMc walks best, its output
    /// columns being the Kronecker product in mode order.
    Mode,
}

impl KeyOrder {
    /// The layout of keys for modes of these extents.
    pub fn layout(self, extents: &[usize]) -> Result<KeyLayout> {
        match self {
            KeyOrder::ByExtent => KeyLayout::by_extent(extents),
            KeyOrder::Mode => KeyLayout::new(extents),
        }
    }

    /// The order an op's kernels walk best.
    pub fn for_op(op: crate::ops::Op) -> Self {
        match op {
            crate::ops::Op::Mttkrp | crate::ops::Op::Completion | crate::ops::Op::Phi => {
                KeyOrder::ByExtent
            }
            crate::ops::Op::Ttmc => KeyOrder::Mode,
        }
    }
}

/// Builds [`HlsTensor`]s.
#[derive(Debug, Clone, Copy)]
pub struct HlsBuilder {
    threshold: u32,
    values: ValueChoice,
}

/// One non-empty tile of a slab: its key and its range in the slab's sorted entries.
struct TileRun {
    key: u64,
    start: u32,
    end: u32,
}

/// A 16-row slab of mode 0 sorted by (tile, bit): `(tile key << CELL_BITS | bit, stream
/// index)`.
struct Slab {
    entries: Vec<(u64, u32)>,
    tiles: Vec<TileRun>,
}

impl HlsBuilder {
    /// Bytes per nonzero that a build holds at its peak besides the forms it returns,
    /// from the sizes of what it allocates (the memory plan's figure): the values
    /// stored as `values` (`f16` while [`ValueChoice::Auto`] finds out, then `f32`);
    /// the 3rd-order slabs where `tiles` are classified (a tile key with its cell and a
    /// position per nonzero); and the larger of the keys being sorted — in mode order
    /// only the split keys (prefix and low word), in another order also the sorted
    /// (prefix, low word, position) triples they are split from and the positions — and
    /// the split keys with one form's dense-membership flags after them.
    pub fn scratch_bytes_per_nonzero(key_order: KeyOrder, tiles: bool, values: ValueType) -> usize {
        use std::mem::size_of;
        let values = values.bytes();
        let slabs = if tiles { size_of::<(u64, u32)>() } else { 0 };
        let split = size_of::<u64>() + size_of::<u32>();
        let positions = match key_order {
            KeyOrder::Mode => 0,
            KeyOrder::ByExtent => size_of::<u32>(),
        };
        let sorting = match key_order {
            KeyOrder::Mode => split,
            KeyOrder::ByExtent => size_of::<(u64, u32, u32)>() + split + positions,
        };
        let flags = split + positions + size_of::<bool>();
        values + slabs + sorting.max(flags)
    }

    /// A builder that makes tiles with at least `threshold` nonzeros dense. A threshold
    /// above 4096 (a tile's cell count), e.g. `u32::MAX`, keeps every nonzero sparse.
    pub fn new(threshold: u32) -> Self {
        HlsBuilder {
            threshold,
            values: ValueChoice::Auto,
        }
    }

    /// The builder storing values as `values` chooses (default [`ValueChoice::Auto`]).
    pub fn with_values(self, values: ValueChoice) -> Self {
        HlsBuilder { values, ..self }
    }

    /// The threshold.
    pub fn threshold(&self) -> u32 {
        self.threshold
    }

    /// Builds the HLS form of `x`.
    pub fn build(&self, x: &CooTensor) -> Result<HlsTensor> {
        Ok(
            Self::build_many_in(x, &[self.threshold], KeyOrder::ByExtent, self.values)?
                .pop()
                .expect("one threshold gives one tensor"),
        )
    }

    /// Builds one HLS tensor per threshold, sharing the sort and the tile count, with
    /// the sparse keys in [`KeyOrder::ByExtent`] and the values' type chosen by
    /// [`ValueChoice::Auto`].
    pub fn build_many(x: &CooTensor, thresholds: &[u32]) -> Result<Vec<HlsTensor>> {
        Self::build_many_in(x, thresholds, KeyOrder::ByExtent, ValueChoice::Auto)
    }

    /// [`HlsBuilder::build_many`] with the sparse keys in the given order and the
    /// values stored as `values` chooses.
    pub fn build_many_in(
        x: &CooTensor,
        thresholds: &[u32],
        order: KeyOrder,
        values: ValueChoice,
    ) -> Result<Vec<HlsTensor>> {
        if x.nnz() == 0 {
            return Err(Error::InvalidTensor("the tensor has no nonzeros".into()));
        }
        if x.nnz() > u32::MAX as usize {
            return Err(Error::Unsupported(format!(
                "{} nonzeros; at most 2^32 − 1 per tensor",
                x.nnz()
            )));
        }
        let layout = order.layout(x.dims())?;
        // Step 1: lexicographic order, duplicates summed.
        let (x, duplicates_summed): (Cow<CooTensor>, usize) = if x.is_sorted_unique() {
            (Cow::Borrowed(x), 0)
        } else {
            let mut y = x.clone();
            let d = y.sum_duplicates();
            (Cow::Owned(y), d)
        };
        let x = x.as_ref();
        let nnz = x.nnz();

        if let Some(p) = x.values().iter().position(|v| !v.is_finite()) {
            // Only reachable when summing duplicates overflowed f64.
            return Err(Error::NonFinite(format!(
                "the entry at {:?} sums to {} after adding its duplicates",
                x.coords(p),
                x.values()[p]
            )));
        }
        let (big, max_abs) = x
            .values()
            .iter()
            .enumerate()
            .fold(
                (0, 0f64),
                |(p, m), (k, v)| {
                    if v.abs() > m { (k, v.abs()) } else { (p, m) }
                },
            );
        // The kernels widen every stored value to f32 and multiply it by the scale: a
        // magnitude above f32's largest would reach them as inf (and fp16 with an f32
        // scale could hold up to about 1.1e43, so the scale alone does not catch it).
        if max_abs > f32::MAX as f64 {
            let coords: Vec<u64> = x.coords(big).iter().map(|&i| i as u64 + 1).collect();
            return Err(Error::Unsupported(format!(
                "the value {:e} at coordinates {coords:?} (1-based) is beyond f32's range \
                 (±3.4e38), in which the kernels compute; scale the tensor down",
                x.values()[big]
            )));
        }
        let scale = choose_scale(max_abs);
        let (stored, quant, norm_sq) = store_all(x.values(), scale, values);

        // Step 2: tiles of 3rd-order tensors.
        let tile_layout = tile::key_layout(x.dims())?;
        let slabs = if x.order() == TILE_ORDER
            && tile::keys_fit::<TILE_ORDER>(&tile_layout)
            && thresholds.iter().any(|&t| t as usize <= DenseTile::CELLS)
        {
            Some(sort_slabs(x, &tile_layout))
        } else {
            None
        };
        let tiles_total: usize = slabs
            .as_ref()
            .map_or(0, |s| s.iter().map(|s| s.tiles.len()).sum());

        // Linearized keys of every nonzero in key order, split into block prefix and low
        // word; shared by every threshold.
        let keys = sorted_keys(x, &layout);
        let prefixes = &keys.prefixes;
        let all_sparse_bytes = sparse_bytes(nnz, count_blocks(prefixes), stored.value_type());

        let mut out = Vec::with_capacity(thresholds.len());
        for &threshold in thresholds {
            let mut in_dense = vec![false; nnz];
            let dense = slabs.as_ref().map(|slabs| {
                with_values!(&stored, |v| {
                    dense_part(slabs, threshold, &tile_layout, v, &mut in_dense)
                })
            });
            let sparse = with_values!(&stored, |v| sparse_part(&layout, &keys, v, &in_dense));
            let dense_nnz = dense.as_ref().map_or(0, DenseTiles::nnz);
            let value_bytes = stored.value_type().bytes();
            let all_dense_bytes = if slabs.is_some() {
                tiles_total * DenseTile::META_BYTES + 4 + nnz * value_bytes
            } else {
                0
            };
            let hls_bytes = dense.as_ref().map_or(0, DenseTiles::bytes) + sparse.bytes();
            let with_type = |t: ValueType| hls_bytes - nnz * value_bytes + nnz * t.bytes();
            let stats = HlsStats {
                nnz,
                duplicates_summed,
                threshold,
                tiles: tiles_total,
                dense_tiles: dense.as_ref().map_or(0, DenseTiles::len),
                dense_nnz,
                sparse_nnz: sparse.nnz(),
                sparse_blocks: sparse.block_prefix.len(),
                dense_bytes: dense.as_ref().map_or(0, DenseTiles::bytes),
                sparse_bytes: sparse.bytes(),
                all_sparse_bytes,
                all_dense_bytes,
                value_choice: values,
                values: stored.value_type(),
                f16_bytes: with_type(ValueType::F16),
                f32_bytes: with_type(ValueType::F32),
                coo_bytes: x.coo_bytes(),
                quant,
                norm_sq,
            };
            out.push(HlsTensor {
                dims: x.dims().to_vec(),
                threshold,
                scale,
                dense,
                sparse,
                stats,
            });
        }
        Ok(out)
    }
}

/// The values stored as `choice` chooses (with [`ValueChoice::Auto`], fp16 first and
/// f32 if fp16 does not hold every value), the report of what they lost, and the squared
/// norm of the values as stored.
fn store_all(values: &[f64], scale: f32, choice: ValueChoice) -> (Values, QuantReport, f64) {
    if choice == ValueChoice::F32 {
        return store_as::<f32>(values, scale);
    }
    let halves = store_as::<f16>(values, scale);
    if choice.resolve(&halves.1) == ValueType::F32 {
        drop(halves);
        return store_as::<f32>(values, scale);
    }
    halves
}

fn store_as<V: StoredValue>(values: &[f64], scale: f32) -> (Values, QuantReport, f64) {
    let stored: Vec<V> = values.par_iter().map(|&v| V::store(v, scale)).collect();
    // In units of the scale, so no square underflows; the scale is a power of two.
    // Summed in fixed chunks, then the chunks in order: rayon's `sum` associates as its
    // work is stolen, which moved the last bits of ‖X‖² (and so of every fit) from one
    // run to the next.
    let units: f64 = stored
        .par_chunks(1 << 14)
        .map(|c| c.iter().map(|h| h.to_f64() * h.to_f64()).sum::<f64>())
        .collect::<Vec<f64>>()
        .iter()
        .sum();
    let norm_sq = units * scale as f64 * scale as f64;
    let quant = values
        .par_iter()
        .zip(&stored)
        .fold(
            || QuantReport {
                scale,
                ..Default::default()
            },
            |mut r, (&v, &h)| {
                r.record(v, h);
                r
            },
        )
        .reduce(
            || QuantReport {
                scale,
                ..Default::default()
            },
            QuantReport::merge,
        );
    (V::wrap(stored), quant, norm_sq)
}

/// Splits the (sorted) tensor into 16-row slabs of mode 0 and sorts each by tile.
fn sort_slabs(x: &CooTensor, tile_layout: &KeyLayout) -> Vec<Slab> {
    let i0 = x.indices(0);
    let mut bounds = vec![0usize];
    for p in 1..i0.len() {
        if tile_index(i0[p]) != tile_index(i0[p - 1]) {
            bounds.push(p);
        }
    }
    bounds.push(i0.len());
    let idx: [&[u32]; TILE_ORDER] = std::array::from_fn(|m| x.indices(m));
    let cell_bits = DenseTile::CELL_BITS;
    bounds
        .par_windows(2)
        .map(|w| {
            let (s, e) = (w[0], w[1]);
            let mut entries: Vec<(u64, u32)> = (s..e)
                .map(|p| {
                    let c = idx.map(|ix| ix[p]);
                    let tile = tile::encode_key(tile_layout, DenseTile::tile_of(c));
                    let bit = DenseTile::bit_position(DenseTile::offsets_of(c)) as u64;
                    ((tile << cell_bits) | bit, p as u32)
                })
                .collect();
            entries.sort_unstable();
            let mut tiles = Vec::new();
            let mut start = 0;
            for q in 1..=entries.len() {
                if q == entries.len() || entries[q].0 >> cell_bits != entries[start].0 >> cell_bits
                {
                    tiles.push(TileRun {
                        key: entries[start].0 >> cell_bits,
                        start: start as u32,
                        end: q as u32,
                    });
                    start = q;
                }
            }
            Slab { entries, tiles }
        })
        .collect()
}

fn dense_part<V: StoredValue>(
    slabs: &[Slab],
    threshold: u32,
    tile_layout: &KeyLayout,
    stored: &[V],
    in_dense: &mut [bool],
) -> DenseTiles {
    let mut keys = Vec::new();
    let mut bitmaps = Vec::new();
    let mut offsets = vec![0u32];
    let mut values = Vec::new();
    for slab in slabs {
        for run in &slab.tiles {
            if run.end - run.start < threshold {
                continue;
            }
            let mut bits: BitArray<Bitmap, Lsb0> = BitArray::ZERO;
            for &(k, p) in &slab.entries[run.start as usize..run.end as usize] {
                bits.set((k & ((1 << DenseTile::CELL_BITS) - 1)) as usize, true);
                values.push(stored[p as usize]);
                in_dense[p as usize] = true;
            }
            keys.push(run.key);
            bitmaps.push(bits.into_inner());
            offsets.push(values.len() as u32);
        }
    }
    DenseTiles {
        layout: tile_layout.clone(),
        keys,
        bitmaps,
        offsets,
        values: V::wrap(values),
    }
}

/// Every nonzero's key, split into the bits above the low 32 and the low 32 bits, in
/// increasing key order.
struct SortedKeys {
    prefixes: Vec<u64>,
    lows: Vec<u32>,
    /// `position[q]`: where the `q`-th key's nonzero sits in the (lexicographically
    /// sorted) tensor; `None` when that is `q` itself (a mode-order layout).
    position: Option<Vec<u32>>,
}

impl SortedKeys {
    fn position(&self, q: usize) -> usize {
        self.position.as_ref().map_or(q, |o| o[q] as usize)
    }
}

/// The keys of the lexicographically sorted tensor `x` under `layout`, computed and
/// (unless the layout is the mode order, which `x` is already sorted by) sorted in
/// parallel. Keys are distinct because `x`'s coordinates are.
fn sorted_keys(x: &CooTensor, layout: &KeyLayout) -> SortedKeys {
    let split = |p: usize| {
        let key = layout.encode_with(|m| x.indices(m)[p]);
        ((key >> LOW_KEY_BITS) as u64, key as u32)
    };
    if layout.is_mode_order() {
        let (prefixes, lows) = (0..x.nnz()).into_par_iter().map(split).unzip();
        return SortedKeys {
            prefixes,
            lows,
            position: None,
        };
    }
    let mut keyed: Vec<(u64, u32, u32)> = (0..x.nnz())
        .into_par_iter()
        .map(|p| {
            let (hi, lo) = split(p);
            (hi, lo, p as u32)
        })
        .collect();
    keyed.par_sort_unstable();
    let mut prefixes = Vec::with_capacity(keyed.len());
    let mut lows = Vec::with_capacity(keyed.len());
    let mut position = Vec::with_capacity(keyed.len());
    for (hi, lo, p) in keyed {
        prefixes.push(hi);
        lows.push(lo);
        position.push(p);
    }
    SortedKeys {
        prefixes,
        lows,
        position: Some(position),
    }
}

/// Number of runs of equal prefixes (blocks) in sorted prefixes.
fn count_blocks(prefixes: &[u64]) -> usize {
    prefixes.first().map_or(0, |_| 1) + prefixes.par_windows(2).filter(|w| w[0] != w[1]).count()
}

/// Bytes of a sparse part of `nnz` nonzeros in `blocks` blocks with values of type
/// `values` (see [`SparsePart::bytes`]).
fn sparse_bytes(nnz: usize, blocks: usize, values: ValueType) -> usize {
    nnz * (4 + values.bytes()) + blocks * 8 + (blocks + 1) * 8
}

/// The sparse part: the nonzeros not in dense tiles (`in_dense`, by position in the
/// tensor), in key order.
fn sparse_part<V: StoredValue>(
    layout: &KeyLayout,
    sorted: &SortedKeys,
    stored: &[V],
    in_dense: &[bool],
) -> SparsePart {
    let n = in_dense.iter().filter(|&&d| !d).count();
    let mut keys = Vec::with_capacity(n);
    let mut values = Vec::with_capacity(n);
    let mut block_prefix = Vec::new();
    let mut block_offsets = Vec::new();
    for q in 0..sorted.lows.len() {
        let p = sorted.position(q);
        if in_dense[p] {
            continue;
        }
        let prefix = sorted.prefixes[q];
        if block_prefix.last() != Some(&prefix) {
            block_prefix.push(prefix);
            block_offsets.push(keys.len() as u64);
        }
        keys.push(sorted.lows[q]);
        values.push(stored[p]);
    }
    block_offsets.push(keys.len() as u64);
    SparsePart {
        layout: layout.clone(),
        block_prefix,
        block_offsets,
        keys,
        values: V::wrap(values),
    }
}
