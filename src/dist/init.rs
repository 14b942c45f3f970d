//! Initial factor rows across ranks: each rank draws only the rows it keeps, the same
//! values a single process draws for the whole factor.
//!
//! A single process draws mode `m`'s factor as [`Matrix::random`]`(I_m, R, seed + m)`
//! ([`Matrix::random_factors`]): the seeded sequence of [`fill_random`], row-major, one
//! entry per draw, in blocks of [`crate::random::RANDOM_BLOCK`] entries each from its
//! own jumped Xoshiro256++ stream. A rank that keeps rows `a..b` draws entries
//! `a·R..b·R` of that sequence: it jumps to the block of entry `a·R` and skips the draws
//! before it within that block (at most one block's, a few milliseconds); nothing
//! else is drawn or stored.

use super::exchange::UsedIndices;
use crate::matrix::Matrix;
use crate::random::fill_random;
use std::ops::Range;

/// Rows `rows` of [`Matrix::random`]`(_, cols, seed)`, drawn without the rows before
/// them.
pub fn random_rows(rows: Range<usize>, cols: usize, seed: u64) -> Matrix {
    let mut m = Matrix::zeros(rows.len(), cols);
    fill_random(m.data_mut(), seed, rows.start * cols);
    m
}

/// The rows `rows` of `f`.
pub(crate) fn rows_of(f: &Matrix, rows: Range<usize>) -> Matrix {
    let r = f.cols();
    Matrix::new(
        rows.len(),
        r,
        f.data()[rows.start * r..rows.end * r].to_vec(),
    )
    .expect("a row range of a matrix")
}

/// Rows `rows` of mode `m`'s initial factor of rank `rank`: of the given factors
/// `init` when there are some, else of the seeded random ones a single process draws
/// from `seed` ([`Matrix::random_factors`]).
pub fn initial_rows(
    init: Option<&[Matrix]>,
    seed: u64,
    m: usize,
    rows: Range<usize>,
    rank: usize,
) -> Matrix {
    match init {
        Some(f) => rows_of(&f[m], rows),
        None => random_rows(rows, rank, seed.wrapping_add(m as u64)),
    }
}

/// Mode `m`'s initial rows on this rank where the run holds the rows `rows` says
/// (every row without it): its slab's rows `slab` (of the run's rows), and the rows of
/// the tensor its owned rows `owned` stand for ([`UsedIndices::span`]: with the empty
/// rows after them), over which the start's scale, Grams and column maxima are taken,
/// as one process takes them over every row.
pub(crate) fn start_rows(
    init: Option<&[Matrix]>,
    seed: u64,
    m: usize,
    rank: usize,
    (slab, owned): (Range<usize>, Range<usize>),
    rows: Option<&UsedIndices>,
) -> (Matrix, Matrix) {
    let Some((rows, used)) = rows.and_then(|r| r.used[m].as_deref().map(|u| (r, u))) else {
        let f = initial_rows(init, seed, m, slab.clone(), rank);
        let spanned = rows_of(&f, owned.start - slab.start..owned.end - slab.start);
        return (f, spanned);
    };
    let mut f = Matrix::zeros(slab.len(), rank);
    if !slab.is_empty() {
        // The tensor's rows from the slab's first used one to its last; its used ones.
        let first = used[slab.start] as usize;
        let last = used[slab.end - 1] as usize;
        let drawn = initial_rows(init, seed, m, first..last + 1, rank);
        for (k, &i) in used[slab].iter().enumerate() {
            f.row_mut(k).copy_from_slice(drawn.row(i as usize - first));
        }
    }
    let spanned = initial_rows(init, seed, m, rows.span(m, owned), rank);
    (f, spanned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_drawn_alone_are_the_whole_factors_rows() {
        // Mode 2's factor spans two blocks of the random sequence.
        let b = crate::random::RANDOM_BLOCK / 3;
        let dims = [37usize, 5, b + 40];
        let whole = Matrix::random_factors(&dims, &[3, 3, 3], 41);
        for (m, f) in whole.iter().enumerate() {
            let d = dims[m];
            for rows in [0..d, 0..0, 1..4, d - 1..d, 2..2, d.min(b - 2)..d] {
                let got = initial_rows(None, 41, m, rows.clone(), 3);
                assert_eq!(got, rows_of(f, rows.clone()), "mode {m}, rows {rows:?}");
                let given = initial_rows(Some(&whole), 0, m, rows.clone(), 3);
                assert_eq!(given, got);
            }
        }
    }
}
