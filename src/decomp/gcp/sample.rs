//! GCP's stratified samples: nonzeros drawn uniformly (with replacement) from the
//! stored entries, zeros drawn uniformly from the index space with the stored entries
//! rejected, each stratum with its own weight, so that `Σ w f(x, m)` over the sample
//! estimates the loss over every cell.
//!
//! Draws are made in fixed chunks of entries, each from its own generator seeded by
//! `(seed, stream, chunk)`: a sample is the same for any thread count.

use crate::engine::GcpSample;
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
/// Nonzero draws whose places are drawn before their entries are copied.
const BATCH: usize = 32;

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
            // The chunk's nonzero draws come first: their places are drawn a batch at a
            // time and then copied, so that the batch's misses to the stored entries
            // overlap (the same draws, in the same order, as one at a time).
            let nz = strata.nonzeros.saturating_sub(first).min(values.len());
            let mut places = [0usize; BATCH];
            for start in (0..nz).step_by(BATCH) {
                let batch = &mut places[..BATCH.min(nz - start)];
                for k in batch.iter_mut() {
                    *k = rng.random_range(0..self.x.nnz());
                }
                for (j, &k) in (start..).zip(batch.iter()) {
                    copy_coord(
                        &mut coords[j * n..(j + 1) * n],
                        &self.coords[k * n..(k + 1) * n],
                    );
                    values[j] = self.x.values()[k] * self.times;
                    weights[j] = strata.w_nonzeros;
                }
            }
            for ((c, v), w) in coords[nz * n..]
                .chunks_exact_mut(n)
                .zip(&mut values[nz..])
                .zip(&mut weights[nz..])
            {
                loop {
                    let mut key = 0;
                    for (m, c) in c.iter_mut().enumerate() {
                        *c = rng.random_range(0..dims[m] as u32);
                        key += *c as u64 * self.strides[m];
                    }
                    if !self.stored.contains(key) {
                        break;
                    }
                }
                *v = 0.0;
                *w = strata.w_zeros;
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
/// two-probe Bloom filter of 16 bits per key. Zero draws ask for cells that are
/// nearly all absent: the filter (an eighth of the table's size, in cache where the
/// table is not) answers most of them without touching the table.
struct KeySet {
    /// `key + 1` per slot, 0 for an empty one.
    slots: Vec<u64>,
    shift: u32,
    /// The filter's bits.
    filter: Vec<u64>,
    /// `64 − log2(the filter's bits)`.
    filter_shift: u32,
}

impl KeySet {
    fn new(keys: &[u64]) -> Self {
        let cap = (keys.len() * 2).next_power_of_two().max(16);
        let bits = (keys.len() * 16).next_power_of_two().max(64);
        let mut set = KeySet {
            slots: vec![0; cap],
            shift: 64 - cap.trailing_zeros(),
            filter: vec![0; bits / 64],
            filter_shift: 64 - bits.trailing_zeros(),
        };
        for &k in keys {
            for b in set.filter_bits(k) {
                set.filter[b / 64] |= 1 << (b % 64);
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

    /// The filter's two bits of `key` (two independent multiplicative hashes).
    #[inline]
    fn filter_bits(&self, key: u64) -> [usize; 2] {
        let h1 = key.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let h2 = (key ^ (key >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        [
            (h1 >> self.filter_shift) as usize,
            (h2 >> self.filter_shift) as usize,
        ]
    }

    #[inline]
    fn contains(&self, key: u64) -> bool {
        if (self.filter_bits(key).iter()).any(|&b| self.filter[b / 64] & (1 << (b % 64)) == 0) {
            return false;
        }
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
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
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

    #[test]
    fn a_full_tensor_has_no_zero_stratum() {
        let x = CooTensor::new(vec![2, 1], vec![vec![0, 1], vec![0, 0]], vec![1.0, 1.0]).unwrap();
        let strata = Strata::new(x.dims(), x.nnz(), 4, 4);
        assert_eq!((strata.zeros, strata.w_zeros), (0, 0.0));
    }
}
