//! MTTKRP at ranks other than the specialized widths: on factors padded to the next
//! width, or in column blocks, each at a specialized width.
//!
//! The CPU's MTTKRP kernels are compiled for ranks 8, 16, 32 and 64 (rows of whole
//! 8-lane vectors, every loop of known length; the row kernels also for 48); any other
//! rank takes the generic walker,
//! which was 2.5–6× slower per call at ranks 20 and 24 than at 32 on a 2 M-nonzero
//! tensor, and 5× slower at rank 128 than two calls at rank 64.
//!
//! Below 64 (on orders from 2, where the row kernels have their widths) the
//! row kernels read copies of the factors padded with zero columns to the next width
//! ([`factor_width`]) and write the output at the rank's own width ([`PaddedFactors`]:
//! the copies are kept between calls, and made again only for a factor the caller
//! says changed). Read in place at the rank's stride instead, a row of rank 10 or 20
//! does not start on a cache line, and the gathers that miss the cache touched about
//! half as many lines again: rank 10 took 1.7× as long as rank 16 on a tensor whose
//! factors are far larger than the cache.
//!
//! Elsewhere a rank that is not one of the widths (above 64, on a tensor with enough
//! nonzeros per factor row to pay for the copies: [`column_blocks`]; below, where the
//! walk runs) runs as passes over blocks of at most 64 of its columns: each pass on
//! copies of the block's columns of the other modes' factors, padded with zero columns
//! to the next width, and its output's first columns go to the block's columns of the
//! result. The padding columns multiply to exact zeros and never touch the real ones,
//! and each output column depends only on the same column of the factors, so the result
//! is the rank-`r` MTTKRP. Each pass reads the nonzeros again; the factor rows it
//! gathers are the block's only, so the rows' bytes are read once in all.

use super::factor_rows::lanes;
use crate::engine::{FactorKey, FactorVersions};
use crate::matrix::Matrix;
use rayon::prelude::*;
use std::ops::Range;

/// The width the row kernels read a rank-`rank` factor at, on a tensor of `order`
/// modes: the next compiled width for a rank between them below 64 (orders 2 to 6
/// have their specializations, higher ones [`super::row_sums::row_sum_any`]'s loop over
/// the modes), else the rank.
pub(crate) fn factor_width(rank: usize, order: usize) -> usize {
    match lanes(rank) {
        w if w > rank && order >= 2 => w,
        _ => rank,
    }
}

/// Copies of a call's factors padded with zero columns to their [`factor_width`], kept
/// between calls: a factor is copied again only where its key
/// ([`FactorVersions::key`]) differs from the copy's, or the call has no keys. A
/// CP-ALS iteration so copies each factor once, after its update, where blocks of
/// columns copied every other mode's factor at every call and the output back.
#[derive(Debug, Default)]
pub(super) struct PaddedFactors {
    /// Per mode, the copy.
    copies: Vec<Matrix>,
    /// Per mode, the key of the factor its copy was made from (`None`: not to be
    /// reused).
    keys: Vec<Option<FactorKey>>,
}

impl PaddedFactors {
    /// Brings the copies of every factor but `mode`'s up to `factors`, `width` columns
    /// each; `versions` the caller's keys of `factors` (`None` where the call has none,
    /// or the factors the kernel reads are not the caller's: rescaled).
    pub(super) fn refresh(
        &mut self,
        factors: &[Matrix],
        mode: usize,
        width: usize,
        versions: Option<&FactorVersions>,
    ) {
        if self.copies.len() != factors.len() {
            self.copies = factors.iter().map(|_| Matrix::zeros(0, 0)).collect();
            self.keys = vec![None; factors.len()];
        }
        let held = self.copies.iter_mut().zip(&mut self.keys);
        for (m, (f, (copy, key))) in factors.iter().zip(held).enumerate() {
            if m == mode {
                continue;
            }
            let now = versions
                .filter(|v| v.modes() == factors.len())
                .map(|v| v.key(m));
            let shape = (f.rows(), width);
            if now.is_some() && *key == now && copy.shape() == shape {
                continue;
            }
            if copy.shape() != shape {
                *copy = Matrix::zeros(f.rows(), width);
            }
            pad_into(f, 0..f.cols(), copy);
            *key = now;
        }
    }

    /// The copies: of every mode's factor but the last call's target's, which is of
    /// unspecified shape and contents (the kernel does not read it).
    pub(super) fn factors(&self) -> &[Matrix] {
        &self.copies
    }
}

/// `dst`'s first `cols.len()` columns = columns `cols` of `f`, the rest zero (`dst`
/// has `f`'s rows); past the cache where `dst` is larger than the last-level cache.
fn pad_into(f: &Matrix, cols: Range<usize>, dst: &mut Matrix) {
    let llc = super::cache_sizes::CacheSizes::of_this_machine().llc;
    pad_rows(f, cols, dst, std::mem::size_of_val(dst.data()) > llc);
}

/// [`pad_into`], with non-temporal stores where `past` (and the rows are whole 8-float
/// vectors, as every compiled width is): a copy larger than the cache is written
/// without first reading each of its lines in. A 4 M-row factor at rank 20 padded to
/// 32 writes 512 MB; read in first, they would be a third of the copy's traffic.
fn pad_rows(f: &Matrix, cols: Range<usize>, dst: &mut Matrix, past: bool) {
    let (fc, c, w) = (f.cols(), cols.len(), dst.cols());
    debug_assert!(c <= w && c <= 64, "{c} columns padded to {w}");
    let past = past && w.is_multiple_of(8) && w <= 64;
    dst.data_mut()
        .par_chunks_mut(w.max(1) * 1024)
        .zip(f.data().par_chunks(fc.max(1) * 1024))
        .for_each(|(d, s)| {
            for (d, s) in d.chunks_exact_mut(w.max(1)).zip(s.chunks_exact(fc.max(1))) {
                let s = &s[cols.clone()];
                if past {
                    // Vector by vector, the one holding the row's end (and those past
                    // it) lane by lane: a copy of a run-time length per row (a call
                    // to memcpy) made rank 10 slower than no streaming.
                    for (k, d) in d.chunks_exact_mut(8).enumerate() {
                        let mut v = [0f32; 8];
                        match s.get(8 * k..8 * k + 8) {
                            Some(whole) => v.copy_from_slice(whole),
                            None => {
                                for (j, x) in v.iter_mut().enumerate() {
                                    if let Some(&y) = s.get(8 * k + j) {
                                        *x = y;
                                    }
                                }
                            }
                        }
                        super::nt_store::store_past_cache(d, &v);
                    }
                } else {
                    d[..c].copy_from_slice(&s[..c]);
                    d[c..].fill(0.0);
                }
            }
            if past {
                super::nt_store::store_fence();
            }
        });
}

/// The widest specialized width: a block holds at most this many columns.
const WIDEST: usize = 64;

/// One pass of a blocked MTTKRP: columns `cols` of the rank, run at `width`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnBlock {
    /// The block's columns of the factors and of the result.
    pub cols: Range<usize>,
    /// The specialized width the pass runs at (at least the block's column count).
    pub width: usize,
}

/// The specialized width a block of `cols` columns (at most 64) runs at.
fn width_of(cols: usize) -> usize {
    match cols {
        0..=8 => 8,
        9..=16 => 16,
        17..=32 => 32,
        _ => WIDEST,
    }
}

/// The passes an MTTKRP of rank `rank` takes on the CPU, on a tensor of `nnz` nonzeros
/// whose modes have `rows` rows in all: `None` where it runs once on the factors as
/// given, at a specialized width (or rank 0) or by the generic walker; else blocks of
/// 64 columns, the last one of the rest at the next width.
///
/// Above rank 64 the copies cost `rows × rank` per call and the kernels save in
/// proportion to `nnz`: at rank 100, the blocks took a quarter of the walker's time
/// with 6.7 nonzeros per row (2 M × 1 M × 1000, 20 M nonzeros) and 1.26 times it with
/// 0.72 (4 M × 1 M × 300, 3.6 M nonzeros). So they are taken from
/// [`BLOCKED_NONZEROS_PER_ROW`] nonzeros per row. Below 64 one pass at the next width
/// beat the walker on both (rank 20: 0.13 s against 0.20 s per iteration on the second).
pub fn column_blocks(rank: usize, nnz: usize, rows: usize) -> Option<Vec<ColumnBlock>> {
    if matches!(rank, 0 | 8 | 16 | 32 | 64)
        || (rank > WIDEST && (nnz as f64) < BLOCKED_NONZEROS_PER_ROW * rows as f64)
    {
        return None;
    }
    let blocks = (0..rank)
        .step_by(WIDEST)
        .map(|start| {
            let end = (start + WIDEST).min(rank);
            ColumnBlock {
                cols: start..end,
                width: width_of(end - start),
            }
        })
        .collect();
    Some(blocks)
}

/// Nonzeros per factor row from which a rank above 64 runs in blocks
/// ([`column_blocks`]): between the two measured points, 0.72 (the walker faster) and
/// 6.7 (the blocks 3.8 times faster).
pub const BLOCKED_NONZEROS_PER_ROW: f64 = 2.0;

/// The columns of padded copies an MTTKRP of rank `rank` on the CPU holds during a
/// call where it runs in blocks (`padded::column_blocks`): the sum of its passes'
/// distinct widths (the buffers of one width are kept while the last, narrower pass
/// takes its own); `None` when the rank is a specialized width and nothing is copied.
/// Below 64 that is the next width, which also covers the row kernels' padded factors
/// (`PaddedFactors`: one copy per mode, at most as many rows as the plan counts for
/// the blocks' copies and output).
pub fn width_for(rank: usize) -> Option<usize> {
    let blocks = column_blocks(rank, usize::MAX, 0)?;
    let mut widths: Vec<usize> = blocks.iter().map(|b| b.width).collect();
    widths.dedup();
    Some(widths.iter().sum())
}

/// Buffers of blocked MTTKRPs kept between calls, so that a call's copies land on
/// pages already faulted in rather than on fresh pages the kernel zeroes at every
/// call (as the walk's private outputs are kept). A call takes them out and puts back
/// those of its widest pass: one matrix per mode (a copy of each other mode's factor
/// and the output are of their modes' shapes), as the memory plan counts them.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    free: Vec<Matrix>,
}

impl Scratch {
    /// A `rows × width` matrix of unspecified contents.
    pub(super) fn take(&mut self, rows: usize, width: usize) -> Matrix {
        match self.free.iter().position(|m| m.shape() == (rows, width)) {
            Some(i) => self.free.swap_remove(i),
            None => Matrix::zeros(rows, width),
        }
    }

    /// Gives `m` back for the passes and calls that follow.
    pub(super) fn give(&mut self, m: Matrix) {
        self.free.push(m);
    }

    /// Drops every buffer narrower than `width`.
    pub(super) fn keep_width(&mut self, width: usize) {
        self.free.retain(|m| m.cols() >= width);
    }
}

/// Copies of columns `cols` of `factors` with `width` columns, zeros after their own,
/// in buffers from `scratch`; the factor of `mode`, which MTTKRP does not read, as
/// zeros of the same shape (left untouched, its pages are never faulted in).
pub(super) fn pad_factors(
    factors: &[Matrix],
    mode: usize,
    cols: Range<usize>,
    width: usize,
    scratch: &mut Scratch,
) -> Vec<Matrix> {
    factors
        .iter()
        .enumerate()
        .map(|(m, f)| {
            if m == mode {
                return Matrix::zeros(f.rows(), width);
            }
            let mut g = scratch.take(f.rows(), width);
            pad_into(f, cols.clone(), &mut g);
            g
        })
        .collect()
}

/// Writes the first `cols.len()` columns of `wide` into columns `cols` of `out`.
pub(super) fn narrow_into(wide: &Matrix, cols: Range<usize>, out: &mut Matrix) {
    let (c, w, n) = (out.cols(), wide.cols(), cols.len());
    out.data_mut()
        .par_chunks_mut(c.max(1) * 1024)
        .zip(wide.data().par_chunks(w * 1024))
        .for_each(|(dst, src)| {
            for (d, s) in dst.chunks_exact_mut(c.max(1)).zip(src.chunks_exact(w)) {
                d[cols.clone()].copy_from_slice(&s[..n]);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_every_column_once_at_the_next_width() {
        for r in 1..=300 {
            let Some(blocks) = column_blocks(r, usize::MAX, 1) else {
                assert!([8, 16, 32, 64].contains(&r), "rank {r} runs unblocked");
                continue;
            };
            assert!(![8, 16, 32, 64].contains(&r), "rank {r} is blocked");
            let mut next = 0;
            for b in &blocks {
                assert_eq!(b.cols.start, next, "rank {r}: blocks not contiguous");
                let n = b.cols.len();
                assert!((1..=64).contains(&n), "rank {r}: block of {n} columns");
                assert!([8, 16, 32, 64].contains(&b.width) && b.width >= n);
                assert!(
                    b.width / 2 < n || b.width == 8,
                    "rank {r}: {n} at {}",
                    b.width
                );
                next = b.cols.end;
            }
            assert_eq!(next, r, "rank {r}: blocks do not end at the rank");
            assert_eq!(
                blocks.len(),
                r.div_ceil(64),
                "rank {r}: more passes than needed"
            );
            // Every width but the last is 64; the copies held are one set per width.
            let held = if blocks.len() > 1 && blocks[blocks.len() - 1].width < 64 {
                64 + blocks[blocks.len() - 1].width
            } else {
                blocks[0].width
            };
            assert_eq!(width_for(r), Some(held), "rank {r}");
        }
        // Above 64 with fewer nonzeros than twice the rows: the walker.
        assert_eq!(column_blocks(100, 199, 100), None);
        assert!(column_blocks(100, 200, 100).is_some());
        assert!(column_blocks(20, 1, 100).is_some());
        assert_eq!(width_for(16), None);
        assert_eq!(width_for(20), Some(32));
        assert_eq!(width_for(100), Some(64));
        assert_eq!(width_for(72), Some(72));
        assert_eq!(width_for(128), Some(64));
    }

    /// A copy is made again where the caller's key of its factor changed, or the call
    /// has no keys; else the one held is read (even where the factor was written
    /// without the caller saying so: the keys are the caller's account).
    #[test]
    fn padded_copies_are_made_again_only_for_factors_that_changed() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicU64;
        let sets = Arc::new(AtomicU64::new(1));
        let mut v = FactorVersions::new(&sets, 3);
        let mut f: Vec<Matrix> = (0..3)
            .map(|m| Matrix::from_fn(5 + m, 3, |i, c| (100 * m + 3 * i + c) as f32 + 1.0))
            .collect();
        let padded =
            |g: &Matrix| Matrix::from_fn(g.rows(), 8, |i, c| if c < 3 { g.get(i, c) } else { 0.0 });
        let mut held = PaddedFactors::default();
        held.refresh(&f, 0, 8, Some(&v));
        assert_eq!(held.factors()[1], padded(&f[1]));
        assert_eq!(held.factors()[2], padded(&f[2]));
        let before = f[2].clone();
        f[1] = f[1].map(|x| -x);
        f[2] = f[2].map(|x| 2.0 * x);
        v.changed(1);
        held.refresh(&f, 0, 8, Some(&v));
        assert_eq!(held.factors()[1], padded(&f[1]), "changed: copied again");
        assert_eq!(held.factors()[2], padded(&before), "unchanged key: kept");
        // Mode 0 as a target was never copied; as a source it is.
        held.refresh(&f, 2, 8, Some(&v));
        assert_eq!(held.factors()[0], padded(&f[0]));
        held.refresh(&f, 0, 8, None);
        assert_eq!(held.factors()[2], padded(&f[2]), "no keys: copied");
        // Keys from another set of factors do not match the copies'.
        held.refresh(&f, 0, 8, Some(&v));
        f[2] = f[2].map(|x| x + 1.0);
        held.refresh(&f, 0, 8, Some(&FactorVersions::new(&sets, 3)));
        assert_eq!(held.factors()[2], padded(&f[2]), "another set: copied");
        // Every rank between the widths below 64, no other.
        assert_eq!(factor_width(20, 3), 32);
        assert_eq!(factor_width(5, 4), 8);
        assert_eq!(factor_width(20, 6), 32);
        assert_eq!(factor_width(20, 7), 32);
        assert_eq!(factor_width(20, 1), 20);
        assert_eq!(factor_width(16, 3), 16);
        assert_eq!(factor_width(70, 3), 70);
        assert_eq!(factor_width(40, 3), 48);
    }

    /// Padded rows are the same past the cache as through it, at every width.
    #[test]
    fn padded_rows_are_the_same_written_past_the_cache() {
        for (c, w) in [
            (5, 8),
            (10, 16),
            (20, 32),
            (40, 48),
            (50, 64),
            (64, 64),
            (3, 3),
        ] {
            let f = Matrix::from_fn(3001, c, |i, k| (i * 67 + k) as f32 - 0.5);
            let (mut a, mut b) = (
                Matrix::from_fn(3001, w, |_, _| f32::NAN),
                Matrix::from_fn(3001, w, |_, _| f32::NAN),
            );
            pad_rows(&f, 0..c, &mut a, false);
            pad_rows(&f, 0..c, &mut b, true);
            assert_eq!(a, b, "{c} columns at {w}");
            for i in [0, 1500, 3000] {
                assert_eq!(&a.row(i)[..c], f.row(i));
                assert!(a.row(i)[c..].iter().all(|&x| x == 0.0));
            }
        }
    }

    #[test]
    fn padding_keeps_the_entries_and_narrowing_takes_them_back() {
        let f = Matrix::from_fn(3000, 70, |i, c| (i * 71 + c) as f32);
        let mut back = Matrix::zeros(3000, 70);
        let mut scratch = Scratch::default();
        // A buffer of the same shape as the first block's, full of its values: the
        // padding columns of the second pass must be zeros again.
        scratch.give(Matrix::from_fn(3000, 8, |_, _| f32::NAN));
        for (cols, width) in [(0..64, 64), (64..70, 8)] {
            let p = pad_factors(
                std::slice::from_ref(&f),
                1,
                cols.clone(),
                width,
                &mut scratch,
            );
            assert_eq!(p[0].shape(), (3000, width));
            let n = cols.len();
            for i in 0..3000 {
                assert_eq!(&p[0].row(i)[..n], &f.row(i)[cols.clone()]);
                assert!(p[0].row(i)[n..].iter().all(|&v| v == 0.0));
            }
            narrow_into(&p[0], cols, &mut back);
        }
        assert_eq!(back.data(), f.data());
    }
}
