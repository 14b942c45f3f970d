//! The streamed MTTKRP's output copies ([`sum_in_copies`]): one per range of the long
//! mode's rows, so that ranges run in parallel and their sums add in a fixed order;
//! f32 rows the kernels add into, added into f64 rows after each part of the range,
//! so that no output row adds more than a part's nonzeros in f32.

use super::subnormal::FlushSubnormals;
use crate::matrix::Matrix;
use rayon::prelude::*;
use std::sync::Mutex;

/// One range's output copy ([`sum_in_copies`]): the f32 rows its kernels add into,
/// and the f64 rows those are added to after each part of the range.
#[derive(Default)]
pub(super) struct OutputCopy {
    part: Vec<f32>,
    sum: Vec<f64>,
    /// Whether `sum` holds the range's sums (it had several parts); else `part` does.
    summed: bool,
}

/// Parts of units `lo..hi` (rows of the long mode, or blocks of them) whose nonzeros
/// start at `starts[u]`: consecutive, each of at least `min` nonzeros but the last
/// (units are not cut).
pub(super) fn parts(starts: &[usize], (lo, hi): (usize, usize), min: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut a = lo;
    while a < hi {
        let want = starts[a].saturating_add(min.max(1));
        let b = (a + starts[a..=hi].partition_point(|&s| s < want)).clamp(a + 1, hi);
        out.push((a, b));
        a = b;
    }
    out
}

/// Fewest nonzeros per part of a range for an output of `rows` rows: a run's
/// ([`super::runs::RUN`]), or enough that adding the part's f32 copy into the f64 one
/// (a pass over `rows` rows) costs a few per cent of summing the part, whose every
/// nonzero costs a row of work.
pub(super) fn part_nonzeros(rows: usize) -> usize {
    super::runs::RUN.max(rows.saturating_mul(32))
}

/// Runs `sum(part, copy)` for each of `chunks` ranges in parallel, each over its
/// `parts(c)` in order into its own copy of `out` with rows of `width ≥ out.cols()`
/// floats (whose rows start on cache lines; `pool` keeps the copies between calls),
/// the f32 copy added into an f64 one and zeroed after each part; then overwrites
/// `out` with the sum of the f64 copies' first `out.cols()` columns, added in range
/// order and rounded once: so the result does not depend on the thread count, and no
/// row of the output adds more than a part's nonzeros in f32 (a short mode's row of a
/// power-law tensor holds hundreds of thousands).
pub(super) fn sum_in_copies(
    chunks: usize,
    pool: &Mutex<Vec<OutputCopy>>,
    out: &mut Matrix,
    width: usize,
    parts: impl Fn(usize) -> Vec<(usize, usize)> + Sync,
    sum: impl Fn((usize, usize), &mut [f32]) + Sync,
) {
    let r = out.cols();
    assert!(width >= r, "output copies narrower than the output");
    let len = out.rows() * width;
    let mut copies = std::mem::take(&mut *pool.lock().unwrap_or_else(|e| e.into_inner()));
    copies.resize_with(chunks, OutputCopy::default);
    copies.par_iter_mut().enumerate().for_each(|(c, copy)| {
        let _flush = FlushSubnormals::new();
        copy.part.clear();
        copy.part.resize(len + LINE_FLOATS - 1, 0.0);
        let parts = parts(c);
        // A range of one part leaves its sums in the f32 copy (no f64 pass over it).
        copy.summed = parts.len() > 1;
        copy.sum.clear();
        if copy.summed {
            copy.sum.resize(len, 0.0);
        }
        for part in parts {
            let rows = on_lines_mut(&mut copy.part, len);
            sum(part, rows);
            if copy.summed {
                for (w, p) in copy.sum.iter_mut().zip(rows.iter_mut()) {
                    *w += f64::from(std::mem::take(p));
                }
            }
        }
    });
    // Blocks of output rows; a copy's block is as many rows of `width`.
    const ROWS: usize = 256;
    let (chunk, wide) = (r.max(1) * ROWS, width.max(1) * ROWS);
    out.data_mut()
        .par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(k, o)| {
            let _flush = FlushSubnormals::new();
            let mut acc = vec![0f64; o.len()];
            for copy in &copies {
                if copy.summed {
                    add_rows(&mut acc, &copy.sum[k * wide..], r, width, |y| y);
                } else {
                    let part = &on_lines(&copy.part, len)[k * wide..];
                    add_rows(&mut acc, part, r, width, f64::from);
                }
            }
            for (o, a) in o.iter_mut().zip(acc) {
                *o = a as f32;
            }
        });
    *pool.lock().unwrap_or_else(|e| e.into_inner()) = copies;
}

/// Adds to `acc` (rows of `r`) the first `r` columns of each row of `rows` (rows of
/// `width`), widened by `wide`.
fn add_rows<T: Copy>(acc: &mut [f64], rows: &[T], r: usize, width: usize, wide: impl Fn(T) -> f64) {
    for (x, y) in acc
        .chunks_exact_mut(r.max(1))
        .zip(rows.chunks_exact(width.max(1)))
    {
        for (x, &y) in x.iter_mut().zip(y) {
            *x += wide(y);
        }
    }
}

/// [`on_lines_mut`] for reading.
fn on_lines(v: &[f32], len: usize) -> &[f32] {
    let a = v
        .as_ptr()
        .align_offset(4 * LINE_FLOATS)
        .min(LINE_FLOATS - 1);
    &v[a..a + len]
}

/// Floats per 64-byte cache line.
pub(super) const LINE_FLOATS: usize = 16;

/// The `len` floats of `v` (which holds `len + LINE_FLOATS - 1`) from its first cache
/// line boundary on: an output copy whose rows start on cache lines. In a vector of
/// floats as allocated (16-byte aligned), each 64-byte half of a rank-32 row straddled
/// two lines, and the read-modify-write per nonzero ran 10–15 % slower (a C model of
/// this loop over a uniform 4th-order tensor, 2 threads).
fn on_lines_mut(v: &mut [f32], len: usize) -> &mut [f32] {
    let a = v
        .as_ptr()
        .align_offset(4 * LINE_FLOATS)
        .min(LINE_FLOATS - 1);
    &mut v[a..a + len]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A range's parts cover its units in order, each of at least the fewest nonzeros
    /// asked for but the last, a unit of more in a part of its own.
    #[test]
    fn parts_cover_the_units_in_order() {
        // Units of 0, 3, 1, 10, 0, 2 and 5 nonzeros.
        let starts = [0, 0, 3, 4, 14, 14, 16, 21];
        assert_eq!(parts(&starts, (0, 7), 4), [(0, 3), (3, 4), (4, 7)]);
        assert_eq!(parts(&starts, (1, 3), 4), [(1, 3)]);
        assert_eq!(parts(&starts, (2, 2), 4), []);
        assert_eq!(parts(&starts, (0, 7), 100), [(0, 7)]);
        assert_eq!(parts(&starts, (0, 3), 0), [(0, 2), (2, 3)]);
    }

    /// An output copy starts on a cache line wherever its vector starts, and holds the
    /// output's floats.
    #[test]
    fn output_copies_start_on_cache_lines() {
        let mut v = vec![0f32; 100 + 2 * LINE_FLOATS];
        for skip in 0..LINE_FLOATS {
            let len = 100;
            let w = &mut v[skip..skip + len + LINE_FLOATS - 1];
            let c = on_lines_mut(w, len);
            assert_eq!(c.len(), len);
            assert!((c.as_ptr() as usize).is_multiple_of(64), "skip {skip}");
        }
    }
}
