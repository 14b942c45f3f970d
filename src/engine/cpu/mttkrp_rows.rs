//! MTTKRP row by row.
//!
//! The key-order walk ([`super::fixed`]) shares each fiber's Khatri-Rao prefix between
//! its nonzeros, but pays for finding the fibers: a level change is a data-dependent
//! branch per nonzero, and it writes into a private copy of the output per worker that
//! is then summed. Here each mode's nonzeros are grouped by row once ([`RowGroups`],
//! the other modes' indices and the value, built at the first MTTKRP call), and every
//! row is one straight loop: per nonzero, `x` times the product of its other rows,
//! accumulated in registers; the row is written once. No branches on the data, no
//! private outputs and no reduction; rows longer than a piece
//! ([`super::rows::PIECE`]) are cut, each piece summed into its own partial row and a
//! row's pieces added in order, so results do not depend on the thread count.
//!
//! Measured against the walk on this project's CPU (2 threads, all modes, ranks 16 and
//! 32, the nine tensors of the CPU comparison, mean fibers of 1.7 to 75 nonzeros) it
//! was faster on every one, 1.2–2.4×, so it is the CPU's MTTKRP wherever the groups fit:
//! `N (N − 1) · 4 + N · 4` bytes per nonzero for all modes, built only where they fit
//! in a quarter of the available memory (else the walk runs). Building them costs
//! about 0.2–0.3 s per mode of a 7 M-nonzero tensor on two cores of this project's CPU,
//! paid once by the first call.
//!
//! A short mode beside a long one whose factor misses the cache visits the long mode's
//! groups instead ([`super::mttkrp_stream`]), chosen per mode and rank from the shape
//! and the cache sizes; where it fits, in blocks of the long mode's rows, each block's
//! nonzeros sorted by target row ([`super::stream_blocks`], built by the first call
//! that streams the mode).

use super::cache_sizes::CacheSizes;
use super::mttkrp_stream;
use super::mttkrp_wide::{span_cut_job, wide_fits, wide_task};
use super::nt_store;
use super::row_groups::RowGroups;
use super::row_sums::{narrow_fits, narrow_task, row_sum_any, specialized};
use super::rows::Plan;
use super::stream_blocks::{StreamBlocks, block_rows};
use super::subnormal::FlushSubnormals;
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use rayon::prelude::*;
use std::sync::Arc;

/// Every mode's nonzeros grouped by row, and how each mode's rows are cut.
pub(super) struct RowMttkrp {
    groups: Vec<RowGroups>,
    plans: Vec<Plan>,
    /// The modes' lengths.
    dims: Vec<usize>,
    /// What chooses between row by row and the long mode's order.
    cache: CacheSizes,
    /// Per mode, its rows cut into the streamed order's ranges.
    bounds: Vec<Vec<usize>>,
    /// The streamed order's output copies, kept between calls.
    copies: std::sync::Mutex<Vec<super::output_copies::OutputCopy>>,
    /// Whether a streamed mode runs in blocks of the long mode's rows
    /// ([`StreamBlocks`]; else through the long mode's groups, as where the blocks do
    /// not fit).
    pub(super) block_streams: bool,
    /// The blocked forms built so far, by target mode and block rows (`None`: no room).
    blocked: std::sync::Mutex<Vec<BlockedForm>>,
}

/// A streamed mode's blocked form: its mode, its rows per block, the form.
type BlockedForm = (usize, usize, Option<Arc<StreamBlocks>>);

impl RowMttkrp {
    /// The groups of `hls`, or `None` where they would not fit in a quarter of the
    /// available memory (or the tensor has one mode).
    pub(super) fn new(hls: &HlsTensor) -> Result<Option<Self>> {
        Self::with_cache(hls, CacheSizes::of_this_machine())
    }

    /// [`RowMttkrp::new`] choosing traversals for caches of `cache`'s sizes.
    pub(super) fn with_cache(hls: &HlsTensor, cache: CacheSizes) -> Result<Option<Self>> {
        let Some(groups) = RowGroups::build_if_room(hls)? else {
            return Ok(None);
        };
        let plans = groups.iter().map(|g| Plan::new(g.ptr())).collect();
        let bounds = groups
            .iter()
            .map(|g| mttkrp_stream::chunk_bounds(g.ptr()))
            .collect();
        Ok(Some(RowMttkrp {
            groups,
            plans,
            dims: hls.dims().to_vec(),
            cache,
            bounds,
            copies: std::sync::Mutex::new(Vec::new()),
            block_streams: true,
            blocked: std::sync::Mutex::new(Vec::new()),
        }))
    }

    /// The mode whose groups MTTKRP of `mode` at rank `rank` reads: its own, or those
    /// of the long mode whose order it streams.
    fn source(&self, mode: usize, rank: usize) -> usize {
        mttkrp_stream::streamed_by(&self.dims, mode, rank, self.cache).unwrap_or(mode)
    }

    /// Bytes of the groups MTTKRP of `mode` at rank `rank` reads: the row offsets,
    /// the other modes' indices and the values of its own groups or of the long mode's
    /// it streams.
    pub(super) fn form_bytes(&self, mode: usize, rank: usize) -> usize {
        // The width its factors run at (a rank between the compiled widths: padded).
        let rank = super::padded::factor_width(rank, self.dims.len());
        let rows = block_rows(rank, self.cache);
        let built = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
        match built.iter().find(|b| (b.0, b.1) == (mode, rows)) {
            Some((_, _, Some(form))) => form.bytes(),
            _ => self.groups[self.source(mode, rank)].bytes(),
        }
    }

    /// The blocked form of `mode`, streamed by `long`, at rank `rank`: built by the
    /// first call that asks for it; `None` where it does not fit.
    fn blocks(&self, mode: usize, long: usize, rank: usize) -> Option<Arc<StreamBlocks>> {
        let rows = block_rows(rank, self.cache);
        let mut built = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, form)) = built.iter().find(|b| (b.0, b.1) == (mode, rows)) {
            return form.clone();
        }
        let form = StreamBlocks::build(&self.groups[long], &self.dims, long, mode, rows)
            .ok()
            .flatten()
            .map(Arc::new);
        built.push((mode, rows, form.clone()));
        form
    }

    /// MTTKRP of `mode` into `out` (`I_mode × R`, every entry overwritten), `factors`
    /// one per mode, each `R` columns, or padded with zero columns to the compiled
    /// width of `R` ([`super::padded::factor_width`]; the same for every one the call
    /// reads). The groups hold the values with the tensor's scale applied.
    /// With `wide` (the CPU has AVX-512F, [`super::avx512::available`]) widths 16, 32,
    /// 48 and 64 run 16 columns per instruction.
    pub(super) fn run(&self, mode: usize, factors: &[Matrix], out: &mut Matrix, wide: bool) {
        let (g, plan, r) = (&self.groups[mode], &self.plans[mode], out.cols());
        let w = (factors.iter().enumerate())
            .find(|&(m, _)| m != mode)
            .map_or(r, |(_, f)| f.cols());
        // The AVX-512 sums read (and the streamed one writes) the rows the groups name
        // unchecked: every factor and the output must have their modes' rows. The
        // engine checks the factors' shapes and sizes the output; held here too.
        assert!(
            factors.len() == self.dims.len()
                && (factors.iter().zip(&self.dims).enumerate())
                    .all(|(m, (f, &d))| m == mode || (f.rows() == d && f.cols() == w))
                && out.rows() == self.dims[mode]
                && (w == r || w == super::padded::factor_width(r, self.dims.len())),
            "MTTKRP: factors or output not of the tensor's shape"
        );
        let long = self.source(mode, w);
        // Rows of factors larger than the last-level cache are loaded ahead (the long
        // one's, where its order is streamed, need not be).
        let look = (0..self.dims.len()).any(|m| {
            m != mode && m != long && mttkrp_stream::larger_than_llc(&self.dims, m, w, self.cache)
        });
        if long != mode
            && self.block_streams
            && let Some(blocks) = self.blocks(mode, long, w)
        {
            let rest: Vec<&[f32]> = (factors.iter().enumerate())
                .filter(|&(m, _)| m != long && m != mode)
                .map(|(_, f)| f.data())
                .collect();
            let (own, ptr) = (factors[long].data(), self.groups[long].ptr());
            return blocks.run(own, w, ptr, &rest, out, &self.copies, look, wide);
        }
        if long != mode {
            let (groups, bounds) = (&self.groups[long], &self.bounds[long]);
            let copies = &self.copies;
            return mttkrp_stream::run(
                groups, long, bounds, mode, factors, out, copies, look, wide,
            );
        }
        let facs: Vec<&[f32]> = (factors.iter().enumerate())
            .filter(|&(m, _)| m != mode)
            .map(|(_, f)| f.data())
            .collect();
        let (ptr, idx, x, d) = (g.ptr(), g.others(), g.values(), facs.len());
        // Row (or piece) `s..e`, whose task's nonzeros end at `te` (for the lookahead).
        let row = |s: usize, e: usize, te: usize, dst: &mut [f32], past: bool| {
            let (ix, xs) = (&idx[s * d..te * d], &x[s..e]);
            if !specialized(w, past, look, wide, ix, xs, &facs, dst) {
                row_sum_any(&ix[..(e - s) * d], xs, &facs, w, dst);
            }
        };
        // Rows written straight into the output go past the cache where it is larger
        // than the cache (rows of the factors' width only: shorter ones are stored
        // under masks).
        let past = mttkrp_stream::larger_than_llc(&self.dims, mode, r, self.cache) && w == r;
        let groups = (ptr, idx, x);
        // Whole rows `rows` into `dst` in one call: on AVX-512 where it has the rank,
        // else on AVX2; `false` where neither has it.
        let span = |rows: (usize, usize), dst: &mut [f32]| {
            (wide && wide_task((w, r), past, look, groups, &facs, rows, dst))
                || narrow_task((w, r), past, look, groups, &facs, rows, dst)
        };
        if !plan.cut {
            // Whole rows per task, written straight into the output.
            let jobs = plan.row_jobs(out.data_mut(), r);
            jobs.into_par_iter().for_each(|(r0, r1, dst)| {
                let _flush = FlushSubnormals::new();
                if !span((r0, r1), dst) {
                    for (i, o) in (r0..r1).zip(dst.chunks_exact_mut(r.max(1))) {
                        row(ptr[i], ptr[i + 1], ptr[r1], o, past);
                    }
                }
                if past {
                    nt_store::store_fence();
                }
            });
            return;
        }
        // Rows in one piece straight into the output, as above; the pieces of the cut
        // rows into partial rows, then each cut row the sum of its pieces in order.
        let mut partial = vec![0f32; plan.cut_slots() * r];
        let jobs = plan.cut_jobs(out.data_mut(), &mut partial, r);
        jobs.into_par_iter().for_each(|job| {
            let _flush = FlushSubnormals::new();
            let te = job.pieces.last().map_or(0, |p| p.2);
            // The runs of short rows between cut and long ones a span at a time.
            if (wide && wide_fits(w, d)) || narrow_fits(w, d) {
                span_cut_job(plan, job, r, past, span, |s, e, dst, past| {
                    row(s, e, te.max(e), dst, past)
                });
            } else {
                job.run(plan, r, |&(_, s, e), dst, direct| {
                    row(s, e, te.max(e), dst, direct && past);
                });
            }
            if past {
                nt_store::store_fence();
            }
        });
        plan.add_cut_rows(&partial, r, out.data_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accuracy::compare;
    use crate::hls::HlsBuilder;
    use crate::tensor::CooTensor;
    use crate::tensor::generate::Pattern;

    /// The row-by-row MTTKRP, and the key-order walk beside it, against the FP64
    /// reference at every specialized rank and others between them (read as given,
    /// and padded to the next width: `padded::factor_width`), orders 2 to 7, with and
    /// without dense tiles, on 1 and 3 workers; the last case has a mode of three rows,
    /// each longer than a piece (cut).
    #[test]
    fn rows_match_the_reference_at_every_rank_and_order() {
        let cases: Vec<(Vec<usize>, usize, Pattern, u32)> = vec![
            (vec![40, 30], 600, Pattern::Uniform, u32::MAX),
            (
                vec![37, 45, 29],
                4000,
                Pattern::PowerLaw { alpha: 1.0 },
                u32::MAX,
            ),
            (
                vec![60, 50, 40],
                9000,
                Pattern::BlockDense {
                    tile_nnz: 300,
                    dense_share: 0.6,
                },
                16,
            ),
            (vec![20, 13, 9, 7], 3000, Pattern::Uniform, u32::MAX),
            (vec![9, 8, 7, 6, 5], 2000, Pattern::Uniform, u32::MAX),
            (vec![6, 5, 4, 4, 3, 3], 2500, Pattern::Uniform, u32::MAX),
            (vec![5, 4, 3, 3, 4, 3, 2], 2000, Pattern::Uniform, u32::MAX),
            (vec![500, 400, 3], 40_000, Pattern::Uniform, u32::MAX),
        ];
        for (k, (dims, nnz, pattern, threshold)) in cases.into_iter().enumerate() {
            let (x, hls) =
                super::super::generated_case(&dims, nnz, pattern, threshold, 90 + k as u64);
            for threads in [1, 3] {
                let pool = crate::pool_of(threads);
                pool.install(|| {
                    let rows = RowMttkrp::new(&hls).unwrap().expect("small groups fit");
                    for (rank, pad) in [8, 16, 32, 64, 5, 5, 10, 20, 40, 63]
                        .into_iter()
                        .enumerate()
                        .map(|(k, r)| (r, k != 4))
                    {
                        let f = Matrix::random_factors(&dims, &vec![rank; dims.len()], 7);
                        // The factors the kernel reads: padded with zero columns to
                        // the next width, as the backend passes
                        // them, or as given (rank 5 once: the generic sums).
                        let w = if pad {
                            super::super::padded::factor_width(rank, dims.len())
                        } else {
                            rank
                        };
                        let mut held = super::super::padded::PaddedFactors::default();
                        held.refresh(&f, usize::MAX, w, None);
                        let read = if w == rank { &f[..] } else { held.factors() };
                        for mode in 0..dims.len() {
                            let mut out = Matrix::from_fn(dims[mode], rank, |_, _| f32::NAN);
                            rows.run(mode, read, &mut out, false);
                            let want = crate::reference::mttkrp(&x, mode, &f).unwrap();
                            let acc = compare(&want, &out).unwrap();
                            assert!(
                                acc.within_contract(),
                                "{dims:?} rank {rank} mode {mode} {threads} threads: {acc:?}"
                            );
                            // AVX-512 (where this CPU has it): the same operations per
                            // column, so the same bits.
                            // Ranks AVX-512 has no width for run on AVX2 even when it is
                            // asked for (safe on any CPU: no AVX-512 instruction runs).
                            if super::super::avx512::available() || w == 8 || w == rank {
                                let mut wide = Matrix::from_fn(dims[mode], rank, |_, _| f32::NAN);
                                rows.run(mode, read, &mut wide, true);
                                assert!(
                                    (out.data().iter().zip(wide.data()))
                                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                                    "AVX-512 {dims:?} rank {rank} mode {mode} {threads} threads"
                                );
                            }
                            // The walk it replaced stays the fallback (no room for the
                            // groups, or SPTMC_CPU_MTTKRP=walk): kept under test here.
                            let mut walk = Matrix::zeros(dims[mode], rank);
                            let pool = std::sync::Mutex::new(Vec::new());
                            super::super::kernel::run(
                                crate::ops::Op::Mttkrp,
                                &hls,
                                mode,
                                &f,
                                &mut walk,
                                &pool,
                            );
                            let walk = walk.map(|v| v * hls.scale());
                            let acc = compare(&want, &walk).unwrap();
                            assert!(
                                acc.within_contract(),
                                "walk {dims:?} rank {rank} mode {mode} {threads} threads: {acc:?}"
                            );
                        }
                    }
                });
            }
            if dims == [500, 400, 3] {
                let g = &RowMttkrp::new(&hls).unwrap().unwrap();
                assert!(g.plans[2].cut, "the 3-row mode is cut into pieces");
            }
        }
    }

    /// A mode with a few rows longer than a piece among many short and empty ones (and
    /// a few uncut long ones): the short rows go straight into the output, the long ones through partial rows
    /// (also one whose pieces straddle two tasks). Against the FP64 reference, and the
    /// same bits on 1, 2 and 3 workers.
    #[test]
    fn cut_rows_among_short_and_empty_rows_match_the_reference() {
        let dims = vec![300, 400, 300];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as u32
        };
        let mut entries = Vec::new();
        for i in 0..300u32 {
            let n = match i {
                3 => 9000,
                10 => 20_000,
                200 => 8193,
                // Long uncut rows, each its own call on AVX-512 (`SHORT_ROW`).
                50 => 100,
                51 => 64,
                52 => 63,
                _ if i % 7 == 0 => 0,
                _ => 1 + next(5) as usize,
            };
            for _ in 0..n {
                let v = 0.5 + f64::from(next(1000)) / 1000.0;
                entries.push(([i, next(400), next(300)], v));
            }
        }
        let x = CooTensor::from_entries(dims.clone(), entries).unwrap();
        let hls = HlsBuilder::new(u32::MAX).build(&x).unwrap();
        let mut first: Option<Matrix> = None;
        for threads in [1, 2, 3] {
            let pool = crate::pool_of(threads);
            pool.install(|| {
                let rows = RowMttkrp::new(&hls).unwrap().expect("small groups fit");
                let plan = &rows.plans[0];
                assert!(plan.cut && plan.is_cut(10) && !plan.is_cut(11));
                // Row 10's pieces lie in more than one task.
                assert!(
                    plan.tasks
                        .iter()
                        .filter(|&&(a, b)| { plan.pieces[a..b].iter().any(|p| p.0 == 10) })
                        .count()
                        > 1
                );
                let same = |a: &Matrix, b: &Matrix| {
                    (a.data().iter().zip(b.data())).all(|(a, b)| a.to_bits() == b.to_bits())
                };
                let f = Matrix::random_factors(&dims, &[16; 3], 3);
                let mut out = Matrix::from_fn(300, 16, |_, _| f32::NAN);
                rows.run(0, &f, &mut out, false);
                let want = crate::reference::mttkrp(&x, 0, &f).unwrap();
                let acc = compare(&want, &out).unwrap();
                assert!(acc.within_contract(), "{threads} threads: {acc:?}");
                // AVX-512 (where this CPU has it): the uncut rows span by span, the
                // same bits, at every width it runs.
                // With no last-level cache the rows are written past it.
                let past = CacheSizes { l2: 0, llc: 0 };
                let past = RowMttkrp::with_cache(&hls, past).unwrap().unwrap();
                if super::super::avx512::available() {
                    for (rank, rows) in [16, 32, 64]
                        .into_iter()
                        .flat_map(|r| [(r, &rows), (r, &past)])
                    {
                        let f = Matrix::random_factors(&dims, &[rank; 3], 3);
                        let mut narrow = Matrix::from_fn(300, rank, |_, _| f32::NAN);
                        rows.run(0, &f, &mut narrow, false);
                        let mut wide = Matrix::from_fn(300, rank, |_, _| f32::NAN);
                        rows.run(0, &f, &mut wide, true);
                        assert!(
                            same(&narrow, &wide),
                            "AVX-512 rank {rank} {threads} threads"
                        );
                    }
                }
                match &first {
                    None => first = Some(out),
                    Some(f1) => assert!(same(f1, &out), "{threads} threads differ from 1"),
                }
            });
        }
    }

    /// Rows of 50 000 nonzeros (a power-law tensor's dense slices), row by row (cut
    /// into pieces) and streamed through a long mode (in blocks and not), on AVX2 and
    /// on AVX-512 where this CPU has it, at a compiled rank and a generic one: every
    /// entry within the error bound of sums in runs ([`super::super::runs`]), derived
    /// from the sums' structure, not from what passed. A term (`x`, rounded to f32,
    /// times two factor entries) carries up to 3 roundings; a sum of `m` terms in f32
    /// adds `(m − 1) u Σ |t|`; f64 steps add nothing measurable; the result is rounded
    /// once more (a cut row: its pieces once each, then once). Row by row `m` is at
    /// most a run; streamed, an output row's f32 copy adds at most a part's nonzeros
    /// (whole long rows: their fewest, plus the longest such row) before it is added
    /// in f64. Values of 0.1 and a column of factors of ones: summed one after
    /// another, 8192 such terms (a piece) drift by 6e-5 relative, eight times the row
    /// path's bound; the other columns mix signs.
    #[test]
    fn dense_rows_stay_within_the_bound_of_sums_in_runs() {
        use super::super::runs::RUN;
        let dims = vec![3usize, 2000, 300];
        let (x, hls) = super::super::dense_rows_case(&dims);
        let longest = |m: usize| {
            let mut count = vec![0usize; dims[m]];
            for &i in x.indices(m) {
                count[i as usize] += 1;
            }
            count.into_iter().max().unwrap_or(0)
        };
        for rank in [16, 5] {
            let (f, abs) = super::super::ones_and_mixed_signs(&dims, &[rank; 3], 41);
            let rows = RowMttkrp::new(&hls).unwrap().expect("small groups fit");
            let streams = CacheSizes {
                l2: 1 << 20,
                llc: 0,
            };
            let mut streamed = RowMttkrp::with_cache(&hls, streams).unwrap().unwrap();
            for (mode, &rows_of_mode) in dims.iter().enumerate() {
                let want = crate::reference::mttkrp(&x, mode, &f).unwrap();
                let scale = crate::reference::mttkrp(&x, mode, &abs).unwrap();
                let long = streamed.source(mode, rank);
                assert_ne!(long, mode, "mode {mode} streams");
                let part = super::super::output_copies::part_nonzeros(rows_of_mode) + longest(long);
                let check = |got: &Matrix, m: usize, path: &str| {
                    let what = format!("{path} rank {rank} mode {mode}");
                    super::super::assert_within_sum_bound(&want, &scale, got, m + 2 + 3, &what);
                };
                for wide in [false, true] {
                    if wide && !super::super::avx512::available() {
                        continue;
                    }
                    let mut out = Matrix::from_fn(rows_of_mode, rank, |_, _| f32::NAN);
                    rows.run(mode, &f, &mut out, wide);
                    check(&out, RUN, "rows");
                    for blocks in [true, false] {
                        streamed.block_streams = blocks;
                        let mut out = Matrix::from_fn(rows_of_mode, rank, |_, _| f32::NAN);
                        streamed.run(mode, &f, &mut out, wide);
                        check(&out, RUN + part, "streamed");
                    }
                }
            }
            assert!(rows.plans[0].cut, "mode 0's rows are cut into pieces");
        }
    }
}
