//! Splitting the work and walking the HLS parts.

use super::fixed::Fixed;
use super::subnormal::FlushSubnormals;
use super::ttmc::TtmcWalker;
use super::walk::{Sink, Walker};
use crate::hls::values::with_values;
use crate::hls::{DenseTile, DenseTiles, HlsTensor, LOW_KEY_BITS, StoredValue, TILE_ORDER};
use crate::matrix::Matrix;
use crate::ops::Op;
use rayon::prelude::*;
use std::sync::Mutex;

/// How many nonzeros ahead the sparse walk prefetches rows.
const PREFETCH_AHEAD: usize = 12;

/// Floats of padding (one 64-byte cache line) around each private output buffer.
const PAD: usize = 16;

/// TTMc outputs of at least this many floats are split by rows between the workers
/// (see [`ttmc_by_rows`]) rather than summed from private copies: zeroing and summing
/// copies of a wide output cost more than decoding the stream once per worker.
const ROW_SPLIT_MIN_FLOATS: usize = 1 << 20;

/// Workers a walk of a tensor of `nnz` nonzeros uses on `threads` threads: one for a
/// tiny tensor (no private buffers).
fn walk_workers(nnz: usize, threads: usize) -> usize {
    if nnz < 4096 { 1 } else { threads.max(1) }
}

/// Whether `op`'s output of `rows` rows and `len` floats is cut by rows between the
/// workers instead of summed from private copies.
fn splits_by_rows(op: Op, workers: usize, rows: usize, len: usize) -> bool {
    op == Op::Ttmc && workers > 1 && len >= ROW_SPLIT_MIN_FLOATS && rows >= 64 * workers
}

/// Floats of each private output (padding included) a walk of `op` into a `rows ×
/// cols` output holds per worker but the first, on `threads` threads, for a tensor of
/// `nnz` nonzeros: 0 where one worker walks or the output is cut by rows. What the
/// memory plan counts for the walk.
pub fn private_output_floats(
    op: Op,
    nnz: usize,
    threads: usize,
    rows: usize,
    cols: usize,
) -> usize {
    let workers = walk_workers(nnz, threads);
    let len = rows.saturating_mul(cols);
    if workers < 2 || splits_by_rows(op, workers, rows, len) {
        return 0;
    }
    PAD + len + PAD
}

/// A worker's share: a range of sparse nonzeros and a range of dense tiles.
pub(super) struct Share {
    pub(super) sparse: (usize, usize),
    pub(super) tiles: (usize, usize),
}

/// Cuts both parts into `n` shares of about equal nonzero counts.
pub(super) fn shares(hls: &HlsTensor, n: usize) -> Vec<Share> {
    let s = hls.sparse().nnz();
    let (tiles, offsets) = hls
        .dense()
        .map_or((0, &[0u32][..]), |d| (d.len(), d.offsets()));
    let dense_nnz = *offsets.last().unwrap_or(&0) as usize;
    (0..n)
        .map(|w| {
            let tile_at = |k: usize| {
                let target = dense_nnz * k / n;
                offsets[..tiles].partition_point(|&o| (o as usize) < target)
            };
            Share {
                sparse: (s * w / n, s * (w + 1) / n),
                tiles: (tile_at(w), if w + 1 == n { tiles } else { tile_at(w + 1) }),
            }
        })
        .collect()
}

/// `op` of `mode` into `out` (zeroed), on rayon's current pool.
pub(super) fn run(
    op: Op,
    hls: &HlsTensor,
    mode: usize,
    factors: &[Matrix],
    out: &mut Matrix,
    pool: &Mutex<Vec<Vec<f32>>>,
) {
    let cols = out.cols();
    let workers = walk_workers(hls.nnz(), rayon::current_num_threads());
    if splits_by_rows(op, workers, out.rows(), out.data().len()) {
        return ttmc_by_rows(hls, mode, factors, out, workers);
    }
    let shares = shares(hls, workers);
    let (first, rest) = shares.split_first().expect("at least one share");
    // Private outputs come from a pool kept across calls: fresh allocations of this size
    // are mapped pages whose first-touch faults cost more than the walk on small tensors.
    let len = out.data().len();
    let mut private: Vec<Vec<f32>> = {
        let mut free = pool.lock().unwrap_or_else(|e| e.into_inner());
        (0..rest.len())
            .map(|_| free.pop().unwrap_or_default())
            .collect()
    };
    rayon::scope(|s| {
        let out0 = out.data_mut();
        for (share, buf) in rest.iter().zip(private.iter_mut()) {
            s.spawn(move |_| {
                // Zeroed by the thread that walks into it, so its lines start in that
                // core's cache rather than being pulled over from the zeroing core
                // (that transfer made 2 threads slower than 1 on movielens-100k's
                // larger modes). Padded by a cache line on both sides: the first and
                // last rows of a small output otherwise share a line with whatever
                // the allocator put next to it, which another core may be writing.
                buf.clear();
                buf.resize(PAD + len + PAD, 0.0);
                walk_share(
                    op,
                    hls,
                    mode,
                    factors,
                    share,
                    &mut buf[PAD..PAD + len],
                    cols,
                )
            });
        }
        walk_share(op, hls, mode, factors, first, out0, cols);
    });
    if !private.is_empty() {
        let chunk = cols * 256;
        out.data_mut()
            .par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(k, o)| {
                let _flush = FlushSubnormals::new();
                for b in &private {
                    for (x, y) in o.iter_mut().zip(&b[PAD + k * chunk..]) {
                        *x += y;
                    }
                }
            });
    }
    pool.lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(private);
}

/// TTMc with the output rows cut into one range per worker, each of about the same
/// number of nonzeros. When the target is the keys' most significant field its rows are
/// contiguous runs of the sorted stream, and each worker walks just its run; otherwise
/// every worker walks the whole stream and keeps the nonzeros of its rows.
fn ttmc_by_rows(
    hls: &HlsTensor,
    mode: usize,
    factors: &[Matrix],
    out: &mut Matrix,
    workers: usize,
) {
    let (rows, cols) = out.shape();
    let sp = hls.sparse();
    let nnz = sp.nnz();
    let tiles = (0, hls.dense().map_or(0, |d| d.len()));
    let levels: Vec<usize> = (0..hls.order()).collect();
    let leading = sp.layout().levels()[0] == mode;
    let row_at = |p: usize| sp.layout().decode(sp.full_key(sp.block_of(p), p), mode) as usize;
    let mut bounds = vec![0usize];
    if leading {
        for w in 1..workers {
            let p = nnz * w / workers;
            let r = if p < nnz { row_at(p) } else { rows };
            bounds.push(r.max(bounds[w - 1]));
        }
    } else {
        let all = Share {
            sparse: (0, nnz),
            tiles,
        };
        let mut counts = vec![0u64; rows];
        stream(
            hls,
            &all,
            &levels,
            &mut CountRows {
                mode,
                counts: &mut counts,
            },
        );
        let total: u64 = counts.iter().sum();
        let mut seen = 0u64;
        for (i, &c) in counts.iter().enumerate() {
            seen += c;
            let k = bounds.len() as u64;
            if k < workers as u64 && seen * workers as u64 >= total * k {
                bounds.push(i + 1);
            }
        }
    }
    bounds.push(rows);
    // The first sparse position whose target coordinate is at least `row` (used only
    // when the stream is sorted by the target).
    let first_at = |row: usize| {
        let (mut lo, mut hi) = (0, nnz);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if row_at(mid) < row {
                lo = mid + 1
            } else {
                hi = mid
            }
        }
        lo
    };
    let mut parts = Vec::with_capacity(workers);
    let mut rest = out.data_mut();
    for w in bounds.windows(2) {
        let (part, tail) = rest.split_at_mut((w[1] - w[0]) * cols);
        let sparse = if leading {
            (first_at(w[0]), first_at(w[1]))
        } else {
            (0, nnz)
        };
        parts.push((w[0], part, Share { sparse, tiles }));
        rest = tail;
    }
    parts.into_par_iter().for_each(|(first, part, share)| {
        let _flush = FlushSubnormals::new();
        let first = u32::try_from(first).expect("rows of a mode fit its u32 coordinates");
        let f = factors.iter().collect();
        stream(
            hls,
            &share,
            &levels,
            &mut TtmcWalker::new(mode, f, part, cols, first),
        );
    });
}

/// Counts the nonzeros of every coordinate of one mode.
struct CountRows<'a> {
    mode: usize,
    counts: &'a mut [u64],
}

impl Sink for CountRows<'_> {
    #[inline]
    fn push(&mut self, c: &[u32], _v: f32) {
        self.counts[c[self.mode] as usize] += 1;
    }
    fn finish(&mut self) {}
}

fn walk_share(
    op: Op,
    hls: &HlsTensor,
    mode: usize,
    factors: &[Matrix],
    share: &Share,
    out: &mut [f32],
    cols: usize,
) {
    let _flush = FlushSubnormals::new();
    let order = hls.order();
    // MTTKRP walks the levels in key order (for MTTKRP forms shortest mode first, see
    // `KeyOrder`): its Hadamard products do not care which mode comes first. TTMc walks
    // in mode order, since its output columns are the Kronecker product in that order
    // (its forms are built in that order); any stream order is correct, a sorted one
    // shares the most work.
    let levels: Vec<usize> = match op {
        Op::Mttkrp | Op::Completion | Op::Phi => hls.sparse().layout().levels().to_vec(),
        Op::Ttmc => (0..order).collect(),
    };
    let target = levels
        .iter()
        .position(|&m| m == mode)
        .expect("mode checked against the order");
    // One instantiation per order, rank and target level (see `Fixed`).
    macro_rules! fixed {
        ($n:literal, $r:literal, $($l:literal)+) => {{
            let lv: [usize; $n] = std::array::from_fn(|k| levels[k]);
            let f: [&[f32]; $n] = std::array::from_fn(|k| factors[lv[k]].data());
            match target {
                $($l => stream_fixed(hls, share, lv, Fixed::<$n, $r, $l>::new(f, out)),)+
                _ => unreachable!("target level checked against the order"),
            }
        }};
    }
    match (op, order, cols) {
        (Op::Mttkrp, 3, 8) => fixed!(3, 8, 0 1 2),
        (Op::Mttkrp, 3, 16) => fixed!(3, 16, 0 1 2),
        (Op::Mttkrp, 3, 32) => fixed!(3, 32, 0 1 2),
        (Op::Mttkrp, 3, 64) => fixed!(3, 64, 0 1 2),
        (Op::Mttkrp, 4, 8) => fixed!(4, 8, 0 1 2 3),
        (Op::Mttkrp, 4, 16) => fixed!(4, 16, 0 1 2 3),
        (Op::Mttkrp, 4, 32) => fixed!(4, 32, 0 1 2 3),
        (Op::Mttkrp, 4, 64) => fixed!(4, 64, 0 1 2 3),
        (Op::Mttkrp, 5, 8) => fixed!(5, 8, 0 1 2 3 4),
        (Op::Mttkrp, 5, 16) => fixed!(5, 16, 0 1 2 3 4),
        (Op::Mttkrp, 5, 32) => fixed!(5, 32, 0 1 2 3 4),
        (Op::Mttkrp, 5, 64) => fixed!(5, 64, 0 1 2 3 4),
        (Op::Mttkrp, 6, 8) => fixed!(6, 8, 0 1 2 3 4 5),
        (Op::Mttkrp, 6, 16) => fixed!(6, 16, 0 1 2 3 4 5),
        (Op::Mttkrp, 6, 32) => fixed!(6, 32, 0 1 2 3 4 5),
        (Op::Mttkrp, 6, 64) => fixed!(6, 64, 0 1 2 3 4 5),
        (Op::Ttmc, ..) => {
            let f = factors.iter().collect();
            stream(
                hls,
                share,
                &levels,
                &mut TtmcWalker::new(mode, f, out, cols, 0),
            )
        }
        _ => {
            let f = levels.iter().map(|&m| &factors[m]).collect();
            stream(hls, share, &levels, &mut Walker::new(target, f, out, cols))
        }
    }
}

/// Feeds `sink` the nonzeros of `share`: sparse part in key order, then dense tiles in
/// tile and bitmap order. Values are widened from their stored type (fp16 or f32), not
/// scaled (the backend multiplies the result by the tensor's scale once). Coordinates
/// are pushed in `levels` order (`c[k]` is the coordinate of mode `levels[k]`).
pub(super) fn stream(hls: &HlsTensor, share: &Share, levels: &[usize], sink: &mut impl Sink) {
    with_values!(hls.sparse().values(), |vals| {
        stream_as(hls, vals, share, levels, sink)
    })
}

/// [`stream`] with the values of their stored type `V` (`vals`: the sparse part's).
fn stream_as<V: StoredValue>(
    hls: &HlsTensor,
    vals: &[V],
    share: &Share,
    levels: &[usize],
    sink: &mut impl Sink,
) {
    let sp = hls.sparse();
    let (s, e) = share.sparse;
    if s < e {
        let layout = sp.layout();
        let order = hls.order();
        let shifts: Vec<u32> = levels.iter().map(|&m| layout.shifts()[m]).collect();
        let masks: Vec<u64> = levels.iter().map(|&m| layout.mask(m)).collect();
        let mut wide = vec![0u32; order];
        let mut c = vec![0u32; order];
        let mut ahead = vec![0u32; order];
        let prefetch = sink.wants_prefetch();
        let (keys, offs) = (sp.keys(), sp.block_offsets());
        let mut b = sp.block_of(s);
        let mut p = s;
        while p < e {
            let end = (offs[b + 1] as usize).min(e);
            let prefix = sp.block_prefix()[b];
            if layout.total_bits() <= 64 {
                let hi = prefix << LOW_KEY_BITS;
                let decode = |k: u32, c: &mut [u32]| {
                    let key = hi | k as u64;
                    for ((cm, &sh), &mk) in c.iter_mut().zip(&shifts).zip(&masks) {
                        *cm = ((key >> sh) & mk) as u32;
                    }
                };
                for (q, (&k, &v)) in (p..end).zip(keys[p..end].iter().zip(&vals[p..end])) {
                    // Rows of the nonzero PREFETCH_AHEAD places on are loaded while this
                    // one is computed: the random factor/output rows are what costs.
                    if prefetch && let Some(&ka) = keys[..end].get(q + PREFETCH_AHEAD) {
                        decode(ka, &mut ahead);
                        sink.prefetch(&ahead);
                    }
                    decode(k, &mut c);
                    sink.push(&c, v.to_f32());
                }
            } else {
                for (q, &v) in (p..end).zip(&vals[p..end]) {
                    layout.decode_all(sp.full_key(b, q), &mut wide);
                    for (ck, &m) in c.iter_mut().zip(levels) {
                        *ck = wide[m];
                    }
                    sink.push(&c, v.to_f32());
                }
            }
            p = end;
            b += 1;
        }
    }
    if let Some(d) = hls.dense() {
        let mut lc = vec![0u32; levels.len()];
        dense_nonzeros_of(d, d.values().typed::<V>(), share.tiles, |c, v| {
            for (ck, &m) in lc.iter_mut().zip(levels) {
                *ck = c[m];
            }
            sink.push(&lc, v)
        });
    }
    sink.finish();
}

/// [`stream`] for the order-`N` specialized walker: the same nonzeros in the same order,
/// with coordinates decoded in `levels` order into a `[u32; N]` that stays in registers. (Decoding into a
/// slice and reading it back as an array stalled on store forwarding: four-byte stores
/// read by a wider load; it was a fifth of the walk's time.)
fn stream_fixed<const N: usize, const R: usize, const M: usize>(
    hls: &HlsTensor,
    share: &Share,
    levels: [usize; N],
    sink: Fixed<'_, N, R, M>,
) {
    with_values!(hls.sparse().values(), |vals| {
        stream_fixed_as(hls, vals, share, levels, sink)
    })
}

/// [`stream_fixed`] with the values of their stored type `V` (`vals`: the sparse
/// part's).
fn stream_fixed_as<V: StoredValue, const N: usize, const R: usize, const M: usize>(
    hls: &HlsTensor,
    vals: &[V],
    share: &Share,
    levels: [usize; N],
    mut sink: Fixed<'_, N, R, M>,
) {
    // `sink` is owned here (not behind a reference) so that, its address never
    // escaping, its rows can be kept in registers across the stores to the output.
    let sp = hls.sparse();
    let (s, e) = share.sparse;
    if s < e {
        let layout = sp.layout();
        let shifts: [u32; N] = std::array::from_fn(|k| layout.shifts()[levels[k]]);
        let masks: [u64; N] = std::array::from_fn(|k| layout.mask(levels[k]));
        let prefetch = sink.wants_prefetch();
        // Key bits of every level but the leaf: two keys equal there are one fiber.
        let (leaf_shift, leaf_mask) = (shifts[N - 1], masks[N - 1]);
        let fiber_mask = !(leaf_mask << leaf_shift);
        let (keys, offs) = (sp.keys(), sp.block_offsets());
        let mut b = sp.block_of(s);
        let mut p = s;
        let mut wide = [0u32; N];
        while p < e {
            let end = (offs[b + 1] as usize).min(e);
            let prefix = sp.block_prefix()[b];
            if layout.total_bits() <= 64 {
                let hi = prefix << LOW_KEY_BITS;
                let decode = |k: u32| -> [u32; N] {
                    let key = hi | k as u64;
                    std::array::from_fn(|m| ((key >> shifts[m]) & masks[m]) as u32)
                };
                let (ks, vs) = (&keys[p..end], &vals[p..end]);
                let mut q = 0;
                while q < ks.len() {
                    let k = ks[q];
                    if prefetch && let Some(&ka) = ks.get(q + PREFETCH_AHEAD) {
                        sink.prefetch(&decode(ka));
                    }
                    sink.push_array(decode(k), vs[q].to_f32());
                    q += 1;
                    // The rest of this fiber (same key outside the leaf's field; the
                    // block prefix is common to the whole block): leaf-only pushes.
                    while let Some(&kn) = ks.get(q)
                        && (kn ^ k) as u64 & fiber_mask == 0
                    {
                        if prefetch && let Some(&ka) = ks.get(q + PREFETCH_AHEAD) {
                            sink.prefetch(&decode(ka));
                        }
                        let leaf = (((hi | kn as u64) >> leaf_shift) & leaf_mask) as u32;
                        sink.push_leaf(leaf, vs[q].to_f32());
                        q += 1;
                    }
                }
            } else {
                for (q, &v) in (p..end).zip(&vals[p..end]) {
                    layout.decode_all(sp.full_key(b, q), &mut wide);
                    sink.push_array(std::array::from_fn(|k| wide[levels[k]]), v.to_f32());
                }
            }
            p = end;
            b += 1;
        }
    }
    // Dense tiles exist for tensors of the tile order only.
    if let Some(d) = hls.dense().filter(|_| N == TILE_ORDER) {
        dense_nonzeros_of(d, d.values().typed::<V>(), share.tiles, |c, v| {
            sink.push_array(std::array::from_fn(|k| c[levels[k]]), v)
        });
    }
    sink.finish();
}

/// Calls `f` with the coordinates and value (as stored: the caller multiplies the
/// result by the tensor's scale) of every nonzero of the dense tiles
/// `tiles.0..tiles.1`, in tile and bitmap order.
#[inline(always)]
pub(super) fn dense_nonzeros(
    d: &DenseTiles,
    tiles: (usize, usize),
    f: impl FnMut([u32; TILE_ORDER], f32),
) {
    with_values!(d.values(), |vals| dense_nonzeros_of(d, vals, tiles, f))
}

/// [`dense_nonzeros`] with `values`, the dense values of their stored type `V`.
#[inline(always)]
fn dense_nonzeros_of<V: StoredValue>(
    d: &DenseTiles,
    values: &[V],
    tiles: (usize, usize),
    mut f: impl FnMut([u32; TILE_ORDER], f32),
) {
    for t in tiles.0..tiles.1 {
        let vals = &values[d.tile_range(t)];
        let mut v = 0;
        DenseTile::walk_cells(d.tile_origin(t), &d.bitmaps()[t], |c| {
            f(c, vals[v].to_f32());
            v += 1;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The floats the memory plan counts follow the walk's own choices: one worker for
    /// a tiny tensor or one thread, wide TTMc outputs cut by rows, padded copies else.
    #[test]
    fn private_outputs_follow_the_walks_choice() {
        assert_eq!(private_output_floats(Op::Ttmc, 100, 4, 10, 10), 0);
        assert_eq!(private_output_floats(Op::Ttmc, 10_000, 1, 10, 10), 0);
        assert_eq!(
            private_output_floats(Op::Ttmc, 10_000, 4, 10, 10),
            100 + 2 * PAD
        );
        let (rows, cols) = (1 << 12, 1 << 8);
        assert!(splits_by_rows(Op::Ttmc, 4, rows, rows * cols));
        assert_eq!(private_output_floats(Op::Ttmc, 10_000, 4, rows, cols), 0);
        // Too few rows per worker to cut: copies.
        assert_eq!(
            private_output_floats(Op::Ttmc, 10_000, 4, 100, 1 << 14),
            (100 << 14) + 2 * PAD
        );
        assert_eq!(
            private_output_floats(Op::Mttkrp, 10_000, 4, rows, cols),
            rows * cols + 2 * PAD
        );
    }
}
