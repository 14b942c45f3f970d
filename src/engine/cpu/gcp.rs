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
//! for every thread count too.

use crate::engine::gcp::{EntryLoss, GcpSample};
use crate::matrix::Matrix;
use rayon::prelude::*;

/// Entries per parallel chunk of the entry-parallel passes.
const CHUNK: usize = 2048;
/// Row blocks per mode of the gradient.
const BLOCKS: usize = 256;
/// Sample ranges of the gradient of a mode with few rows ([`mode_gradient_private`]).
const PRIVATE_CHUNKS: usize = 8;

/// `Σ_r Π_n A⁽ⁿ⁾[c_n, r]`: the rows multiplied element-wise (contiguous, so the
/// products vectorize), then summed in 4 interleaved partial sums (one chain of
/// `rank` dependent additions per entry cost more than the products).
#[inline]
fn model_value(c: &[u32], factors: &[&[f64]], rank: usize) -> f64 {
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
    grads: &mut [Matrix<f64>],
) -> f64 {
    let f = slices(factors);
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

/// Adds one entry's term of [`mode_gradient`], `y_k Π_{j≠mode} A⁽ʲ⁾[c_j, :]`, to
/// `out` (its row of the gradient); `prod` is scratch of the rank's length.
#[inline]
fn add_entry(out: &mut [f64], prod: &mut [f64], yk: f64, c: &[u32], f: &[&[f64]], mode: usize) {
    let rank = prod.len();
    prod.fill(yk);
    for (j, (fj, &i)) in f.iter().zip(c).enumerate() {
        if j != mode {
            let row = &fj[i as usize * rank..][..rank];
            prod.iter_mut().zip(row).for_each(|(p, &a)| *p *= a);
        }
    }
    out.iter_mut().zip(prod.iter()).for_each(|(o, &p)| *o += p);
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
