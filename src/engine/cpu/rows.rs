//! The ALS normal equations on the CPU, row by row.
//!
//! Each row `i` of the target mode needs `G_i = Σ k kᵀ` and `b_i = Σ x k` over its own
//! nonzeros. Walking the nonzeros in the tensor's key order, as the other kernels do,
//! scatters every nonzero's `R × R` update to a random row (for `R = 16` a kilobyte of
//! read-modify-write per nonzero, into private copies of the whole output that are
//! then summed). Here each mode's nonzeros are grouped by row once per session
//! ([`RowGroups`], built from the HLS form: the other modes' indices and the value of
//! every nonzero, ordered by the mode's index), and every row's system is built by one
//! worker in registers: a chunk of the row's Khatri-Rao rows `k` is formed in a small
//! buffer, then `G_i` is accumulated over the chunk a few rows of `G` at a time
//! (accumulators that fit the vector registers: 64 floats, e.g. 4 rows of 16), so each
//! update costs loads and FMAs, no stores. Rows are independent: no private outputs,
//! no reduction, no atomics. Sums run in the row's nonzero order, chunk by chunk, so a
//! result does not depend on the thread count.

use super::avx512;
use super::row_groups::RowGroups;
use super::row_kernels::{
    BiasFactors, pad_rows, padded_width, row_loss, row_loss_any, row_system, row_system_any,
    row_system_bias,
};
use super::subnormal::FlushSubnormals;
use crate::matrix::Matrix;
use rayon::prelude::*;
use std::borrow::Cow;

/// A row's kernel: its nonzeros' other indices and values in, its system out.
type RowKernel<'a> = dyn Fn(&[u32], &[f32], &mut [f32]) + Sync + 'a;

/// A [`RowKernel`] that also returns a number per row (the bias kernel's `Σ y²`).
type RowSumKernel<'a> = dyn Fn(&[u32], &[f32], &mut [f32]) -> f64 + Sync + 'a;

/// Most nonzeros of one piece of a row (longer rows are cut, so that a mode with a few
/// long rows, e.g. 5 time steps, still spreads over the workers). A mode whose rows
/// are all shorter runs MU's inner iterations row by row, so the cut is not made
/// finer than it must be: with 8192 instead of 2048, movielens-100k's 31 weeks and
/// most of movielens-10m-tags-4d run row by row (2 % fewer instructions on 10m-tags).
pub(super) const PIECE: usize = 8192;
/// A partial row's entry: f32 or f64, added in f64.
pub(super) trait Widen: Copy {
    /// The entry in f64.
    fn wide(self) -> f64;
    /// An f64 sum as an entry (rounded to nearest).
    fn narrow(v: f64) -> Self;
}

impl Widen for f32 {
    fn wide(self) -> f64 {
        f64::from(self)
    }
    fn narrow(v: f64) -> Self {
        v as f32
    }
}

impl Widen for f64 {
    fn wide(self) -> f64 {
        self
    }
    fn narrow(v: f64) -> Self {
        v
    }
}

/// Nonzeros per parallel task (consecutive pieces, or whole rows).
pub(super) const TASK: usize = 4096;

/// One worker's share of a cut mode ([`Plan::cut_jobs`]).
pub(super) struct CutJob<'a, T> {
    /// Its pieces (row, start, end).
    pub(super) pieces: &'a [(usize, usize, usize)],
    /// The first row it owns.
    pub(super) row0: usize,
    /// The rows it owns (those whose first piece it holds), `r` wide.
    pub(super) rows: &'a mut [T],
    /// One `r`-wide partial row per piece of a cut row among its pieces, in order.
    pub(super) slots: &'a mut [T],
}

impl<T: Copy + Default> CutJob<'_, T> {
    /// Runs `f(piece, dst, direct)` on the job's pieces in order, `dst` the row's
    /// output where the row is in one piece (`direct`), else the piece's partial slot;
    /// zeroes the owned rows that no piece writes.
    pub(super) fn run(
        self,
        plan: &Plan,
        r: usize,
        mut f: impl FnMut(&(usize, usize, usize), &mut [T], bool),
    ) {
        let rw = r.max(1);
        let mut slots = self.slots.chunks_exact_mut(rw);
        let mut rows = self.rows.chunks_exact_mut(rw);
        // The next owned row not yet written.
        let mut next = self.row0;
        for piece in self.pieces {
            let i = piece.0;
            if plan.is_cut(i) {
                f(
                    piece,
                    slots.next().expect("a slot per piece of a cut row"),
                    false,
                );
                continue;
            }
            for _ in next..i {
                rows.next().expect("an owned row").fill(T::default());
            }
            f(piece, rows.next().expect("the piece's owned row"), true);
            next = i + 1;
        }
        for o in rows {
            o.fill(T::default());
        }
    }
}

/// How one mode's rows are cut for the row-by-row kernels (Φ, MTTKRP): into pieces of
/// at most [`PIECE`] nonzeros, consecutive pieces grouped into tasks of about [`TASK`].
/// Fixed by the tensor, not the thread count; a row in one piece is written straight
/// into the output, each piece of a longer row sums into its own partial row and a
/// row's pieces are added in order, so results do not depend on the thread count.
pub(super) struct Plan {
    /// Per piece: its row and its nonzeros `start..end` in the mode's row order.
    pub(super) pieces: Vec<(usize, usize, usize)>,
    /// Row `i`'s pieces are `first[i]..first[i + 1]` (none for an empty row).
    pub(super) first: Vec<usize>,
    /// Per task: its pieces `a..b`.
    pub(super) tasks: Vec<(usize, usize)>,
    /// Whether some row was cut (longer than [`PIECE`]).
    pub(super) cut: bool,
    /// The cut rows, ascending: what [`Plan::add_cut_rows`] visits (a scan of `first`
    /// read the whole mode's rows, single-threaded, on every call: 8 ms of a 90 ms
    /// MTTKRP of a 4 M-row mode).
    cut_rows: Vec<usize>,
    /// Tasks of whole rows `r0..r1` of about [`TASK`] nonzeros (every row, empty ones
    /// included), for [`PhiSession::mu_inner`](crate::engine::PhiSession::mu_inner)'s row-by-row iterations.
    pub(super) row_tasks: Vec<(usize, usize)>,
    /// Per task, the first row it owns: task `t` owns rows `own[t]..own[t + 1]`, those
    /// whose first piece it holds (and the empty rows after them).
    own: Vec<usize>,
    /// Per task, the first partial slot of its pieces of cut rows.
    task_slot: Vec<usize>,
}

impl Plan {
    /// The plan of a mode whose row `i` holds nonzeros `ptr[i]..ptr[i + 1]`.
    pub(super) fn new(ptr: &[usize]) -> Self {
        let rows = ptr.len() - 1;
        let (mut pieces, mut first, mut tasks) =
            (Vec::new(), Vec::with_capacity(rows + 1), Vec::new());
        for i in 0..rows {
            first.push(pieces.len());
            let mut s = ptr[i];
            while s < ptr[i + 1] {
                let e = (s + PIECE).min(ptr[i + 1]);
                pieces.push((i, s, e));
                s = e;
            }
        }
        first.push(pieces.len());
        let (mut a, mut n) = (0, 0);
        for (k, &(_, s, e)) in pieces.iter().enumerate() {
            n += e - s;
            if n >= TASK {
                tasks.push((a, k + 1));
                (a, n) = (k + 1, 0);
            }
        }
        if a < pieces.len() {
            tasks.push((a, pieces.len()));
        }
        let mut row_tasks = Vec::new();
        let mut r0 = 0;
        for i in 0..rows {
            if ptr[i + 1] - ptr[r0] >= TASK || i + 1 == rows {
                row_tasks.push((r0, i + 1));
                r0 = i + 1;
            }
        }
        // A task owns the rows whose first piece it holds; a cut row's later pieces
        // may lie in later tasks, which write them to partial slots.
        let mut own = vec![0; tasks.len() + 1];
        own[tasks.len()] = rows;
        let mut task_slot = vec![0; tasks.len() + 1];
        for (t, &(a, b)) in tasks.iter().enumerate() {
            if t > 0 {
                let i = pieces[a].0;
                own[t] = if first[i] == a { i } else { i + 1 };
            }
            let cut_here = (a..b)
                .filter(|&k| first[pieces[k].0 + 1] - first[pieces[k].0] > 1)
                .count();
            task_slot[t + 1] = task_slot[t] + cut_here;
        }
        let cut_rows: Vec<usize> = (0..rows).filter(|&i| first[i + 1] - first[i] > 1).collect();
        Plan {
            own,
            task_slot,
            cut: !cut_rows.is_empty(),
            cut_rows,
            pieces,
            first,
            tasks,
            row_tasks,
        }
    }

    /// Whether row `i` is cut into more than one piece.
    pub(super) fn is_cut(&self, i: usize) -> bool {
        self.first[i + 1] - self.first[i] > 1
    }

    /// The partial slots [`Plan::cut_jobs`] needs: one per piece of a cut row.
    pub(super) fn cut_slots(&self) -> usize {
        self.task_slot[self.tasks.len()]
    }

    /// `out` (the mode's `r`-wide rows) and `partial` ([`Plan::cut_slots`] rows of `r`)
    /// cut into each task's share ([`CutJob`]): a row in one piece is written straight
    /// into the output by the task that holds it; the pieces of a cut row go to partial
    /// slots, summed afterwards by [`Plan::add_cut_rows`]. The task zeroes the rows it
    /// owns that no piece of its writes (empty rows, and its cut rows until they are
    /// summed).
    pub(super) fn cut_jobs<'a, T>(
        &'a self,
        out: &'a mut [T],
        partial: &'a mut [T],
        r: usize,
    ) -> Vec<CutJob<'a, T>> {
        let (mut rows, mut slots) = (out, partial);
        let mut jobs = Vec::with_capacity(self.tasks.len());
        for (t, &(a, e)) in self.tasks.iter().enumerate() {
            let n_rows = self.own[t + 1] - self.own[t];
            let n_slots = self.task_slot[t + 1] - self.task_slot[t];
            let (mine, rest) = std::mem::take(&mut rows).split_at_mut(n_rows * r);
            rows = rest;
            let (my_slots, rest) = std::mem::take(&mut slots).split_at_mut(n_slots * r);
            slots = rest;
            jobs.push(CutJob {
                pieces: &self.pieces[a..e],
                row0: self.own[t],
                rows: mine,
                slots: my_slots,
            });
        }
        jobs
    }

    /// Each cut row of `out` (`r` wide) = the sum of its pieces' partial slots (laid out
    /// by [`Plan::cut_jobs`]), added in piece order in f64 and rounded once (a row of
    /// hundreds of pieces would otherwise add their rounding to its own).
    pub(super) fn add_cut_rows<T: Widen>(&self, partial: &[T], r: usize, out: &mut [T]) {
        let mut slot = 0;
        let mut sum = vec![0f64; r];
        for &i in &self.cut_rows {
            let n = self.first[i + 1] - self.first[i];
            sum.fill(0.0);
            for p in partial[slot * r..(slot + n) * r].chunks_exact(r.max(1)) {
                for (a, &b) in sum.iter_mut().zip(p) {
                    *a += b.wide();
                }
            }
            for (o, &a) in out[i * r..(i + 1) * r].iter_mut().zip(&sum) {
                *o = T::narrow(a);
            }
            slot += n;
        }
    }

    /// `rows` (the mode's `r`-wide rows) cut into each whole-row task's range `r0..r1`
    /// and its rows, for the workers.
    pub(super) fn row_jobs<'a, T>(
        &self,
        rows: &'a mut [T],
        r: usize,
    ) -> Vec<(usize, usize, &'a mut [T])> {
        let mut rest = rows;
        let mut jobs = Vec::with_capacity(self.row_tasks.len());
        for &(r0, r1) in &self.row_tasks {
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut((r1 - r0) * r);
            rest = tail;
            jobs.push((r0, r1, mine));
        }
        jobs
    }
}

impl RowGroups {
    /// Runs `f` on the rows `rows` (row `rows[k]`: its nonzeros' `d` other indices
    /// each and values, and row `k` of `out`, `width` wide), rows in parallel.
    fn each_row(&self, d: usize, width: usize, f: &RowKernel, rows: &[u32], out: &mut Matrix) {
        out.data_mut()
            .par_chunks_mut(width)
            .zip(rows.par_iter())
            .with_min_len(4)
            .for_each_init(FlushSubnormals::new, |_, (dst, &i)| {
                let i = i as usize;
                let (s, e) = (self.ptr()[i], self.ptr()[i + 1]);
                f(&self.others()[s * d..e * d], &self.values()[s..e], dst);
            });
    }

    /// [`RowGroups::each_row`] for a kernel that returns a number per row, into `sums`
    /// (resized to `out`'s rows).
    fn each_row_sum(
        &self,
        d: usize,
        width: usize,
        f: &RowSumKernel,
        rows: &[u32],
        out: &mut Matrix,
        sums: &mut Vec<f64>,
    ) {
        sums.resize(out.rows(), 0.0);
        out.data_mut()
            .par_chunks_mut(width)
            .zip(sums.par_iter_mut())
            .zip(rows.par_iter())
            .with_min_len(4)
            .for_each_init(FlushSubnormals::new, |_, ((dst, sum), &i)| {
                let i = i as usize;
                let (s, e) = (self.ptr()[i], self.ptr()[i + 1]);
                *sum = f(&self.others()[s * d..e * d], &self.values()[s..e], dst);
            });
    }

    /// Writes the `G_i` (row-major `R × R`) and `b_i` of the rows `rows` into `out`
    /// (`rows.len() × (R² + R)`), `others` the other modes' factors in mode order.
    pub(super) fn normal_equations(
        &self,
        others: &[&Matrix],
        rank: usize,
        rows: &[u32],
        out: &mut Matrix,
    ) {
        let width = rank * rank + rank;
        let d = others.len();
        let p = if d == 0 { 0 } else { padded_width(rank) };
        let padded: Vec<Cow<[f32]>> = others.iter().map(|m| pad_rows(m, p)).collect();
        let facs: Vec<&[f32]> = padded.iter().map(|f| &f[..]).collect();
        let rows = |f: &RowKernel, out: &mut Matrix| self.each_row(d, width, f, rows, out);
        // Ranks between the register-blocked widths (a CP rank plus bias columns, say
        // 16 + 3) run zero-padded to the next width rather than unblocked.
        let r = rank;
        match p {
            8 => rows(&|o, v, dst| row_system::<8>(r, o, v, &facs, dst), out),
            16 => rows(&|o, v, dst| row_system::<16>(r, o, v, &facs, dst), out),
            24 => rows(&|o, v, dst| row_system::<24>(r, o, v, &facs, dst), out),
            32 => rows(&|o, v, dst| row_system::<32>(r, o, v, &facs, dst), out),
            40 => rows(&|o, v, dst| row_system::<40>(r, o, v, &facs, dst), out),
            48 => rows(&|o, v, dst| row_system::<48>(r, o, v, &facs, dst), out),
            64 => rows(&|o, v, dst| row_system::<64>(r, o, v, &facs, dst), out),
            _ => rows(&|o, v, dst| row_system_any(rank, o, v, &facs, dst), out),
        }
    }
}

impl RowGroups {
    /// [`RowGroups::normal_equations`] in the bias layout
    /// ([`crate::engine::CompletionSession::bias_normal_equations`]): `others` of `k`
    /// columns (`rank` CP columns, then one bias column per mode, the fixed ones at 1),
    /// the target mode `mode`; `out` is `rows.len() × (w² + w)`, `w = rank + 1`. The Gram
    /// matrix runs at the CP rank's width; the bias unknown's Khatri-Rao entry is 1 and
    /// the other modes' biases (moved to the right-hand side) one sum per nonzero, so
    /// the bias columns cost no Gram rows. Each row's `Σ y²` (its targets `y`: the
    /// values minus the other modes' biases) goes into `squares`; above the blocked
    /// widths `squares` is left empty. `wide`: CP ranks 9 to 64 run on AVX-512
    /// ([`super::avx512`], padded to a multiple of 16; the caller checked the CPU has
    /// it).
    #[allow(clippy::too_many_arguments)] // the session's call, plus the vector width
    pub(super) fn bias_normal_equations(
        &self,
        others: &[&Matrix],
        k: usize,
        rank: usize,
        mode: usize,
        rows: &[u32],
        out: &mut Matrix,
        squares: &mut Vec<f64>,
        wide: bool,
    ) {
        let w = rank + 1;
        let width = w * w + w;
        let wide_p = if wide { avx512::padded_width(rank) } else { 0 };
        let p = if wide_p > 0 {
            wide_p
        } else {
            padded_width(rank)
        };
        let d = others.len();
        if d == 0 || p == 0 {
            // Above the blocked widths: the full system, reduced.
            let mut full = Matrix::zeros(out.rows(), k * k + k);
            self.normal_equations(others, k, rows, &mut full);
            *out = crate::engine::completion::reduce_to_bias(&full, k, rank, mode);
            squares.clear();
            return;
        }
        let mut rows =
            |f: &RowSumKernel, out: &mut Matrix| self.each_row_sum(d, width, f, rows, out, squares);
        macro_rules! run {
            ($p:literal) => {{
                let f = BiasFactors::<$p>::new(others, rank, mode);
                rows(&|o, v, dst| row_system_bias::<$p>(&f, rank, o, v, dst), out)
            }};
        }
        macro_rules! wide {
            ($p:literal) => {{
                const B: usize = avx512::block($p);
                let f = BiasFactors::<$p>::new(others, rank, mode);
                // SAFETY: `wide` only where the CPU has AVX-512F.
                rows(
                    &|o, v, dst| unsafe { avx512::row_system_bias::<$p, B>(&f, rank, o, v, dst) },
                    out,
                )
            }};
        }
        match (wide_p, p) {
            (16, _) => wide!(16),
            (32, _) => wide!(32),
            (48, _) => wide!(48),
            (64, _) => wide!(64),
            (_, 8) => run!(8),
            (_, 16) => run!(16),
            (_, 24) => run!(24),
            (_, 32) => run!(32),
            (_, 40) => run!(40),
            (_, 48) => run!(48),
            _ => run!(64),
        }
    }

    /// `Σ (x − m(i))²` over every nonzero in f64, `own` the factor of this mode and
    /// `others` those of the other modes in mode order. Rows are summed in fixed blocks
    /// and the blocks in order, so the result does not depend on the thread count.
    pub(super) fn loss(&self, own: &Matrix, others: &[&Matrix], rank: usize) -> f64 {
        const ROWS: usize = 64;
        let p = if others.is_empty() {
            0
        } else {
            padded_width(rank)
        };
        let padded: Vec<Cow<[f32]>> = others.iter().map(|m| pad_rows(m, p)).collect();
        let facs: Vec<&[f32]> = padded.iter().map(|f| &f[..]).collect();
        let rows = self.ptr().len() - 1;
        let block = |b: usize| -> f64 {
            let _flush = FlushSubnormals::new();
            let mut sum = 0f64;
            for i in b * ROWS..((b + 1) * ROWS).min(rows) {
                let (s, e) = (self.ptr()[i], self.ptr()[i + 1]);
                let d = facs.len();
                let (ix, vals) = (&self.others()[s * d..e * d], &self.values()[s..e]);
                let a = own.row(i);
                sum += match p {
                    8 => row_loss::<8>(a, ix, vals, &facs),
                    16 => row_loss::<16>(a, ix, vals, &facs),
                    24 => row_loss::<24>(a, ix, vals, &facs),
                    32 => row_loss::<32>(a, ix, vals, &facs),
                    40 => row_loss::<40>(a, ix, vals, &facs),
                    48 => row_loss::<48>(a, ix, vals, &facs),
                    64 => row_loss::<64>(a, ix, vals, &facs),
                    _ => row_loss_any(a, ix, vals, &facs),
                };
            }
            sum
        };
        let parts: Vec<f64> = (0..rows.div_ceil(ROWS))
            .into_par_iter()
            .map(block)
            .collect();
        parts.iter().sum()
    }
}
