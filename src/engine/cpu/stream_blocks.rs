//! The streamed MTTKRP of a short mode in blocks of the long mode's rows
//! ([`StreamBlocks`]).
//!
//! [`super::mttkrp_stream`] visits the long mode's rows in order and adds each
//! nonzero's product into its row of the short target's output: one read-modify-write
//! of an output row per nonzero. On a one-long-mode tensor (1.5 M rows of about five
//! nonzeros each) those were most of the time; a C model of that loop ran at about
//! 40 % of the memory's speed.
//!
//! Here the long mode's rows are cut into blocks whose factor rows fill half of one
//! core's L2 ([`block_rows`]), and within a block the nonzeros are sorted by their
//! target row (stable, so each target row keeps the long mode's order): a run of a
//! block's nonzeros with the same target row is summed in registers, and the output
//! row is read and written once per run. The block's factor rows are read at random
//! but from cache: while a block is summed, the rows in use of the next one are
//! prefetched, a few per run. On longmode7m (rank 32, two threads) the model's
//! streamed modes took 30–33 ms instead of 39–46 ms, and on long4m 45–49 ms instead
//! of 62–66 ms, with 6 to 15 nonzeros per run.
//!
//! The form is a copy of the long mode's groups, reordered (the other indices and the
//! value per nonzero: as many bytes), plus 8 bytes per run. It is built at the first
//! call that streams a mode, where it fits in a quarter of the available memory
//! (else that call streams the long mode's groups as before), and counted in the
//! memory plans ([`blocks_bytes`]).
//!
//! The blocks are cut into [`super::mttkrp_stream::CHUNKS`] ranges of about equal
//! nonzero counts, each summed into its own copy of the output, added in range order;
//! block sizes and ranges follow the tensor, the rank and the cache sizes, never the
//! thread count.

use super::cache_sizes::CacheSizes;
use super::factor_rows::{row, row_mut};
use super::mttkrp_stream::{CHUNKS, chunk_bounds, streamed_by};
use super::output_copies::{OutputCopy, part_nonzeros, parts, sum_in_copies};
use super::row_groups::RowGroups;
use super::runs::{in_runs, in_runs_any};
use super::walk::prefetch_row;
use crate::error::Result;
use crate::matrix::{Matrix, check_alloc};
use rayon::prelude::*;
use std::sync::Mutex;

/// How many nonzeros ahead the rows of remaining factors larger than the cache are
/// prefetched (as in the unblocked order).
const LOOKAHEAD: usize = 16;

/// Rows of the long mode per block at rank `rank`: those whose factor rows fill half of
/// one core's L2 (the other half holds the output and the short factors' rows in use),
/// at least 16.
pub(super) fn block_rows(rank: usize, cache: CacheSizes) -> usize {
    (cache.l2 / 2 / (4 * rank.max(1))).max(16)
}

/// Most runs a mode's blocks can hold: one per nonzero, or one per target row and
/// block, whichever is fewer.
fn most_runs(dims: &[usize], long: usize, mode: usize, nnz: usize, rows: usize) -> usize {
    nnz.min(dims[long].div_ceil(rows.max(1)).saturating_mul(dims[mode]))
}

/// Bytes of the blocked forms MTTKRP at rank `rank` builds for `modes` (those that
/// stream a long mode's order): per mode the other indices and the value of each
/// nonzero, and at most [`most_runs`] runs of 8 bytes. What the memory plans count.
pub fn blocks_bytes(
    dims: &[usize],
    nnz: usize,
    rank: usize,
    cache: CacheSizes,
    modes: impl IntoIterator<Item = usize>,
) -> u128 {
    let rows = block_rows(rank, cache);
    modes
        .into_iter()
        .filter_map(|m| streamed_by(dims, m, rank, cache).map(|long| (m, long)))
        .map(|(m, long)| {
            let per_nnz = 4 * dims.len() as u128;
            let runs = most_runs(dims, long, m, nnz, rows) as u128;
            (nnz as u128).saturating_mul(per_nnz) + runs.saturating_mul(8)
        })
        .sum()
}

/// A short mode's nonzeros in blocks of the long mode's rows, each block's sorted by
/// the target row.
pub(super) struct StreamBlocks {
    /// The long mode's rows per block.
    rows: usize,
    /// Block `b`'s nonzeros start at `starts[b]` (and the last entry is their count).
    starts: Vec<usize>,
    /// Block `b`'s runs are `run_ptr[b]..run_ptr[b + 1]`.
    run_ptr: Vec<usize>,
    /// Per run, the target row and the count of its nonzeros.
    runs: Vec<[u32; 2]>,
    /// Per nonzero, the long mode's row, then the rest's indices in mode order
    /// (`order − 1` in all).
    idx: Vec<u32>,
    /// Per nonzero, its value.
    values: Vec<f32>,
    /// Output copy `c` sums blocks `bounds[c]..bounds[c + 1]`.
    bounds: Vec<usize>,
}

impl StreamBlocks {
    /// The blocked form of `mode`'s MTTKRP from `groups`, those of the long mode
    /// `long`, with `rows` of its rows per block; `None` where it would not fit in a
    /// quarter of the available memory.
    pub(super) fn build(
        groups: &RowGroups,
        dims: &[usize],
        long: usize,
        mode: usize,
        rows: usize,
    ) -> Result<Option<Self>> {
        let d = dims.len() - 1;
        let ptr = groups.ptr();
        let nnz = ptr[dims[long]];
        let need =
            nnz as u128 * (4 * d as u128 + 4) + most_runs(dims, long, mode, nnz, rows) as u128 * 8;
        let budget = crate::matrix::available_memory().map_or(u64::MAX, |a| a / 4);
        if need > budget as u128 {
            return Ok(None);
        }
        check_alloc("the streamed MTTKRP's blocks", nnz, d + 1, 4)?;
        let blocks = dims[long].div_ceil(rows.max(1));
        let starts: Vec<usize> = (0..=blocks)
            .map(|b| ptr[(b * rows).min(dims[long])])
            .collect();
        // The target's position among a nonzero's other indices.
        let target = if mode < long { mode } else { mode - 1 };
        let mut idx = vec![0u32; nnz * d];
        let mut values = vec![0f32; nnz];
        let idx_parts = split_at_starts(&mut idx, &starts, d);
        let value_parts = split_at_starts(&mut values, &starts, 1);
        let (others, xs) = (groups.others(), groups.values());
        let block_runs: Vec<Vec<[u32; 2]>> = idx_parts
            .into_par_iter()
            .zip(value_parts)
            .enumerate()
            .map_init(
                || vec![0usize; dims[mode] + 1],
                |count, (b, (idx, values))| {
                    // A counting sort of the block's nonzeros by target row.
                    count.fill(0);
                    let (l0, l1) = (b * rows, ((b + 1) * rows).min(dims[long]));
                    let (s, e) = (ptr[l0], ptr[l1]);
                    for ix in others[s * d..e * d].chunks_exact(d) {
                        count[ix[target] as usize + 1] += 1;
                    }
                    let mut runs = Vec::new();
                    for t in 0..dims[mode] {
                        let mut n = count[t + 1];
                        while n > 0 {
                            let part = n.min(u32::MAX as usize);
                            runs.push([t as u32, part as u32]);
                            n -= part;
                        }
                        count[t + 1] += count[t];
                    }
                    for l in l0..l1 {
                        for n in ptr[l]..ptr[l + 1] {
                            let ix = &others[n * d..(n + 1) * d];
                            let t = ix[target] as usize;
                            let at = count[t];
                            count[t] += 1;
                            let dst = &mut idx[at * d..(at + 1) * d];
                            dst[0] = l as u32;
                            let rest = ix.iter().enumerate().filter(|&(p, _)| p != target);
                            for (o, (_, &i)) in dst[1..].iter_mut().zip(rest) {
                                *o = i;
                            }
                            values[at] = xs[n];
                        }
                    }
                    runs
                },
            )
            .collect();
        let mut run_ptr = Vec::with_capacity(blocks + 1);
        run_ptr.push(0);
        for r in &block_runs {
            run_ptr.push(run_ptr.last().copied().unwrap_or(0) + r.len());
        }
        let runs = block_runs.concat();
        let bounds = chunk_bounds(&starts);
        debug_assert_eq!(bounds.len(), CHUNKS + 1);
        Ok(Some(StreamBlocks {
            rows,
            starts,
            run_ptr,
            runs,
            idx,
            values,
            bounds,
        }))
    }

    /// Bytes of the form: what a call reads besides the factors.
    pub(super) fn bytes(&self) -> usize {
        4 * (self.idx.len() + self.values.len() + 2 * self.runs.len())
            + 8 * (self.starts.len() + self.run_ptr.len())
    }

    /// MTTKRP of `mode` into `out` (every entry overwritten): `own` the long mode's
    /// factor, `w` its and the rest's columns (`out`'s, or a compiled width they are
    /// padded to with zero columns), and `long_ptr` its groups' row offsets (to prefetch
    /// only rows in use),
    /// `rest` the other factors in mode order, `pool` the output copies kept between
    /// calls. With `look` the rest's rows are prefetched [`LOOKAHEAD`] nonzeros ahead;
    /// with `wide` (the CPU has AVX-512F) the same sums run on 512-bit registers (the
    /// same operations per column: the same bits).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        &self,
        own: &[f32],
        w: usize,
        long_ptr: &[usize],
        rest: &[&[f32]],
        out: &mut Matrix,
        pool: &Mutex<Vec<OutputCopy>>,
        look: bool,
        wide: bool,
    ) {
        let r = w;
        // The sums read factor rows unchecked: every index is below its mode's length
        // (a validated tensor), and `RowMttkrp::run` asserted every factor's and the
        // output's shape; the long mode's rows and offsets are checked here.
        assert!(
            own.len() >= (long_ptr.len() - 1) * r
                && self.idx.len() == self.values.len() * (rest.len() + 1)
        );
        let min = part_nonzeros(out.rows());
        let parts_of = |c: usize| parts(&self.starts, (self.bounds[c], self.bounds[c + 1]), min);
        sum_in_copies(CHUNKS, pool, out, w, parts_of, |blocks, copy| {
            if !self.specialized(blocks, r, own, long_ptr, rest, look, wide, copy) {
                self.sum_any(blocks, r, own, rest, copy);
            }
        });
    }

    /// Runs [`StreamBlocks::sum`] specialized for the rank and the order; `false`
    /// where no specialization exists.
    #[allow(clippy::too_many_arguments)]
    fn specialized(
        &self,
        blocks: (usize, usize),
        r: usize,
        own: &[f32],
        long_ptr: &[usize],
        rest: &[&[f32]],
        look: bool,
        wide: bool,
        out: &mut [f32],
    ) -> bool {
        macro_rules! by_rank {
            ($d:literal) => {{
                let mut facs: [&[f32]; $d] = [own; $d];
                facs[1..].copy_from_slice(rest);
                macro_rules! go {
                    ($r:literal, $look:literal) => {{
                        #[cfg(target_arch = "x86_64")]
                        if wide {
                            // SAFETY: `wide` is set only where the CPU has AVX-512F.
                            unsafe { self.sum_wide::<$r, $d, $look>(blocks, long_ptr, &facs, out) };
                            return true;
                        }
                        let _ = wide;
                        self.sum::<$r, $d, $look>(blocks, long_ptr, &facs, out)
                    }};
                }
                match (r, look) {
                    (8, false) => go!(8, false),
                    (16, false) => go!(16, false),
                    (32, false) => go!(32, false),
                    (48, false) => go!(48, false),
                    (64, false) => go!(64, false),
                    (8, true) => go!(8, true),
                    (16, true) => go!(16, true),
                    (32, true) => go!(32, true),
                    (48, true) => go!(48, true),
                    (64, true) => go!(64, true),
                    _ => return false,
                }
            }};
        }
        match rest.len() + 1 {
            2 => by_rank!(2),
            3 => by_rank!(3),
            4 => by_rank!(4),
            5 => by_rank!(5),
            _ => return false,
        }
        true
    }

    /// [`StreamBlocks::sum`] compiled for AVX-512F.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn sum_wide<const R: usize, const D: usize, const LOOK: bool>(
        &self,
        blocks: (usize, usize),
        long_ptr: &[usize],
        facs: &[&[f32]; D],
        out: &mut [f32],
    ) {
        self.sum::<R, D, LOOK>(blocks, long_ptr, facs, out)
    }

    /// Adds the nonzeros of blocks `blocks.0..blocks.1` into `out` at rank `R`, `D`
    /// indices per nonzero (`facs[0]` the long mode's factor, then the rest's): per run
    /// the sum of each nonzero's value times its factor rows, added to the run's target
    /// row. The next block's rows in use are prefetched a few per run.
    #[inline(always)]
    fn sum<const R: usize, const D: usize, const LOOK: bool>(
        &self,
        blocks: (usize, usize),
        long_ptr: &[usize],
        facs: &[&[f32]; D],
        out: &mut [f32],
    ) {
        let end = self.starts[blocks.1];
        let (ixs, _) = self.idx[..end * D].as_chunks::<D>();
        let xs = &self.values[..end];
        let long_rows = long_ptr.len() - 1;
        for b in blocks.0..blocks.1 {
            // The next block's rows, also past this part's last block (parts of a range
            // follow one another).
            let (mut next, next_end) = match (b + 1) * self.rows < long_rows {
                true => ((b + 1) * self.rows, ((b + 2) * self.rows).min(long_rows)),
                false => (0, 0),
            };
            let runs = &self.runs[self.run_ptr[b]..self.run_ptr[b + 1]];
            let per = (next_end - next).div_ceil(runs.len().max(1));
            let mut n = self.starts[b];
            for &[t, len] in runs {
                let stop = (next + per).min(next_end);
                while next < stop {
                    if long_ptr[next + 1] > long_ptr[next] {
                        // SAFETY: `next` is a row of the long mode (asserted in `run`).
                        prefetch_row(unsafe { row::<R>(facs[0], next) });
                    }
                    next += 1;
                }
                // A long run (a dense target row) in runs of f32 sums added in f64.
                let n0 = n;
                let acc = in_runs::<R>(len as usize, |s, e| {
                    let mut acc = [0f32; R];
                    for n in n0 + s..n0 + e {
                        debug_assert!(n < end, "runs within their block");
                        // SAFETY: the runs of blocks below `blocks.1` count their
                        // nonzeros, which end at `end`; every index names a row of its
                        // factor (`run`).
                        let (ix, x) = unsafe { (ixs.get_unchecked(n), *xs.get_unchecked(n)) };
                        if LOOK && let Some(ahead) = ixs.get(n + LOOKAHEAD) {
                            for p in 1..D {
                                let i = ahead[p] as usize;
                                if let Some(row) = facs[p].get(i * R..(i + 1) * R) {
                                    prefetch_row(row);
                                }
                            }
                        }
                        let a = unsafe { row::<R>(facs[0], ix[0] as usize) };
                        let mut k = [0f32; R];
                        for (kc, &ac) in k.iter_mut().zip(a) {
                            *kc = x * ac;
                        }
                        for p in 1..D {
                            let f = unsafe { row::<R>(facs[p], ix[p] as usize) };
                            for (kc, &fc) in k.iter_mut().zip(f) {
                                *kc *= fc;
                            }
                        }
                        for (s, &kc) in acc.iter_mut().zip(&k) {
                            *s += kc;
                        }
                    }
                    acc
                });
                n += len as usize;
                // SAFETY: the target row is below the output's rows (`run`'s caller).
                let o = unsafe { row_mut::<R>(out, t as usize) };
                for (oc, &s) in o.iter_mut().zip(&acc) {
                    *oc += s;
                }
            }
        }
    }

    /// [`StreamBlocks::sum`] at any rank and order (`own` the long mode's factor).
    fn sum_any(
        &self,
        blocks: (usize, usize),
        r: usize,
        own: &[f32],
        rest: &[&[f32]],
        out: &mut [f32],
    ) {
        let d = rest.len() + 1;
        let (mut k, mut acc) = (vec![0f32; r], vec![0f32; r]);
        for b in blocks.0..blocks.1 {
            let mut n = self.starts[b];
            for &[t, len] in &self.runs[self.run_ptr[b]..self.run_ptr[b + 1]] {
                in_runs_any(len as usize, &mut acc, |s, e, acc| {
                    acc.fill(0.0);
                    for n in n + s..n + e {
                        let (ix, x) = (&self.idx[n * d..(n + 1) * d], self.values[n]);
                        let l = ix[0] as usize;
                        for (kc, &ac) in k.iter_mut().zip(&own[l * r..(l + 1) * r]) {
                            *kc = x * ac;
                        }
                        for (f, &i) in rest.iter().zip(&ix[1..]) {
                            let i = i as usize;
                            for (kc, &fc) in k.iter_mut().zip(&f[i * r..(i + 1) * r]) {
                                *kc *= fc;
                            }
                        }
                        for (s, &kc) in acc.iter_mut().zip(&k) {
                            *s += kc;
                        }
                    }
                });
                n += len as usize;
                let t = t as usize;
                for (oc, &s) in out[t * r..(t + 1) * r].iter_mut().zip(&acc) {
                    *oc += s;
                }
            }
        }
    }
}

/// `v` (`width` entries per nonzero) split into the blocks' parts: block `b` the
/// nonzeros `starts[b]..starts[b + 1]`.
fn split_at_starts<'a, T>(mut v: &'a mut [T], starts: &[usize], width: usize) -> Vec<&'a mut [T]> {
    let mut parts = Vec::with_capacity(starts.len().saturating_sub(1));
    for w in starts.windows(2) {
        let (part, rest) = v.split_at_mut((w[1] - w[0]) * width);
        parts.push(part);
        v = rest;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::super::mttkrp_rows::RowMttkrp;
    use super::super::mttkrp_stream::{larger_than_llc, streamed_by};
    use super::*;

    /// With a last-level cache too small for any factor and a large L2, every mode
    /// streams its longest neighbour's order, prefetching the other factors' rows; with
    /// one too small for the long factor only, the short modes stream it without
    /// prefetching; with both caches too small, every mode runs row by row, writing its
    /// output past the cache. Against the FP64 reference
    /// at every specialized rank and one other, orders 3 to 6, with and without dense
    /// tiles, on 1 and 3 workers, and the same result whatever the worker count.
    #[test]
    fn streamed_modes_match_the_reference_and_not_the_thread_count() {
        use crate::accuracy::compare;
        use crate::tensor::generate::Pattern;
        let streams = CacheSizes {
            l2: 1 << 30,
            llc: 0,
        };
        let none = CacheSizes { l2: 0, llc: 0 };
        // The long factors miss this one and the short ones fit (except case 2's at
        // rank 5, which runs row by row): streamed without prefetching.
        let mid = CacheSizes {
            l2: 1 << 30,
            llc: 12_000,
        };
        // An L2 of 4 KiB: the short modes stream at ranks up to 16 (case 0) in blocks
        // of 64 or 32 long rows (`stream_blocks`), many runs per block.
        let small = CacheSizes { l2: 4096, llc: 0 };
        let cases: Vec<(Vec<usize>, usize, Pattern, u32)> = vec![
            (
                vec![37, 45, 2900],
                6000,
                Pattern::PowerLaw { alpha: 1.0 },
                u32::MAX,
            ),
            (
                vec![60, 50, 400],
                9000,
                Pattern::BlockDense {
                    tile_nnz: 300,
                    dense_share: 0.6,
                },
                16,
            ),
            (vec![20, 900, 9, 7], 3000, Pattern::Uniform, u32::MAX),
            (vec![9, 700, 5, 6, 4], 3000, Pattern::Uniform, u32::MAX),
            (vec![7, 500, 4, 3, 5, 3], 2500, Pattern::Uniform, u32::MAX),
        ];
        for (k, (dims, nnz, pattern, threshold)) in cases.into_iter().enumerate() {
            let (x, hls) =
                super::super::generated_case(&dims, nnz, pattern, threshold, 40 + k as u64);
            // Grouped once, on one worker: the groups' order of nonzeros follows the
            // shares they were built from; what is checked here is the kernels'.
            let one = crate::pool_of(1);
            // The 3-worker runs take the AVX-512 rows where this CPU has them: the same
            // bits as the 1-worker AVX2 runs.
            let wide = |threads: usize| threads == 3 && super::super::avx512::available();
            for (rank, tiny) in [8, 16, 32, 64, 5, 10, 20, 40]
                .into_iter()
                .flat_map(|r| [(r, streams), (r, none), (r, mid), (r, small)])
            {
                let f = Matrix::random_factors(&dims, &vec![rank; dims.len()], 3);
                // A rank between the widths reads its factors padded to the next one
                // (as the backend passes them; the output at the rank).
                let w = super::super::padded::factor_width(rank, dims.len());
                let mut held = super::super::padded::PaddedFactors::default();
                held.refresh(&f, usize::MAX, w, None);
                let read = if w == rank { &f[..] } else { held.factors() };
                let mut rows = one.install(|| RowMttkrp::with_cache(&hls, tiny).unwrap().unwrap());
                // In blocks of the long mode's rows, and through its groups.
                let mut first: Vec<Matrix> = Vec::new();
                for (blocked, threads) in [(true, 1), (true, 3), (false, 1), (false, 3)] {
                    rows.block_streams = blocked;
                    if threads == 1 {
                        first.clear();
                    }
                    let pool = crate::pool_of(threads);
                    pool.install(|| {
                        for mode in 0..dims.len() {
                            let long = streamed_by(&dims, mode, w, tiny);
                            if tiny == small && k == 0 && mode < 2 && w <= 16 {
                                assert!(long.is_some(), "{dims:?} rank {rank} mode {mode}");
                            }
                            if tiny == streams || tiny == none {
                                assert_eq!(long.is_some(), tiny == streams);
                                assert!(larger_than_llc(&dims, mode, w, tiny));
                            } else if tiny == mid && mode == 0 && k != 1 {
                                assert!(long.is_some(), "{dims:?} rank {rank}");
                            }
                            let mut out = Matrix::from_fn(dims[mode], rank, |_, _| f32::NAN);
                            rows.run(mode, read, &mut out, wide(threads));
                            let want = crate::reference::mttkrp(&x, mode, &f).unwrap();
                            let acc = compare(&want, &out).unwrap();
                            assert!(
                                acc.within_contract(),
                                "{dims:?} rank {rank} mode {mode} {threads} threads, blocked {blocked}: {acc:?}"
                            );
                            if threads == 1 {
                                first.push(out);
                            } else {
                                assert_eq!(
                                    out, first[mode],
                                    "{dims:?} rank {rank} mode {mode} blocked {blocked}"
                                );
                            }
                        }
                    });
                }
            }
        }
    }
}
