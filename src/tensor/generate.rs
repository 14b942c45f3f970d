//! Seeded synthetic sparse tensors of controllable shape, so tests, benches and the
//! tuner can make any regime the kernels care about.
//!
//! - [`Pattern::Uniform`]: coordinates uniform over the whole index space.
//! - [`Pattern::PowerLaw`]: each mode's index drawn from `p(i) ∝ (i+1)^-α` and then
//!   relabelled at random, giving skewed slices like rating data.
//! - [`Pattern::BlockDense`]: a share of the nonzeros packed into 16^N tiles holding
//!   exactly `tile_nnz` nonzeros each (distinct random cells), the rest uniform — the
//!   knob the tuner turns to set the density inside tiles.
//! - [`Pattern::TileBlocks`]: every nonzero in such tiles, the tiles side by side in
//!   blocks of `side^N` neighbouring tiles: dense regions wider than one tile, as
//!   block-dense data has them (what the tuner measures on).
//!
//! Values are uniform in `[0.5, 5)` (not integers, so fp16 rounding is exercised).
//! The result is sorted with duplicates summed, so it may hold slightly fewer than
//! `nnz` entries for patterns that draw repeats.

use super::CooTensor;
use crate::error::{Error, Result};
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::ops::Range;

/// How nonzeros are placed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pattern {
    /// Uniform over all cells.
    Uniform,
    /// Power-law slice sizes with exponent `alpha` (> 0; about 1 for rating data).
    PowerLaw {
        /// The exponent α of `p(i) ∝ (i+1)^-α`.
        alpha: f64,
    },
    /// `dense_share` of the nonzeros in tiles of exactly `tile_nnz` nonzeros each.
    BlockDense {
        /// Nonzeros per dense tile (1..=16^N, capped by the tile's cell count).
        tile_nnz: u32,
        /// Share of all nonzeros placed in dense tiles, in `[0, 1]`.
        dense_share: f64,
    },
    /// Every nonzero in tiles of exactly `tile_nnz` nonzeros, the tiles packed into
    /// blocks of `side` tiles per mode, each block at a random place on the tile grid.
    /// Fibers then run on across neighbouring tiles, as in real block-dense data (a
    /// walk that shares work along fibers sees them; isolated tiles hide that).
    TileBlocks {
        /// Nonzeros per tile (1..=16^N, capped by the tile's cell count).
        tile_nnz: u32,
        /// Tiles per mode in one block (≥ 1; 1 places tiles alone).
        side: usize,
    },
}

impl Pattern {
    /// The block-dense layout of the benchmarks and the self-test: 70% of the nonzeros
    /// in 16³ tiles of 400 each, the rest uniform, so dense tiles exist at any tuned
    /// threshold up to 400 and the sparse part is not empty.
    pub const BLOCK_DENSE: Pattern = Pattern::BlockDense {
        tile_nnz: 400,
        dense_share: 0.7,
    };
}

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenSpec {
    /// Mode extents.
    pub dims: Vec<usize>,
    /// Nonzeros to draw (before summing repeats).
    pub nnz: usize,
    /// Placement.
    pub pattern: Pattern,
    /// Seed: equal specs give equal tensors.
    pub seed: u64,
}

/// Generates the tensor `spec` describes.
pub fn generate(spec: &GenSpec) -> Result<CooTensor> {
    let (idx, values) = generate_part(spec, 0..usize::MAX)?;
    let mut t = CooTensor::new(spec.dims.clone(), idx, values)?;
    t.sum_duplicates();
    Ok(t)
}

/// Of the nonzeros [`generate`] draws for `spec` (numbered `0, 1, …` in the order they
/// are drawn, before repeats are summed), those numbered in `keep`, in that order:
/// per mode their indices, and their values. The others are drawn and dropped, so
/// memory is that of the part kept. Parts for consecutive ranges, put one after the
/// other in the order of their ranges and their repeats summed, are [`generate`]'s
/// tensor, value for value (repeats are summed in the order they are drawn).
pub fn generate_part(spec: &GenSpec, keep: Range<usize>) -> Result<(Vec<Vec<u32>>, Vec<f64>)> {
    let order = spec.dims.len();
    if order == 0 || spec.dims.contains(&0) {
        return Err(Error::InvalidTensor(format!(
            "cannot generate a tensor with dims {:?}",
            spec.dims
        )));
    }
    if spec.nnz == 0 {
        return Err(Error::InvalidTensor("cannot generate 0 nonzeros".into()));
    }
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(spec.seed);
    let kept = keep.end.min(spec.nnz).saturating_sub(keep.start);
    let mut idx = Draws {
        idx: vec![Vec::with_capacity(kept); order],
        drawn: vec![0; order],
        keep,
    };
    match spec.pattern {
        Pattern::Uniform => uniform(&mut rng, &spec.dims, spec.nnz, &mut idx),
        Pattern::PowerLaw { alpha } => {
            if alpha.is_nan() || alpha <= 0.0 {
                return Err(Error::InvalidOption(format!(
                    "power-law exponent must be > 0, got {alpha}"
                )));
            }
            for (m, &d) in spec.dims.iter().enumerate() {
                let cdf = zipf_cdf(d, alpha);
                let relabel: Vec<u32> = {
                    let mut v: Vec<u32> = (0..d as u32).collect();
                    for i in (1..v.len()).rev() {
                        v.swap(i, rng.random_range(0..=i));
                    }
                    v
                };
                for _ in 0..spec.nnz {
                    let u: f64 = rng.random();
                    if idx.wants(m) {
                        let i = cdf.partition_point(|&c| c < u).min(d - 1);
                        idx.push(m, relabel[i]);
                    } else {
                        idx.skip(m);
                    }
                }
            }
        }
        Pattern::BlockDense {
            tile_nnz,
            dense_share,
        } => {
            if !(0.0..=1.0).contains(&dense_share) || tile_nnz == 0 {
                return Err(Error::InvalidOption(format!(
                    "block-dense needs tile_nnz ≥ 1 and dense_share in [0, 1], got {tile_nnz} and {dense_share}"
                )));
            }
            let per_tile = per_tile(&spec.dims, tile_nnz);
            let tile_dims: Vec<usize> = spec.dims.iter().map(|d| d.div_ceil(16)).collect();
            let n_tiles_total: f64 = tile_dims.iter().map(|&t| t as f64).product();
            let want_dense = (spec.nnz as f64 * dense_share) as usize;
            let n_tiles = (want_dense / per_tile).min(n_tiles_total as usize);
            let mut used = std::collections::HashSet::new();
            for _ in 0..n_tiles {
                // Pick a tile not used yet (the tiles are few next to the grid).
                let tile: Vec<usize> = loop {
                    let t: Vec<usize> = tile_dims.iter().map(|&t| rng.random_range(0..t)).collect();
                    if used.insert(t.clone()) {
                        break t;
                    }
                };
                fill_tile(&mut rng, &spec.dims, &tile, per_tile, &mut idx);
            }
            let placed = idx.drawn[0];
            uniform(
                &mut rng,
                &spec.dims,
                spec.nnz.saturating_sub(placed),
                &mut idx,
            );
        }
        Pattern::TileBlocks { tile_nnz, side } => {
            if tile_nnz == 0 || side == 0 {
                return Err(Error::InvalidOption(format!(
                    "tile blocks need tile_nnz ≥ 1 and side ≥ 1, got {tile_nnz} and {side}"
                )));
            }
            let per_tile = per_tile(&spec.dims, tile_nnz);
            let tile_dims: Vec<usize> = spec.dims.iter().map(|d| d.div_ceil(16)).collect();
            let block_dims: Vec<usize> = tile_dims.iter().map(|t| t.div_ceil(side)).collect();
            let n_blocks_total: f64 = block_dims.iter().map(|&b| b as f64).product();
            let mut left = spec.nnz / per_tile;
            let mut used = std::collections::HashSet::new();
            while left > 0 && (used.len() as f64) < n_blocks_total {
                let block: Vec<usize> =
                    block_dims.iter().map(|&b| rng.random_range(0..b)).collect();
                if !used.insert(block.clone()) {
                    continue;
                }
                // The block's tiles in row-major order (cut by the grid's edge).
                let span: Vec<usize> = (0..order)
                    .map(|m| (tile_dims[m] - block[m] * side).min(side))
                    .collect();
                let count: usize = span.iter().product();
                for k in 0..count.min(left) {
                    let mut rest = k;
                    let mut tile = vec![0; order];
                    for m in (0..order).rev() {
                        tile[m] = block[m] * side + rest % span[m];
                        rest /= span[m];
                    }
                    fill_tile(&mut rng, &spec.dims, &tile, per_tile, &mut idx);
                }
                left = left.saturating_sub(count);
            }
            let placed = idx.drawn[0];
            uniform(
                &mut rng,
                &spec.dims,
                spec.nnz.saturating_sub(placed),
                &mut idx,
            );
        }
    }
    let n = idx.drawn[0];
    let mut values = Vec::with_capacity(kept);
    for k in 0..n {
        let v: f64 = rng.random_range(0.5..5.0);
        if idx.keep.contains(&k) {
            values.push(v);
        }
    }
    Ok((idx.idx, values))
}

/// The indices drawn so far: every mode's count, and those numbered in `keep`.
struct Draws {
    idx: Vec<Vec<u32>>,
    drawn: Vec<usize>,
    keep: Range<usize>,
}

impl Draws {
    /// Whether the next index of mode `m` is kept.
    fn wants(&self, m: usize) -> bool {
        self.keep.contains(&self.drawn[m])
    }

    /// The next index of mode `m`.
    fn push(&mut self, m: usize, i: u32) {
        if self.wants(m) {
            self.idx[m].push(i);
        }
        self.drawn[m] += 1;
    }

    /// The next index of mode `m`, drawn and dropped.
    fn skip(&mut self, m: usize) {
        self.drawn[m] += 1;
    }
}

/// Nonzeros per tile for a requested `tile_nnz`: at most the cells of a full tile.
fn per_tile(dims: &[usize], tile_nnz: u32) -> usize {
    let cells: usize = dims.iter().map(|&d| d.min(16)).product();
    (tile_nnz as usize).min(cells)
}

/// Places `per_tile` nonzeros at distinct random cells of the tile at tile coordinates
/// `tile` (fewer where the tensor's extent cuts the tile).
fn fill_tile(
    rng: &mut Xoshiro256PlusPlus,
    dims: &[usize],
    tile: &[usize],
    per_tile: usize,
    idx: &mut Draws,
) {
    let order = dims.len();
    // Cells of this tile that exist (edge tiles may be cut by the extent).
    let extent: Vec<usize> = (0..order)
        .map(|m| (dims[m] - tile[m] * 16).min(16))
        .collect();
    let tile_cells: usize = extent.iter().product();
    for c in sample(rng, tile_cells, per_tile.min(tile_cells)) {
        let mut rest = c;
        for m in (0..order).rev() {
            idx.push(m, (tile[m] * 16 + rest % extent[m]) as u32);
            rest /= extent[m];
        }
    }
}

fn uniform(rng: &mut Xoshiro256PlusPlus, dims: &[usize], n: usize, idx: &mut Draws) {
    for _ in 0..n {
        for (m, &d) in dims.iter().enumerate() {
            idx.push(m, rng.random_range(0..d as u32));
        }
    }
}

fn zipf_cdf(n: usize, alpha: f64) -> Vec<f64> {
    let mut cdf: Vec<f64> = (0..n).map(|i| ((i + 1) as f64).powf(-alpha)).collect();
    let mut s = 0.0;
    for c in cdf.iter_mut() {
        s += *c;
        *c = s;
    }
    for c in cdf.iter_mut() {
        *c /= s;
    }
    cdf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_tensor_other_seed_other_tensor() {
        let spec = GenSpec {
            dims: vec![50, 40, 30],
            nnz: 2000,
            pattern: Pattern::PowerLaw { alpha: 1.1 },
            seed: 7,
        };
        let a = generate(&spec).unwrap();
        assert_eq!(a, generate(&spec).unwrap());
        assert_ne!(a, generate(&GenSpec { seed: 8, ..spec }).unwrap());
        assert!(a.is_sorted_unique());
    }

    /// Parts drawn alone, put together in order, are the whole tensor, for every
    /// pattern (the repeats summed in the same order).
    #[test]
    fn parts_put_together_are_the_whole_tensor() {
        for pattern in [
            Pattern::Uniform,
            Pattern::PowerLaw { alpha: 1.0 },
            Pattern::BLOCK_DENSE,
            Pattern::TileBlocks {
                tile_nnz: 30,
                side: 2,
            },
        ] {
            let spec = GenSpec {
                dims: vec![40, 35, 20],
                nnz: 3000,
                pattern,
                seed: 11,
            };
            let whole = generate(&spec).unwrap();
            assert!(whole.nnz() < 3000, "{pattern:?}: some repeats to sum");
            for cuts in [
                vec![0, 3000],
                vec![0, 1, 1, 1700, 2999],
                vec![0, 1000, 2000],
            ] {
                let mut idx = vec![Vec::new(); 3];
                let mut values = Vec::new();
                let ends = cuts[1..].iter().copied().chain([usize::MAX]);
                for (lo, hi) in cuts.iter().copied().zip(ends) {
                    let (i, v) = generate_part(&spec, lo..hi).unwrap();
                    for (all, part) in idx.iter_mut().zip(i) {
                        all.extend(part);
                    }
                    values.extend(v);
                }
                let mut t = CooTensor::new(spec.dims.clone(), idx, values).unwrap();
                t.sum_duplicates();
                assert_eq!(t, whole, "{pattern:?}, cut at {cuts:?}");
            }
        }
    }

    #[test]
    fn tile_blocks_fill_neighbouring_tiles_exactly() {
        let (side, t) = (3usize, 50u32);
        let x = generate(&GenSpec {
            dims: vec![200, 160, 100],
            nnz: 27 * 50 * 2,
            pattern: Pattern::TileBlocks { tile_nnz: t, side },
            seed: 5,
        })
        .unwrap();
        assert_eq!(x.nnz(), 27 * 50 * 2);
        let mut per_tile = std::collections::HashMap::<[u32; 3], u32>::new();
        for k in 0..x.nnz() {
            let c = [0, 1, 2].map(|m| x.indices(m)[k] / 16);
            *per_tile.entry(c).or_default() += 1;
        }
        // Exactly 50 nonzeros in each of 54 tiles ...
        assert_eq!(per_tile.len(), 54);
        assert!(per_tile.values().all(|&n| n == t));
        // ... filling whole blocks of neighbouring tiles, all but the last one placed
        // (blocks at the grid's edge are cut: the grid is 13×10×7 tiles).
        let grid = [13u32, 10, 7];
        let mut blocks = std::collections::HashMap::<[u32; 3], usize>::new();
        for c in per_tile.keys() {
            *blocks.entry(c.map(|v| v / side as u32)).or_default() += 1;
        }
        let partial = blocks
            .iter()
            .filter(|(b, n)| {
                let full: u32 = (0..3)
                    .map(|m| (grid[m] - b[m] * side as u32).min(side as u32))
                    .product();
                **n < full as usize
            })
            .count();
        assert!(partial <= 1, "{partial} partly filled blocks: {blocks:?}");
        assert!(blocks.len() < 54, "tiles were placed alone");
        assert!(
            generate(&GenSpec {
                dims: vec![20, 20],
                nnz: 10,
                pattern: Pattern::TileBlocks {
                    tile_nnz: 1,
                    side: 0
                },
                seed: 1,
            })
            .is_err()
        );
    }
}
