//! Stores past the cache: an output larger than the last-level cache is written with
//! non-temporal stores, so that writing it does not first read every line of it in
//! (the row-by-row MTTKRP of a long mode, [`super::mttkrp_rows`]).

/// `dst = src` with non-temporal stores (`dst` 32-byte aligned, `R` a multiple of 8);
/// the writer calls [`store_fence`] before others may read them.
#[inline(always)]
pub(super) fn store_past_cache<const R: usize>(dst: &mut [f32], src: &[f32; R]) {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx"))]
    if R.is_multiple_of(8) && (dst.as_ptr() as usize).is_multiple_of(32) && dst.len() >= R {
        use std::arch::x86_64::{_mm256_loadu_ps, _mm256_stream_ps};
        for c in (0..R).step_by(8) {
            // SAFETY: `dst[c..c + 8]` and `src[c..c + 8]` are in bounds (checked above:
            // `dst.len() ≥ R`), and `dst + c` is 32-byte aligned (`dst` is, and `c` is a
            // multiple of 8 floats), as the streaming store requires.
            unsafe {
                let v = _mm256_loadu_ps(src.as_ptr().add(c));
                _mm256_stream_ps(dst.as_mut_ptr().add(c), v);
            }
        }
        return;
    }
    dst[..R].copy_from_slice(src);
}

/// Orders this thread's non-temporal stores before its later stores (and so before the
/// end of its task is seen by others).
#[inline(always)]
pub(super) fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a store fence has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}
