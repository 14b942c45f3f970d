//! Rows of a factor or an output, of a rank fixed at compile time, read and written
//! without a bounds check in release builds: the row-grouped MTTKRP's portable sums
//! (AVX2 where the build targets it) gather one row per nonzero and mode, and a check
//! per gather cost a C model of the loop about a fifth of its time. Their callers hold
//! the contract: the groups come from a validated tensor (every index below its mode's
//! length) and `RowMttkrp::run` asserts every factor's and the output's shape once per
//! call. Debug builds check every row.

/// Row `i` of `f`, `R` floats a row.
///
/// # Safety
/// `(i + 1) · R` must not exceed `f.len()`.
#[inline(always)]
pub(super) unsafe fn row<const R: usize>(f: &[f32], i: usize) -> &[f32; R] {
    debug_assert!((i + 1) * R <= f.len(), "row {i} past its matrix");
    // SAFETY: the row lies in `f` (the caller's contract); `[f32; R]` has `f32`'s
    // alignment.
    unsafe { &*f.as_ptr().add(i * R).cast::<[f32; R]>() }
}

/// The compiled width a rank `r` runs at: the next of 8, 16, 32, 48 and 64 (0 for rank
/// 0 or above 64, which have none). 48 is three AVX-512 vectors: ranks 33 to 48 read
/// three cache lines a row where 64 would read four. A rank between them reads copies of the factors
/// padded with zero columns to it (`super::padded`), and writes its output rows at
/// their own length ([`store_row`]).
pub(crate) fn lanes(r: usize) -> usize {
    match r {
        1..=8 => 8,
        9..=16 => 16,
        17..=32 => 32,
        33..=48 => 48,
        49..=64 => 64,
        _ => 0,
    }
}

/// `dst = src[..dst.len()]`: an output row of the rank's length (`dst.len() ≤ R`) from
/// a sum of `R` lanes. Whole 8-lane groups, then the rest lane by lane.
#[inline(always)]
pub(super) fn store_row<const R: usize>(dst: &mut [f32], src: &[f32; R]) {
    let n = dst.len();
    let whole = n / 8 * 8;
    for (d, s) in dst[..whole].chunks_exact_mut(8).zip(src.chunks_exact(8)) {
        d.copy_from_slice(s);
    }
    for (d, &s) in dst[whole..].iter_mut().zip(&src[whole..]) {
        *d = s;
    }
}

/// Row `i` of `f` for writing, `R` floats a row.
///
/// # Safety
/// `(i + 1) · R` must not exceed `f.len()`.
#[inline(always)]
pub(super) unsafe fn row_mut<const R: usize>(f: &mut [f32], i: usize) -> &mut [f32; R] {
    debug_assert!((i + 1) * R <= f.len(), "row {i} past its matrix");
    // SAFETY: as in `row`, and `f` is borrowed mutably for the result's lifetime.
    unsafe { &mut *f.as_mut_ptr().add(i * R).cast::<[f32; R]>() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_the_slices_they_name() {
        let mut m: Vec<f32> = (0..12).map(|k| k as f32).collect();
        // SAFETY: 3 rows of 4 floats.
        unsafe {
            assert_eq!(row::<4>(&m, 2), &[8.0, 9.0, 10.0, 11.0]);
            row_mut::<4>(&mut m, 1)[3] = -1.0;
        }
        assert_eq!(m[7], -1.0);
    }

    #[test]
    fn widths_are_the_next_compiled_one_and_stores_keep_the_rank() {
        assert_eq!(
            [1, 8, 9, 16, 17, 20, 32, 33, 48, 49, 63, 64].map(lanes),
            [8, 8, 16, 16, 32, 32, 32, 48, 48, 64, 64, 64]
        );
        assert_eq!((lanes(0), lanes(65)), (0, 0));
        let src: [f32; 16] = std::array::from_fn(|k| k as f32 + 1.0);
        for n in [0, 3, 8, 11, 16] {
            let mut dst = vec![-1.0; n + 2];
            store_row(&mut dst[..n], &src);
            assert_eq!(&dst[..n], &src[..n]);
            assert_eq!(&dst[n..], &[-1.0, -1.0], "{n} lanes stored");
        }
    }
}
