//! GCP's sampled model values and gradient on the CPU (see [`crate::engine::gcp`]).
//!
//! Values and loss derivatives are computed entry-parallel in fixed chunks. The
//! gradient of mode `n` then cuts the mode's rows into at most [`BLOCKS`] row blocks
//! (fixed, whatever the thread count), sorts the entries into their row's block by a
//! stable counting pass, and lets each block zero its rows and add its entries'
//! contributions in sample order: no atomics, no private outputs, and the same bits
//! for every thread count. A mode with few rows beside the sample (at most one in
//! [`PRIVATE_CHUNKS`] per entry) instead sums fixed ranges of the sample into private
//! outputs, added in range order: no sort, the entries read in order, the same bits
//! for every thread count too. A sample of at most [`FUSED_ENTRIES`] entries, or one
//! asked for in one piece, runs in one fused pass per half instead: values,
//! derivatives and every mode's terms per entry.

use super::phi::prefetch_row_f64;
use crate::engine::gcp::{EntryLoss, GcpSample, GcpSpread};
use crate::matrix::Matrix;
use rayon::prelude::*;

/// Entries per parallel chunk of the entry-parallel passes.
const CHUNK: usize = 2048;
/// Row blocks per mode of the gradient.
const BLOCKS: usize = 256;
/// Sample ranges of the gradient of a mode with few rows ([`mode_gradient_private`]).
const PRIVATE_CHUNKS: usize = 8;
/// Samples of at most this many entries take the gradient in one fused pass per half
/// ([`gradient_fused`]; the choice depends on the sample, not on the thread count);
/// asked for in one piece (`halves` false), a sample of any size does.
const FUSED_ENTRIES: usize = 65_536;
/// A sample asked for in stages ([`GcpSpread::Staged`]) takes them from this many
/// entries on more than one worker (below, the one piece: the same bits, and the
/// stages' wake-ups cost more than the workers save).
pub(crate) const STAGED_ENTRIES: usize = 8192;
/// The fewest entries per half of [`gradient_fused`] (smaller samples run in one pass).
const FUSED_HALF_MIN: usize = 1024;
/// [`gradient_fused`] runs in halves only where the modes' rows number at most this
/// many per sampled entry (else in one pass).
const FUSED_ROWS_PER_ENTRY: usize = 4;
/// How many entries ahead the fused pass prefetches rows.
const AHEAD: usize = 8;

/// `Σ_r Π_n A⁽ⁿ⁾[c_n, r]`: the rows multiplied element-wise (contiguous, so the
/// products vectorize), then summed in 4 interleaved partial sums (one chain of
/// `rank` dependent additions per entry cost more than the products).
#[inline(always)]
pub(super) fn model_value(c: &[u32], factors: &[&[f64]], rank: usize) -> f64 {
    let mut buf = [0f64; 64];
    let mut heap = Vec::new();
    let p: &mut [f64] = if rank <= buf.len() {
        &mut buf[..rank]
    } else {
        heap.resize(rank, 0.0);
        &mut heap
    };
    p.copy_from_slice(&factors[0][c[0] as usize * rank..][..rank]);
    for (f, &i) in factors[1..].iter().zip(&c[1..]) {
        for (x, &a) in p.iter_mut().zip(&f[i as usize * rank..][..rank]) {
            *x *= a;
        }
    }
    let mut acc = [0f64; 4];
    let mut chunks = p.chunks_exact(4);
    for ch in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(ch) {
            *a += v;
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a += v;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

fn slices(factors: &[Matrix<f64>]) -> Vec<&[f64]> {
    factors.iter().map(|f| f.data()).collect()
}

/// The model value at every entry of `sample` into `out` (of the sample's length).
pub(crate) fn model_values(
    sample: &GcpSample,
    factors: &[Matrix<f64>],
    rank: usize,
    out: &mut [f64],
) {
    let f = slices(factors);
    let n = sample.dims().len();
    out.par_chunks_mut(CHUNK)
        .zip(sample.coords().par_chunks(CHUNK * n))
        .for_each(|(out, coords)| {
            for (o, c) in out.iter_mut().zip(coords.chunks_exact(n)) {
                *o = model_value(c, &f, rank);
            }
        });
}

/// The gradient of `Σ w f(x, m)` into `grads` (shaped `I_n × rank`); returns that sum
/// when `with_value` (else 0).
pub(crate) fn gradient<L: EntryLoss>(
    sample: &GcpSample,
    factors: &[Matrix<f64>],
    rank: usize,
    loss: &L,
    with_value: bool,
    spread: GcpSpread,
    grads: &mut [Matrix<f64>],
) -> f64 {
    let f = slices(factors);
    let halves = spread == GcpSpread::Workers;
    // In one piece the fused pass reads each entry and its rows once; the row-block
    // path reads the sample once per mode, in block order (a miss per entry once the
    // sample outgrows the cache), and ran 3.6–4.4× slower per entry at 128 000–256 000
    // entries on two cores with the caller's other worker drawing the next sample.
    if spread == GcpSpread::Staged
        && sample.len() >= STAGED_ENTRIES
        && rayon::current_num_threads() > 1
    {
        return super::gcp_staged::gradient_staged(sample, &f, rank, loss, with_value, grads);
    }
    if sample.len() <= FUSED_ENTRIES || !halves {
        return gradient_fused(sample, &f, rank, loss, with_value, halves, grads);
    }
    let n = sample.dims().len();
    let mut y = vec![0.0; sample.len()];
    // y_k = w_k ∂f/∂m, and the chunk's Σ w f; chunk sums added in chunk order.
    let parts: Vec<f64> = y
        .par_chunks_mut(CHUNK)
        .zip(sample.coords().par_chunks(CHUNK * n))
        .zip(sample.values().par_chunks(CHUNK))
        .zip(sample.weights().par_chunks(CHUNK))
        .map(|(((y, coords), xs), ws)| {
            let mut value = 0.0;
            for (((y, c), &x), &w) in y.iter_mut().zip(coords.chunks_exact(n)).zip(xs).zip(ws) {
                let m = model_value(c, &f, rank);
                *y = w * loss.deriv(x, m);
                if with_value {
                    value += w * loss.value(x, m);
                }
            }
            value
        })
        .collect();
    for (mode, g) in grads.iter_mut().enumerate() {
        mode_gradient(sample, &f, rank, &y, mode, g);
    }
    parts.iter().sum()
}

/// [`gradient`] of a sample of at most [`FUSED_ENTRIES`] in one pass per half: each
/// entry's factor rows are gathered once for its model value and every mode's term.
/// The first half adds its terms to `grads`, the second (a worker of its own where one
/// is free) to private outputs added after it, each in sample order; whether there are
/// halves depends on `halves` (the caller's [`crate::engine::GcpSpread`]), the sample's
/// length and the tensor's rows, so the bits do not depend on the thread count. At GCP-SGD's usual sample sizes (a few thousand to a
/// few tens of thousands of entries) the row-block path's passes cost more in wake-ups,
/// sorting and barriers than they save: with 6000 entries an iteration ran slower on 2
/// workers than on 1, and with 41 600 entries on a 30 500-row tensor the fused pass
/// took 2.8 s per epoch where the parallel passes took 4.0 s.
pub(super) fn gradient_fused<L: EntryLoss>(
    sample: &GcpSample,
    f: &[&[f64]],
    rank: usize,
    loss: &L,
    with_value: bool,
    halves: bool,
    grads: &mut [Matrix<f64>],
) -> f64 {
    let n = f.len();
    let len = sample.len();
    // The second half's private outputs cost a pass over every gradient row: worth it
    // where the rows are not many more than the entries.
    let rows: usize = grads.iter().map(Matrix::rows).sum();
    let half = if halves && len >= 2 * FUSED_HALF_MIN && rows <= FUSED_ROWS_PER_ENTRY * len {
        len.div_ceil(2)
    } else {
        len
    };
    let mut outs: Vec<&mut [f64]> = grads.iter_mut().map(|g| g.data_mut()).collect();
    let part = |range: std::ops::Range<usize>, outs: &mut [&mut [f64]]| {
        fused_part(sample, range, f, rank, loss, with_value, outs)
    };
    if half == len {
        return part(0..len, &mut outs);
    }
    let mut second: Vec<Vec<f64>> = outs.iter().map(|o| vec![0.0; o.len()]).collect();
    let (v0, v1) = rayon::join(
        || part(0..half, &mut outs),
        || {
            let mut views: Vec<&mut [f64]> = second.iter_mut().map(|o| &mut o[..]).collect();
            part(half..len, &mut views)
        },
    );
    for (o, s) in outs.iter_mut().zip(&second) {
        for (o, &s) in o.iter_mut().zip(s) {
            *o += s;
        }
    }
    debug_assert_eq!(n, outs.len());
    v0 + v1
}

/// The entries `range` of [`gradient_fused`]: zeroes `outs` (one `rows × rank` slice
/// per mode), adds every entry's terms in order; returns `Σ w f` when `with_value`.
/// Orders 2 to 6 at ranks up to 64 run a kernel compiled for the width that holds
/// them ([`by_width`], [`fused_entries`]), the rest the generic loops; both do the
/// same operations in the same order.
fn fused_part<L: EntryLoss>(
    sample: &GcpSample,
    range: std::ops::Range<usize>,
    f: &[&[f64]],
    rank: usize,
    loss: &L,
    with_value: bool,
    outs: &mut [&mut [f64]],
) -> f64 {
    let n = f.len();
    for o in outs.iter_mut() {
        o.fill(0.0);
    }
    let coords = &sample.coords()[range.start * n..range.end * n];
    let (xs, ws) = (&sample.values()[range.clone()], &sample.weights()[range]);
    // Rows are prefetched only where the factors and outputs outgrow half the core's
    // L2 cache: below it the hints are pure cost (on a 900-row tensor at rank 24, SGD
    // epochs took 0.44-0.60 s with them and 0.39-0.54 s without, run beside them).
    let bytes = 16 * f.iter().map(|s| s.len()).sum::<usize>();
    let prefetch = bytes > super::CacheSizes::cached().l2 / 2;
    macro_rules! fixed {
        ($n:literal, $r:literal, $pad:literal) => {
            return fused_entries::<$n, $r, $pad, L>(
                coords, xs, ws, f, rank, loss, with_value, prefetch, outs,
            )
        };
    }
    by_width!(n, rank, fixed);
    let mut prod = vec![0.0; rank];
    let mut value = 0.0;
    for ((c, &x), &w) in coords.chunks_exact(n).zip(xs).zip(ws) {
        let m = model_value(c, f, rank);
        if with_value {
            value += w * loss.value(x, m);
        }
        let yk = w * loss.deriv(x, m);
        if yk == 0.0 {
            continue;
        }
        for (mode, out) in outs.iter_mut().enumerate() {
            let row = &mut out[c[mode] as usize * rank..][..rank];
            add_entry(row, &mut prod, yk, c, f, mode);
        }
    }
    value
}

/// Runs `$call!(N, W, PAD)` (which returns) for orders 2 to 6 at ranks 1 to 64: `W`
/// the rank where it is 4, 8, 16, 32 or 64 (`PAD` false), else the next of them
/// (`PAD` true, the rows zero-padded to it: [`entry_rows`]); does nothing for other
/// orders and ranks. The kernels it picks are compiled for their width: at rank 20
/// the generic loops took 2.6 times rank 16's time per SGD epoch, padded to 32 they
/// take 1.3 times it. Orders 5 and 6 ran 3.2–4 times as fast per SGD epoch on their
/// kernels as on the generic loops (rank 16, 3 000-entry samples); orders above 6 are
/// rare enough not to be worth the compile time.
macro_rules! by_width {
    ($n:expr, $rank:expr, $call:ident) => {
        match $n {
            2 => by_width!(@rank 2, $rank, $call),
            3 => by_width!(@rank 3, $rank, $call),
            4 => by_width!(@rank 4, $rank, $call),
            5 => by_width!(@rank 5, $rank, $call),
            6 => by_width!(@rank 6, $rank, $call),
            _ => {}
        }
    };
    (@rank $n:literal, $rank:expr, $call:ident) => {
        match $rank {
            4 => $call!($n, 4, false),
            8 => $call!($n, 8, false),
            16 => $call!($n, 16, false),
            32 => $call!($n, 32, false),
            64 => $call!($n, 64, false),
            1..=3 => $call!($n, 4, true),
            5..=7 => $call!($n, 8, true),
            9..=15 => $call!($n, 16, true),
            17..=31 => $call!($n, 32, true),
            33..=63 => $call!($n, 64, true),
            _ => {}
        }
    };
}
pub(super) use by_width;

/// The width [`by_width`] runs order `order` and rank `rank` at: the next of 4, 8, 16,
/// 32 and 64 for orders 2 to 6 up to rank 64, else `rank` (the generic loops).
pub(crate) fn kernel_width(order: usize, rank: usize) -> usize {
    macro_rules! width {
        ($n:expr, $w:expr, $pad:expr) => {
            return $w
        };
    }
    by_width!(order, rank, width);
    rank
}

/// [`fused_part`]'s loop for order `N` and width `R` known at compile time (rows of
/// `rank` values, `R` of them where not `PAD`, else zero-padded to `R`): the rows held
/// in arrays, every loop unrolled. The model value is [`model_value`]'s (rows
/// multiplied in mode order, summed in 4 interleaved partial sums; the padding adds
/// zeros) and each mode's term [`add_entry`]'s (`y` times the other rows in mode
/// order), so the bits are the generic loops'.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn fused_entries<const N: usize, const R: usize, const PAD: bool, L: EntryLoss>(
    coords: &[u32],
    xs: &[f64],
    ws: &[f64],
    f: &[&[f64]],
    rank: usize,
    loss: &L,
    with_value: bool,
    prefetch: bool,
    outs: &mut [&mut [f64]],
) -> f64 {
    let len = if PAD { rank } else { R };
    let mut buf = [[0f64; R]; N];
    let mut value = 0.0;
    // The entries whose rows are prefetched: none where `prefetch` is false (an empty
    // slice rather than a test in the loop, so that where it does prefetch the loop is
    // the one measured before the test was added).
    let hinted = if prefetch { coords } else { &[] };
    for (e, ((c, &x), &w)) in coords.chunks_exact(N).zip(xs).zip(ws).enumerate() {
        // The rows of the entry AHEAD places on, factors and outputs: the sample's
        // rows are scattered over factors larger than the core's cache.
        if let Some(ahead) = hinted.get((e + AHEAD) * N..(e + AHEAD + 1) * N) {
            for (j, &i) in ahead.iter().enumerate() {
                let at = i as usize * len;
                prefetch_row_f64(&f[j][at..at + len]);
                prefetch_row_f64(&outs[j][at..at + len]);
            }
        }
        let rows = entry_rows::<N, R, PAD>(c, f, len, &mut buf);
        let m = rows_value(&rows);
        if with_value {
            value += w * loss.value(x, m);
        }
        let yk = w * loss.deriv(x, m);
        if yk == 0.0 {
            continue;
        }
        for (mode, out) in outs.iter_mut().enumerate().take(N) {
            let prod = fixed_term(&rows, yk, mode);
            let at = c[mode] as usize * len;
            for (o, &v) in out[at..at + len].iter_mut().zip(&prod) {
                *o += v;
            }
        }
    }
    value
}

/// Entry `c`'s rows of `f` (rows of `len` values) as arrays of `R`: the factors' own
/// rows where not `PAD` (`len` is `R`), else copies in `buf` with zeros after `len`
/// (`buf`'s entries past `len` must be zeros).
#[inline(always)]
pub(super) fn entry_rows<'r, const N: usize, const R: usize, const PAD: bool>(
    c: &[u32],
    f: &[&'r [f64]],
    len: usize,
    buf: &'r mut [[f64; R]; N],
) -> [&'r [f64; R]; N] {
    if PAD {
        for (j, b) in buf.iter_mut().enumerate() {
            let at = c[j] as usize * len;
            copy_short(&mut b[..len], &f[j][at..at + len]);
        }
        let buf: &'r [[f64; R]; N] = buf;
        std::array::from_fn(|j| &buf[j])
    } else {
        std::array::from_fn(|j| {
            let at = c[j] as usize * R;
            f[j][at..at + R].try_into().expect("R columns")
        })
    }
}

/// `dst.copy_from_slice(src)` for a row shorter than 64 values, 4 at a time: as
/// `copy_from_slice` of a length known only at run time it was a call to `memmove` per
/// row, 13 % of a rank-24 gradient's time.
#[inline(always)]
fn copy_short(dst: &mut [f64], src: &[f64]) {
    let mut d = dst.chunks_exact_mut(4);
    let mut s = src.chunks_exact(4);
    for (d, s) in (&mut d).zip(&mut s) {
        let s: &[f64; 4] = s.try_into().expect("4 values");
        let d: &mut [f64; 4] = d.try_into().expect("4 values");
        *d = *s;
    }
    for (d, &s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d = s;
    }
}

/// The model value over an entry's rows with [`model_value`]'s bits (rows multiplied
/// in mode order, summed in 4 interleaved partial sums).
#[inline(always)]
pub(super) fn rows_value<const N: usize, const R: usize>(rows: &[&[f64; R]; N]) -> f64 {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx"))]
    if R.is_multiple_of(4) {
        use std::arch::x86_64::{_mm256_add_pd, _mm256_loadu_pd, _mm256_mul_pd, _mm256_storeu_pd};
        // Written out: LLVM turned the element-wise loops below into scalar chains.
        // Lane `l` of `acc` is partial sum `l`, taking its columns in order.
        // SAFETY: AVX is enabled at compile time; every load reads 4 of a row's `R`
        // values (`j + 4 ≤ R`).
        unsafe {
            let mut acc = [0f64; 4];
            let mut sum = _mm256_loadu_pd(acc.as_ptr());
            for j in (0..R).step_by(4) {
                let mut v = _mm256_loadu_pd(rows[0].as_ptr().add(j));
                for row in &rows[1..] {
                    v = _mm256_mul_pd(v, _mm256_loadu_pd(row.as_ptr().add(j)));
                }
                sum = _mm256_add_pd(sum, v);
            }
            _mm256_storeu_pd(acc.as_mut_ptr(), sum);
            return (acc[0] + acc[1]) + (acc[2] + acc[3]);
        }
    }
    let mut p = *rows[0];
    for row in &rows[1..] {
        for (x, &a) in p.iter_mut().zip(row.iter()) {
            *x *= a;
        }
    }
    let mut acc = [0f64; 4];
    for (k, &v) in p.iter().enumerate() {
        acc[k % 4] += v;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// One mode's term with [`add_entry`]'s bits: `y` times every row but `mode`'s, in
/// mode order.
#[inline(always)]
pub(super) fn fixed_term<const N: usize, const R: usize>(
    rows: &[&[f64; R]; N],
    y: f64,
    mode: usize,
) -> [f64; R] {
    let mut prod = [y; R];
    for (j, row) in rows.iter().enumerate() {
        if j != mode {
            for (x, &a) in prod.iter_mut().zip(row.iter()) {
                *x *= a;
            }
        }
    }
    prod
}

/// Adds one entry's term of [`mode_gradient`], `y_k Π_{j≠mode} A⁽ʲ⁾[c_j, :]`, to
/// `out` (its row of the gradient); `prod` is scratch of the rank's length.
#[inline]
fn add_entry(out: &mut [f64], prod: &mut [f64], yk: f64, c: &[u32], f: &[&[f64]], mode: usize) {
    entry_term(prod, yk, c, f, mode);
    out.iter_mut().zip(prod.iter()).for_each(|(o, &p)| *o += p);
}

/// Writes one entry's term of `mode`, `y_k Π_{j≠mode} A⁽ʲ⁾[c_j, :]`, into `prod` (the
/// rank's length): the other rows multiplied in mode order.
#[inline]
pub(super) fn entry_term(prod: &mut [f64], yk: f64, c: &[u32], f: &[&[f64]], mode: usize) {
    let rank = prod.len();
    prod.fill(yk);
    for (j, (fj, &i)) in f.iter().zip(c).enumerate() {
        if j != mode {
            let row = &fj[i as usize * rank..][..rank];
            prod.iter_mut().zip(row).for_each(|(p, &a)| *p *= a);
        }
    }
}

/// `G⁽ᵐᵒᵈᵉ⁾ = Σ_k y_k Π_{j≠mode} A⁽ʲ⁾[i_kj, :]` at row `i_k,mode`.
fn mode_gradient(
    sample: &GcpSample,
    f: &[&[f64]],
    rank: usize,
    y: &[f64],
    mode: usize,
    g: &mut Matrix<f64>,
) {
    if g.rows() * PRIVATE_CHUNKS <= y.len() {
        return mode_gradient_private(sample, f, rank, y, mode, g);
    }
    let n = f.len();
    let rows = g.rows();
    let blocks = BLOCKS.min(rows).max(1);
    let block_of = |i: u32| (i as usize * blocks) / rows;
    // First row of each block: the least i with i·blocks/rows ≥ b.
    let starts: Vec<usize> = (0..=blocks).map(|b| (b * rows).div_ceil(blocks)).collect();
    let coords = sample.coords();
    // Stable counting sort of the entries by block.
    let mut offsets = vec![0usize; blocks + 1];
    for k in 0..y.len() {
        offsets[block_of(coords[k * n + mode]) + 1] += 1;
    }
    for b in 0..blocks {
        offsets[b + 1] += offsets[b];
    }
    let mut order = vec![0u32; y.len()];
    let mut next = offsets.clone();
    for k in 0..y.len() {
        let b = block_of(coords[k * n + mode]);
        order[next[b]] = k as u32;
        next[b] += 1;
    }
    // The output cut at the block starts.
    let mut parts: Vec<&mut [f64]> = Vec::with_capacity(blocks);
    let mut rest = g.data_mut();
    for b in 0..blocks {
        let (head, tail) = rest.split_at_mut((starts[b + 1] - starts[b]) * rank);
        parts.push(head);
        rest = tail;
    }
    parts.into_par_iter().enumerate().for_each(|(b, out)| {
        out.fill(0.0);
        let first = starts[b];
        let mut prod = vec![0.0; rank];
        for &k in &order[offsets[b]..offsets[b + 1]] {
            let k = k as usize;
            let yk = y[k];
            if yk == 0.0 {
                continue;
            }
            let c = &coords[k * n..(k + 1) * n];
            let row = &mut out[(c[mode] as usize - first) * rank..][..rank];
            add_entry(row, &mut prod, yk, c, f, mode);
        }
    });
}

/// [`mode_gradient`] for a mode whose rows number at most `1/PRIVATE_CHUNKS` of the
/// sample: the sample cut into [`PRIVATE_CHUNKS`] fixed ranges, each adding its
/// entries in order into its own `rows × rank` buffer, the buffers then summed in
/// range order (the same bits for every thread count). The entries are read in
/// order: the row-block path's sort and its scattered reads of the entries (a cache
/// miss each once the sample outgrows the cache) are skipped, for at most
/// `PRIVATE_CHUNKS` outputs' worth of memory, no more than the sample's gradient
/// rows.
fn mode_gradient_private(
    sample: &GcpSample,
    f: &[&[f64]],
    rank: usize,
    y: &[f64],
    mode: usize,
    g: &mut Matrix<f64>,
) {
    let n = f.len();
    let width = g.rows() * rank;
    let per = y.len().div_ceil(PRIVATE_CHUNKS).max(1);
    let coords = sample.coords();
    let partials: Vec<Vec<f64>> = y
        .par_chunks(per)
        .zip(coords.par_chunks(per * n))
        .map(|(y, coords)| {
            let mut out = vec![0.0; width];
            let mut prod = vec![0.0; rank];
            for (&yk, c) in y.iter().zip(coords.chunks_exact(n)) {
                if yk == 0.0 {
                    continue;
                }
                let row = &mut out[c[mode] as usize * rank..][..rank];
                add_entry(row, &mut prod, yk, c, f, mode);
            }
            out
        })
        .collect();
    const SUM_CHUNK: usize = 4096;
    g.data_mut()
        .par_chunks_mut(SUM_CHUNK)
        .enumerate()
        .for_each(|(b, out)| {
            let at = b * SUM_CHUNK;
            out.fill(0.0);
            for part in &partials {
                for (o, &v) in out.iter_mut().zip(&part[at..]) {
                    *o += v;
                }
            }
        });
}
