//! GCP's sampled gradient asked for in one piece ([`crate::engine::GcpSpread::Caller`]),
//! spread over every worker with the one-piece pass's bits.
//!
//! The one-piece fused pass ([`super::gcp`]) adds each entry's term
//! `y_k Π_{j≠n} A⁽ʲ⁾[c_j, :]` to its row of every mode's gradient, in sample order, on
//! one worker: GCP-SGD's gradient ran on one core whatever the thread count. Here the
//! same terms are summed in the same order per row, by stages:
//!
//! 1. **Terms** (entry-parallel, fixed chunks): each entry's rows gathered once, its
//!    model value, `y_k = w_k ∂f/∂m` and every mode's term written to a buffer in
//!    entry order; then, per mode, the chunk's entries sorted by row block (a stable
//!    counting sort within the chunk).
//! 2. **Sums** (block-parallel, every mode's blocks in one region): a block adds the
//!    terms of its entries to its rows, chunk after chunk, each chunk's in order.
//!
//! Every row thus receives the one-piece pass's terms, computed by the same operations,
//! in the same order: the bits are that pass's, for every thread count and block
//! count, so the blocks may follow the workers. The sample runs in segments of at most
//! [`SEGMENT_BYTES`] of terms, one after another (each segment's sums after the
//! earlier's: the order is kept).

use super::gcp::{by_width, entry_rows, entry_term, fixed_term, model_value, rows_value};
use super::phi::prefetch_row_f64;
use crate::engine::gcp::{EntryLoss, GcpSample};
use crate::matrix::Matrix;
use rayon::prelude::*;

/// Entries per chunk of the terms stage.
const CHUNK: usize = 1024;
/// The most bytes of terms one segment holds (`entries × N × R × 8`).
const SEGMENT_BYTES: usize = 4 << 20;
/// Row blocks per mode per worker: several, so that a block of hot rows (a power-law
/// mode) does not hold the others up.
const BLOCKS_PER_WORKER: usize = 8;
/// How many entries ahead the terms stage prefetches rows.
const AHEAD: usize = 8;

/// A mode's row blocks: block `b` holds rows `starts[b]..starts[b + 1]`.
struct Blocks {
    starts: Vec<usize>,
}

impl Blocks {
    fn new(rows: usize, workers: usize) -> Self {
        let blocks = (BLOCKS_PER_WORKER * workers).min(rows).max(1);
        Blocks {
            starts: (0..=blocks).map(|b| (b * rows).div_ceil(blocks)).collect(),
        }
    }

    fn count(&self) -> usize {
        self.starts.len() - 1
    }

    /// The block of `row`: the least `b` with `starts[b + 1] > row`.
    #[inline]
    fn of(&self, row: usize) -> usize {
        let blocks = self.count();
        let rows = self.starts[blocks].max(1);
        // The inverse of `starts[b] = ⌈b · rows / blocks⌉`, up to one for rounding.
        let b = row * blocks / rows;
        if row >= self.starts[b + 1] { b + 1 } else { b }
    }
}

/// The gradient of `Σ w f(x, m)` over `sample` into `grads` (`I_n × rank`, any
/// contents), the one-piece fused pass's bits; returns `Σ w f` (summed in sample
/// order) when `with_value`, else 0.
pub(crate) fn gradient_staged<L: EntryLoss>(
    sample: &GcpSample,
    f: &[&[f64]],
    rank: usize,
    loss: &L,
    with_value: bool,
    grads: &mut [Matrix<f64>],
) -> f64 {
    staged(sample, f, rank, loss, with_value, grads, SEGMENT_BYTES)
}

/// [`gradient_staged`] in segments of at most `segment_bytes` of terms (at least one
/// chunk's).
fn staged<L: EntryLoss>(
    sample: &GcpSample,
    f: &[&[f64]],
    rank: usize,
    loss: &L,
    with_value: bool,
    grads: &mut [Matrix<f64>],
    segment_bytes: usize,
) -> f64 {
    let n = f.len();
    let len = sample.len();
    let workers = rayon::current_num_threads().max(1);
    let seg = ((segment_bytes / (n * rank * 8).max(1)).max(CHUNK) / CHUNK * CHUNK).min(len);
    let blocks: Vec<Blocks> = grads
        .iter()
        .map(|g| Blocks::new(g.rows(), workers))
        .collect();
    SCRATCH.with_borrow_mut(|s| {
        s.terms.resize(seg * n * rank, 0.0);
        s.y.resize(seg, 0.0);
        s.values.resize(seg, 0.0);
        s.order.resize(seg * n, 0);
    });
    let mut scratch = SCRATCH.take();
    let Scratch {
        terms,
        y,
        values,
        order,
    } = &mut scratch;
    let mut value = 0.0;
    for g in grads.iter_mut() {
        g.data_mut().fill(0.0);
    }
    let mut at = 0;
    while at < len {
        let end = (at + seg).min(len);
        let count = end - at;
        let coords = &sample.coords()[at * n..end * n];
        let (xs, ws) = (&sample.values()[at..end], &sample.weights()[at..end]);
        // 1. Terms, and per chunk and mode where each block's entries start in the
        // chunk's part of `order`.
        let firsts: Vec<Vec<Vec<usize>>> = terms[..count * n * rank]
            .par_chunks_mut(CHUNK * n * rank)
            .zip(y[..count].par_chunks_mut(CHUNK))
            .zip(values[..count].par_chunks_mut(CHUNK))
            .zip(order[..count * n].par_chunks_mut(CHUNK * n))
            .zip(coords.par_chunks(CHUNK * n))
            .zip(xs.par_chunks(CHUNK).zip(ws.par_chunks(CHUNK)))
            .map(|(((((terms, y), vals), order), coords), (xs, ws))| {
                let vals = if with_value { vals } else { &mut [][..] };
                chunk_terms(coords, xs, ws, f, rank, loss, terms, y, vals);
                sort_chunk(coords, &blocks, order)
            })
            .collect();
        if with_value {
            // Σ w f in sample order, as the one-piece pass adds it.
            value = values[..count].iter().fold(value, |v, &t| v + t);
        }
        // 2. Every mode's blocks add their entries' terms in sample order.
        let mut jobs: Vec<(usize, usize, usize, &mut [f64])> = Vec::new();
        for (m, g) in grads.iter_mut().enumerate() {
            let s = &blocks[m].starts;
            let mut rest = g.data_mut();
            for b in 0..blocks[m].count() {
                let (head, tail) = rest.split_at_mut((s[b + 1] - s[b]) * rank);
                jobs.push((m, b, s[b], head));
                rest = tail;
            }
        }
        let (terms, y, order, firsts) = (&terms, &y, &order, &firsts);
        jobs.into_par_iter().for_each(|(m, b, first_row, out)| {
            for (c, firsts) in firsts.iter().enumerate() {
                let base = c * CHUNK;
                let size = CHUNK.min(count - base);
                let mine = &order[base * n + m * size..][firsts[m][b]..firsts[m][b + 1]];
                for &k in mine {
                    let e = base + k as usize;
                    if y[e] == 0.0 {
                        continue;
                    }
                    let row = coords[e * n + m] as usize - first_row;
                    let term = &terms[(e * n + m) * rank..][..rank];
                    for (o, &t) in out[row * rank..][..rank].iter_mut().zip(term) {
                        *o += t;
                    }
                }
            }
        });
        at = end;
    }
    SCRATCH.set(scratch);
    value
}

/// The stages' buffers, kept by the calling thread between gradients (SGD asks for
/// one per iteration: fresh buffers cost page faults of their size every time).
#[derive(Default)]
struct Scratch {
    terms: Vec<f64>,
    y: Vec<f64>,
    values: Vec<f64>,
    order: Vec<u16>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// Stage 1's sort of one chunk: per mode, the chunk's entries (local indices) by
/// block into that mode's part of `order` (`size` entries a mode, modes in order),
/// stable; returns per mode where each block's entries start (blocks + 1 offsets).
fn sort_chunk(coords: &[u32], blocks: &[Blocks], order: &mut [u16]) -> Vec<Vec<usize>> {
    let n = blocks.len();
    let size = coords.len() / n;
    (0..n)
        .map(|m| {
            let bl = &blocks[m];
            let mut firsts = vec![0usize; bl.count() + 1];
            for c in coords.chunks_exact(n) {
                firsts[bl.of(c[m] as usize) + 1] += 1;
            }
            for b in 0..bl.count() {
                firsts[b + 1] += firsts[b];
            }
            let mut next = firsts.clone();
            let part = &mut order[m * size..(m + 1) * size];
            for (k, c) in coords.chunks_exact(n).enumerate() {
                let b = bl.of(c[m] as usize);
                part[next[b]] = k as u16;
                next[b] += 1;
            }
            firsts
        })
        .collect()
}

/// Stage 1 for one chunk: `y_k` and every mode's term of each entry into `y` and
/// `terms` (`N × R` per entry, modes in order), by the one-piece pass's operations;
/// `w f` into `values` where it is not empty.
#[allow(clippy::too_many_arguments)]
fn chunk_terms<L: EntryLoss>(
    coords: &[u32],
    xs: &[f64],
    ws: &[f64],
    f: &[&[f64]],
    rank: usize,
    loss: &L,
    terms: &mut [f64],
    y: &mut [f64],
    values: &mut [f64],
) {
    let n = f.len();
    macro_rules! fixed {
        ($n:literal, $r:literal, $pad:literal) => {
            return chunk_terms_fixed::<$n, $r, $pad, L>(
                coords, xs, ws, f, rank, loss, terms, y, values,
            )
        };
    }
    by_width!(n, rank, fixed);
    for (e, (((c, &x), &w), yk)) in coords
        .chunks_exact(n)
        .zip(xs)
        .zip(ws)
        .zip(y.iter_mut())
        .enumerate()
    {
        prefetch_ahead(coords, e, n, rank, f);
        let m = model_value(c, f, rank);
        if let Some(v) = values.get_mut(e) {
            *v = w * loss.value(x, m);
        }
        *yk = w * loss.deriv(x, m);
        if *yk == 0.0 {
            continue;
        }
        let out = &mut terms[e * n * rank..(e + 1) * n * rank];
        for (mode, prod) in out.chunks_exact_mut(rank).enumerate() {
            entry_term(prod, *yk, c, f, mode);
        }
    }
}

/// Prefetches the factor rows of the entry `AHEAD` places after entry `e` (`n`
/// coordinates an entry, rows of `rank`).
#[inline(always)]
fn prefetch_ahead(coords: &[u32], e: usize, n: usize, rank: usize, f: &[&[f64]]) {
    if let Some(ahead) = coords.get((e + AHEAD) * n..(e + AHEAD + 1) * n) {
        for (j, &i) in ahead.iter().enumerate() {
            let at = i as usize * rank;
            prefetch_row_f64(&f[j][at..at + rank]);
        }
    }
}

/// [`chunk_terms`] for order `N` and width `R` known at compile time (rows of `rank`
/// values, zero-padded to `R` where `PAD`): the one-piece pass's fixed kernel's
/// operations (rows in arrays, loops unrolled), so the bits are the generic loops'.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn chunk_terms_fixed<const N: usize, const R: usize, const PAD: bool, L: EntryLoss>(
    coords: &[u32],
    xs: &[f64],
    ws: &[f64],
    f: &[&[f64]],
    rank: usize,
    loss: &L,
    terms: &mut [f64],
    y: &mut [f64],
    values: &mut [f64],
) {
    let len = if PAD { rank } else { R };
    let mut buf = [[0f64; R]; N];
    for (e, (((c, &x), &w), yk)) in coords
        .chunks_exact(N)
        .zip(xs)
        .zip(ws)
        .zip(y.iter_mut())
        .enumerate()
    {
        prefetch_ahead(coords, e, N, len, f);
        let rows = entry_rows::<N, R, PAD>(c, f, len, &mut buf);
        let m = rows_value(&rows);
        if let Some(v) = values.get_mut(e) {
            *v = w * loss.value(x, m);
        }
        *yk = w * loss.deriv(x, m);
        if *yk == 0.0 {
            continue;
        }
        let out = &mut terms[e * N * len..(e + 1) * N * len];
        for (mode, out) in out.chunks_exact_mut(len).enumerate() {
            out.copy_from_slice(&fixed_term(&rows, *yk, mode)[..len]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomp::gcp::Loss;
    use crate::engine::cpu::gcp::gradient_fused;
    use rand::{Rng, SeedableRng};

    /// A sample of `len` entries on `dims` (mode 0's rows drawn from a power law, so
    /// that some rows have many entries), every fifth entry of weight 0 (its `y` is 0:
    /// skipped), and factors near 1.
    fn case(dims: &[usize], len: usize, rank: usize, seed: u64) -> (GcpSample, Vec<Matrix<f64>>) {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut s = GcpSample::new(dims);
        for k in 0..len {
            let c: Vec<u32> = (dims.iter().enumerate())
                .map(|(m, &d)| {
                    let u: f64 = rng.random();
                    let i = if m == 0 {
                        (u * u * u * d as f64) as usize
                    } else {
                        rng.random_range(0..d)
                    };
                    i.min(d - 1) as u32
                })
                .collect();
            let w = if k % 5 == 0 {
                0.0
            } else {
                0.5 + rng.random::<f64>()
            };
            s.push(&c, rng.random::<f64>() * 3.0, w).unwrap();
        }
        let a = (dims.iter())
            .map(|&d| Matrix::from_fn(d, rank, |_, _| 0.5 + rng.random::<f64>()))
            .collect();
        (s, a)
    }

    /// The stages give the one-piece fused pass's bits, value included: orders 2 to 7,
    /// ranks the fused pass has a fixed kernel for and others, one segment and many
    /// (the last chunk of each partial), on 1, 2 and 3 workers (the blocks follow them).
    #[test]
    fn the_stages_give_the_one_piece_pass_bits_for_any_workers_and_segments() {
        let cases: [(&[usize], usize, usize); 10] = [
            (&[500, 40, 30], 9000, 8),
            (&[400, 30, 20], 5000, 20),
            (&[300, 20, 9, 7], 4000, 40),
            (&[200, 30, 25], 3000, 70),
            (&[3000, 7, 50, 11], 7000, 4),
            (&[60, 5000, 9], 5000, 5),
            (&[2, 3, 4], 3000, 16),
            (&[90, 80], 5000, 6),
            (&[40, 6, 5, 4, 3], 5000, 8),
            (&[9, 4, 3, 3, 2, 2, 2], 4000, 12),
        ];
        for (seed, (dims, len, rank)) in cases.into_iter().enumerate() {
            let (s, a) = case(dims, len, rank, seed as u64 + 7);
            let f: Vec<&[f64]> = a.iter().map(|m| m.data()).collect();
            for loss in [Loss::Gaussian, Loss::PoissonLog, Loss::BernoulliOdds] {
                let mut want: Vec<Matrix<f64>> =
                    dims.iter().map(|&d| Matrix::zeros(d, rank)).collect();
                let v = gradient_fused(&s, &f, rank, &loss, true, false, &mut want);
                for workers in [1, 2, 3] {
                    let pool = crate::pool_of(workers);
                    // One segment; segments of 2 048 entries; of 1 024 (one chunk).
                    for bytes in [usize::MAX / 2, 2048 * dims.len() * rank * 8, 1] {
                        let mut got: Vec<Matrix<f64>> = dims
                            .iter()
                            .map(|&d| Matrix::from_fn(d, rank, |_, _| 9.0))
                            .collect();
                        let g = pool.install(|| staged(&s, &f, rank, &loss, true, &mut got, bytes));
                        let at =
                            format!("{dims:?} rank {rank} {loss:?} {workers} workers, {bytes} B");
                        assert_eq!(g.to_bits(), v.to_bits(), "{at}: value {g} vs {v}");
                        assert!(got == want, "{at}: gradient differs");
                    }
                }
            }
        }
    }
}
