//! MTTKRP at ranks between the specialized widths, run at the next width.
//!
//! The CPU's MTTKRP kernels are compiled for ranks 8, 16, 32 and 64 (rows of whole
//! 8-lane vectors, every loop of known length); any other rank takes the generic walker,
//! which was 2.5–6× slower per call at ranks 20 and 24 than at 32 on a 2 M-nonzero
//! tensor. A rank below 64 that is not one of them runs instead on copies of the other
//! modes' factors padded with zero columns to the next width, and the output's first
//! columns are kept: the padding columns multiply to exact zeros and never touch the
//! real ones, so the result is the rank-`r` MTTKRP.

use crate::matrix::Matrix;
use rayon::prelude::*;

/// The specialized width an MTTKRP of rank `rank` runs at on the CPU: `None` when the
/// rank is one of them (or above 64).
pub fn width_for(rank: usize) -> Option<usize> {
    match rank {
        0 | 8 | 16 | 32 | 64 => None,
        1..=7 => Some(8),
        9..=15 => Some(16),
        17..=31 => Some(32),
        33..=63 => Some(64),
        _ => None,
    }
}

/// Copies of `factors` with `width` columns, zeros after their own; the factor of
/// `mode`, which MTTKRP does not read, as zeros of the same shape (left untouched,
/// its pages are never faulted in).
pub(super) fn pad_factors(factors: &[Matrix], mode: usize, width: usize) -> Vec<Matrix> {
    factors
        .iter()
        .enumerate()
        .map(|(m, f)| {
            if m == mode {
                return Matrix::zeros(f.rows(), width);
            }
            let c = f.cols();
            let mut g = Matrix::zeros(f.rows(), width);
            g.data_mut()
                .par_chunks_mut(width * 1024)
                .zip(f.data().par_chunks(c.max(1) * 1024))
                .for_each(|(dst, src)| {
                    for (d, s) in dst.chunks_exact_mut(width).zip(src.chunks_exact(c.max(1))) {
                        d[..c].copy_from_slice(s);
                    }
                });
            g
        })
        .collect()
}

/// Writes the first `out.cols()` columns of `wide` into `out`.
pub(super) fn narrow_into(wide: &Matrix, out: &mut Matrix) {
    let (c, w) = (out.cols(), wide.cols());
    out.data_mut()
        .par_chunks_mut(c.max(1) * 1024)
        .zip(wide.data().par_chunks(w * 1024))
        .for_each(|(dst, src)| {
            for (d, s) in dst.chunks_exact_mut(c.max(1)).zip(src.chunks_exact(w)) {
                d.copy_from_slice(&s[..c]);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_below_64_maps_to_the_next_width() {
        for r in 1..=70 {
            match width_for(r) {
                None => assert!([8, 16, 32, 64].contains(&r) || r > 64, "rank {r}"),
                Some(w) => {
                    assert!([8, 16, 32, 64].contains(&w) && w > r, "rank {r} → {w}");
                    assert!(
                        w / 2 < r || w == 8,
                        "rank {r} → {w}: a smaller width holds it"
                    );
                }
            }
        }
    }

    #[test]
    fn padding_keeps_the_entries_and_narrowing_takes_them_back() {
        let f = Matrix::from_fn(3000, 5, |i, c| (i * 7 + c) as f32);
        let p = pad_factors(std::slice::from_ref(&f), 1, 8);
        assert_eq!(p[0].shape(), (3000, 8));
        for i in 0..3000 {
            assert_eq!(&p[0].row(i)[..5], f.row(i));
            assert_eq!(&p[0].row(i)[5..], &[0.0; 3]);
        }
        let mut back = Matrix::zeros(3000, 5);
        narrow_into(&p[0], &mut back);
        assert_eq!(back.data(), f.data());
    }
}
