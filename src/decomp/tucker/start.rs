//! Tucker's drawn start on a mode's used rows, without the factor on all its rows.
//!
//! The run on the used rows (`super::rows`) starts from the rows it keeps of the start
//! the run on all rows takes: `Matrix::random(I, R, seed)` made orthonormal by Cholesky
//! QR twice, to f32, scaled by a power of two (`super::scale_start`). Formed whole, that
//! took about 28 bytes per entry of the full factor at once (the draw, its f64 copy,
//! both QR passes and the narrowed result): 11 GB for a 50 M-row mode at rank 8 whose
//! model on its 389 k used rows is 25 MB, and 10 s of page clearing beside 0.3 s of
//! iterations.
//!
//! Here the draw is never held: each pass draws the rows again, a row block
//! (`dense::row_blocks`) per task in sub-blocks (`dense::sub_block_rows`), from the
//! seed's sequence placed at the block ([`RandomStream`]). Pass 1 sums the Gram of the
//! draw, pass 2 the Gram of the first QR pass's rows, pass 3 finds the largest entry
//! of the result and keeps the used rows. Each Gram is summed as `dense::gram` sums it
//! (the same blocks, sub-blocks and order), and each row is solved as `cholesky_qr`
//! solves it, so the rows kept are those of the whole start to the bit.

use crate::decomp::cp_als::rescale_by_max;
use crate::decomp::dense::{GramRows, row_blocks, sub_block_rows, sum_in_order};
use crate::decomp::leading::{CholeskyLower, cholesky_lower};
use crate::matrix::Matrix;
use crate::random::RandomStream;
use rayon::prelude::*;
use std::ops::Range;

/// The drawn start of a mode of `rows` rows and `cols` columns from `seed`, scaled by
/// a power of two into `scale` as the whole factor would be: its rows `used`
/// (ascending, below `rows`; all where `None`) at rows `0..` of an `out_rows × cols`
/// matrix whose other rows are zero. `None` where the draw's columns are numerically
/// dependent (a Cholesky pivot fails), where the start takes a Householder QR instead.
pub(super) fn drawn(
    rows: usize,
    cols: usize,
    seed: u64,
    used: Option<&[u32]>,
    out_rows: usize,
    scale: Range<f32>,
) -> Option<Matrix> {
    let pass = Pass { rows, cols, seed };
    let grams = pass.gram(|draw, q| {
        q.iter_mut().zip(draw).for_each(|(a, &b)| *a = f64::from(b));
    });
    let first = cholesky_lower(&grams)?;
    let grams = pass.gram(|draw, q| solve_rows(&first, draw, q));
    let second = cholesky_lower(&grams)?;
    // Each block's kept rows, `lo..hi` of the result's, written in place.
    let kept = |block: &Range<usize>| match used {
        None => block.clone(),
        Some(u) => {
            let at = |row: usize| u.partition_point(|&i| (i as usize) < row);
            at(block.start)..at(block.end)
        }
    };
    let mut out = Matrix::zeros(out_rows, cols);
    let mut pieces = Vec::new();
    let mut rest = out.data_mut();
    for block in pass.blocks() {
        let n = kept(&block).len() * cols;
        let (piece, r) = std::mem::take(&mut rest).split_at_mut(n);
        pieces.push((block, piece));
        rest = r;
    }
    let top = (pieces.into_par_iter())
        .map(|(block, piece)| {
            let mut want = kept(&block).map(|k| used.map_or(k, |u| u[k] as usize));
            let mut next = want.next();
            let (mut top, mut at_piece) = (0f32, 0);
            let mut row = vec![0f64; cols];
            pass.draw_block(block, |at, draw, q| {
                solve_rows(&first, draw, q);
                for (k, r) in q.chunks_exact_mut(cols.max(1)).enumerate() {
                    row.copy_from_slice(r);
                    second.solve_row(&row, r);
                    // The largest magnitude is exact in any order.
                    top = r.iter().fold(top, |m, &v| m.max((v as f32).abs()));
                    if next == Some(at + k) {
                        let dst = &mut piece[at_piece..at_piece + cols];
                        dst.iter_mut()
                            .zip(r.iter())
                            .for_each(|(d, &v)| *d = v as f32);
                        at_piece += cols;
                        next = want.next();
                    }
                }
            });
            top
        })
        .reduce(|| 0f32, f32::max);
    rescale_by_max(&mut out, top, scale);
    Some(out)
}

/// `u Lᵀ = w` for every row `w` of `draw` (widened), into the rows of `q`.
fn solve_rows(l: &CholeskyLower, draw: &[f32], q: &mut [f64]) {
    let k = l.order().max(1);
    let mut w = vec![0f64; k];
    for (d, u) in draw.chunks_exact(k).zip(q.chunks_exact_mut(k)) {
        w.iter_mut().zip(d).for_each(|(a, &b)| *a = f64::from(b));
        l.solve_row(&w, u);
    }
}

/// The passes over a drawn factor of `rows × cols` from `seed`.
struct Pass {
    rows: usize,
    cols: usize,
    seed: u64,
}

impl Pass {
    /// The row blocks of `dense::gram` over the rows, in order.
    fn blocks(&self) -> impl Iterator<Item = Range<usize>> + use<> {
        let (rows, block) = (self.rows, row_blocks(self.rows));
        (0..rows.div_ceil(block)).map(move |b| b * block..((b + 1) * block).min(rows))
    }

    /// Calls `f(first row, draw, scratch)` on the drawn rows `block` one sub-block at a
    /// time, in order; `scratch` holds as many f64 entries as the draw.
    fn draw_block(&self, block: Range<usize>, mut f: impl FnMut(usize, &[f32], &mut [f64])) {
        let cols = self.cols;
        let sub = sub_block_rows(cols);
        let mut stream = RandomStream::new(self.seed, block.start * cols);
        let mut draw = vec![0f32; sub * cols];
        let mut scratch = vec![0f64; sub * cols];
        let mut at = block.start;
        while at < block.end {
            let n = sub.min(block.end - at);
            stream.fill(&mut draw[..n * cols]);
            f(at, &draw[..n * cols], &mut scratch[..n * cols]);
            at += n;
        }
    }

    /// The Gram of the rows `f(draw, rows)` writes for each drawn sub-block, summed as
    /// `dense::gram` sums that of the whole.
    fn gram(&self, f: impl Fn(&[f32], &mut [f64]) + Sync) -> faer::Mat<f64> {
        let blocks: Vec<Range<usize>> = self.blocks().collect();
        let parts: Vec<_> = (blocks.into_par_iter())
            .map(|block| {
                let mut sum = GramRows::new(self.cols);
                self.draw_block(block, |_, draw, rows| {
                    f(draw, rows);
                    sum.add(&*rows);
                });
                sum.finish()
            })
            .collect();
        sum_in_order(&parts, self.cols)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomp::cp_als::rescale_to_unit;
    use crate::decomp::leading::cholesky_qr;

    /// The start held whole: Cholesky QR twice of the draw in f64, to f32, scaled.
    fn whole(rows: usize, cols: usize, seed: u64, scale: Range<f32>) -> Matrix {
        let a = Matrix::random(rows, cols, seed).to_f64();
        let q = cholesky_qr(&cholesky_qr(&a).unwrap()).unwrap();
        let mut q = q.to_f32();
        rescale_to_unit(&mut q, scale);
        q
    }

    /// Drawn on the fly, the start is the one held whole to the bit, on 1 and 3
    /// threads: over more than one block of the random sequence and 64 row blocks, all
    /// rows or some (with zero rows after them), scaled or not.
    #[test]
    fn the_start_drawn_on_the_fly_is_the_one_held_whole() {
        let (rows, cols) = (150_001, 7);
        assert!(rows * cols > crate::random::RANDOM_BLOCK);
        let used: Vec<u32> = (0..rows as u32)
            .filter(|i| i % 97 == 3 || *i == 150_000)
            .collect();
        // Entries near 1/sqrt(rows) = 2⁻⁸·⁶: the first range scales them, the second not.
        for scale in [2f32.powi(-4)..2f32.powi(4), 0.0..f32::INFINITY] {
            let want = whole(rows, cols, 5, scale.clone());
            let cut = Matrix::from_fn(used.len() + 1, cols, |k, j| match used.get(k) {
                Some(&i) => want.get(i as usize, j),
                None => 0.0,
            });
            for threads in [1, 3] {
                crate::pool_of(threads).install(|| {
                    let all = drawn(rows, cols, 5, None, rows, scale.clone()).unwrap();
                    assert!(all == want, "{threads} threads, {scale:?}");
                    let some = drawn(rows, cols, 5, Some(&used), used.len() + 1, scale.clone());
                    assert!(some.unwrap() == cut, "{threads} threads, {scale:?}");
                });
            }
        }
    }

    /// A draw with dependent columns (one row, two columns) is left to the caller.
    #[test]
    fn dependent_columns_are_refused() {
        assert!(drawn(1, 2, 3, None, 1, 0.0..f32::INFINITY).is_none());
        assert!(drawn(3, 2, 3, None, 3, 0.0..f32::INFINITY).is_some());
    }
}
