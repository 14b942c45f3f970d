//! GCP's losses: the elementwise `f(x, m)` of an observed value `x` and the model's
//! value `m`, its derivative `∂f/∂m`, the lower bound the factors keep (where the loss
//! needs a nonnegative model) and the check the data must pass.
//!
//! Formulas and the floor `ε = 1e-10` are those of pyttb's `gcp` handles and GenTen's
//! loss functions, so that values compare. Two exceptions, both where the peers'
//! derivative is not the derivative of their value: negative-binomial's derivative is
//! `(r + x) / (1 + m) − x / (m + ε)` (pyttb writes `r + 1` in the numerator; the
//! MATLAB Tensor Toolbox `r + x`), and bernoulli-logit's value is computed as a stable
//! `softplus(m) − x m` (the same number where `exp(m)` does not overflow).

use crate::error::{Error, Result};
use std::f64::consts::PI;

/// The floor the peers add to `m` inside logarithms and denominators.
pub const EPS: f64 = 1e-10;

/// A GCP loss, with its parameter where it has one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Loss {
    /// `(x − m)²`: Gaussian noise (what CP-ALS minimizes).
    Gaussian,
    /// `log(1 + eᵐ) − x m`: binary data, `m` the log-odds.
    BernoulliLogit,
    /// `log(m + 1) − x log(m + ε)`: binary data, `m ≥ 0` the odds.
    BernoulliOdds,
    /// `eᵐ − x m`: counts, `m` the log-rate.
    PoissonLog,
    /// `m − x log(m + ε)`: counts, `m ≥ 0` the rate.
    Poisson,
    /// `x / (m + ε) + log(m + ε)`: positive continuous data, `m ≥ 0`.
    Gamma,
    /// `2 log(m + ε) + (π/4) (x / (m + ε))²`: nonnegative amplitudes, `m ≥ 0`.
    Rayleigh,
    /// `(r + x) log(1 + m) − x log(m + ε)`: over-dispersed counts with `r` trials,
    /// `m ≥ 0`.
    NegativeBinomial {
        /// The number of trials `r` (> 0).
        trials: f64,
    },
    /// `(x − m)²` within `Δ` of `x`, `2Δ|x − m| − Δ²` beyond: Gaussian with outliers.
    Huber {
        /// The threshold `Δ` (> 0).
        threshold: f64,
    },
    /// The β-divergence `(m + ε)ᵇ / b − x (m + ε)ᵇ⁻¹ / (b − 1)`, `m ≥ 0`.
    Beta {
        /// The exponent `b`: `b > 0` and not 1 (see [`BETA_RANGE`]).
        b: f64,
    },
}

/// The exponents the β-divergence takes, in words: `b > 0`, `b ≠ 1`. At `b = 0`
/// and `b = 1` its formula divides by zero (those are the Itakura–Saito and KL
/// limits, the gamma and poisson losses here). For `b < 0` the loss of a zero cell,
/// `(m + ε)ᵇ / b`, falls without bound as `m → 0`: only `ε` stops it, at `εᵇ / b`
/// (−2e49 per cell at `b = −5`), so a run drives the model to 0 at every zero and
/// reports a huge negative loss for a meaningless model.
pub const BETA_RANGE: &str = "a finite number > 0 other than 1";

/// What a loss needs of the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    /// Any finite value.
    Any,
    /// Every stored value 0 or 1.
    Binary,
    /// Every stored value a nonnegative integer.
    Counts,
    /// Every stored value ≥ 0.
    Nonnegative,
}

/// The names the front ends accept, in the order help lists them.
pub const NAMES: [&str; 10] = [
    "gaussian",
    "bernoulli-logit",
    "bernoulli-odds",
    "poisson-log",
    "poisson",
    "gamma",
    "rayleigh",
    "negative-binomial",
    "huber",
    "beta",
];

impl Loss {
    /// The loss named `name` (one of [`NAMES`]); `param` is negative-binomial's number
    /// of trials, huber's threshold or beta's exponent, and must be absent for the
    /// others.
    pub fn parse(name: &str, param: Option<f64>) -> Result<Loss> {
        let needs = |what: &str| -> Result<f64> {
            param.ok_or_else(|| {
                Error::InvalidOption(format!(
                    "loss {name} needs a parameter, {what}: --loss-param on the command line, loss_param from Python"
                ))
            })
        };
        let loss = match name {
            "gaussian" | "normal" => Loss::Gaussian,
            "bernoulli-logit" => Loss::BernoulliLogit,
            "bernoulli-odds" | "bernoulli" => Loss::BernoulliOdds,
            "poisson-log" => Loss::PoissonLog,
            "poisson" => Loss::Poisson,
            "gamma" => Loss::Gamma,
            "rayleigh" => Loss::Rayleigh,
            "negative-binomial" => Loss::NegativeBinomial {
                trials: needs("the number of trials r > 0")?,
            },
            "huber" => Loss::Huber {
                threshold: needs("the threshold Δ > 0")?,
            },
            "beta" => Loss::Beta {
                b: needs("the exponent b > 0, not 1")?,
            },
            _ => {
                return Err(Error::InvalidOption(format!(
                    "unknown loss {name:?}; the losses are {}",
                    NAMES.join(", ")
                )));
            }
        };
        if param.is_some() && loss.param().is_none() {
            return Err(Error::InvalidOption(format!(
                "loss {name} takes no parameter (--loss-param, loss_param from Python)"
            )));
        }
        loss.check_param()?;
        Ok(loss)
    }

    /// The loss's name as [`Loss::parse`] takes it.
    pub fn name(&self) -> &'static str {
        match self {
            Loss::Gaussian => "gaussian",
            Loss::BernoulliLogit => "bernoulli-logit",
            Loss::BernoulliOdds => "bernoulli-odds",
            Loss::PoissonLog => "poisson-log",
            Loss::Poisson => "poisson",
            Loss::Gamma => "gamma",
            Loss::Rayleigh => "rayleigh",
            Loss::NegativeBinomial { .. } => "negative-binomial",
            Loss::Huber { .. } => "huber",
            Loss::Beta { .. } => "beta",
        }
    }

    /// The loss's parameter, where it has one.
    pub fn param(&self) -> Option<f64> {
        match *self {
            Loss::NegativeBinomial { trials } => Some(trials),
            Loss::Huber { threshold } => Some(threshold),
            Loss::Beta { b } => Some(b),
            _ => None,
        }
    }

    fn check_param(&self) -> Result<()> {
        let bad = |what: &str, v: f64| {
            Err(Error::InvalidOption(format!(
                "loss_param of {} must be {what}, got {v}",
                self.name()
            )))
        };
        match *self {
            Loss::NegativeBinomial { trials: v } | Loss::Huber { threshold: v }
                if !(v.is_finite() && v > 0.0) =>
            {
                bad("a finite number > 0", v)
            }
            Loss::Beta { b } if !(b.is_finite() && b > 0.0) || b == 1.0 => bad(
                &format!(
                    "{BETA_RANGE} (for b ≤ 0 the loss of a zero falls without bound as the \
                     model goes to 0)"
                ),
                b,
            ),
            _ => Ok(()),
        }
    }

    /// What the loss needs of the data.
    pub fn data_kind(&self) -> DataKind {
        match self {
            Loss::Gaussian | Loss::Huber { .. } => DataKind::Any,
            Loss::BernoulliLogit | Loss::BernoulliOdds => DataKind::Binary,
            Loss::PoissonLog | Loss::Poisson => DataKind::Counts,
            Loss::Gamma | Loss::Rayleigh | Loss::NegativeBinomial { .. } | Loss::Beta { .. } => {
                DataKind::Nonnegative
            }
        }
    }

    /// The lower bound of the factors' entries: 0 where the loss needs `m ≥ 0`
    /// (kept by projection), else −∞.
    pub fn lower_bound(&self) -> f64 {
        match self {
            Loss::Gaussian | Loss::BernoulliLogit | Loss::PoissonLog | Loss::Huber { .. } => {
                f64::NEG_INFINITY
            }
            _ => 0.0,
        }
    }

    /// Refuses values the loss cannot model, naming the first such value and where it
    /// is (`index` gives an entry's coordinates in 1-based form for the message).
    pub fn check_data(&self, values: &[f64], index: impl Fn(usize) -> String) -> Result<()> {
        let (ok, need): (fn(f64) -> bool, &str) = match self.data_kind() {
            DataKind::Any => (|v: f64| v.is_finite(), "finite values"),
            DataKind::Binary => (|v: f64| v == 0.0 || v == 1.0, "binary data (0 or 1)"),
            DataKind::Counts => (
                |v: f64| v >= 0.0 && v.fract() == 0.0,
                "counts (nonnegative integers)",
            ),
            DataKind::Nonnegative => (|v: f64| v >= 0.0, "nonnegative values"),
        };
        match values.iter().position(|&v| !ok(v)) {
            None => Ok(()),
            Some(k) => Err(Error::InvalidTensor(format!(
                "loss {} needs {need}, but the value at {} (1-based) is {}",
                self.name(),
                index(k),
                values[k]
            ))),
        }
    }

    /// `f(x, m)`.
    #[inline]
    pub fn value(&self, x: f64, m: f64) -> f64 {
        match *self {
            Loss::Gaussian => (x - m) * (x - m),
            // softplus(m) = log(1 + eᵐ), without overflow for large m.
            Loss::BernoulliLogit => m.max(0.0) + (-m.abs()).exp().ln_1p() - x * m,
            Loss::BernoulliOdds => (m + 1.0).ln() - x * (m + EPS).ln(),
            Loss::PoissonLog => m.exp() - x * m,
            Loss::Poisson => m - x * (m + EPS).ln(),
            Loss::Gamma => x / (m + EPS) + (m + EPS).ln(),
            Loss::Rayleigh => {
                let q = x / (m + EPS);
                2.0 * (m + EPS).ln() + PI / 4.0 * q * q
            }
            Loss::NegativeBinomial { trials } => (trials + x) * (m + 1.0).ln() - x * (m + EPS).ln(),
            Loss::Huber { threshold } => {
                let d = (x - m).abs();
                if d < threshold {
                    d * d
                } else {
                    2.0 * threshold * d - threshold * threshold
                }
            }
            Loss::Beta { b } => {
                let me = m + EPS;
                me.powf(b) / b - x * me.powf(b - 1.0) / (b - 1.0)
            }
        }
    }

    /// `∂f/∂m` at `(x, m)`.
    #[inline]
    pub fn deriv(&self, x: f64, m: f64) -> f64 {
        match *self {
            Loss::Gaussian => 2.0 * (m - x),
            Loss::BernoulliLogit => sigmoid(m) - x,
            Loss::BernoulliOdds => 1.0 / (m + 1.0) - x / (m + EPS),
            Loss::PoissonLog => m.exp() - x,
            Loss::Poisson => 1.0 - x / (m + EPS),
            Loss::Gamma => {
                let me = m + EPS;
                -x / (me * me) + 1.0 / me
            }
            Loss::Rayleigh => {
                let me = m + EPS;
                2.0 / me - PI / 2.0 * x * x / (me * me * me)
            }
            Loss::NegativeBinomial { trials } => (trials + x) / (1.0 + m) - x / (m + EPS),
            Loss::Huber { threshold } => {
                let d = x - m;
                if d.abs() < threshold {
                    -2.0 * d
                } else {
                    -2.0 * threshold * d.signum()
                }
            }
            Loss::Beta { b } => {
                let me = m + EPS;
                me.powf(b - 1.0) - x * me.powf(b - 2.0)
            }
        }
    }
}

/// `1 / (1 + e⁻ᵐ)`, without overflow for either sign of `m`.
#[inline]
fn sigmoid(m: f64) -> f64 {
    if m >= 0.0 {
        1.0 / (1.0 + (-m).exp())
    } else {
        let e = m.exp();
        e / (1.0 + e)
    }
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.param() {
            Some(p) => write!(f, "{} ({p})", self.name()),
            None => f.write_str(self.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every loss, with a parameter where it needs one.
    pub(crate) fn all() -> Vec<Loss> {
        NAMES
            .iter()
            .map(|n| {
                let p = match *n {
                    "negative-binomial" => Some(3.0),
                    "huber" => Some(0.7),
                    "beta" => Some(0.5),
                    _ => None,
                };
                Loss::parse(n, p).unwrap()
            })
            .collect()
    }

    /// Points `(x, m)` where the loss is smooth, in its domain and data kind.
    fn points(loss: &Loss) -> Vec<(f64, f64)> {
        let xs: &[f64] = match loss.data_kind() {
            DataKind::Any => &[-1.3, 0.0, 0.4, 2.5],
            DataKind::Binary => &[0.0, 1.0],
            DataKind::Counts => &[0.0, 1.0, 4.0],
            DataKind::Nonnegative => &[0.0, 0.3, 2.0],
        };
        let ms: &[f64] = if loss.lower_bound() == 0.0 {
            &[0.05, 0.6, 1.7, 4.0]
        } else {
            &[-2.2, -0.3, 0.45, 1.9]
        };
        let mut v = Vec::new();
        for &x in xs {
            for &m in ms {
                // Huber's kink at |x − m| = Δ has no derivative.
                if let Loss::Huber { threshold } = loss
                    && ((x - m).abs() - threshold).abs() < 1e-3
                {
                    continue;
                }
                v.push((x, m));
            }
        }
        v
    }

    #[test]
    fn every_derivative_matches_central_differences() {
        for loss in all() {
            for (x, m) in points(&loss) {
                let h = 1e-6 * m.abs().max(1.0);
                let fd = (loss.value(x, m + h) - loss.value(x, m - h)) / (2.0 * h);
                let d = loss.deriv(x, m);
                assert!(
                    (fd - d).abs() <= 1e-6 * d.abs().max(1.0),
                    "{loss} at x={x}, m={m}: derivative {d}, finite difference {fd}"
                );
            }
        }
    }

    #[test]
    fn values_are_the_peers_formulas() {
        // Spot values computed by hand from pyttb's handles.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
        assert!(close(Loss::Gaussian.value(1.0, 3.0), 4.0));
        assert!(close(
            Loss::BernoulliLogit.value(1.0, 0.5),
            (0.5f64.exp() + 1.0).ln() - 0.5
        ));
        assert!(close(
            Loss::BernoulliOdds.value(1.0, 2.0),
            3f64.ln() - (2.0 + EPS).ln()
        ));
        assert!(close(Loss::PoissonLog.value(3.0, 0.5), 0.5f64.exp() - 1.5));
        assert!(close(
            Loss::Poisson.value(3.0, 2.0),
            2.0 - 3.0 * (2.0 + EPS).ln()
        ));
        assert!(close(
            Loss::Gamma.value(3.0, 2.0),
            3.0 / (2.0 + EPS) + (2.0 + EPS).ln()
        ));
        let q = 3.0 / (2.0 + EPS);
        assert!(close(
            Loss::Rayleigh.value(3.0, 2.0),
            2.0 * (2.0 + EPS).ln() + PI / 4.0 * q * q
        ));
        let nb = Loss::NegativeBinomial { trials: 3.0 };
        assert!(close(
            nb.value(2.0, 1.5),
            5.0 * 2.5f64.ln() - 2.0 * (1.5 + EPS).ln()
        ));
        let hu = Loss::Huber { threshold: 1.0 };
        assert!(close(hu.value(0.0, 0.5), 0.25));
        assert!(close(hu.value(0.0, 3.0), 6.0 - 1.0));
        let be = Loss::Beta { b: 0.5 };
        let me = 2.0 + EPS;
        assert!(close(
            be.value(3.0, 2.0),
            me.sqrt() / 0.5 - 3.0 * me.powf(-0.5) / -0.5
        ));
        // Large |m| does not overflow where the loss is defined there.
        assert!(close(Loss::BernoulliLogit.value(0.0, 800.0), 800.0));
        assert!(close(Loss::BernoulliLogit.deriv(1.0, -800.0), -1.0));
    }

    #[test]
    fn names_parse_back_and_bad_options_are_one_line() {
        for loss in all() {
            assert_eq!(Loss::parse(loss.name(), loss.param()).unwrap(), loss);
        }
        let msg = |r: Result<Loss>| r.unwrap_err().to_string();
        assert!(msg(Loss::parse("cauchy", None)).contains("unknown loss \"cauchy\""));
        assert!(
            msg(Loss::parse("huber", None))
                .contains("needs a parameter, the threshold Δ > 0: --loss-param")
        );
        assert!(msg(Loss::parse("gaussian", Some(1.0))).contains("takes no parameter"));
        // The β-divergence's range, b > 0 and not 1: its edges and the negative
        // exponents, whose loss of a zero is unbounded below.
        for b in [1.0, 0.0, -0.0, -5.0, -1e-300, f64::NAN, f64::INFINITY] {
            let e = msg(Loss::parse("beta", Some(b)));
            assert!(
                e.contains("> 0 other than 1") && !e.contains('\n'),
                "{b}: {e}"
            );
        }
        for b in [1e-300, 0.5, 1.5, 2.0, 7.0] {
            assert_eq!(Loss::parse("beta", Some(b)).unwrap(), Loss::Beta { b });
        }
        assert!(msg(Loss::parse("negative-binomial", Some(-2.0))).contains("> 0"));
    }

    #[test]
    fn data_checks_name_the_first_bad_value() {
        let at = |k: usize| format!("entry {k}");
        let odds = Loss::BernoulliOdds;
        assert!(odds.check_data(&[1.0, 0.0, 1.0], at).is_ok());
        let e = odds.check_data(&[1.0, 2.0], at).unwrap_err().to_string();
        assert!(
            e.contains("binary") && e.contains("entry 1") && e.contains(" 2"),
            "{e}"
        );
        let e = Loss::Poisson
            .check_data(&[1.0, 2.5], at)
            .unwrap_err()
            .to_string();
        assert!(e.contains("counts"), "{e}");
        let e = Loss::Gamma
            .check_data(&[1.0, -0.5], at)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nonnegative") && e.contains("-0.5"), "{e}");
        assert!(Loss::Gaussian.check_data(&[-3.0, 2.5], at).is_ok());
        assert!(Loss::Gaussian.check_data(&[f64::NAN], at).is_err());
    }
}
