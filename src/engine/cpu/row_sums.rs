//! The row-by-row MTTKRP's portable sums (AVX2 where the build targets it): one row
//! ([`row_sum`], compiled per rank width and count of other modes), a span of whole
//! rows in one call ([`narrow_task`]), and any rank ([`row_sum_any`]). The AVX-512
//! twins are [`super::mttkrp_wide`]'s; both give the same bits. Callers in
//! [`super::mttkrp_rows`].

use super::factor_rows::{self, store_row};
use super::mttkrp_wide::Groups;
use super::nt_store;
use super::runs::{RUN, in_runs, in_runs_any};

/// How many nonzeros ahead [`row_sum`] prefetches factor rows that miss the cache.
pub(super) const LOOKAHEAD: usize = 16;

/// A sum compiled per factor width `R`, count of other modes `D` and the three
/// switches (`PAST`: non-temporal stores; `LOOK`: prefetch ahead; `S`: output rows
/// shorter than `R`, the rank of factors padded to `R`), run by [`by_shape`].
trait ShapedSum {
    fn run<const R: usize, const D: usize, const PAST: bool, const LOOK: bool, const S: bool>(
        self,
        facs: &[&[f32]; D],
    );
}

/// Runs `sum` specialized for factor width `w`, `facs.len()` other modes and the
/// switches (`short`: output rows shorter than `w`; never with `past`, whose stores
/// write whole rows of `w`); `false` where no specialization exists.
#[inline(always)]
fn by_shape(
    sum: impl ShapedSum,
    w: usize,
    past: bool,
    look: bool,
    short: bool,
    facs: &[&[f32]],
) -> bool {
    debug_assert!(!(past && short), "non-temporal stores of short rows");
    /// The width and order arms for one set of switches.
    macro_rules! arms {
        ($past:literal, $look:literal, $s:literal) => {
            match (w, facs) {
                (8, [a]) => sum.run::<8, 1, $past, $look, $s>(&[a]),
                (16, [a]) => sum.run::<16, 1, $past, $look, $s>(&[a]),
                (32, [a]) => sum.run::<32, 1, $past, $look, $s>(&[a]),
                (48, [a]) => sum.run::<48, 1, $past, $look, $s>(&[a]),
                (64, [a]) => sum.run::<64, 1, $past, $look, $s>(&[a]),
                (8, [a, b]) => sum.run::<8, 2, $past, $look, $s>(&[a, b]),
                (16, [a, b]) => sum.run::<16, 2, $past, $look, $s>(&[a, b]),
                (32, [a, b]) => sum.run::<32, 2, $past, $look, $s>(&[a, b]),
                (48, [a, b]) => sum.run::<48, 2, $past, $look, $s>(&[a, b]),
                (64, [a, b]) => sum.run::<64, 2, $past, $look, $s>(&[a, b]),
                (8, [a, b, c]) => sum.run::<8, 3, $past, $look, $s>(&[a, b, c]),
                (16, [a, b, c]) => sum.run::<16, 3, $past, $look, $s>(&[a, b, c]),
                (32, [a, b, c]) => sum.run::<32, 3, $past, $look, $s>(&[a, b, c]),
                (48, [a, b, c]) => sum.run::<48, 3, $past, $look, $s>(&[a, b, c]),
                (64, [a, b, c]) => sum.run::<64, 3, $past, $look, $s>(&[a, b, c]),
                (8, [a, b, c, d]) => sum.run::<8, 4, $past, $look, $s>(&[a, b, c, d]),
                (16, [a, b, c, d]) => sum.run::<16, 4, $past, $look, $s>(&[a, b, c, d]),
                (32, [a, b, c, d]) => sum.run::<32, 4, $past, $look, $s>(&[a, b, c, d]),
                (48, [a, b, c, d]) => sum.run::<48, 4, $past, $look, $s>(&[a, b, c, d]),
                (64, [a, b, c, d]) => sum.run::<64, 4, $past, $look, $s>(&[a, b, c, d]),
                (8, [a, b, c, d, e]) => sum.run::<8, 5, $past, $look, $s>(&[a, b, c, d, e]),
                (16, [a, b, c, d, e]) => sum.run::<16, 5, $past, $look, $s>(&[a, b, c, d, e]),
                (32, [a, b, c, d, e]) => sum.run::<32, 5, $past, $look, $s>(&[a, b, c, d, e]),
                (48, [a, b, c, d, e]) => sum.run::<48, 5, $past, $look, $s>(&[a, b, c, d, e]),
                (64, [a, b, c, d, e]) => sum.run::<64, 5, $past, $look, $s>(&[a, b, c, d, e]),
                _ => return false,
            }
        };
    }
    match (past, look, short) {
        (false, false, false) => arms!(false, false, false),
        (true, false, false) => arms!(true, false, false),
        (false, true, false) => arms!(false, true, false),
        (true, true, false) => arms!(true, true, false),
        (_, false, true) => arms!(false, false, true),
        (_, true, true) => arms!(false, true, true),
    }
    true
}

/// One row's (or piece's) [`row_sum`].
struct RowCall<'a> {
    wide: bool,
    others: &'a [u32],
    values: &'a [f32],
    out: &'a mut [f32],
}

impl ShapedSum for RowCall<'_> {
    #[inline(always)]
    fn run<const R: usize, const D: usize, const PAST: bool, const LOOK: bool, const S: bool>(
        self,
        facs: &[&[f32]; D],
    ) {
        row_sum::<R, D, PAST, LOOK, S>(self.wide, self.others, self.values, facs, self.out);
    }
}

/// Runs [`row_sum`] specialized for factor width `w` (the rank, or the width the
/// factors are padded to, with `out` the rank's length), `facs.len()` other modes and
/// the two switches; `false` where no specialization exists (the caller runs
/// [`row_sum_any`]).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn specialized(
    w: usize,
    past: bool,
    look: bool,
    wide: bool,
    others: &[u32],
    values: &[f32],
    facs: &[&[f32]],
    out: &mut [f32],
) -> bool {
    let short = out.len() < w;
    let call = RowCall {
        wide,
        others,
        values,
        out,
    };
    by_shape(call, w, past, look, short, facs)
}

/// One row (or piece) of MTTKRP at rank `R` with `D` other modes: `Σ x · Π_m F_m[i_m]`
/// over its nonzeros (`others` holds `D` indices per nonzero), into `out` (with `S`,
/// its first `out.len() < R` entries: factors padded with zero columns to `R`): per
/// nonzero
/// `x` times the rows but the last, then one fused multiply-add with the last. The
/// order and the factors are constants, so that every factor's address stays in a
/// register and the loop over the modes unrolls. With `PAST` the row is written with
/// non-temporal stores (see [`nt_store::store_past_cache`]); with `LOOK` the
/// factor rows of the nonzero [`LOOKAHEAD`] places on are prefetched (`others` may run
/// on past this row's nonzeros, into the rest of its task, for that; `values` holds this
/// row's alone). A row longer than [`super::runs::RUN`] nonzeros is summed in runs
/// ([`in_runs`]).
#[inline(always)]
fn row_sum<const R: usize, const D: usize, const PAST: bool, const LOOK: bool, const S: bool>(
    wide: bool,
    others: &[u32],
    values: &[f32],
    facs: &[&[f32]; D],
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if wide && matches!(R, 16 | 32 | 48 | 64) {
        use super::avx512_mttkrp::mttkrp_row;
        // Its own array: one borrowed by the call would keep the AVX2 loop's
        // accumulators in memory.
        let mut acc = [0f32; R];
        let (o, x, f, a) = (others, values, facs, &mut acc[..]);
        // SAFETY: `wide` is set only where the CPU has AVX-512F; the groups' indices
        // name rows of the factors (a validated tensor's, checked shapes: `run`).
        unsafe {
            match R {
                16 => mttkrp_row::<1, D, LOOK>(o, x, f, LOOKAHEAD, a),
                32 => mttkrp_row::<2, D, LOOK>(o, x, f, LOOKAHEAD, a),
                48 => mttkrp_row::<3, D, LOOK>(o, x, f, LOOKAHEAD, a),
                _ => mttkrp_row::<4, D, LOOK>(o, x, f, LOOKAHEAD, a),
            }
        }
        if PAST {
            nt_store::store_past_cache(out, &acc);
        } else if S {
            store_row(out, &acc);
        } else {
            out.copy_from_slice(&acc);
        }
        return;
    }
    let _ = wide;
    let (ixs, _) = others.as_chunks::<D>();
    let acc = in_runs::<R>(values.len(), |s, e| {
        run_sum::<R, D, LOOK>(&ixs[s..], &values[s..e], facs)
    });
    store::<R, PAST, S>(out, &acc);
}

/// A row's sums into its output row: past the cache with `PAST`, its first
/// `out.len()` columns with `S`.
#[inline(always)]
fn store<const R: usize, const PAST: bool, const S: bool>(out: &mut [f32], acc: &[f32; R]) {
    if PAST {
        nt_store::store_past_cache(out, acc);
    } else if S {
        store_row(out, acc);
    } else {
        out.copy_from_slice(acc);
    }
}

/// [`row_sum`]'s f32 sum of `values.len()` nonzeros (at most [`RUN`]), `ixs` their
/// indices from the first on (running on past them for the lookahead).
#[inline(always)]
fn run_sum<const R: usize, const D: usize, const LOOK: bool>(
    ixs: &[[u32; D]],
    values: &[f32],
    facs: &[&[f32]; D],
) -> [f32; R] {
    let mut acc = [0f32; R];
    for (j, (ix, &x)) in ixs.iter().zip(values).enumerate() {
        if LOOK && let Some(ahead) = ixs.get(j + LOOKAHEAD) {
            for (f, &i) in facs.iter().zip(ahead) {
                if let Some(row) = f.get(i as usize * R..(i as usize + 1) * R) {
                    super::walk::prefetch_row(row);
                }
            }
        }
        let mut k = [x; R];
        for m in 0..D - 1 {
            // SAFETY: the groups' indices name rows of the factors (a validated
            // tensor's, checked shapes: `run`).
            let row = unsafe { factor_rows::row::<R>(facs[m], ix[m] as usize) };
            for (a, &b) in k.iter_mut().zip(row) {
                *a *= b;
            }
        }
        // SAFETY: as above.
        let row = unsafe { factor_rows::row::<R>(facs[D - 1], ix[D - 1] as usize) };
        for ((a, &kc), &l) in acc.iter_mut().zip(&k).zip(row) {
            *a = kc.mul_add(l, *a);
        }
    }
    acc
}

/// [`row_sum`] at any rank and order (in runs, as it), on factors of width `w` (the
/// rank `out.len()`, or a compiled width it is padded to): at the compiled widths a
/// loop over the modes around rows of `w` in registers ([`run_sum_modes`]), the first
/// `out.len()` sums written; else rows of the rank's length. [`row_sum`] is compiled
/// for orders 2 to 6; above, the loop over the modes keeps the rows in registers: on a
/// 5th-order tensor of 2 M nonzeros at rank 16 it took 0.2–0.3 times the time of the
/// rows of the rank's length, and [`row_sum`] 0.15–0.2 times.
pub(super) fn row_sum_any(
    others: &[u32],
    values: &[f32],
    facs: &[&[f32]],
    w: usize,
    out: &mut [f32],
) {
    let d = facs.len();
    macro_rules! width {
        ($r:literal) => {{
            let acc = in_runs::<$r>(values.len(), |s, e| {
                run_sum_modes::<$r>(&others[s * d..e * d], &values[s..e], facs)
            });
            let r = out.len();
            out.copy_from_slice(&acc[..r]);
            return;
        }};
    }
    assert!(out.len() <= w, "output rows longer than the factors'");
    match w {
        8 => width!(8),
        16 => width!(16),
        32 => width!(32),
        48 => width!(48),
        64 => width!(64),
        _ => {
            // Factors are padded to compiled widths only (`padded::factor_width`).
            assert_eq!(w, out.len(), "factors padded to a width with no sums");
            row_sum_rank(others, values, facs, out)
        }
    }
}

/// [`row_sum_any`] on rows of the rank's length (`out.len()`, the factors' width).
fn row_sum_rank(others: &[u32], values: &[f32], facs: &[&[f32]], out: &mut [f32]) {
    let (d, r) = (facs.len(), out.len());
    let (last, mid) = facs.split_last().expect("order ≥ 2");
    let mut k = vec![0f32; r];
    in_runs_any(values.len(), out, |s, e, part| {
        part.fill(0.0);
        for (ix, &x) in others[s * d..e * d].chunks_exact(d).zip(&values[s..e]) {
            k.fill(x);
            for (f, &i) in mid.iter().zip(ix) {
                for (kc, &a) in k.iter_mut().zip(&f[i as usize * r..][..r]) {
                    *kc *= a;
                }
            }
            let row = &last[ix[d - 1] as usize * r..][..r];
            for ((o, &kc), &l) in part.iter_mut().zip(&k).zip(row) {
                *o = kc.mul_add(l, *o);
            }
        }
    });
}

/// [`run_sum`] with the count of other modes known at run time only (`facs.len()`
/// indices per nonzero in `others`): the same operations in the same order, so the
/// same bits.
#[inline(always)]
fn run_sum_modes<const R: usize>(others: &[u32], values: &[f32], facs: &[&[f32]]) -> [f32; R] {
    let (last, mid) = facs.split_last().expect("order ≥ 2");
    let d = facs.len();
    let mut acc = [0f32; R];
    for (ix, &x) in others.chunks_exact(d).zip(values) {
        let mut k = [x; R];
        for (f, &i) in mid.iter().zip(ix) {
            let row: &[f32; R] = f[i as usize * R..][..R].try_into().expect("R columns");
            for (a, &b) in k.iter_mut().zip(row) {
                *a *= b;
            }
        }
        let row: &[f32; R] = last[ix[d - 1] as usize * R..][..R]
            .try_into()
            .expect("R columns");
        for ((a, &kc), &l) in acc.iter_mut().zip(&k).zip(row) {
            *a = kc.mul_add(l, *a);
        }
    }
    acc
}

/// Whether [`narrow_task`] has a specialization for factor width `w` and `d` other
/// modes.
pub(super) fn narrow_fits(w: usize, d: usize) -> bool {
    matches!(w, 8 | 16 | 32 | 48 | 64) && (1..=5).contains(&d)
}

/// Rows `rows` (whole, into `dst`, `r` floats each) of [`row_sum`] in one call where
/// a specialization exists for factor width `w` (`r`, or the width `r`'s factors are
/// padded to) and `facs.len()` other modes (the caller runs row by row where this
/// returns `false`). A long mode's rows hold a few nonzeros
/// each, and a call per row (its dispatch on the rank and switches, its frame) cost
/// about a quarter of such a mode's time: longmode7m's mode 0, 1.5 M rows, one
/// thread, took 81 ms, and a C loop of the same sums 62 ms. The same sums, so the
/// same bits.
#[allow(clippy::too_many_arguments)]
pub(super) fn narrow_task(
    (w, r): (usize, usize),
    past: bool,
    look: bool,
    groups: Groups<'_>,
    facs: &[&[f32]],
    rows: (usize, usize),
    dst: &mut [f32],
) -> bool {
    let call = SpanCall {
        groups,
        rows,
        r,
        dst,
    };
    by_shape(call, w, past, look, r < w, facs)
}

/// A span of whole rows: each row's [`row_sum`], its lookahead running on to the
/// span's last nonzero.
struct SpanCall<'a> {
    groups: Groups<'a>,
    rows: (usize, usize),
    /// The output rows' length (the rank).
    r: usize,
    dst: &'a mut [f32],
}

impl ShapedSum for SpanCall<'_> {
    fn run<const R: usize, const D: usize, const PAST: bool, const LOOK: bool, const S: bool>(
        self,
        facs: &[&[f32]; D],
    ) {
        let ((ptr, others, values), (r0, r1)) = (self.groups, self.rows);
        let te = ptr[r1];
        let (others, values) = (&others[..te * D], &values[..te]);
        let r = if S { self.r } else { R };
        // Rows of at most a run in this loop, longer ones after it (as
        // `avx512_mttkrp::mttkrp_rows` does: no call in the loop).
        let mut long = false;
        for (w, o) in ptr[r0..=r1].windows(2).zip(self.dst.chunks_exact_mut(r)) {
            let (s, e) = (w[0], w[1]);
            if e - s > RUN {
                long = true;
                continue;
            }
            let (ixs, _) = others[s * D..].as_chunks::<D>();
            let acc = run_sum::<R, D, LOOK>(ixs, &values[s..e], facs);
            store::<R, PAST, S>(o, &acc);
        }
        if long {
            for (w, o) in ptr[r0..=r1].windows(2).zip(self.dst.chunks_exact_mut(r)) {
                let (s, e) = (w[0], w[1]);
                if e - s > RUN {
                    row_sum::<R, D, PAST, LOOK, S>(false, &others[s * D..], &values[s..e], facs, o);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sums at the compiled widths with the modes in a loop give the bits of the
    /// sums on rows of the rank's length, for 1 to 6 other modes, rows shorter and
    /// longer than a run, and output rows of the width or shorter.
    #[test]
    fn any_order_at_a_width_is_the_rank_length_sum_bit_for_bit() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(17);
        for d in 1..=6 {
            for r in [8, 16, 32, 48, 64] {
                let rows = 7u32;
                let facs: Vec<Vec<f32>> = (0..d)
                    .map(|_| {
                        (0..rows as usize * r)
                            .map(|_| rng.random::<f32>() - 0.3)
                            .collect()
                    })
                    .collect();
                let facs: Vec<&[f32]> = facs.iter().map(|f| &f[..]).collect();
                for n in [1, 5, RUN, 3 * RUN + 17] {
                    let others: Vec<u32> = (0..n * d).map(|_| rng.random_range(0..rows)).collect();
                    let values: Vec<f32> = (0..n).map(|_| rng.random::<f32>() * 14.0).collect();
                    let (mut got, mut want) = (vec![f32::NAN; r], vec![f32::NAN; r]);
                    row_sum_any(&others, &values, &facs, r, &mut got);
                    row_sum_rank(&others, &values, &facs, &mut want);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "{d} other modes, rank {r}, {n} nonzeros"
                    );
                    // Output rows shorter than the factors' (a rank padded to `r`): the
                    // first columns of the same sums.
                    let mut short = vec![f32::NAN; r - 3];
                    row_sum_any(&others, &values, &facs, r, &mut short);
                    assert_eq!(bits(&short), bits(&want[..r - 3]), "{d} modes, {r} padded");
                }
            }
        }
    }
}
