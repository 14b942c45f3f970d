//! The multiplicative update's pieces on the host: MU's inner iterations for backends
//! without a Φ session (one Φ call each), the inadmissible-zero fix, the column
//! normalizations and the log-likelihood.

use super::Clock;
use crate::engine::{Call, Engine, FactorVersions, PhiRun, Prepared, RunStats};
use crate::error::{Error, Result};
use crate::math::mu::{MuInner, kkt_violation};
use crate::matrix::Matrix;
use crate::ops::Op;
use rayon::prelude::*;

/// MU's inner iterations on one mode, one Φ evaluation at a time through `phi` (`Φ`
/// of the f32 copy of `B` into `out`, as [`Op::Phi`] computes it): up to `max_inner`
/// times, Φ, its KKT violation (stop when below `tol`), then `B ← B ∗ Φ` and `B`'s f32
/// copy `b32` refreshed. `out` holds the last Φ. For backends without a [`PhiRun`].
pub(super) fn mu_inner_seq(
    mut phi: impl FnMut(&mut Matrix, &mut Matrix) -> Result<RunStats>,
    b: &mut [f64],
    b32: &mut Matrix,
    max_inner: usize,
    tol: f64,
    out: &mut Matrix,
) -> Result<MuInner> {
    let mut done = MuInner::default();
    for _ in 0..max_inner {
        done.evaluations += 1;
        let stats = phi(b32, out)?;
        done.bytes_to_device += stats.bytes_to_device;
        done.bytes_from_device += stats.bytes_from_device;
        done.violation = kkt_violation(b, out.data());
        if done.violation < tol {
            break;
        }
        done.updated = true;
        mu_update(b, out.data(), b32.data_mut());
    }
    Ok(done)
}

/// `B ← B ∗ Φ`, and its f32 copy.
fn mu_update(b: &mut [f64], phi: &[f32], copy: &mut [f32]) {
    b.par_chunks_mut(1 << 16)
        .zip(phi.par_chunks(1 << 16))
        .zip(copy.par_chunks_mut(1 << 16))
        .for_each(|((b, p), c)| {
            for ((b, &p), c) in b.iter_mut().zip(p).zip(c) {
                *b *= f64::from(p);
                *c = *b as f32;
            }
        });
}

/// Whether some entry of `a` is below `kappa_tol` where `Φ` (from f32) is 0: the
/// entries whose inadmissible-zero test f32 underflow can decide.
pub(crate) fn has_unsure_zero<P: Copy + Into<f64> + Sync>(
    a: &[f64],
    phi: &[P],
    kappa_tol: f64,
) -> bool {
    a.len() == phi.len()
        && a.par_iter()
            .zip(phi.par_iter())
            .any(|(&a, &p)| a < kappa_tol && p.into() == 0.0)
}

/// Sets to `f32::MIN_POSITIVE` every zero of `phi` (mode `n`'s last Φ) that is positive
/// in exact arithmetic. Φ is positive wherever some nonzero of the row has every other
/// mode's factor entry positive (its weight `x / max(μ, ε)` is), which is where the
/// MTTKRP of the other factors' 0/1 patterns is positive. In f32 the product of a few
/// small factor entries underflows to 0 where pyttb's f64 keeps it positive, and the
/// inadmissible-zero rule would then add `κ` in one run and not in the other.
pub(super) fn mark_support(
    engine: &Engine,
    x: &Prepared,
    n: usize,
    a: &[Vec<f64>],
    (pattern, out): &mut (Vec<Matrix>, Matrix),
    phi: &mut Matrix,
    clock: &mut Clock,
) -> Result<()> {
    fill_patterns(n, a, phi.cols().max(1), pattern);
    clock.kernel(|| engine.run_into(Op::Mttkrp, x, n, pattern, out))?;
    phi.data_mut()
        .par_iter_mut()
        .zip(out.data().par_iter())
        .for_each(|(p, &s)| {
            if *p == 0.0 && s > 0.0 {
                *p = f32::MIN_POSITIVE;
            }
        });
    Ok(())
}

/// `pattern[m]` = the 0/1 pattern of `a[m]` (1 where an entry is positive, `rank`
/// columns) for every mode `m` but `n`, the factors of the MTTKRP of mode `n` whose
/// positive rows are Φ's exact support ([`mark_support`]).
pub(crate) fn fill_patterns(n: usize, a: &[Vec<f64>], rank: usize, pattern: &mut Vec<Matrix>) {
    pattern.resize_with(a.len(), || Matrix::zeros(0, 0));
    for (m, (p, f)) in pattern.iter_mut().zip(a).enumerate() {
        if m == n {
            // Not read by the MTTKRP of mode n; kept for the next mode's call, so no
            // pattern is allocated and zeroed again every mode.
            continue;
        }
        if p.shape() != (f.len() / rank, rank) {
            *p = Matrix::zeros(f.len() / rank, rank);
        }
        p.data_mut()
            .par_iter_mut()
            .zip(f.par_iter())
            .for_each(|(p, &v)| *p = if v > 0.0 { 1.0 } else { 0.0 });
    }
}

/// `Σ x log m − Σ m` of the model (`λ`, the normalized factors `a`, their f32 copies
/// `eng`): the first sum from a Φ call on `ll.0` with `B = A diag(λ)`, the second as
/// `Σ_r λ_r Π_n Σ_i A_n[i, r]`. With a [`PhiRun`] (fixed on `ll.0`, the other factors
/// as they are now) `B` and Φ are the f64 buffers `ll.3`; otherwise the f32 `B` (`ll.1`)
/// is swapped into `eng` for an [`Op::Phi`] call into `ll.2` and back, each swap
/// recorded in `versions` (the caller's versions of `eng`).
#[allow(clippy::too_many_arguments)]
pub(super) fn log_likelihood(
    engine: &Engine,
    x: &Prepared,
    (eng, versions): (&mut [Matrix], &mut FactorVersions),
    (mode, b, out, (b64, out64)): LlScratch<'_>,
    a: &[Vec<f64>],
    lambda: &[f64],
    call: &Call<'_>,
    run: Option<&mut PhiRun<'_>>,
    clock: &mut Clock,
) -> Result<f64> {
    let rank = lambda.len();
    // B = A diag(λ) of the mode, in f64.
    b64.resize(a[mode].len(), 0.0);
    b64.par_chunks_mut(rank * 1024)
        .zip(a[mode].par_chunks(rank * 1024))
        .for_each(|(d, s)| {
            for (row_d, row_s) in d.chunks_exact_mut(rank).zip(s.chunks_exact(rank)) {
                for ((d, &s), &l) in row_d.iter_mut().zip(row_s).zip(lambda) {
                    *d = s * l;
                }
            }
        });
    let stats = match run {
        Some(run) => clock.kernel(|| run.phi(b64, call.phi, out64)),
        None => {
            to_f32(b64, b.data_mut());
            std::mem::swap(&mut eng[mode], b);
            versions.changed(mode);
            let call = Call {
                versions: Some(&*versions),
                ..*call
            };
            let stats = clock.kernel(|| engine.run_into_with(Op::Phi, x, mode, eng, &call, out));
            std::mem::swap(&mut eng[mode], b);
            versions.changed(mode);
            stats
        }
    };
    let data = stats?.log_term.ok_or_else(|| {
        Error::Unsupported(format!(
            "the {} backend gave no log term for Φ",
            engine.kind()
        ))
    })?;
    let sums: Vec<Vec<f64>> = a.iter().map(|f| column_sums(f, rank)).collect();
    let total: f64 = (0..rank)
        .map(|r| sums.iter().fold(lambda[r], |p, s| p * s[r]))
        .sum();
    let ll = data - total;
    if !ll.is_finite() {
        return Err(Error::NonFinite(format!(
            "the log-likelihood is {ll} (Σ x log m = {data}, Σ m = {total})"
        )));
    }
    Ok(ll)
}

/// The log-likelihood's Φ call: its mode, the f32 `B` and Φ of an [`Op::Phi`] call, and
/// the f64 ones of a [`PhiRun`] call.
type LlScratch<'s> = (
    usize,
    &'s mut Matrix,
    &'s mut Matrix,
    (&'s mut Vec<f64>, &'s mut Vec<f64>),
);

/// Rows per parallel chunk of the element-wise passes.
const CHUNK_ROWS: usize = 4096;

/// Column sums in f64 of a row-major `rows × rank` matrix, over fixed row blocks added
/// in order (the same result whatever the thread count, and for f32 entries the same
/// as for their f64 copies).
pub(crate) fn column_sums<T: Copy + Into<f64> + Sync>(a: &[T], rank: usize) -> Vec<f64> {
    let parts: Vec<Vec<f64>> = a
        .par_chunks(rank * CHUNK_ROWS)
        .map(|block| {
            let mut s = vec![0.0; rank];
            for row in block.chunks_exact(rank) {
                for (s, &v) in s.iter_mut().zip(row) {
                    *s += v.into();
                }
            }
            s
        })
        .collect();
    let mut s = vec![0.0; rank];
    for p in parts {
        for (s, v) in s.iter_mut().zip(p) {
            *s += v;
        }
    }
    s
}

/// Divides every column by its sum (a column whose sum is 0 is left as it is).
pub(crate) fn normalize(a: &mut [f64], sums: &[f64]) {
    let inv: Vec<f64> = sums
        .iter()
        .map(|&s| if s > 0.0 { 1.0 / s } else { 1.0 })
        .collect();
    scale_columns(a, &inv);
}

/// Multiplies column `r` by `s[r]`.
pub(crate) fn scale_columns(a: &mut [f64], s: &[f64]) {
    let rank = s.len();
    a.par_chunks_mut(rank * CHUNK_ROWS).for_each(|block| {
        for row in block.chunks_exact_mut(rank) {
            for (v, &s) in row.iter_mut().zip(s) {
                *v *= s;
            }
        }
    });
}

/// `dst = a` in f32.
pub(crate) fn to_f32(a: &[f64], dst: &mut [f32]) {
    dst.par_chunks_mut(1 << 16)
        .zip(a.par_chunks(1 << 16))
        .for_each(|(d, s)| {
            for (d, &s) in d.iter_mut().zip(s) {
                *d = s as f32;
            }
        });
}

/// Adds `kappa` to every entry below `kappa_tol` whose `Φ` is positive; whether any was.
pub(crate) fn fix_inadmissible(a: &mut [f64], phi: &[f64], kappa_tol: f64, kappa: f64) -> bool {
    if phi.len() != a.len() {
        return false;
    }
    a.par_chunks_mut(1 << 16)
        .zip(phi.par_chunks(1 << 16))
        .map(|(a, p)| {
            let mut any = false;
            for (v, &p) in a.iter_mut().zip(p) {
                if p > 0.0 && *v < kappa_tol {
                    *v += kappa;
                    any = true;
                }
            }
            any
        })
        .reduce(|| false, |x, y| x | y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inadmissible_zeros_move_only_where_phi_is_positive() {
        let mut a = vec![0.0, 0.0, 0.5, 1e-12];
        assert!(fix_inadmissible(&mut a, &[1.0, 0.0, 2.0, 0.5], 1e-10, 0.01));
        assert_eq!(a, vec![0.01, 0.0, 0.5, 0.01 + 1e-12]);
        assert!(!fix_inadmissible(&mut a, &[0.0; 4], 1e-10, 0.01));
    }

    #[test]
    fn zero_columns_stay_zero_when_normalized() {
        let mut a = vec![1.0, 0.0, 3.0, 0.0];
        let s = column_sums(&a, 2);
        assert_eq!(s, vec![4.0, 0.0]);
        normalize(&mut a, &s);
        assert_eq!(a, vec![0.25, 0.0, 0.75, 0.0]);
    }
}
