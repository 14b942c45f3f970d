//! Long sums in two precisions: f32 within runs of at most [`RUN`] terms, the runs'
//! sums added in f64 and rounded once.
//!
//! The CPU kernels sum a row's nonzeros in f32 registers. Summed one after another,
//! `n` terms carry a rounding error of up to `(n − 1) u Σ |t|` (`u = 2⁻²⁴`), and
//! a slice of a power-law tensor holds hundreds of thousands: on one with a
//! 557 k-nonzero slice a CP-ALS step was off by 2.4e-4 relative on its dense rows,
//! and the fit estimate moved by more than the default tolerance from noise alone.
//! Cut into runs whose f32 sums are added in f64, the bound is
//! `(RUN − 1 + D) u Σ |t|` for products of `D` roundings, whatever `n`: the error of
//! the f32 products themselves, within a small factor. A sum of at most [`RUN`] terms
//! is the plain f32 sum, bit for bit, so short rows (most rows of most tensors) cost
//! nothing more; a long one costs one widening add per column every [`RUN`] terms.

/// Most terms summed in f32 before the sum is added to an f64 one.
pub(super) const RUN: usize = 128;

/// The sum of `n` terms in runs: `sum(s, e)` is the f32 sum of terms `s..e` (`R`
/// columns); runs of at most [`RUN`], in order, their sums added per column in f64 and
/// rounded to f32 once. Where `n ≤ RUN`, `sum(0, n)` itself. No call: `sum` is inlined
/// twice, the same operations, since a call in a row loop, even one never made, cost
/// the short sums their registers (the streamed blocks' runs: a sixth of a short
/// mode's time at rank 32).
#[inline(always)]
pub(super) fn in_runs<const R: usize>(
    n: usize,
    mut sum: impl FnMut(usize, usize) -> [f32; R],
) -> [f32; R] {
    let first = sum(0, n.min(RUN));
    if n <= RUN {
        return first;
    }
    let mut wide = first.map(f64::from);
    for s in (RUN..n).step_by(RUN) {
        let part = sum(s, (s + RUN).min(n));
        for (w, p) in wide.iter_mut().zip(part) {
            *w += f64::from(p);
        }
    }
    wide.map(|w| w as f32)
}

/// [`in_runs`] at any width: `sum(s, e, part)` writes the f32 sum of terms `s..e`
/// into `part` (`out.len()` floats, zeroed first by `sum` itself); the result goes to
/// `out`.
pub(super) fn in_runs_any(
    n: usize,
    out: &mut [f32],
    mut sum: impl FnMut(usize, usize, &mut [f32]),
) {
    if n <= RUN {
        return sum(0, n, out);
    }
    let mut wide = vec![0f64; out.len()];
    for s in (0..n).step_by(RUN) {
        sum(s, (s + RUN).min(n), out);
        for (w, &p) in wide.iter_mut().zip(out.iter()) {
            *w += f64::from(p);
        }
    }
    for (o, w) in out.iter_mut().zip(wide) {
        *o = w as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Terms of 1/3 summed one after another round down by a third of an ulp per add
    /// once the sum passes 2¹⁵ or so: 100 000 of them drift by about 1e-3 relative.
    /// In runs the drift stays within the derived bound `(RUN − 1) u Σ |t|`, and a
    /// short sum is the plain f32 sum.
    #[test]
    fn runs_bound_the_drift_of_a_long_f32_sum() {
        let (n, t) = (100_000usize, 1f32 / 3.0);
        let exact = n as f64 * f64::from(t);
        let plain = (0..n).fold(0f32, |a, _| a + t);
        let u = f64::from(f32::EPSILON) / 2.0;
        let bound = (RUN - 1) as f64 * u * exact;
        assert!(
            (f64::from(plain) - exact).abs() > 10.0 * bound,
            "the plain sum should drift past the bound"
        );
        let sum = |s: usize, e: usize| [(s..e).fold(0f32, |a, _| a + t); 1];
        let runs = in_runs::<1>(n, sum)[0];
        assert!(
            (f64::from(runs) - exact).abs() <= bound,
            "{runs} vs {exact}"
        );
        let mut out = [0f32; 3];
        in_runs_any(n, &mut out, |s, e, part| {
            part.fill((s..e).fold(0f32, |a, _| a + t));
        });
        assert!(out.iter().all(|&o| o == runs), "{out:?} vs {runs}");
        let short = in_runs::<1>(RUN, sum)[0];
        assert_eq!(short, (0..RUN).fold(0f32, |a, _| a + t));
    }
}
