//! The row-by-row MTTKRP's calls into its AVX-512 sums ([`super::avx512`]): which
//! ranks and orders have one, whole-row tasks ([`wide_task`]), and the shares of a mode
//! with cut rows, whose runs of short rows go to one call each ([`span_cut_job`]).
//! Callers in [`super::mttkrp_rows`]; every sum here gives the same bits as the AVX2
//! one there.

use super::row_sums::LOOKAHEAD;
use super::rows::{CutJob, Plan};

/// The groups' row offsets, other indices and values.
pub(super) type Groups<'a> = (&'a [usize], &'a [u32], &'a [f32]);

/// Whether [`wide_task`] has a specialization for factor width `w` and `d` other
/// modes.
pub(super) fn wide_fits(w: usize, d: usize) -> bool {
    cfg!(target_arch = "x86_64") && matches!(w, 16 | 32 | 48 | 64) && (1..=5).contains(&d)
}

/// Rows of fewer nonzeros than this, consecutive and uncut, go to [`wide_task`]
/// together in [`span_cut_job`]: for them the call a row took cost as much as the row
/// (a long mode of about 5 nonzeros per row ran 15 % faster in spans). Longer rows
/// keep a call each, which costs them nothing, and which measured faster on a
/// block-dense tensor of rows of thousands (8 %, not explained by the loop, which
/// compiles to the same instructions both ways).
const SHORT_ROW: usize = 64;

/// One share of a mode with cut rows, in its pieces' order: runs of consecutive short
/// rows (fewer than [`SHORT_ROW`] nonzeros, uncut; an empty row's sum is zero) one
/// `span(rows, dst)` call per run (on AVX-512 [`wide_task`], else
/// [`super::row_sums::narrow_task`]; it must return `true`), straight into the
/// output; every other piece by `piece(start, end, dst, past)`, a long uncut row into
/// its output row (`past` as the mode's), a piece of a cut row into its partial slot.
/// The same sums as [`CutJob::run`]'s, so the same bits.
pub(super) fn span_cut_job(
    plan: &Plan,
    job: CutJob<'_, f32>,
    r: usize,
    past: bool,
    span: impl Fn((usize, usize), &mut [f32]) -> bool,
    mut piece: impl FnMut(usize, usize, &mut [f32], bool),
) {
    let (row0, n) = (job.row0, job.rows.len() / r);
    let rows = job.rows;
    let mut slots = job.slots.chunks_exact_mut(r);
    // The first owned row not yet written: rows `a..` up to the next long or cut one
    // form the current run.
    let mut a = row0;
    let flush = |a: usize, b: usize, rows: &mut [f32]| {
        if a < b {
            let done = span((a, b), &mut rows[(a - row0) * r..(b - row0) * r]);
            debug_assert!(done, "a span sum for rank {r}");
        }
    };
    for &(i, s, e) in job.pieces {
        if plan.is_cut(i) {
            piece(
                s,
                e,
                slots.next().expect("a slot per piece of a cut row"),
                false,
            );
        } else if e - s >= SHORT_ROW {
            flush(a, i, rows);
            piece(s, e, &mut rows[(i - row0) * r..(i - row0 + 1) * r], past);
            a = i + 1;
        } else {
            continue;
        }
        // A cut row's own output row is written by `Plan::add_cut_rows`; the run
        // before it ends there (its first piece is in the job that owns it).
        if plan.is_cut(i) && i >= a && i < row0 + n {
            flush(a, i, rows);
            a = i + 1;
        }
    }
    flush(a, row0 + n, rows);
}

/// Rows `rows` (whole, into `dst`) of the row-by-row MTTKRP on AVX-512
/// ([`super::avx512_mttkrp::mttkrp_rows`]) where a specialization exists for factor width
/// `w` (the rank `r`, or the width `r`'s factors are padded to; `dst` holds rows of
/// `r`) and `facs.len()` other modes (the caller runs row by row where this returns
/// `false`). Call only where the CPU has AVX-512F.
#[allow(clippy::too_many_arguments)]
pub(super) fn wide_task(
    (w, r): (usize, usize),
    past: bool,
    look: bool,
    (ptr, others, values): Groups<'_>,
    facs: &[&[f32]],
    rows: (usize, usize),
    dst: &mut [f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use super::avx512_mttkrp::mttkrp_rows;
        /// The rank arms for `D` other modes and one pair of switches.
        macro_rules! by_rank {
            ($f:expr, $d:literal, $look:literal, $past:literal, $s:literal) => {
                // SAFETY: called only where the CPU has AVX-512F (the caller's `wide`),
                // with groups whose offsets ascend (running sums of row counts) and
                // whose indices name rows of the factors (checked shapes:
                // `RowMttkrp::run`).
                unsafe {
                    match w {
                        16 => mttkrp_rows::<16, 1, $d, $look, $past, $s>(
                            ptr, others, values, $f, r, rows, LOOKAHEAD, dst,
                        ),
                        32 => mttkrp_rows::<32, 2, $d, $look, $past, $s>(
                            ptr, others, values, $f, r, rows, LOOKAHEAD, dst,
                        ),
                        48 => mttkrp_rows::<48, 3, $d, $look, $past, $s>(
                            ptr, others, values, $f, r, rows, LOOKAHEAD, dst,
                        ),
                        64 => mttkrp_rows::<64, 4, $d, $look, $past, $s>(
                            ptr, others, values, $f, r, rows, LOOKAHEAD, dst,
                        ),
                        _ => return false,
                    }
                }
            };
        }
        /// The order arms for one set of switches.
        macro_rules! by_order {
            ($look:literal, $past:literal, $s:literal) => {
                match facs {
                    [a] => by_rank!(&[a], 1, $look, $past, $s),
                    [a, b] => by_rank!(&[a, b], 2, $look, $past, $s),
                    [a, b, c] => by_rank!(&[a, b, c], 3, $look, $past, $s),
                    [a, b, c, d] => by_rank!(&[a, b, c, d], 4, $look, $past, $s),
                    [a, b, c, d, e] => by_rank!(&[a, b, c, d, e], 5, $look, $past, $s),
                    _ => return false,
                }
            };
        }
        // Rows shorter than the width are stored under masks, never past the cache.
        match (look, past, r < w) {
            (false, false, false) => by_order!(false, false, false),
            (true, false, false) => by_order!(true, false, false),
            (false, true, false) => by_order!(false, true, false),
            (true, true, false) => by_order!(true, true, false),
            (false, _, true) => by_order!(false, false, true),
            (true, _, true) => by_order!(true, false, true),
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (w, r, past, look, ptr, others, values, facs, rows, dst);
        false
    }
}
