//! MTTKRP of a short mode that streams a long mode's factor instead of gathering it.
//!
//! Row by row ([`super::mttkrp_rows`]), the output row of a short mode (a few thousand
//! rows, each with thousands of nonzeros) gathers one row of every other factor per
//! nonzero. When another mode is long, its factor (1.5 M rows × rank 32 is 192 MB) is
//! far larger than the last-level cache and every such gather is a miss to memory: the
//! kernel then runs at a tenth of what the bytes it must move allow.
//!
//! Here the nonzeros are visited in the order of the long mode instead, through that
//! mode's own row groups (already built for its own MTTKRP: no extra form): each of
//! its rows is read once, in order, and multiplies the nonzeros of that row, whose
//! products are scattered into the short target's output. That output stays in cache,
//! and so do the factors of the remaining modes where they are short: every gather and
//! scatter hits cache, and the only memory traffic is the groups and the long factor,
//! streamed. Where a second mode is long too, its rows are still gathered at random
//! (prefetched ahead), but only its: row by row would gather both long factors'.
//!
//! The long mode's rows are cut into [`CHUNKS`] ranges of about equal nonzero counts,
//! fixed by the tensor (not the thread count); each range sums into its own copy of
//! the target's output, and the copies are added in range order, so results do not
//! depend on the thread count. Chosen per mode and rank by [`streamed_by`] from the
//! shape and the cache sizes ([`CacheSizes::of_this_machine`]).

use super::cache_sizes::CacheSizes;
use super::factor_rows;
use super::output_copies::{LINE_FLOATS, OutputCopy, part_nonzeros, parts, sum_in_copies};
use super::row_groups::RowGroups;
use crate::matrix::Matrix;
use std::sync::Mutex;

/// Ranges of the long mode's rows, each with its own copy of the output.
pub const CHUNKS: usize = 16;

/// How many nonzeros ahead the streamed order prefetches the rows of remaining factors
/// larger than the cache.
const LOOKAHEAD: usize = 16;

/// How far ahead of the row in use the long factor's rows are prefetched, in bytes.
///
/// Its rows are read in order, but a long mode's rows hold a few nonzeros each, so a
/// row's load comes soon after the last one: the stall on it was about a quarter of
/// the streamed sum's samples in `perf` (longmode7m, rank 32). The hardware's stream
/// prefetcher does not cross 4 KiB pages and ramps up on each. Asked 2 KiB ahead
/// (16 rows at rank 32), the streamed modes of two 3rd-order one-long-mode tensors
/// ran 17–32 % faster (a 4th-order one of 4 nonzeros per row: no change), and 8 or 24
/// rows ahead measured the same
/// (`bench/results/2026-11-29-cpu-mttkrp-huge-pages-prefetch-xeon`).
const OWN_AHEAD_BYTES: usize = 2048;

/// Rows of `r` floats of the long factor prefetched ahead: [`OWN_AHEAD_BYTES`] of them,
/// at least one row.
pub(super) const fn own_rows_ahead(r: usize) -> usize {
    let rows = OWN_AHEAD_BYTES / (4 * if r == 0 { 1 } else { r });
    if rows == 0 { 1 } else { rows }
}

/// The long factor's row to prefetch while on row `l` of the long mode (`ptr` its row
/// offsets, `k` rows ahead: [`own_rows_ahead`]): row `l + k` where it holds nonzeros,
/// else row `l` itself (loaded already: a no-op). A long mode's rows are often empty
/// (half of a 1.5 M-row power-law mode's, 72 % of a 4 M-row one's) and their factor
/// rows need not be read at all; prefetched regardless, they cost as much bandwidth as
/// the rows in use. Chosen without a branch, which would miss as often as rows are
/// empty.
#[inline(always)]
pub(super) fn own_row_to_prefetch(ptr: &[usize], l: usize, k: usize) -> usize {
    let a = l + k;
    match ptr.get(a + 1) {
        Some(&end) => l + k * usize::from(end > ptr[a]),
        None => l,
    }
}

/// The long mode whose rows MTTKRP of `mode` at rank `rank` visits in order, or `None`
/// to run row by row: the longest other mode, where its factor is larger than the
/// last-level cache while the target's output fits in one core's L2 (so that every
/// scatter into it hits cache, and its copies stay small).
///
/// The remaining factors need not fit: row by row gathers their rows at random as
/// well, besides the long factor's, so the streamed order gathers strictly fewer rows
/// from memory (with two long modes and a short target, one random row per nonzero
/// instead of two). Those larger than the last-level cache are prefetched ahead.
pub fn streamed_by(dims: &[usize], mode: usize, rank: usize, cache: CacheSizes) -> Option<usize> {
    if dims.len() < 3 {
        return None;
    }
    let long = (0..dims.len())
        .filter(|&m| m != mode)
        .max_by_key(|&m| (dims[m], std::cmp::Reverse(m)))?;
    let row = rank.saturating_mul(4);
    let long_bytes = dims[long].saturating_mul(row);
    let target_bytes = dims[mode].saturating_mul(row);
    (long_bytes > cache.llc && target_bytes <= cache.l2).then_some(long)
}

/// Adds to `plan` what the CPU's MTTKRP of each of `modes` at rank `rank` keeps where it
/// streams a long mode's order, on a tensor of extents `dims` with `nnz` nonzeros: the
/// output copies of the widest such mode (`streamed_mode_output_floats`) and those
/// modes' nonzeros in blocks of the long mode's rows
/// (`super::stream_blocks::blocks_bytes`). The one rule every plan of a CPU MTTKRP
/// (a fit, one kernel call, a rank's block) follows.
pub fn add_streamed_to_plan(
    plan: &mut crate::memplan::MemoryPlan,
    dims: &[usize],
    nnz: usize,
    rank: usize,
    modes: &[usize],
    cache: CacheSizes,
) {
    let floats = modes
        .iter()
        .map(|&m| streamed_mode_output_floats(dims, m, rank, cache))
        .max()
        .unwrap_or(0);
    if floats > 0 {
        plan.add(
            "the CPU's streamed MTTKRP output copies (f32, and their f64 sums)",
            floats as u128,
            12,
        );
    }
    let bytes = super::stream_blocks::blocks_bytes(dims, nnz, rank, cache, modes.iter().copied());
    if bytes > 0 {
        plan.add("the CPU's streamed MTTKRP blocks", bytes, 1);
    }
}

/// Floats of the output copies MTTKRP of `mode` alone at rank `rank` keeps: [`CHUNKS`]
/// copies of its output where it streams a long mode's order (each with room to start
/// on a cache line), else none. What the memory plan of one MTTKRP counts.
pub fn streamed_mode_output_floats(
    dims: &[usize],
    mode: usize,
    rank: usize,
    cache: CacheSizes,
) -> usize {
    match streamed_by(dims, mode, rank, cache) {
        // Rows of the width the factors run at (a rank between the compiled widths:
        // padded, `super::padded::factor_width`).
        Some(_) => CHUNKS.saturating_mul(
            (dims[mode].saturating_mul(super::padded::factor_width(rank, dims.len())))
                .saturating_add(LINE_FLOATS - 1),
        ),
        None => 0,
    }
}

/// Whether `mode`'s rows at rank `rank` (a factor or an MTTKRP output) are larger than
/// the last-level cache: such an output is written past the cache (non-temporal
/// stores, so that writing it does not first read every line of it in), and such a
/// factor's rows are prefetched ahead where they are gathered.
pub(super) fn larger_than_llc(dims: &[usize], mode: usize, rank: usize, cache: CacheSizes) -> bool {
    dims[mode].saturating_mul(rank).saturating_mul(4) > cache.llc
}

/// The long mode's rows cut into [`CHUNKS`] ranges of about equal nonzero counts:
/// `bounds[c]..bounds[c + 1]` (fixed by the tensor).
pub(super) fn chunk_bounds(ptr: &[usize]) -> Vec<usize> {
    let rows = ptr.len() - 1;
    let nnz = ptr[rows];
    let mut bounds = vec![0];
    for c in 1..CHUNKS {
        let target = nnz * c / CHUNKS;
        let r = ptr.partition_point(|&p| p < target).min(rows);
        bounds.push(r.max(*bounds.last().expect("starts with 0")));
    }
    bounds.push(rows);
    bounds
}

/// MTTKRP of `mode` into `out` (every entry overwritten) through `groups`, the row
/// groups of the long mode `long`, whose rows are cut at `bounds`; `pool` keeps the
/// output copies between calls. The factors are `out`'s columns wide, or padded with
/// zero columns to a compiled width (the copies are then rows of that width, of which
/// `out` takes the first columns). With `look`, the rows of the remaining factors are
/// prefetched [`LOOKAHEAD`] nonzeros ahead (for factors larger than the cache). With
/// `wide` (the CPU has AVX-512F) widths 16, 32, 48 and 64 run 16 columns per instruction.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    groups: &RowGroups,
    long: usize,
    bounds: &[usize],
    mode: usize,
    factors: &[Matrix],
    out: &mut Matrix,
    pool: &Mutex<Vec<OutputCopy>>,
    look: bool,
    wide: bool,
) {
    let r = factors[long].cols();
    // The other modes' indices in a group are in mode order without `long`: the
    // target's position among them, and the factors of the rest.
    let target = if mode < long { mode } else { mode - 1 };
    let rest: Vec<&[f32]> = (0..factors.len())
        .filter(|&m| m != long && m != mode)
        .map(|m| factors[m].data())
        .collect();
    let own = factors[long].data();
    let (ptr, min) = (groups.ptr(), part_nonzeros(out.rows()));
    let parts_of = |c: usize| parts(ptr, (bounds[c], bounds[c + 1]), min);
    sum_in_copies(bounds.len() - 1, pool, out, r, parts_of, |rows, copy| {
        let args = Chunk {
            ptr,
            others: groups.others(),
            values: groups.values(),
            own,
            rest: &rest,
            target,
            rows,
        };
        if !args.specialized(r, look, wide, copy) {
            args.sum_any(r, copy);
        }
    });
}

/// One range of the long mode's rows and what its sums read.
struct Chunk<'a> {
    ptr: &'a [usize],
    others: &'a [u32],
    values: &'a [f32],
    /// The long mode's factor.
    own: &'a [f32],
    /// The factors of the modes other than the long one and the target, in mode order.
    rest: &'a [&'a [f32]],
    /// The target's position among a nonzero's other indices.
    target: usize,
    /// The long mode's rows `rows.0..rows.1`.
    rows: (usize, usize),
}

impl Chunk<'_> {
    /// Runs [`Chunk::sum`] specialized for rank `r`, the number of other indices and
    /// `look`; `false` where no specialization exists (the caller runs
    /// [`Chunk::sum_any`]).
    fn specialized(&self, r: usize, look: bool, wide: bool, out: &mut [f32]) -> bool {
        // The rest's factors by position among a nonzero's other indices, the target's
        // position holding an empty slice (never read).
        let by_pos = |d: usize| {
            let mut f = self.rest.iter();
            (0..d)
                .map(|p| match p == self.target {
                    true => &[][..],
                    false => *f.next().expect("one factor per other index"),
                })
                .collect::<Vec<&[f32]>>()
        };
        /// The rank arms for `D` other indices.
        macro_rules! by_rank {
            ($d:literal) => {{
                let facs: [&[f32]; $d] = by_pos($d).try_into().expect("D factors");
                match (r, look) {
                    (8, false) => self.sum::<8, $d, false>(wide, &facs, out),
                    (16, false) => self.sum::<16, $d, false>(wide, &facs, out),
                    (32, false) => self.sum::<32, $d, false>(wide, &facs, out),
                    (48, false) => self.sum::<48, $d, false>(wide, &facs, out),
                    (64, false) => self.sum::<64, $d, false>(wide, &facs, out),
                    (8, true) => self.sum::<8, $d, true>(wide, &facs, out),
                    (16, true) => self.sum::<16, $d, true>(wide, &facs, out),
                    (32, true) => self.sum::<32, $d, true>(wide, &facs, out),
                    (48, true) => self.sum::<48, $d, true>(wide, &facs, out),
                    (64, true) => self.sum::<64, $d, true>(wide, &facs, out),
                    _ => return false,
                }
            }};
        }
        match self.rest.len() + 1 {
            2 => by_rank!(2),
            3 => by_rank!(3),
            4 => by_rank!(4),
            5 => by_rank!(5),
            _ => return false,
        }
        true
    }

    /// Adds every nonzero of the range into `out` at rank `R`, `D` other indices per
    /// nonzero (`facs` the rest's factors by position, the target's unused): per row of
    /// the long mode its factor row times the value and the rest's rows, scattered to
    /// the target's row. The order and the factors are constants, so that the loop over
    /// the modes unrolls with every factor's address in a register. With `LOOK` the
    /// rest's rows of the nonzero [`LOOKAHEAD`] places on (within the range) are
    /// prefetched.
    #[inline(always)]
    fn sum<const R: usize, const D: usize, const LOOK: bool>(
        &self,
        wide: bool,
        facs: &[&[f32]; D],
        out: &mut [f32],
    ) {
        let t = self.target;
        // The range's nonzeros end here: the lookahead stays inside them.
        let (ixs, _) = self.others[..self.ptr[self.rows.1] * D].as_chunks::<D>();
        #[cfg(target_arch = "x86_64")]
        if wide && matches!(R, 16 | 32 | 48 | 64) {
            use super::avx512_mttkrp::mttkrp_streamed_rows as rows;
            let (p, x, own, rs) = (self.ptr, self.values, self.own, self.rows);
            // SAFETY: `wide` is set only where the CPU has AVX-512F. The groups'
            // offsets ascend (running sums of row counts) and their indices are below
            // the modes' lengths (they come from a validated tensor), and the caller
            // of `run` checked that every factor and `out` has that many rows
            // (`RowMttkrp::run`).
            unsafe {
                match R {
                    16 => rows::<1, D, LOOK>(p, ixs, x, own, facs, t, rs, LOOKAHEAD, out),
                    32 => rows::<2, D, LOOK>(p, ixs, x, own, facs, t, rs, LOOKAHEAD, out),
                    48 => rows::<3, D, LOOK>(p, ixs, x, own, facs, t, rs, LOOKAHEAD, out),
                    _ => rows::<4, D, LOOK>(p, ixs, x, own, facs, t, rs, LOOKAHEAD, out),
                }
            }
            return;
        }
        let k = own_rows_ahead(R);
        // Checked once here; rows are read unchecked below (`factor_rows`).
        let end = ixs.len();
        assert!(end <= self.values.len() && self.own.len() >= (self.ptr.len() - 1) * R);
        for l in self.rows.0..self.rows.1 {
            let a = own_row_to_prefetch(self.ptr, l, k);
            // SAFETY (here and below): `a` and `l` are rows of the mode, each `R`
            // floats of `own` (asserted); offsets ascend to `end`; the groups' indices
            // name rows of the factors and of `out` (`run`'s caller checked shapes).
            super::walk::prefetch_row(unsafe { factor_rows::row::<R>(self.own, a) });
            let (s, e) = (self.ptr[l], self.ptr[l + 1]);
            if s == e {
                continue;
            }
            debug_assert!(s <= e && e <= end, "offsets that ascend");
            let a = unsafe { factor_rows::row::<R>(self.own, l) };
            let (xs, vs) = unsafe { (ixs.get_unchecked(s..e), self.values.get_unchecked(s..e)) };
            for (j, (ix, &x)) in xs.iter().zip(vs).enumerate() {
                if LOOK && let Some(ahead) = ixs.get(s + j + LOOKAHEAD) {
                    for p in (0..D).filter(|&p| p != t) {
                        let i = ahead[p] as usize;
                        if let Some(row) = facs[p].get(i * R..(i + 1) * R) {
                            super::walk::prefetch_row(row);
                        }
                    }
                }
                let mut k = [0f32; R];
                for (kc, &ac) in k.iter_mut().zip(a) {
                    *kc = x * ac;
                }
                for p in 0..D {
                    if p != t {
                        let row = unsafe { factor_rows::row::<R>(facs[p], ix[p] as usize) };
                        for (kc, &b) in k.iter_mut().zip(row) {
                            *kc *= b;
                        }
                    }
                }
                let o = unsafe { factor_rows::row_mut::<R>(out, ix[t] as usize) };
                for (oc, &kc) in o.iter_mut().zip(&k) {
                    *oc += kc;
                }
            }
        }
    }

    /// [`Chunk::sum`] at any rank.
    fn sum_any(&self, r: usize, out: &mut [f32]) {
        let d = self.rest.len() + 1;
        let mut k = vec![0f32; r];
        for l in self.rows.0..self.rows.1 {
            let (s, e) = (self.ptr[l], self.ptr[l + 1]);
            let a = &self.own[l * r..(l + 1) * r];
            for (ix, &x) in self.others[s * d..e * d]
                .chunks_exact(d)
                .zip(&self.values[s..e])
            {
                for (kc, &ac) in k.iter_mut().zip(a) {
                    *kc = x * ac;
                }
                let mut f = self.rest.iter();
                for (p, &i) in ix.iter().enumerate() {
                    if p != self.target {
                        let row = &f.next().expect("one factor per other index")
                            [i as usize * r..(i as usize + 1) * r];
                        for (kc, &b) in k.iter_mut().zip(row) {
                            *kc *= b;
                        }
                    }
                }
                let t = ix[self.target] as usize;
                for (oc, &kc) in out[t * r..(t + 1) * r].iter_mut().zip(&k) {
                    *oc += kc;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CACHE: CacheSizes = CacheSizes {
        l2: 1 << 20,
        llc: 32 << 20,
    };

    /// Only rows with nonzeros are prefetched: an empty row ahead leaves the row in use,
    /// and so does a row past the mode's end.
    #[test]
    fn only_rows_in_use_are_prefetched() {
        // Rows 0..6 hold 2, 0, 1, 0, 0, 3 nonzeros.
        let ptr = [0, 2, 2, 3, 3, 3, 6];
        assert_eq!(own_row_to_prefetch(&ptr, 0, 2), 2);
        assert_eq!(own_row_to_prefetch(&ptr, 0, 1), 0);
        assert_eq!(own_row_to_prefetch(&ptr, 1, 3), 1);
        assert_eq!(own_row_to_prefetch(&ptr, 2, 3), 5);
        assert_eq!(own_row_to_prefetch(&ptr, 4, 2), 4);
        assert_eq!(own_row_to_prefetch(&ptr, 5, 16), 5);
    }

    /// One long mode (1.5 M rows) and two short ones: the short modes stream the long
    /// mode's factor at rank 32; the long mode itself runs row by row, as does every
    /// mode once the long factor fits in cache (low rank) or the short rows do not fit
    /// in L2 (wide rank).
    #[test]
    fn short_modes_stream_the_long_factor_only_when_it_misses_cache() {
        let dims = [800, 3000, 1_500_000];
        assert_eq!(streamed_by(&dims, 0, 32, CACHE), Some(2));
        assert_eq!(streamed_by(&dims, 1, 32, CACHE), Some(2));
        assert_eq!(streamed_by(&dims, 2, 32, CACHE), None);
        // 1.5 M × 4 × 4 bytes = 24 MB: fits in 32 MiB.
        assert_eq!(streamed_by(&dims, 0, 4, CACHE), None);
        // 3000 rows × 128 floats × 4 = 1.5 MB of output: over L2.
        assert_eq!(streamed_by(&dims, 1, 128, CACHE), None);
        // 800 rows × 128 floats × 4 = 410 KB: in L2 (the other short factor is
        // gathered from the last-level cache either way).
        assert_eq!(streamed_by(&dims, 0, 128, CACHE), Some(2));
        // Two long modes: the short target streams the longer one's order (the other
        // long factor is gathered at random either way); the long targets' outputs do
        // not fit in L2.
        let two = [600_000, 500_000, 2000];
        assert_eq!(streamed_by(&two, 2, 32, CACHE), Some(0));
        assert_eq!(streamed_by(&two, 0, 32, CACHE), None);
        assert_eq!(streamed_by(&two, 1, 32, CACHE), None);
        assert_eq!(streamed_by(&[800, 1_500_000], 0, 32, CACHE), None);
        let copies = |rows: usize| CHUNKS * (rows * 32 + LINE_FLOATS - 1);
        // A run over every mode: the widest streamed mode's copies, in the plan.
        let planned = |rank: usize| {
            let mut plan = crate::memplan::MemoryPlan::new("every mode", "");
            add_streamed_to_plan(&mut plan, &dims, 0, rank, &[0, 1, 2], CACHE);
            let part = plan
                .parts()
                .iter()
                .find(|(p, _)| p.contains("output copies"));
            // 4 bytes a float, 8 for its f64 sum.
            part.map_or(0, |&(_, bytes)| bytes / 12)
        };
        assert_eq!(planned(32), copies(3000) as u128);
        assert_eq!(planned(4), 0);
        // One mode alone: its own copies, none for the long mode.
        assert_eq!(
            streamed_mode_output_floats(&dims, 0, 32, CACHE),
            copies(800)
        );
        assert_eq!(streamed_mode_output_floats(&dims, 2, 32, CACHE), 0);
    }

    #[test]
    fn chunks_cover_the_rows_in_order() {
        let ptr: Vec<usize> = (0..=1000).map(|i| i * 3).collect();
        let b = chunk_bounds(&ptr);
        assert_eq!(b.len(), CHUNKS + 1);
        assert_eq!((b[0], b[CHUNKS]), (0, 1000));
        assert!(b.windows(2).all(|w| w[0] <= w[1]));
        // Fewer rows than chunks: empty ranges, still in order.
        let b = chunk_bounds(&[0, 5, 9]);
        assert_eq!((b[0], b[CHUNKS]), (0, 2));
        assert!(b.windows(2).all(|w| w[0] <= w[1]));
    }
}
