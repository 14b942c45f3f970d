//! CP-APR's multiplicative update (Chi & Kolda 2012): the inner iterations on one mode
//! and their KKT stopping test.
//!
//! With the other modes' factors fixed, mode `n`'s factor `B` is updated by
//! `B ← B ∗ Φ(B)` ([`crate::ops::Op::Phi`]) until the KKT violation
//! `max |min(B, 1 − Φ)|` is below a tolerance, at most `max_inner` times. Both the
//! per-call loop ([`inner_iterations`]) and the CPU's fused row-by-row session
//! ([`row_violation`], [`update_row`]) apply these operations in this order.

use crate::error::Result;
use rayon::prelude::*;

/// What a run of MU's inner iterations did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MuInner {
    /// Φ evaluations (the inner iterations run, the last one included).
    pub evaluations: usize,
    /// The KKT violation `max |min(B, 1 − Φ)|` of the last evaluation (0 when none).
    pub violation: f64,
    /// Whether `B` was updated at least once (some violation was at least `tol`).
    pub updated: bool,
    /// Bytes copied to a device, summed over the evaluations.
    pub bytes_to_device: u64,
    /// Bytes copied back from a device, summed over the evaluations.
    pub bytes_from_device: u64,
}

/// MU's inner iterations on one mode, all in f64, one Φ evaluation at a time through
/// `phi` (Φ of `B` into `out`, returning the bytes it copied to and from a device): up to `max_inner` times, Φ, its KKT violation
/// ([`kkt_violation`]; stop when below `tol`), then `B ← B ∗ Φ`. `out` holds the last
/// Φ. The definition a fused session's inner iterations reproduce to the bit.
pub fn inner_iterations(
    phi: impl FnMut(&[f64], &mut [f64]) -> Result<(u64, u64)>,
    b: &mut [f64],
    max_inner: usize,
    tol: f64,
    out: &mut [f64],
) -> Result<MuInner> {
    inner_iterations_combined(phi, Ok, b, max_inner, tol, out)
}

/// [`inner_iterations`] on some rows of `B` (and of Φ), the others held elsewhere:
/// each evaluation's violation over these rows goes through `combine`, which gives the
/// violation over all rows (the largest over the processes that hold them), and the
/// stopping test reads that. With `combine` the identity it is [`inner_iterations`].
pub fn inner_iterations_combined(
    mut phi: impl FnMut(&[f64], &mut [f64]) -> Result<(u64, u64)>,
    mut combine: impl FnMut(f64) -> Result<f64>,
    b: &mut [f64],
    max_inner: usize,
    tol: f64,
    out: &mut [f64],
) -> Result<MuInner> {
    let mut done = MuInner::default();
    for _ in 0..max_inner {
        done.evaluations += 1;
        let (to, from) = phi(b, out)?;
        done.bytes_to_device += to;
        done.bytes_from_device += from;
        done.violation = combine(kkt_violation(b, out))?;
        if done.violation < tol {
            break;
        }
        done.updated = true;
        b.par_chunks_mut(1 << 16)
            .zip(out.par_chunks(1 << 16))
            .for_each(|(b, p)| update_row(b, p));
    }
    Ok(done)
}

/// `B ← B ∗ Φ` on one row (or any run of entries).
#[inline(always)]
pub fn update_row(b: &mut [f64], phi: &[f64]) {
    for (bk, &p) in b.iter_mut().zip(phi) {
        *bk *= p;
    }
}

/// `max |min(B, 1 − Φ)|` of one row, NaN if `B` or `Φ` holds one (as
/// [`kkt_violation`] over all rows).
#[inline(always)]
pub fn row_violation(b: &[f64], phi: &[f64]) -> f64 {
    let mut m = 0f64;
    let mut nan = false;
    for (&bk, &p) in b.iter().zip(phi) {
        let d = 1.0 - p;
        nan |= d.is_nan() | bk.is_nan();
        m = m.max(bk.min(d).abs());
    }
    if nan { f64::NAN } else { m }
}

/// The larger of two violations, NaN if either is.
#[inline]
pub fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// `max |min(B, 1 − Φ)|` (Φ in f32 or f64); NaN when `B` or `Φ` holds a NaN (a broken
/// Φ is not read as converged). Four running maxima per chunk, NaN tracked apart, so
/// the loop vectorizes (it runs after every Φ of the inner iterations).
pub fn kkt_violation<P: Copy + Into<f64> + Sync>(b: &[f64], phi: &[P]) -> f64 {
    b.par_chunks(1 << 16)
        .zip(phi.par_chunks(1 << 16))
        .map(|(b, p)| {
            let mut m = [0f64; 4];
            let mut nan = false;
            let (b4, p4) = (b.chunks_exact(4), p.chunks_exact(4));
            let tail = b4.remainder().iter().zip(p4.remainder());
            for (b, p) in b4.zip(p4) {
                for k in 0..4 {
                    let d = 1.0 - p[k].into();
                    nan |= d.is_nan() | b[k].is_nan();
                    m[k] = m[k].max(b[k].min(d).abs());
                }
            }
            for (&b, &p) in tail {
                let d = 1.0 - p.into();
                nan |= d.is_nan() | b.is_nan();
                m[0] = m[0].max(b.min(d).abs());
            }
            if nan {
                f64::NAN
            } else {
                m[0].max(m[1]).max(m[2].max(m[3]))
            }
        })
        .reduce(|| 0.0, |x, y| if x.is_nan() || x > y { x } else { y })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kkt_violation_is_the_largest_complementarity_gap() {
        // min(0.5, 1 - 0.2) = 0.5; min(0.1, 1 - 3) = -2 → 2; min(0, 1 - 1) = 0.
        assert_eq!(kkt_violation(&[0.5, 0.1, 0.0], &[0.2, 3.0, 1.0]), 2.0);
        assert!(kkt_violation(&[0.5], &[f32::NAN]).is_nan());
        assert_eq!(kkt_violation::<f32>(&[], &[]), 0.0);
        // Past the four lanes: the largest gap in the tail, then in a lane; NaN in B.
        let b = [0.5, 0.1, 0.0, 0.3, 0.2, 0.7];
        assert_eq!(kkt_violation(&b, &[0.2, 3.0, 1.0, 0.9, 5.0, 0.1]), 4.0);
        assert_eq!(kkt_violation(&b, &[0.2, 0.0, 1.0, 9.0, 0.0, 0.1]), 8.0);
        let mut b8 = [0.5; 8];
        b8[6] = f64::NAN;
        assert!(kkt_violation(&b8, &[0.5; 8]).is_nan());
        // The same in f64 (a PhiRun's Φ).
        assert_eq!(kkt_violation(&b, &[0.2f64, 3.0, 1.0, 0.9, 5.0, 0.1]), 4.0);
        assert!(kkt_violation(&[0.5], &[f64::NAN]).is_nan());
    }

    #[test]
    fn the_row_rule_agrees_with_the_whole_matrix_rule() {
        let b = [0.5, 0.1, 0.0, 0.3, 0.2, 0.7];
        let phi = [0.2, 3.0, 1.0, 0.9, 5.0, 0.1];
        let rows = b
            .chunks(2)
            .zip(phi.chunks(2))
            .map(|(b, p)| row_violation(b, p))
            .fold(0.0, nan_max);
        assert_eq!(rows, kkt_violation(&b, &phi));
        assert!(row_violation(&[f64::NAN], &[1.0]).is_nan());
        assert!(nan_max(0.0, f64::NAN).is_nan() && nan_max(f64::NAN, 1.0).is_nan());
        let mut b2 = b;
        update_row(&mut b2, &phi);
        assert_eq!(b2[1], 0.1 * 3.0);
        // Two inner iterations from a Φ that halves B: the second violation stops it.
        let mut bb = vec![1.0, 2.0];
        let mut out = vec![0.0; 2];
        let done = inner_iterations(
            |b, o| {
                o.iter_mut().zip(b).for_each(|(o, &b)| *o = 1.0 - b / 8.0);
                Ok((3, 1))
            },
            &mut bb,
            5,
            0.2,
            &mut out,
        )
        .unwrap();
        // 1st: violation max(min(1, 1/8), min(2, 1/4)) = 0.25, B ← [7/8, 3/2]; 2nd:
        // max(7/64, 3/16) = 0.1875 < 0.2.
        assert_eq!((done.evaluations, done.updated), (2, true));
        assert_eq!(done.violation, 0.1875);
        assert_eq!(bb, [0.875, 1.5]);
        assert_eq!((done.bytes_to_device, done.bytes_from_device), (6, 2));
    }
}
