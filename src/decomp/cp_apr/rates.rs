//! Observed counts the fitted model gives no rate.
//!
//! The multiplicative updates cannot move an entry of a factor away from zero while
//! its Φ is zero, and Φ of a row is zero where the model's other factors are zero at
//! every nonzero of the row. An isolated count (the only nonzero of its rows in two
//! modes) whose two factor rows both reach zero stays at a rate of zero for good;
//! `κ` does not help, since it moves only zeros whose Φ exceeds 1. The model's own
//! log-likelihood is then −∞, while the one reported (as pyttb's `epsDivZero` floor in
//! Φ) counts `x ln ε` there. This module finds such counts, so the run can say so.

use crate::hls::HlsTensor;

/// A warning where the rate `μ = Σ_r λ_r Π_n A_n[i_n, r]` of the model (`λ`, the
/// factors `a`, `rank` values per row) is at most `eps` at a positive value of `x`.
pub(super) fn floored_rates(
    x: &HlsTensor,
    a: &[Vec<f64>],
    lambda: &[f64],
    eps: f64,
) -> Option<String> {
    let rank = lambda.len();
    let mut rows = vec![0f64; rank];
    let (mut count, mut first) = (0u64, None);
    x.for_each_nonzero(|c, v| {
        if v <= 0.0 {
            return;
        }
        rows.copy_from_slice(lambda);
        for (f, &i) in a.iter().zip(c) {
            for (p, &q) in rows.iter_mut().zip(&f[i as usize * rank..][..rank]) {
                *p *= q;
            }
        }
        if rows.iter().sum::<f64>() <= eps {
            count += 1;
            first.get_or_insert_with(|| (c.to_vec(), v));
        }
    });
    let (at, v) = first?;
    let at: Vec<String> = at.iter().map(|i| (i + 1).to_string()).collect();
    Some(format!(
        "the model's rate is at most eps = {eps:e} at {count} observed nonzero{} (the first at ({}), value {v}): the multiplicative updates cannot move it, and the log-likelihood counts x·ln(eps) there, where the model's own is -inf",
        if count == 1 { "" } else { "s" },
        at.join(", ")
    ))
}
