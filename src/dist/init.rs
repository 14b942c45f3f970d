//! Initial factor rows across ranks: each rank draws only the rows it keeps, the same
//! values a single process draws for the whole factor.
//!
//! A single process draws mode `m`'s factor as [`Matrix::random`]`(I_m, R, seed + m)`
//! ([`Matrix::random_factors`]): one Xoshiro256++ stream per mode, row-major, one draw
//! per entry. A rank that keeps rows `a..b` skips the stream's first `a·R` draws (each
//! drawn and dropped, a few nanoseconds per entry; nothing is stored), then keeps the
//! next `(b − a)·R`. Memory is that of the rows kept; the skip costs time in proportion
//! to the rows before them, far below one iteration's.

use crate::matrix::Matrix;
use std::ops::Range;

/// Rows `rows` of [`Matrix::random`]`(_, cols, seed)`, drawn without the rows before
/// them being stored.
pub fn random_rows(rows: Range<usize>, cols: usize, seed: u64) -> Matrix {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    for _ in 0..rows.start * cols {
        // The same call as the whole matrix's, so the stream advances identically.
        let _: f32 = rng.random::<f32>();
    }
    Matrix::from_fn(rows.len(), cols, |_, _| rng.random::<f32>())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_drawn_alone_are_the_whole_factors_rows() {
        let dims = [37usize, 5, 64];
        let whole = Matrix::random_factors(&dims, &[3, 3, 3], 41);
        for (m, f) in whole.iter().enumerate() {
            for rows in [0..dims[m], 0..0, 1..4, dims[m] - 1..dims[m], 2..2] {
                let got = initial_rows(None, 41, m, rows.clone(), 3);
                assert_eq!(got, rows_of(f, rows.clone()), "mode {m}, rows {rows:?}");
                let given = initial_rows(Some(&whole), 0, m, rows.clone(), 3);
                assert_eq!(given, got);
            }
        }
    }
}
