//! The MTTKRP's kernels on CPUs with AVX-512F ([`super::avx512::available`]), 16
//! columns per instruction: one row of the row-by-row MTTKRP ([`mttkrp_row`]; a task
//! of whole rows in one call, [`mttkrp_rows`], so that the row's sum inlines; rows
//! longer than a run in f32 runs added in f64, [`super::runs`]) and one row of the
//! long mode in the streamed MTTKRP ([`mttkrp_streamed_row`]). Each does the same
//! operations per column in the same order as its AVX2 twin, so gives the same bits.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m512, _MM_HINT_T0, _mm_prefetch, _mm256_castpd_ps, _mm256_castps_pd, _mm512_add_pd,
    _mm512_add_ps, _mm512_castpd_ps, _mm512_castps_pd, _mm512_castps256_ps512,
    _mm512_castps512_ps256, _mm512_cvtpd_ps, _mm512_cvtps_pd, _mm512_extractf64x4_pd,
    _mm512_fmadd_ps, _mm512_insertf64x4, _mm512_loadu_ps, _mm512_mask_storeu_ps, _mm512_mul_ps,
    _mm512_set1_ps, _mm512_setzero_pd, _mm512_setzero_ps, _mm512_storeu_ps, _mm512_stream_ps,
};

/// One row (or piece) of the row-by-row MTTKRP at rank `16 V` with `D` other modes, as
/// [`super::mttkrp_rows`]'s AVX2 sum: per nonzero `x` times the rows but the last, then
/// one fused multiply-add with the last, the same operations per column in the same
/// order (so the same bits), 16 columns per instruction. `facs` are the other modes'
/// factors at rank `16 V`, `others` holds `D` indices per nonzero (and may run on past
/// `values`, for the lookahead: with `LOOK` the rows of the nonzero `ahead` places on
/// are prefetched); the sums go to `acc` (`16 V` floats).
///
/// # Safety
/// The CPU must have AVX-512F ([`super::avx512::available`]), and every index of the nonzeros must
/// name a row of its factor ([`mttkrp_row_sums`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)] // vectors indexed by constants: kept in registers
#[inline]
pub(super) unsafe fn mttkrp_row<const V: usize, const D: usize, const LOOK: bool>(
    others: &[u32],
    values: &[f32],
    facs: &[&[f32]; D],
    ahead: usize,
    acc: &mut [f32],
) {
    // SAFETY: this function runs only where the CPU has AVX-512F.
    let sum = unsafe { mttkrp_any_row_sums::<V, D, LOOK>(others, values, facs, ahead) };
    let acc = &mut acc[..16 * V];
    for v in 0..V {
        // SAFETY: `acc` holds `16 V` floats.
        unsafe { _mm512_storeu_ps(acc.as_mut_ptr().add(16 * v), sum[v]) };
    }
}

/// [`mttkrp_row_sums`] over a row of any length: where it is longer than
/// [`super::runs::RUN`] nonzeros, [`mttkrp_long_row_sums`] (out of line: inlined, its
/// loop slowed the short rows' path by a quarter at rank 16).
///
/// # Safety
/// As [`mttkrp_row_sums`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn mttkrp_any_row_sums<const V: usize, const D: usize, const LOOK: bool>(
    others: &[u32],
    values: &[f32],
    facs: &[&[f32]; D],
    ahead: usize,
) -> [__m512; V] {
    // SAFETY (both): the caller's contract.
    if values.len() <= super::runs::RUN {
        unsafe { mttkrp_row_sums::<V, D, LOOK>(others, values, facs, ahead) }
    } else {
        unsafe { mttkrp_long_row_sums::<V, D, LOOK>(others, values, facs, ahead) }
    }
}

/// [`mttkrp_row_sums`] of a row longer than [`super::runs::RUN`] nonzeros: runs of at
/// most that many summed in f32, their sums added in f64 in order and rounded once
/// ([`super::runs::in_runs`]'s operations per column, so its bits).
///
/// # Safety
/// As [`mttkrp_row_sums`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)] // vectors indexed by constants: kept in registers
#[inline(never)]
#[cold]
unsafe fn mttkrp_long_row_sums<const V: usize, const D: usize, const LOOK: bool>(
    others: &[u32],
    values: &[f32],
    facs: &[&[f32]; D],
    ahead: usize,
) -> [__m512; V] {
    use super::runs::RUN;
    let n = values.len();
    // Per vector, its low and high eight columns in f64.
    let (mut lo, mut hi) = ([_mm512_setzero_pd(); V], [_mm512_setzero_pd(); V]);
    for s in (0..n).step_by(RUN) {
        let e = (s + RUN).min(n);
        // SAFETY: the caller's contract, for a run of the row's nonzeros.
        let part =
            unsafe { mttkrp_row_sums::<V, D, LOOK>(&others[s * D..], &values[s..e], facs, ahead) };
        for v in 0..V {
            let top = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(part[v])));
            lo[v] = _mm512_add_pd(lo[v], _mm512_cvtps_pd(_mm512_castps512_ps256(part[v])));
            hi[v] = _mm512_add_pd(hi[v], _mm512_cvtps_pd(top));
        }
    }
    std::array::from_fn(|v| {
        let (l, h) = (_mm512_cvtpd_ps(lo[v]), _mm512_cvtpd_ps(hi[v]));
        let joined = _mm512_insertf64x4::<1>(
            _mm512_castps_pd(_mm512_castps256_ps512(l)),
            _mm256_castps_pd(h),
        );
        _mm512_castpd_ps(joined)
    })
}

/// [`mttkrp_row`]'s sums, left in registers.
///
/// # Safety
/// The CPU must have AVX-512F ([`super::avx512::available`]). Every index of the nonzeros in `values`
/// must name a row of its factor (`facs[m]`, `16 V` floats a row): the rows are read
/// unchecked, as in [`mttkrp_streamed_row`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)] // vectors indexed by constants: kept in registers
#[inline]
unsafe fn mttkrp_row_sums<const V: usize, const D: usize, const LOOK: bool>(
    others: &[u32],
    values: &[f32],
    facs: &[&[f32]; D],
    ahead: usize,
) -> [__m512; V] {
    let r = 16 * V;
    let row_of = |f: &[f32], i: u32| -> *const f32 {
        let s = i as usize * r;
        debug_assert!(s + r <= f.len(), "index past its factor");
        // SAFETY: the index names a row of its factor (the caller's contract).
        unsafe { f.as_ptr().add(s) }
    };
    let (ixs, _) = others.as_chunks::<D>();
    let mut sum = [_mm512_setzero_ps(); V];
    for (j, (ix, &x)) in ixs.iter().zip(values).enumerate() {
        if LOOK && let Some(next) = ixs.get(j + ahead) {
            for m in 0..D {
                let i = next[m] as usize;
                if let Some(row) = facs[m].get(i * r..(i + 1) * r) {
                    super::walk::prefetch_row(row);
                }
            }
        }
        let mut k = [_mm512_set1_ps(x); V];
        for m in 0..D - 1 {
            let p = row_of(facs[m], ix[m]);
            for v in 0..V {
                // SAFETY: `p` starts a row of `16 V` floats (checked by `row_of`).
                k[v] = _mm512_mul_ps(k[v], unsafe { _mm512_loadu_ps(p.add(16 * v)) });
            }
        }
        let p = row_of(facs[D - 1], ix[D - 1]);
        for v in 0..V {
            // SAFETY: as above.
            sum[v] = _mm512_fmadd_ps(k[v], unsafe { _mm512_loadu_ps(p.add(16 * v)) }, sum[v]);
        }
    }
    sum
}

/// One row of the long mode in the streamed MTTKRP ([`super::mttkrp_stream`]) at rank
/// `16 V` with `D` other indices per nonzero: for each nonzero, `x` times the long
/// factor's row `own` times the rest's rows (`facs` by position, the target's at
/// position `target` unused), added to the target's row of `out`; the same operations
/// per column in the same order as the AVX2 sum, so the same bits. `others` holds `D`
/// indices per nonzero from this row's first on and may run on past `values` (with
/// `LOOK` the rest's rows of the nonzero `ahead` places on are prefetched).
///
/// # Safety
/// The CPU must have AVX-512F ([`super::avx512::available`]). Every index of the nonzeros in `values`
/// must name a row of its factor (`facs[p]`, `16 V` floats a row) and the target's a
/// row of `out`: the rows are read and written unchecked (a bounds check per gather
/// cost a C model of this loop a fifth of its time).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)] // vectors by constants
#[inline]
pub(super) unsafe fn mttkrp_streamed_row<const V: usize, const D: usize, const LOOK: bool>(
    others: &[[u32; D]],
    values: &[f32],
    own: &[f32],
    facs: &[&[f32]; D],
    target: usize,
    ahead: usize,
    out: &mut [f32],
) {
    let r = 16 * V;
    let own = &own[..r];
    let mut a = [_mm512_setzero_ps(); V];
    for v in 0..V {
        // SAFETY: `own` holds `16 V` floats.
        a[v] = unsafe { _mm512_loadu_ps(own.as_ptr().add(16 * v)) };
    }
    for (j, (ix, &x)) in others.iter().zip(values).enumerate() {
        if LOOK && let Some(next) = others.get(j + ahead) {
            for p in (0..D).filter(|&p| p != target) {
                let i = next[p] as usize;
                if let Some(row) = facs[p].get(i * r..(i + 1) * r) {
                    super::walk::prefetch_row(row);
                }
            }
        }
        let xv = _mm512_set1_ps(x);
        let mut k = [_mm512_setzero_ps(); V];
        for v in 0..V {
            k[v] = _mm512_mul_ps(xv, a[v]);
        }
        for p in 0..D {
            if p != target {
                let i = ix[p] as usize * r;
                debug_assert!(i + r <= facs[p].len(), "index past its factor");
                // SAFETY: the index names a row of its factor (the caller's contract).
                let row = unsafe { facs[p].as_ptr().add(i) };
                for v in 0..V {
                    // SAFETY: `row` starts `16 V` floats of the factor (above).
                    k[v] = _mm512_mul_ps(k[v], unsafe { _mm512_loadu_ps(row.add(16 * v)) });
                }
            }
        }
        let o = ix[target] as usize * r;
        debug_assert!(o + r <= out.len(), "target index past the output");
        // SAFETY: the target's index names a row of `out` (the caller's contract).
        let dst = unsafe { out.as_mut_ptr().add(o) };
        for v in 0..V {
            // SAFETY: `dst` starts `16 V` floats of `out` (above).
            unsafe {
                let d = dst.add(16 * v);
                _mm512_storeu_ps(d, _mm512_add_ps(_mm512_loadu_ps(d), k[v]));
            }
        }
    }
}

/// Rows `rows.0..rows.1` of the long mode in the streamed MTTKRP at rank `16 V` with
/// `D` other indices per nonzero: per row [`mttkrp_streamed_row`], inlined here, so
/// that a row of a few nonzeros (the long mode's are short) costs no call and no
/// reload of the factors' addresses. `ptr` are the long mode's row offsets, `others`
/// and `values` its whole groups', `own` its factor, whose rows in use are prefetched
/// [`super::mttkrp_stream::own_rows_ahead`] rows ahead
/// ([`super::mttkrp_stream::own_row_to_prefetch`]).
///
/// The offsets, `values` and `own` are checked against each other once here, not per
/// row: a 4th-order long mode holds about four nonzeros a row, and slicing each row's
/// nonzeros and factor row with checks cost about a fifth of the instructions per
/// nonzero (a C model of the same loop without them ran 20 % faster).
///
/// # Safety
/// The CPU must have AVX-512F ([`super::avx512::available`]), the offsets in `ptr` must ascend, and
/// the nonzeros' indices must name rows of their factors and of `out`, as
/// [`mttkrp_streamed_row`] requires.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn mttkrp_streamed_rows<const V: usize, const D: usize, const LOOK: bool>(
    ptr: &[usize],
    others: &[[u32; D]],
    values: &[f32],
    own: &[f32],
    facs: &[&[f32]; D],
    target: usize,
    rows: (usize, usize),
    ahead: usize,
    out: &mut [f32],
) {
    let r = 16 * V;
    let k = super::mttkrp_stream::own_rows_ahead(r);
    assert!(
        rows.0 <= rows.1 && rows.1 < ptr.len(),
        "rows past the long mode"
    );
    let end = ptr[rows.1];
    assert!(
        end <= values.len() && end <= others.len(),
        "offsets past the nonzeros"
    );
    assert!(
        own.len() >= (ptr.len() - 1) * r,
        "a factor row per row of the mode"
    );
    for l in rows.0..rows.1 {
        // A row of the mode (`l`, or one whose offsets exist): a row of `own`.
        let a = super::mttkrp_stream::own_row_to_prefetch(ptr, l, k);
        // SAFETY: `a` is below the mode's rows, each `r` floats of `own` (asserted),
        // so its `V` lines lie in `own`.
        unsafe {
            let row = own.as_ptr().add(a * r);
            for v in 0..V {
                _mm_prefetch::<_MM_HINT_T0>(row.add(16 * v).cast());
            }
        }
        // SAFETY: `l + 1 <= rows.1 < ptr.len()` (asserted).
        let (s, e) = unsafe { (*ptr.get_unchecked(l), *ptr.get_unchecked(l + 1)) };
        debug_assert!(s <= e && e <= end, "offsets that ascend");
        if s == e {
            continue;
        }
        // SAFETY: this function runs only where the CPU has AVX-512F. The offsets
        // ascend, so `s <= e <= end`, within `others` and `values` (asserted); row `l`
        // of the mode is `r` floats of `own`; the indices are the caller's contract.
        unsafe {
            mttkrp_streamed_row::<V, D, LOOK>(
                others.get_unchecked(s..),
                values.get_unchecked(s..e),
                own.get_unchecked(l * r..(l + 1) * r),
                facs,
                target,
                ahead,
                out,
            )
        };
    }
}

/// Rows `rows.0..rows.1` of the row-by-row MTTKRP at rank `R = 16 V` with `D` other
/// modes, each whole, into `dst` (their rows of the output, one after the other): per
/// row [`mttkrp_row`] (inlined here), written with non-temporal stores with `PAST`.
/// With `S` the output rows are `r < R` floats (the rank of factors padded with zero
/// columns to `R`), each stored under a mask. `ptr` are the groups' row offsets,
/// `others` and `values` the whole groups'.
///
/// # Safety
/// The CPU must have AVX-512F ([`super::avx512::available`]), the offsets in `ptr` must ascend, and
/// every index of the nonzeros must name a row of its factor ([`mttkrp_row_sums`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)] // vectors by constants
pub(super) unsafe fn mttkrp_rows<
    const R: usize,
    const V: usize,
    const D: usize,
    const LOOK: bool,
    const PAST: bool,
    const S: bool,
>(
    ptr: &[usize],
    others: &[u32],
    values: &[f32],
    facs: &[&[f32]; D],
    r: usize,
    rows: (usize, usize),
    ahead: usize,
    dst: &mut [f32],
) {
    debug_assert_eq!(R, 16 * V);
    let r = if S { r } else { R };
    assert!(r <= R && !(PAST && S), "rows of {r} at width {R}");
    // Per vector, the lanes of an output row it stores: all 16 up to the rank, the
    // rest in the vector that holds it, none past it.
    let masks: [u16; V] = std::array::from_fn(|v| {
        let n = r.saturating_sub(16 * v).min(16);
        ((1u32 << n) - 1) as u16
    });
    // Checked once here, not per row (as in `mttkrp_streamed_rows`): a long mode's
    // rows hold a few nonzeros each.
    assert!(rows.0 <= rows.1 && rows.1 < ptr.len(), "rows past the mode");
    // The task's nonzeros end here (the lookahead runs on to there).
    let te = ptr[rows.1];
    assert!(
        te <= values.len() && te * D <= others.len(),
        "offsets past the nonzeros"
    );
    // Rows of 16 V floats from a 64-byte aligned start are each 64-byte aligned, as
    // the non-temporal 512-bit store requires.
    let aligned = (dst.as_ptr() as usize).is_multiple_of(64);
    let store = |o: &mut [f32], sum: [__m512; V]| {
        for v in 0..V {
            // SAFETY: `o` holds `r` floats: `R = 16 V` without `S` (with `PAST` and
            // `aligned`, `o + 16 v` is then 64-byte aligned); with `S` the masked store
            // touches only the lanes below `r` (a lane masked off is neither written
            // nor faulted on).
            unsafe {
                let d = o.as_mut_ptr().add(16 * v);
                if S {
                    _mm512_mask_storeu_ps(d, masks[v], sum[v]);
                } else if PAST && aligned {
                    _mm512_stream_ps(d, sum[v]);
                } else {
                    _mm512_storeu_ps(d, sum[v]);
                }
            }
        }
    };
    // Rows of at most a run in this loop; longer ones (rare: a dense slice's) after
    // it, so that no call sits in the loop (one there, even never taken, cost a long
    // mode of mostly empty rows a sixth of its time at rank 32).
    let mut long = false;
    for (i, o) in (rows.0..rows.1).zip(dst.chunks_exact_mut(r)) {
        // SAFETY: `i + 1 <= rows.1 < ptr.len()` (asserted).
        let (s, e) = unsafe { (*ptr.get_unchecked(i), *ptr.get_unchecked(i + 1)) };
        debug_assert!(s <= e && e <= te, "offsets that ascend");
        if e - s > super::runs::RUN {
            long = true;
            continue;
        }
        // SAFETY: this function runs only where the CPU has AVX-512F. The offsets
        // ascend, so `s <= e <= te`, within `values` and `others` (asserted).
        let sum = unsafe {
            mttkrp_row_sums::<V, D, LOOK>(
                others.get_unchecked(s * D..te * D),
                values.get_unchecked(s..e),
                facs,
                ahead,
            )
        };
        store(o, sum);
    }
    if !long {
        return;
    }
    for (i, o) in (rows.0..rows.1).zip(dst.chunks_exact_mut(r)) {
        let (s, e) = (ptr[i], ptr[i + 1]);
        if e - s > super::runs::RUN {
            // SAFETY: as above.
            let sum = unsafe {
                mttkrp_long_row_sums::<V, D, LOOK>(
                    &others[s * D..te * D],
                    &values[s..e],
                    facs,
                    ahead,
                )
            };
            store(o, sum);
        }
    }
}
