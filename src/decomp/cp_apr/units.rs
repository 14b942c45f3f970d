//! CP-APR at any scale of values: values far below 1 run multiplied by a power of two,
//! and `λ` and the log-likelihoods come back in the given units.
//!
//! pyttb's stopping test is absolute: a mode's inner loop ends once
//! `max |min(B, 1 − Φ)|` is below `tol` (1e-4), and the run once no mode needed an
//! update. `B`, a mode's factor with `λ` moved into it, scales with the values; `Φ`
//! does not. Values far below 1 make every `B` small, so the test passes before the
//! model has moved: counts (200 × 150 × 60, 20,000 nonzeros, rank 3) times 1e-9,
//! 1e-12 or 1e-30 stopped after 2 iterations with the tolerance "met", where the
//! counts themselves and their multiples down to 1e-6 ran all 1000, each to the counts'
//! log-likelihood in its own units. `ε`, the model's floor in `Φ` and in the
//! log-likelihood (1e-10), is fixed in the given units too, above every model value of
//! data at 1e-30.
//!
//! The Poisson problem keeps its form under a change of units: with `x = c x'` and
//! `m = c m'`, `Φ` is the same, `B = c B'`, and
//! `Σ x log m − Σ m = c (Σ x' log m' − Σ m') + c ln(c) Σ x'`. Values whose RMS is
//! below `2^−BAND` therefore run as `x' = x / c` with `c = 2^e`, `e` rounding `log2` of
//! their RMS, so that the run's values have an RMS within √2 of 1, where the
//! tolerance, `ε` and `κ` mean what they mean for counts. After the run `λ` is
//! multiplied by `c` and each log-likelihood converted by the formula above (`Σ x'` the
//! run's values' sum); given initial factors are divided by `c` first (spread over the
//! modes), so that they start the same model. The KKT violations reported are the
//! run's. Powers of two keep every product exact: a run on `2^k x` is the run on `x`,
//! `λ` times `2^k`, whenever both run scaled.
//!
//! Large values run as given: there `B` is large, the test reads `1 − Φ`, which has no
//! units, `ε` is far below the model, and counts, pyttb's domain, keep pyttb's
//! arithmetic bit for bit.

use super::{CpAprIter, CpAprModel, CpAprOptions, NonInteger, check_values};
use crate::decomp::rms_about;
use crate::engine::ValueCensus;
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::tensor::CooTensor;

/// Values whose RMS is at least `2^−BAND` run as given.
pub const BAND: i32 = 10;

/// The power of two a CP-APR run divides the values by: `c = 2^exponent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AprScale {
    /// `e` (negative): the values are divided by `2^e`.
    pub exponent: i32,
}

impl AprScale {
    /// The scale a run on `values` takes: `None` where their RMS is at least
    /// `2^−BAND`, zero or not finite.
    pub fn of(values: &[f64]) -> Option<Self> {
        Self::of_rms(rms_about(values, 0.0))
    }

    /// [`AprScale::of`] for values of RMS `rms` (one computed over several processes).
    pub fn of_rms(rms: f64) -> Option<Self> {
        if !(rms > 0.0 && rms.is_finite()) || rms.log2() >= -f64::from(BAND) {
            return None;
        }
        Some(AprScale {
            exponent: rms.log2().round() as i32,
        })
    }

    /// The power of two the values are multiplied by for the run (`−e`, positive).
    pub fn values_power(&self) -> i32 {
        -self.exponent
    }

    /// A value of the given units in the run's: `x / c`.
    pub fn to_run(&self, x: f64) -> f64 {
        times_pow2(x, -self.exponent)
    }

    /// Given initial factors in the run's units: their product divided by `c`, each
    /// mode taking an even share of the power of two. An error where an entry would
    /// leave f32's range (factors far from 1 beside values far below it).
    pub fn divide_init(&self, init: &mut [Matrix]) -> Result<()> {
        let n = init.len().max(1) as i32;
        let p = -self.exponent;
        for (m, f) in init.iter_mut().enumerate() {
            let share = p / n + i32::from((m as i32) < p % n);
            for v in f.data_mut() {
                *v = times_pow2(f64::from(*v), share) as f32;
            }
            if f.data().iter().any(|v| !v.is_finite()) {
                return Err(Error::InvalidOption(format!(
                    "the initial factors cannot start a run on values multiplied by 2^{p}: \
                     factor {m} times 2^{share} leaves f32's range"
                )));
            }
        }
        Ok(())
    }

    /// A log-likelihood of the run in the given units: `c (ll + ln(c) Σ x')`, with
    /// `run_sum = Σ x'` the run's values' sum.
    pub fn log_likelihood(&self, ll: f64, run_sum: f64) -> f64 {
        let ln_c = f64::from(self.exponent) * std::f64::consts::LN_2;
        times_pow2(ll + ln_c * run_sum, self.exponent)
    }

    /// One iteration's statistics in the given units (its log-likelihood converted).
    pub fn iteration(&self, it: &CpAprIter, run_sum: f64) -> CpAprIter {
        CpAprIter {
            log_likelihood: self.log_likelihood(it.log_likelihood, run_sum),
            ..*it
        }
    }

    /// The run's model in the given units: `λ` times `c`, every log-likelihood
    /// converted, and a note of the scaling among the warnings.
    pub fn model(&self, m: &mut CpAprModel, run_sum: f64) {
        for w in &mut m.weights {
            *w = times_pow2(*w, self.exponent);
        }
        for it in &mut m.iters {
            *it = self.iteration(it, run_sum);
        }
        m.log_likelihood = self.log_likelihood(m.log_likelihood, run_sum);
        m.warnings.push(self.note());
    }

    /// What the run tells the user about the scaling.
    pub fn note(&self) -> String {
        format!(
            "the values' RMS is below 2^-{BAND}, where CP-APR's absolute tolerances stop it \
             before the model moves: the run multiplied them by 2^{}; λ and the \
             log-likelihoods are in the given units, the KKT violations the run's",
            self.values_power()
        )
    }
}

/// A run on values far below 1: its scale, the tensor in the run's units and their
/// sum, and what the checks of the given values said.
#[derive(Debug, Clone)]
pub struct ScaledRun {
    /// The power of two.
    pub scale: AprScale,
    /// The tensor with its values divided by `c`.
    pub tensor: CooTensor,
    /// The sum of those values (`Σ x'` of [`AprScale::log_likelihood`]).
    pub sum: f64,
    /// The warnings of the checks of the given values (the run, which reads other
    /// values, checks none: [`NonInteger::Allow`]).
    pub warnings: Vec<String>,
}

impl ScaledRun {
    /// The run `x` needs: `None` where its values run as given. The checks of the
    /// values (negative ones refused, non-integers per `non_integer`) read the given
    /// values, as a run on them would.
    pub fn of(x: &CooTensor, non_integer: NonInteger) -> Result<Option<Self>> {
        let Some(scale) = AprScale::of(x.values()) else {
            return Ok(None);
        };
        let census = ValueCensus::of_values(x.values().iter().copied());
        let warnings = check_values(&census, x.nnz(), non_integer)?;
        let mut tensor = x.clone();
        tensor.map_values(|v| scale.to_run(v));
        let sum = tensor.values().iter().sum();
        Ok(Some(ScaledRun {
            scale,
            tensor,
            sum,
            warnings,
        }))
    }

    /// The options of the run: given initial factors divided by `c`, and the values'
    /// checks left to [`ScaledRun::of`] (the run reads other values).
    pub fn adapt(&self, opts: &mut CpAprOptions) -> Result<()> {
        opts.non_integer = NonInteger::Allow;
        match &mut opts.init {
            Some(init) => self.scale.divide_init(init),
            None => Ok(()),
        }
    }
}

/// `x · 2^p`, exact where the result is a normal number, in two steps so that no
/// power of two leaves f64's range on the way (`p` may reach ±2000).
pub fn times_pow2(x: f64, p: i32) -> f64 {
    let h = p / 2;
    x * 2f64.powi(h) * 2f64.powi(p - h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_values_far_below_one_are_scaled() {
        assert_eq!(AprScale::of(&[1.0, 2.0, 3.0]), None);
        assert_eq!(AprScale::of(&[1e30, 2e30]), None);
        assert_eq!(AprScale::of(&[2e-3, 1e-3]), None);
        assert_eq!(AprScale::of(&[0.0, 0.0]), None);
        assert_eq!(AprScale::of(&[]), None);
        assert_eq!(AprScale::of(&[f64::INFINITY]), None);
        for (x, e) in [(2f64.powi(-40), -40), (1e-30, -100), (5e-324, -1074)] {
            let s = AprScale::of(&[x, x]).expect("scaled");
            assert_eq!(s.exponent, e, "{x}");
            // The run's values have an RMS within √2 of 1.
            let r = s.to_run(x);
            assert!((0.7..=1.42).contains(&r), "{x} runs as {r}");
        }
    }

    #[test]
    fn the_log_likelihood_is_the_given_units_one() {
        // x' and m' of a run, and the same problem at x = c x', m = c m'.
        let (xs, ms) = ([1.0, 3.0, 0.5], [0.8, 2.5, 1.1]);
        let extra = 4.0; // Σ m over the cells holding no x
        let ll = |c: f64| {
            xs.iter()
                .zip(&ms)
                .map(|(x, m)| c * x * (c * m).ln())
                .sum::<f64>()
                - c * (ms.iter().sum::<f64>() + extra)
        };
        let s = AprScale { exponent: -40 };
        let c = 2f64.powi(-40);
        let got = s.log_likelihood(ll(1.0), xs.iter().sum());
        let want = ll(c);
        assert!((got - want).abs() <= 1e-13 * want.abs(), "{got} vs {want}");
        // Beyond f64's normal range of c the conversion still has its value.
        let deep = AprScale { exponent: -1074 };
        assert!(deep.log_likelihood(-5.0, 2.0) < 0.0);
        assert_eq!(
            times_pow2(3.0, -1074) * 2f64.powi(1000),
            3.0 * 2f64.powi(-74)
        );
    }

    #[test]
    fn initial_factors_carry_the_scale_in_shares() {
        let s = AprScale { exponent: -7 };
        let mut init = vec![Matrix::from_fn(2, 1, |_, _| 1.0); 3];
        s.divide_init(&mut init).unwrap();
        let prod: f32 = init.iter().map(|f| f.get(0, 0)).product();
        assert_eq!(prod, 128.0);
        let mut far = vec![Matrix::from_fn(2, 1, |_, _| 1e30); 2];
        let err = AprScale { exponent: -400 }
            .divide_init(&mut far)
            .unwrap_err();
        assert!(err.to_string().contains("f32's range"), "{err}");
    }
}
