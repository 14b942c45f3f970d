//! GCP's stratified samples: nonzeros drawn uniformly (with replacement) from the
//! stored entries, zeros drawn uniformly from the index space with the stored entries
//! rejected, each stratum with its own weight, so that `Σ w f(x, m)` over the sample
//! estimates the loss over every cell.
//!
//! Draws are made in fixed chunks of entries, each from its own generator seeded by
//! `(seed, stream, chunk)`: a sample is the same for any thread count.

use crate::engine::GcpSample;
use crate::engine::cpu::prefetch_line as prefetch;
use crate::error::{Error, Result};
use crate::tensor::CooTensor;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rayon::prelude::*;

/// One chunk of a sample being drawn: its number, coordinates, values and weights.
type DrawChunk<'a> = (usize, ((&'a mut [u32], &'a mut [f64]), &'a mut [f64]));

/// Entries drawn per generator.
const CHUNK: usize = 1024;
/// Samples of at most this many entries are drawn on the calling worker (a parallel
/// region costs more than drawing a few thousand entries).
const SERIAL_DRAW: usize = 16_384;
/// Zero candidates drawn before they are tested.
const BATCH: usize = 32;
/// How many nonzero draws ahead the stored entry is fetched.
const AHEAD: usize = 16;

/// Sample sizes and weights of one stratified sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Strata {
    /// Nonzeros drawn.
    pub nonzeros: usize,
    /// Zeros drawn.
    pub zeros: usize,
    /// Weight of each drawn nonzero (stored entries / nonzeros drawn).
    pub w_nonzeros: f64,
    /// Weight of each drawn zero (zero cells / zeros drawn).
    pub w_zeros: f64,
}

impl Strata {
    /// `nonzeros` and `zeros` drawn from a tensor of extents `dims` with `nnz` stored
    /// entries, weighted to estimate sums over all cells: a stratum with nothing to
    /// draw from gets no draws.
    pub fn new(dims: &[usize], nnz: usize, nonzeros: usize, zeros: usize) -> Strata {
        let nonzeros = if nnz == 0 { 0 } else { nonzeros };
        let nnz = nnz as f64;
        let zero_cells = cells(dims) - nnz;
        let zeros = if zero_cells < 1.0 { 0 } else { zeros };
        Strata {
            nonzeros,
            zeros,
            w_nonzeros: if nonzeros == 0 {
                0.0
            } else {
                nnz / nonzeros as f64
            },
            w_zeros: if zeros == 0 {
                0.0
            } else {
                zero_cells / zeros as f64
            },
        }
    }
}

/// The number of cells of a tensor of extents `dims`, as f64.
pub fn cells(dims: &[usize]) -> f64 {
    dims.iter().map(|&d| d as f64).product()
}

/// Draws stratified samples of one tensor (see the [module documentation](self)).
pub struct Sampler<'a> {
    x: &'a CooTensor,
    /// Strides of the linear index (mode 0 fastest).
    strides: Vec<u64>,
    /// The stored entries' indices, `order` per entry: a nonzero draw reads one place
    /// (the tensor keeps one array per mode).
    coords: Vec<u32>,
    /// The stored entries' linear indices, for rejecting them as zeros.
    stored: KeySet,
    seed: u64,
    /// What a drawn nonzero's value is multiplied by (1, or a power of two:
    /// [`super::units`]).
    times: f64,
}

impl<'a> Sampler<'a> {
    /// A sampler of `x` with the seed `seed`; [`Error::Unsupported`] when the index
    /// space has more than 2⁶⁴ cells.
    pub fn new(x: &'a CooTensor, seed: u64) -> Result<Self> {
        let mut strides = Vec::with_capacity(x.order());
        let mut s: u64 = 1;
        for &d in x.dims() {
            strides.push(s);
            s = s.checked_mul(d as u64).ok_or_else(|| {
                Error::Unsupported(format!(
                    "GCP samples zeros of index spaces of at most 2^64 cells; {:?} has more",
                    x.dims()
                ))
            })?;
        }
        let keys: Vec<u64> = (0..x.nnz())
            .into_par_iter()
            .map(|k| {
                (0..x.order())
                    .map(|m| x.indices(m)[k] as u64 * strides[m])
                    .sum()
            })
            .collect();
        let n = x.order();
        let mut coords = vec![0u32; x.nnz() * n];
        coords
            .par_chunks_mut(n.max(1))
            .enumerate()
            .for_each(|(k, c)| {
                for (m, c) in c.iter_mut().enumerate() {
                    *c = x.indices(m)[k];
                }
            });
        Ok(Sampler {
            x,
            strides,
            coords,
            stored: KeySet::new(&keys),
            seed,
            times: 1.0,
        })
    }

    /// The sampler with every drawn value multiplied by `times` (exact for a power of
    /// two that keeps the values normal).
    pub fn times(self, times: f64) -> Self {
        Sampler { times, ..self }
    }

    /// Draws the sample of `strata` for stream `stream` (e.g. an iteration number)
    /// into `out`, replacing what it held.
    pub fn draw(&self, strata: &Strata, stream: u64, out: &mut GcpSample) -> Result<()> {
        let n = self.x.order();
        let total = strata.nonzeros + strata.zeros;
        let (mut coords, mut values, mut weights) = std::mem::take(out).into_parts();
        coords.resize(total * n, 0);
        values.resize(total, 0.0);
        weights.resize(total, 0.0);
        let dims = self.x.dims();
        // Chunk `chunk` draws from its own generator, so the sample is the same whether
        // the chunks run in parallel or, for a small sample, in order on this worker.
        let draw_chunk = |(chunk, ((coords, values), weights)): DrawChunk| {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(mix(self.seed, stream, chunk));
            let first = chunk * CHUNK;
            // The chunk's nonzero draws come first: their places are all drawn, then the
            // entries copied with the places AHEAD on being fetched, so that the misses
            // to the stored entries overlap (the same draws, in the same order, as one at
            // a time).
            let nz = strata.nonzeros.saturating_sub(first).min(values.len());
            let mut places = [0usize; CHUNK];
            for k in &mut places[..nz] {
                *k = rng.random_range(0..self.x.nnz());
            }
            for &k in &places[..AHEAD.min(nz)] {
                prefetch(&self.coords[k * n]);
                prefetch(&self.x.values()[k]);
            }
            for (j, &k) in places[..nz].iter().enumerate() {
                if let Some(&ahead) = places[..nz].get(j + AHEAD) {
                    prefetch(&self.coords[ahead * n]);
                    prefetch(&self.x.values()[ahead]);
                }
                copy_coord(
                    &mut coords[j * n..(j + 1) * n],
                    &self.coords[k * n..(k + 1) * n],
                );
                values[j] = self.x.values()[k] * self.times;
                weights[j] = strata.w_nonzeros;
            }
            // Then the zeros: candidates are drawn a batch at a time (at most as many as
            // slots are left) and their filter lines fetched, then tested in order, each
            // one not stored filling the next slot. The candidates and the cells kept are
            // those of drawing and testing one at a time, so the sample is the same; the
            // batch lets the filter's misses overlap.
            let mut next = nz;
            let mut cands = vec![0u32; BATCH * n];
            let mut keys = [0u64; BATCH];
            while next < values.len() {
                let m = BATCH.min(values.len() - next);
                for (cand, key) in cands.chunks_exact_mut(n).zip(&mut keys[..m]) {
                    *key = 0;
                    for (mode, c) in cand.iter_mut().enumerate() {
                        *c = rng.random_range(0..dims[mode] as u32);
                        *key += *c as u64 * self.strides[mode];
                    }
                    self.stored.prefetch(*key);
                }
                // The filter's answers, and the table's lines fetched for the candidates
                // it cannot rule out (the stored cells and its false positives).
                let mut maybe = [false; BATCH];
                for (may, &key) in maybe.iter_mut().zip(&keys[..m]) {
                    *may = self.stored.may_contain(key);
                    if *may {
                        self.stored.prefetch_slot(key);
                    }
                }
                for ((cand, &key), &may) in cands.chunks_exact(n).zip(&keys[..m]).zip(&maybe) {
                    if !(may && self.stored.table_contains(key)) {
                        copy_coord(&mut coords[next * n..(next + 1) * n], cand);
                        values[next] = 0.0;
                        weights[next] = strata.w_zeros;
                        next += 1;
                    }
                }
            }
        };
        if total <= SERIAL_DRAW {
            coords
                .chunks_mut(CHUNK * n)
                .zip(values.chunks_mut(CHUNK))
                .zip(weights.chunks_mut(CHUNK))
                .enumerate()
                .for_each(draw_chunk);
        } else {
            coords
                .par_chunks_mut(CHUNK * n)
                .zip(values.par_chunks_mut(CHUNK))
                .zip(weights.par_chunks_mut(CHUNK))
                .enumerate()
                .for_each(draw_chunk);
        }
        *out = GcpSample::from_parts(dims, coords, values, weights)?;
        Ok(())
    }
}

/// Copies a nonzero's coordinates (`dst.len()` of them): constant lengths for the
/// usual orders, so that the copy is a few moves instead of a call to `memcpy`.
#[inline(always)]
fn copy_coord(dst: &mut [u32], src: &[u32]) {
    match dst.len() {
        3 => dst[..3].copy_from_slice(&src[..3]),
        4 => dst[..4].copy_from_slice(&src[..4]),
        5 => dst[..5].copy_from_slice(&src[..5]),
        _ => dst.copy_from_slice(src),
    }
}

/// A seed for chunk `chunk` of stream `stream` (splitmix64 of the three).
fn mix(seed: u64, stream: u64, chunk: usize) -> u64 {
    let mut z = seed
        ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (chunk as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A set of u64 keys: open addressing, linear probing, at most half full, behind a
/// blocked Bloom filter of 16 bits per key (two bits per key, both in one 64-byte
/// line). Zero draws ask for cells that are nearly all absent: the filter (an eighth
/// of the table's size, in cache where the table is not) answers most of them from
/// one line without touching the table.
struct KeySet {
    /// `key + 1` per slot, 0 for an empty one.
    slots: Vec<u64>,
    shift: u32,
    /// The filter's lines.
    filter: Vec<FilterLine>,
    /// `64 − log2(the filter's lines)`.
    filter_shift: u32,
}

/// One cache line of [`KeySet`]'s filter (512 bits).
#[derive(Clone, Copy)]
#[repr(align(64))]
struct FilterLine([u64; 8]);

impl KeySet {
    fn new(keys: &[u64]) -> Self {
        let cap = (keys.len() * 2).next_power_of_two().max(16);
        let lines = (keys.len() * 16).div_ceil(512).next_power_of_two().max(1);
        let mut set = KeySet {
            slots: vec![0; cap],
            shift: 64 - cap.trailing_zeros(),
            filter: vec![FilterLine([0; 8]); lines],
            filter_shift: 64 - lines.trailing_zeros(),
        };
        for &k in keys {
            let (line, bits) = set.filter_bits(k);
            for b in bits {
                set.filter[line].0[b / 64] |= 1 << (b % 64);
            }
            let mut s = set.slot(k);
            while set.slots[s] != 0 && set.slots[s] != k + 1 {
                s = (s + 1) & (cap - 1);
            }
            set.slots[s] = k + 1;
        }
        set
    }

    #[inline]
    fn slot(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The filter's line of `key` and its two bits there (from two independent
    /// multiplicative hashes: one picks the line, the other's top 18 bits the bits).
    #[inline]
    fn filter_bits(&self, key: u64) -> (usize, [usize; 2]) {
        let h1 = key.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let h2 = (key ^ (key >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        // With one line, `filter_shift` is 64 and the shift would overflow.
        let line = h1.checked_shr(self.filter_shift).unwrap_or(0) as usize;
        (line, [(h2 >> 55) as usize, ((h2 >> 46) & 511) as usize])
    }

    /// Starts fetching the filter line [`Self::contains`] reads first for `key`.
    #[inline]
    fn prefetch(&self, key: u64) {
        prefetch(&self.filter[self.filter_bits(key).0]);
    }

    /// Starts fetching the table's line where [`Self::table_contains`] starts for `key`.
    #[inline]
    fn prefetch_slot(&self, key: u64) {
        prefetch(&self.slots[self.slot(key)]);
    }

    /// Whether the filter lets `key` through (`false`: `key` is not in the set).
    #[inline]
    fn may_contain(&self, key: u64) -> bool {
        let (line, bits) = self.filter_bits(key);
        let line = &self.filter[line].0;
        bits.iter().all(|&b| line[b / 64] & (1 << (b % 64)) != 0)
    }

    /// Whether `key` is in the table (the filter not asked).
    #[inline]
    fn table_contains(&self, key: u64) -> bool {
        let mask = self.slots.len() - 1;
        let mut s = self.slot(key);
        loop {
            match self.slots[s] {
                0 => return false,
                v if v == key + 1 => return true,
                _ => s = (s + 1) & mask,
            }
        }
    }

    #[cfg(test)]
    fn contains(&self, key: u64) -> bool {
        self.may_contain(key) && self.table_contains(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> CooTensor {
        CooTensor::new(
            vec![3, 4, 2],
            vec![vec![0, 1, 2, 2], vec![0, 3, 1, 1], vec![0, 1, 0, 1]],
            vec![1.0, 2.0, 3.0, 4.0],
        )
        .unwrap()
    }

    #[test]
    fn zeros_are_never_stored_cells_and_weights_estimate_counts() {
        let x = small();
        let s = Sampler::new(&x, 7).unwrap();
        let strata = Strata::new(x.dims(), x.nnz(), 5, 3000);
        assert_eq!(strata.w_nonzeros, 4.0 / 5.0);
        assert_eq!(strata.w_zeros, 20.0 / 3000.0);
        let mut out = GcpSample::new(x.dims());
        s.draw(&strata, 0, &mut out).unwrap();
        assert_eq!(out.len(), 3005);
        let stored: Vec<Vec<u32>> = (0..x.nnz()).map(|k| x.coords(k)).collect();
        let mut seen = std::collections::HashSet::new();
        for k in 0..out.len() {
            let c = out.coord(k).to_vec();
            if k < 5 {
                let at = stored.iter().position(|s| *s == c).expect("a stored entry");
                assert_eq!(out.values()[k], x.values()[at]);
            } else {
                assert!(!stored.contains(&c), "zero drawn at a stored cell {c:?}");
                assert_eq!(out.values()[k], 0.0);
                seen.insert(c);
            }
        }
        assert_eq!(seen.len(), 20, "every zero cell is drawn in 3000 tries");
        // Same seed and stream: same sample; another stream: another one.
        let mut again = GcpSample::new(x.dims());
        s.draw(&strata, 0, &mut again).unwrap();
        assert_eq!(again, out);
        s.draw(&strata, 1, &mut again).unwrap();
        assert_ne!(again, out);
    }

    #[test]
    fn a_sample_is_the_same_for_any_thread_count() {
        let x = small();
        let strata = Strata::new(x.dims(), x.nnz(), 3000, 5000);
        let draw = |threads| {
            crate::pool_of(threads).install(|| {
                let mut out = GcpSample::new(x.dims());
                Sampler::new(&x, 3)
                    .unwrap()
                    .draw(&strata, 9, &mut out)
                    .unwrap();
                out
            })
        };
        assert_eq!(draw(1), draw(3));
    }

    /// The key set against a `HashSet` of the same keys: every key found, and every
    /// other key asked (most answered by the filter alone) not; from sets of one filter
    /// line to many, with keys that share table slots.
    #[test]
    fn the_key_set_holds_exactly_its_keys() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(41);
        for n in [0usize, 1, 3, 40, 1000, 50_000] {
            // Keys clustered (runs of neighbours, as a fiber's cells) and spread.
            let keys: Vec<u64> = (0..n)
                .map(|k| {
                    if k % 2 == 0 {
                        k as u64 * 3
                    } else {
                        rng.random_range(0..1u64 << 40)
                    }
                })
                .collect();
            let set = KeySet::new(&keys);
            let want: std::collections::HashSet<u64> = keys.iter().copied().collect();
            for &k in &keys {
                assert!(set.contains(k), "key {k} of {n}");
            }
            let mut passed = 0;
            for k in (0..20_000u64).chain((0..20_000).map(|_| rng.random_range(0..1u64 << 40))) {
                assert_eq!(set.contains(k), want.contains(&k), "key {k} of {n}");
                passed += usize::from(set.may_contain(k) && !want.contains(&k));
            }
            // 16 bits and 2 probes per key: about 1.5 % of absent keys pass the filter;
            // 5 % would mean it has lost most of its use.
            assert!(
                passed < 2000,
                "{passed} of 40000 absent keys passed the filter ({n} keys)"
            );
        }
    }

    #[test]
    fn a_full_tensor_has_no_zero_stratum() {
        let x = CooTensor::new(vec![2, 1], vec![vec![0, 1], vec![0, 0]], vec![1.0, 1.0]).unwrap();
        let strata = Strata::new(x.dims(), x.nnz(), 4, 4);
        assert_eq!((strata.zeros, strata.w_zeros), (0, 0.0));
    }
}
