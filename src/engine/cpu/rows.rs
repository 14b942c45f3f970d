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

use super::completion::visit;
use super::kernel::Share;
use super::subnormal::FlushSubnormals;
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::{Matrix, check_alloc};
use rayon::prelude::*;
use std::borrow::Cow;

/// Khatri-Rao rows formed per chunk (a chunk of rank-32 rows is 4 KiB: L1-resident).
const CHUNK: usize = 32;

/// A row's kernel: its nonzeros' other indices and values in, its system out.
type RowKernel<'a> = dyn Fn(&[u32], &[f32], &mut [f32]) + Sync + 'a;

/// Most nonzeros of one piece of a row (longer rows are cut, so that a mode with a few
/// long rows, e.g. 5 time steps, still spreads over the workers). A mode whose rows
/// are all shorter runs MU's inner iterations row by row, so the cut is not made
/// finer than it must be: with 8192 instead of 2048, movielens-100k's 31 weeks and
/// most of movielens-10m-tags-4d run row by row (2 % fewer instructions on 10m-tags).
pub(super) const PIECE: usize = 8192;
/// Nonzeros per parallel task (consecutive pieces, or whole rows).
pub(super) const TASK: usize = 4096;

/// One worker's pieces (row, start, end) and their partial rows.
pub(super) type PieceJob<'a, T> = (&'a [(usize, usize, usize)], &'a mut [T]);

/// How one mode's rows are cut for the row-by-row kernels (Φ, MTTKRP): into pieces of
/// at most [`PIECE`] nonzeros, consecutive pieces grouped into tasks of about [`TASK`].
/// Fixed by the tensor, not the thread count; each piece sums into its own partial
/// row, and a row's pieces are added in order, so results do not depend on the thread
/// count.
pub(super) struct Plan {
    /// Per piece: its row and its nonzeros `start..end` in the mode's row order.
    pub(super) pieces: Vec<(usize, usize, usize)>,
    /// Row `i`'s pieces are `first[i]..first[i + 1]` (none for an empty row).
    pub(super) first: Vec<usize>,
    /// Per task: its pieces `a..b`.
    pub(super) tasks: Vec<(usize, usize)>,
    /// Whether some row was cut (longer than [`PIECE`]).
    pub(super) cut: bool,
    /// Tasks of whole rows `r0..r1` of about [`TASK`] nonzeros (every row, empty ones
    /// included), for [`PhiSession::mu_inner`]'s row-by-row iterations.
    pub(super) row_tasks: Vec<(usize, usize)>,
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
        Plan {
            cut: pieces.len() > first.windows(2).filter(|w| w[1] > w[0]).count(),
            pieces,
            first,
            tasks,
            row_tasks,
        }
    }

    /// `partial` (one `r`-wide row per piece) cut into each task's pieces and their
    /// partial rows, for the workers.
    pub(super) fn piece_jobs<'a, T>(
        &'a self,
        partial: &'a mut [T],
        r: usize,
    ) -> Vec<PieceJob<'a, T>> {
        let mut rest = partial;
        let mut jobs = Vec::with_capacity(self.tasks.len());
        for &(a, e) in &self.tasks {
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut((e - a) * r);
            rest = tail;
            jobs.push((&self.pieces[a..e], mine));
        }
        jobs
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

    /// Row `i` of `out` (`r` wide) = the sum of its pieces' rows of `partial`, added in
    /// piece order (0 for a row with none), rows in parallel.
    pub(super) fn add_pieces<T>(&self, partial: &[T], r: usize, out: &mut [T])
    where
        T: Copy + Default + std::ops::AddAssign + Send + Sync,
    {
        const ROWS: usize = 256;
        let first = &self.first;
        out.par_chunks_mut(ROWS * r.max(1))
            .enumerate()
            .for_each(|(blk, o)| {
                let _flush = FlushSubnormals::new();
                for (k, orow) in o.chunks_exact_mut(r.max(1)).enumerate() {
                    let i = blk * ROWS + k;
                    orow.fill(T::default());
                    for p in partial[first[i] * r..first[i + 1] * r].chunks_exact(r) {
                        for (a, &b) in orow.iter_mut().zip(p) {
                            *a += b;
                        }
                    }
                }
            });
    }
}

/// One mode's nonzeros grouped by row.
pub(super) struct RowGroups {
    /// Row `i`'s nonzeros are `ptr[i]..ptr[i + 1]`.
    ptr: Vec<usize>,
    /// Per nonzero, the indices of the other modes, in mode order (`order − 1` each).
    others: Vec<u32>,
    /// Per nonzero, its value minus the session's offset.
    values: Vec<f32>,
}

impl RowGroups {
    /// The rows' nonzero ranges: row `i`'s nonzeros are `ptr()[i]..ptr()[i + 1]`.
    pub(super) fn ptr(&self) -> &[usize] {
        &self.ptr
    }

    /// Per nonzero, the other modes' indices (`order − 1` each, in mode order).
    pub(super) fn others(&self) -> &[u32] {
        &self.others
    }

    /// Per nonzero, its value minus the offset it was built with.
    pub(super) fn values(&self) -> &[f32] {
        &self.values
    }

    /// Bytes it holds: offsets, indices and values.
    pub(super) fn bytes(&self) -> usize {
        self.ptr.len() * std::mem::size_of::<usize>() + 4 * (self.others.len() + self.values.len())
    }

    /// Groups the nonzeros of `hls` (visited share by share, values minus `offset`)
    /// by their index in every mode: one [`RowGroups`] per mode.
    pub(super) fn build(hls: &HlsTensor, shares: &[Share], offset: f32) -> Result<Vec<Self>> {
        let (order, dims, nnz) = (hls.order(), hls.dims(), hls.nnz());
        check_alloc("the row-grouped nonzeros of ALS", nnz, order * order, 4)?;
        let mut counts: Vec<Vec<usize>> = dims.iter().map(|&d| vec![0; d + 1]).collect();
        for share in shares {
            visit(hls, share, offset, |_, c, _| {
                for (cnt, &i) in counts.iter_mut().zip(c) {
                    cnt[i as usize + 1] += 1;
                }
            });
        }
        let mut groups: Vec<RowGroups> = counts
            .into_iter()
            .map(|mut ptr| {
                for i in 1..ptr.len() {
                    ptr[i] += ptr[i - 1];
                }
                RowGroups {
                    ptr,
                    others: vec![0; nnz * (order - 1)],
                    values: vec![0.0; nnz],
                }
            })
            .collect();
        let mut next: Vec<Vec<usize>> = groups.iter().map(|g| g.ptr.clone()).collect();
        for share in shares {
            visit(hls, share, offset, |_, c, x| {
                for (mode, (g, nx)) in groups.iter_mut().zip(&mut next).enumerate() {
                    let p = nx[c[mode] as usize];
                    nx[c[mode] as usize] += 1;
                    g.values[p] = x;
                    let o = &mut g.others[p * (order - 1)..(p + 1) * (order - 1)];
                    for (dst, (_, &ci)) in o
                        .iter_mut()
                        .zip(c.iter().enumerate().filter(|&(m, _)| m != mode))
                    {
                        *dst = ci;
                    }
                }
            });
        }
        Ok(groups)
    }

    /// Writes every row's `G_i` (row-major `R × R`) and `b_i` into `out`
    /// (`rows × (R² + R)`), `others` the factors of the other modes in mode order.
    pub(super) fn normal_equations(&self, others: &[&Matrix], rank: usize, out: &mut Matrix) {
        let width = rank * rank + rank;
        let d = others.len();
        let p = if d == 0 { 0 } else { padded_width(rank) };
        let padded: Vec<Cow<[f32]>> = others.iter().map(|m| pad_rows(m, p)).collect();
        let facs: Vec<&[f32]> = padded.iter().map(|f| &f[..]).collect();
        let rows = |f: &RowKernel, out: &mut Matrix| {
            out.data_mut()
                .par_chunks_mut(width)
                .enumerate()
                .with_min_len(4)
                .for_each_init(FlushSubnormals::new, |_, (i, dst)| {
                    let (s, e) = (self.ptr[i], self.ptr[i + 1]);
                    f(&self.others[s * d..e * d], &self.values[s..e], dst);
                });
        };
        // Ranks between the register-blocked widths (a CP rank plus bias columns, say
        // 16 + 3) run zero-padded to the next width rather than unblocked.
        let r = rank;
        match p {
            8 => rows(&|o, v, dst| row_system::<8, 8>(r, o, v, &facs, dst), out),
            16 => rows(&|o, v, dst| row_system::<16, 4>(r, o, v, &facs, dst), out),
            24 => rows(&|o, v, dst| row_system::<24, 3>(r, o, v, &facs, dst), out),
            32 => rows(&|o, v, dst| row_system::<32, 2>(r, o, v, &facs, dst), out),
            40 => rows(&|o, v, dst| row_system::<40, 2>(r, o, v, &facs, dst), out),
            48 => rows(&|o, v, dst| row_system::<48, 1>(r, o, v, &facs, dst), out),
            64 => rows(&|o, v, dst| row_system::<64, 1>(r, o, v, &facs, dst), out),
            _ => rows(&|o, v, dst| row_system_any(rank, o, v, &facs, dst), out),
        }
    }
}

impl RowGroups {
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
        let rows = self.ptr.len() - 1;
        let block = |b: usize| -> f64 {
            let _flush = FlushSubnormals::new();
            let mut sum = 0f64;
            for i in b * ROWS..((b + 1) * ROWS).min(rows) {
                let (s, e) = (self.ptr[i], self.ptr[i + 1]);
                let d = facs.len();
                let (ix, vals) = (&self.others[s * d..e * d], &self.values[s..e]);
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

/// The register-blocked width a rank runs at: the smallest of 8, 16, 24, 32, 40, 48
/// and 64 that holds it (0 above 64: the unblocked kernels).
fn padded_width(rank: usize) -> usize {
    match rank {
        0..=8 => 8,
        9..=48 => rank.div_ceil(8) * 8,
        49..=64 => 64,
        _ => 0,
    }
}

/// `m`'s rows padded with zeros to `p` columns (`m` itself when it has `p` columns,
/// or when `p` is 0: the unblocked kernels), so that the blocked kernels' loops over a
/// row have a constant length.
fn pad_rows(m: &Matrix, p: usize) -> Cow<'_, [f32]> {
    let c = m.cols();
    if p == 0 || p == c {
        return Cow::Borrowed(m.data());
    }
    let mut out = vec![0f32; m.rows() * p];
    for (o, row) in out.chunks_exact_mut(p).zip(m.data().chunks_exact(c.max(1))) {
        o[..c].copy_from_slice(row);
    }
    Cow::Owned(out)
}

/// One row's `Σ (x − a·k)²` for a rank `r = a.len() ≤ P`, run `P` wide on factors
/// padded to `P` columns ([`pad_rows`]). Each model value is summed as 8 lanes, then the lanes (not one chain of
/// `P` dependent additions per nonzero).
#[inline(always)]
fn row_loss<const P: usize>(a: &[f32], others: &[u32], values: &[f32], facs: &[&[f32]]) -> f64 {
    let (d, r) = (facs.len(), a.len());
    let mut own = [0f32; P];
    own[..r].copy_from_slice(a);
    let mut sum = 0f64;
    for (ix, &x) in others.chunks_exact(d).zip(values) {
        let mut k = own;
        for (f, &i) in facs.iter().zip(ix) {
            for (kr, &v) in k.iter_mut().zip(&f[i as usize * P..][..P]) {
                *kr *= v;
            }
        }
        let mut lanes = [0f32; 8];
        for c in k.chunks_exact(8) {
            for (l, &v) in lanes.iter_mut().zip(c) {
                *l += v;
            }
        }
        let m = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
            + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
        let e = f64::from(x - m);
        sum += e * e;
    }
    sum
}

/// [`row_loss`] for any rank and order.
fn row_loss_any(a: &[f32], others: &[u32], values: &[f32], facs: &[&[f32]]) -> f64 {
    let (d, r) = (facs.len(), a.len());
    let mut k = vec![0f32; r];
    let mut sum = 0f64;
    for (j, &x) in values.iter().enumerate() {
        k.copy_from_slice(a);
        for (f, &i) in facs.iter().zip(&others[j * d..(j + 1) * d]) {
            for (kr, &v) in k.iter_mut().zip(&f[i as usize * r..][..r]) {
                *kr *= v;
            }
        }
        let e = f64::from(x - k.iter().sum::<f32>());
        sum += e * e;
    }
    sum
}

/// One row's system for a rank `r ≤ P`, run `P` wide on factors padded to `P` columns
/// ([`pad_rows`]; the padding's entries of `G` and `b` are never written out), `B` rows
/// of `G` accumulated at a time (`P·B ≤ 96` floats: at most 12 AVX registers). `others`
/// holds `d = facs.len()` indices per nonzero.
#[inline(always)]
fn row_system<const P: usize, const B: usize>(
    r: usize,
    others: &[u32],
    values: &[f32],
    facs: &[&[f32]],
    dst: &mut [f32],
) {
    let d = facs.len();
    let mut g = [[0f32; P]; P];
    let mut b = [0f32; P];
    let mut k = [[0f32; P]; CHUNK];
    for (idx, vals) in others.chunks(CHUNK * d).zip(values.chunks(CHUNK)) {
        let n = vals.len();
        for (j, (kj, &x)) in k.iter_mut().zip(vals).enumerate() {
            let ix = &idx[j * d..(j + 1) * d];
            kj.copy_from_slice(&facs[0][ix[0] as usize * P..][..P]);
            for (f, &i) in facs.iter().zip(ix).skip(1) {
                let row = &f[i as usize * P..][..P];
                for (kr, &a) in kj.iter_mut().zip(row) {
                    *kr *= a;
                }
            }
            for (br, &kr) in b.iter_mut().zip(kj.iter()) {
                *br = x.mul_add(kr, *br);
            }
        }
        // G is symmetric: rows a0.. need only the columns from their 8-wide column
        // block on (the rest is mirrored below). The block's start is a constant of
        // `gram_rows`, so its accumulators stay in registers.
        for a0 in (0..r).step_by(B) {
            let k = &k[..n];
            match a0 / 8 {
                0 => gram_rows::<P, B, 0>(k, a0, &mut g),
                1 => gram_rows::<P, B, 8>(k, a0, &mut g),
                2 => gram_rows::<P, B, 16>(k, a0, &mut g),
                3 => gram_rows::<P, B, 24>(k, a0, &mut g),
                4 => gram_rows::<P, B, 32>(k, a0, &mut g),
                5 => gram_rows::<P, B, 40>(k, a0, &mut g),
                6 => gram_rows::<P, B, 48>(k, a0, &mut g),
                _ => gram_rows::<P, B, 56>(k, a0, &mut g),
            }
        }
    }
    for (p, o) in dst.chunks_exact_mut(r).take(r).enumerate() {
        for (q, v) in o.iter_mut().enumerate() {
            *v = if q < p { g[q][p] } else { g[p][q] };
        }
    }
    dst[r * r..].copy_from_slice(&b[..r]);
}

/// Adds `Σ_j k_j[a0 + t] · k_j[c]` for `t < B` and columns `c ≥ C0` to `g`'s rows
/// `a0..a0 + B` (`C0 ≤ a0`, so that with the mirror this covers the rows' upper part).
#[inline(always)]
fn gram_rows<const P: usize, const B: usize, const C0: usize>(
    k: &[[f32; P]],
    a0: usize,
    g: &mut [[f32; P]; P],
) {
    if C0 >= P {
        return;
    }
    let mut acc = [[0f32; P]; B];
    for kj in k {
        for (t, acc_t) in acc.iter_mut().enumerate() {
            let s = kj[a0 + t];
            for (c, &kc) in acc_t[C0..].iter_mut().zip(&kj[C0..]) {
                *c = s.mul_add(kc, *c);
            }
        }
    }
    for (gt, acc_t) in g[a0..a0 + B].iter_mut().zip(&acc) {
        for (x, &y) in gt[C0..].iter_mut().zip(&acc_t[C0..]) {
            *x += y;
        }
    }
}

/// [`row_system`] for any rank and order (no register blocking).
fn row_system_any(r: usize, others: &[u32], values: &[f32], facs: &[&[f32]], dst: &mut [f32]) {
    let d = facs.len();
    dst.fill(0.0);
    let (g, b) = dst.split_at_mut(r * r);
    let mut k = vec![0f32; r];
    for (j, &x) in values.iter().enumerate() {
        let ix = &others[j * d..(j + 1) * d];
        k.fill(1.0);
        for (f, &i) in facs.iter().zip(ix) {
            for (kr, &a) in k.iter_mut().zip(&f[i as usize * r..][..r]) {
                *kr *= a;
            }
        }
        for (gr, &ka) in g.chunks_exact_mut(r).zip(&k) {
            for (x, &kb) in gr.iter_mut().zip(&k) {
                *x = ka.mul_add(kb, *x);
            }
        }
        for (br, &kr) in b.iter_mut().zip(&k) {
            *br = x.mul_add(kr, *br);
        }
    }
}
