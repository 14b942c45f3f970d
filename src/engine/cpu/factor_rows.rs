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
}
