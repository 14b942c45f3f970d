//! Generalized CP (GCP): a rank-`R` CP model `m = Σ_r Π_n A⁽ⁿ⁾[i_n, r]` of a sparse
//! tensor under a loss other than least squares (D. Hong, T. G. Kolda and J. A.
//! Duersch, "Generalized canonical polyadic tensor decomposition", SIAM Review 62(1),
//! 2020; T. G. Kolda and D. Hong, "Stochastic gradients for large-scale tensor
//! decomposition", SIAM J. Math. Data Sci. 2(4), 2020). It minimizes
//! `F = Σ_i f(x_i, m_i)` over every cell `i` of the tensor, zeros included, for one of
//! the losses of [`Loss`]; losses that need `m ≥ 0` keep the factors nonnegative.
//!
//! The gradient with respect to `A⁽ⁿ⁾` is the MTTKRP of the tensor `Y` of derivatives
//! `∂f/∂m`; the engine computes it over a sampled sparse tensor
//! ([`Engine::gcp_gradient`]). Two methods:
//!
//! - [`Method::Sgd`] (GenTen's `gcp_sgd`, [`sgd`]): stratified samples of nonzeros and
//!   zeros for each gradient, a fixed stratified sample for the loss estimate, Adam,
//!   and a step that shrinks after an epoch that does not improve the estimate.
//! - [`Method::Lbfgs`] (pyttb's `gcp_opt` with L-BFGS-B, [`opt`]): the exact loss and
//!   gradient over every cell, for small tensors: the nonzeros through the engine, the
//!   zeros in closed form for the Gaussian and Poisson losses and by a pass over the
//!   whole index space otherwise (refused beyond [`GcpOptions::dense_limit`] cells).
//!
//! Initial factors, unless given: mode `n` is `Matrix::random(I_n, R, seed + n)`
//! (uniform in `[0, 1)`), all scaled by one factor so that `‖M‖ = ‖X‖` (as GenTen
//! scales its random guess by the tensor's norm); for poisson-log, whose model is the
//! log of the rate, so that `‖M‖ = ‖log(1 + X)‖` (at `‖X‖` the start's `exp(m)`
//! overflowed on counts in the thousands). Given or drawn, they are then
//! balanced ([`balance`]) as GenTen's `gcp_sgd` and pyttb's `gcp_opt` balance an
//! initial guess: the model is the same, but the scale of each factor's entries sets
//! how far Adam's fixed-size steps move it (from unbalanced factors the first epochs
//! of the nonnegative losses went elsewhere, 7–9 % apart on movielens-100k). The
//! model returned has unit-norm columns and weights `λ` in decreasing order, as
//! CP-ALS returns its model.
//!
//! Deterministic for a given seed, options and thread count (the samples are drawn in
//! fixed chunks from seeded generators, the gradient sums in a fixed order).

mod exact;
mod grams;
pub mod loss;
pub mod opt;
mod sample;
pub mod sgd;
#[cfg(test)]
mod tests;
pub mod units;
pub use grams::{GRAM_PARTS, balance, gram, model_norm_sq};
mod zeros;

pub use loss::{DataKind, Loss};
pub use sample::{Strata, cells};

use crate::engine::{Engine, EntryLoss};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::tensor::CooTensor;
use std::ops::ControlFlow;

impl EntryLoss for Loss {
    #[inline]
    fn value(&self, x: f64, m: f64) -> f64 {
        Loss::value(self, x, m)
    }
    #[inline]
    fn deriv(&self, x: f64, m: f64) -> f64 {
        Loss::deriv(self, x, m)
    }
}

/// How the model is fitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Stochastic gradients with Adam (GenTen's `gcp_sgd`).
    Sgd,
    /// L-BFGS-B on the exact loss and gradient (pyttb's `gcp_opt`), small tensors.
    Lbfgs,
}

impl Method {
    /// The method's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Method::Sgd => "sgd",
            Method::Lbfgs => "lbfgs",
        }
    }
}

/// GCP's options. Defaults are GenTen's `gcp_sgd` ones for the SGD method and pyttb's
/// `gcp_opt` (scipy's L-BFGS-B) ones for the full-gradient method.
#[derive(Debug, Clone, PartialEq)]
pub struct GcpOptions {
    /// The number of components `R`.
    pub rank: usize,
    /// The loss.
    pub loss: Loss,
    /// How the model is fitted.
    pub method: Method,
    /// Seed of the initial factors and of every sample.
    pub seed: u64,
    /// Initial factors (one `I_n × R` per mode), instead of random ones.
    pub init: Option<Vec<Matrix<f64>>>,
    /// SGD: the most epochs (GenTen `maxiters`, 100).
    pub epochs: usize,
    /// SGD: iterations per epoch (GenTen `epoch_iters`, 1000).
    pub epoch_iters: usize,
    /// SGD: Adam's initial step (GenTen `rate`, 1e-3).
    pub rate: f64,
    /// SGD: the step's factor after a failed epoch (GenTen `decay`, 0.1).
    pub decay: f64,
    /// SGD: failed epochs tolerated; one more stops the run (GenTen `max_fails`, 10).
    pub max_fails: usize,
    /// SGD: nonzeros per gradient sample; 0 for GenTen's default
    /// `min(max(⌈3 nnz / epochs⌉, 1000), nnz)`.
    pub grad_nonzeros: usize,
    /// SGD: zeros per gradient sample; 0 for GenTen's default (as many as nonzeros,
    /// at most the zero cells).
    pub grad_zeros: usize,
    /// SGD: nonzeros of the loss-estimate sample; 0 for GenTen's default
    /// `min(max(⌈nnz / 100⌉, 100000), nnz)`.
    pub value_nonzeros: usize,
    /// SGD: zeros of the loss-estimate sample; 0 for GenTen's default (as many as
    /// nonzeros, at most the zero cells).
    pub value_zeros: usize,
    /// L-BFGS: the most iterations (scipy `maxiter`, 1000).
    pub max_iters: usize,
    /// L-BFGS: the projected-gradient tolerance (scipy `pgtol`, 1e-5), capped at this
    /// times the start's projected gradient where that is below 1.
    pub pgtol: f64,
    /// L-BFGS: stop when the loss's relative decrease is at most `factr · ε_mach`
    /// (scipy `factr`, 1e7).
    pub factr: f64,
    /// L-BFGS: corrections kept (scipy `m`, 10).
    pub memory: usize,
    /// The most cells a loss without a closed form for its zeros may sum over (2²⁶):
    /// L-BFGS refuses a larger index space; SGD's exact final loss is a pass over the
    /// cells not stored, and beyond this it reports only its estimate.
    pub dense_limit: f64,
}

impl GcpOptions {
    /// The defaults for `rank` and `loss`.
    pub fn new(rank: usize, loss: Loss) -> Self {
        GcpOptions {
            rank,
            loss,
            method: Method::Sgd,
            seed: 0,
            init: None,
            epochs: 100,
            epoch_iters: 1000,
            rate: 1e-3,
            decay: 0.1,
            max_fails: 10,
            grad_nonzeros: 0,
            grad_zeros: 0,
            value_nonzeros: 0,
            value_zeros: 0,
            max_iters: 1000,
            pgtol: 1e-5,
            factr: 1e7,
            memory: 10,
            dense_limit: (1u64 << 26) as f64,
        }
    }
}

/// Why an SGD epoch was undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Undone {
    /// Its loss estimate was above the last accepted one.
    Worse,
    /// Its loss estimate was not a finite number (a step too large for the loss).
    NotFinite,
}

/// What one SGD epoch or L-BFGS iteration did.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GcpIter {
    /// 0-based epoch (SGD) or iteration (L-BFGS).
    pub iter: usize,
    /// SGD: the loss estimate over the fixed sample after the epoch (before a failed
    /// epoch is undone), `None` where it was not a finite number; L-BFGS: the
    /// optimizer's exact loss.
    pub loss: Option<f64>,
    /// SGD: Adam's step during the epoch; L-BFGS: the projected gradient's largest
    /// entry.
    pub step: f64,
    /// SGD: whether the epoch improved the estimate (else it was undone and the step
    /// multiplied by `decay`); L-BFGS: always true.
    pub accepted: bool,
    /// SGD: why the epoch was undone, where it was.
    pub undone: Option<Undone>,
    /// Seconds since the fit started.
    pub seconds: f64,
}

/// SGD's loss estimates: `Σ w f(x, m)` over its fixed stratified sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossEstimate {
    /// The estimate of the model returned (the last accepted epoch's, or the start's).
    pub final_loss: f64,
    /// The estimate of the initial factors.
    pub initial_loss: f64,
    /// Stored entries in the sample.
    pub nonzeros: usize,
    /// Zero cells in the sample.
    pub zeros: usize,
}

/// A fitted GCP model.
#[derive(Debug, Clone, PartialEq)]
pub struct GcpModel {
    /// `λ`, one weight per component, in decreasing order.
    pub weights: Vec<f64>,
    /// One `I_n × R` factor per mode, columns of unit 2-norm (or zero).
    pub factors: Vec<Matrix<f64>>,
    /// The exact loss of the model returned, over every cell, in f64 from its factors
    /// (`exact`'s documentation: the stored entries and the cells not stored summed
    /// apart). `None` only for SGD with a loss whose zeros have no closed form on an
    /// index space of more than [`GcpOptions::dense_limit`] cells (or where the sum is
    /// not a finite number): then only [`Self::estimate`] is known.
    pub loss: Option<f64>,
    /// The exact loss of the initial factors, as [`Self::loss`].
    pub initial_loss: Option<f64>,
    /// SGD: its estimates over its fixed sample (what its epochs compare); L-BFGS:
    /// `None`.
    pub estimate: Option<LossEstimate>,
    /// Every epoch or iteration.
    pub iters: Vec<GcpIter>,
    /// Why the run stopped, in words.
    pub stopped: String,
    /// What the run divided the values by ([`units`]), 1 where it ran on them as
    /// given; the model and losses are in the given units either way.
    pub value_scale: f64,
    /// What the caller should know of the run: SGD's loss that hardly moved from the
    /// start over every epoch ([`sgd::STALLED`]).
    pub warnings: Vec<String>,
}

impl GcpModel {
    /// The number of components.
    pub fn rank(&self) -> usize {
        self.weights.len()
    }

    /// The model's value at `coords`: `Σ_r λ_r Π_n A⁽ⁿ⁾[i_n, r]`.
    pub fn entry(&self, coords: &[usize]) -> Result<f64> {
        if coords.len() != self.factors.len()
            || coords
                .iter()
                .zip(&self.factors)
                .any(|(&i, f)| i >= f.rows())
        {
            return Err(Error::shape(
                "model coordinates",
                format!(
                    "{:?}",
                    self.factors.iter().map(Matrix::rows).collect::<Vec<_>>()
                ),
                format!("{coords:?}"),
            ));
        }
        Ok((0..self.rank())
            .map(|r| {
                self.weights[r]
                    * coords
                        .iter()
                        .zip(&self.factors)
                        .map(|(&i, f)| f.get(i, r))
                        .product::<f64>()
            })
            .sum())
    }
}

/// Fits a GCP model of `x` on `engine` with `opts`, calling `progress` after every
/// epoch (SGD) or iteration (L-BFGS); [`ControlFlow::Break`] stops the run there.
pub fn gcp(
    engine: &Engine,
    x: &CooTensor,
    opts: &GcpOptions,
    progress: &mut dyn FnMut(&GcpIter) -> ControlFlow<()>,
) -> Result<GcpModel> {
    check_options(opts)?;
    check_data(x, opts)?;
    memory_plan(x, opts).check()?;
    let mut init = match &opts.init {
        Some(f) => f.clone(),
        None => initial_factors(x, opts.rank, opts.seed, &opts.loss),
    };
    balance(&mut init);
    let scale = value_scale(x, opts);
    let exact = |f: &[Matrix<f64>]| {
        exact::loss(engine, x, opts.loss, f, opts.dense_limit).filter(|v| v.is_finite())
    };
    let initial_exact = exact(&init);
    let (factors, fitted, fitted_initial, iters, stopped, warnings) = match opts.method {
        Method::Sgd => sgd::run(engine, x, opts, init, scale, progress)?,
        Method::Lbfgs => opt::run(engine, x, opts, init, scale, progress)?,
    };
    if let Some(bad) = factors
        .iter()
        .flat_map(|f| f.data())
        .find(|v| !v.is_finite())
    {
        return Err(Error::NonFinite(format!(
            "GCP with loss {} gave a factor entry of {bad}; the model is discarded \
             (try a smaller rate)",
            opts.loss
        )));
    }
    let final_exact = exact(&factors);
    let (loss, initial_loss, estimate) = match opts.method {
        Method::Sgd => {
            let (value, _) = sgd::strata(x.dims(), x.nnz(), opts);
            let estimate = LossEstimate {
                final_loss: fitted,
                initial_loss: fitted_initial,
                nonzeros: value.nonzeros,
                zeros: value.zeros,
            };
            (final_exact, initial_exact, Some(estimate))
        }
        // Its own sums are exact too, but for the cancellation `exact` avoids.
        Method::Lbfgs => (
            final_exact.or(Some(fitted).filter(|v| v.is_finite())),
            initial_exact.or(Some(fitted_initial).filter(|v| v.is_finite())),
            None,
        ),
    };
    let (weights, factors) = normalize(factors);
    Ok(GcpModel {
        weights,
        factors,
        loss,
        initial_loss,
        estimate,
        iters,
        stopped,
        value_scale: scale.map_or(1.0, |s| s.values()),
        warnings,
    })
}

/// What a run of `opts` on `x` divides the values by ([`units`]): a power of two for
/// values far from 1 under a loss that keeps its form, none otherwise.
pub fn value_scale(x: &CooTensor, opts: &GcpOptions) -> Option<units::ValueScale> {
    units::ValueScale::of(x, &opts.loss)
}

/// The error of a start whose loss is `value`, not a finite number: no step from it
/// is defined.
fn start_not_finite(loss: &Loss, fitted: f64, value: f64) -> Error {
    if fitted.is_finite() {
        // Finite on the values as run (divided by a power of two), not in the tensor's
        // units: the values themselves are beyond what f64 holds the loss of.
        return Error::NonFinite(format!(
            "GCP with loss {loss}: the starting model's loss in the tensor's units is \
             {value}: the values are too large for f64 to hold the loss (scale the tensor \
             down)"
        ));
    }
    Error::NonFinite(format!(
        "GCP with loss {loss}: the starting model's loss is {value}; its model values \
         overflow the loss (give a start of smaller entries with init)"
    ))
}

/// The checks of `opts` that need no tensor: the rank, the counts, the rates.
pub fn check_options(opts: &GcpOptions) -> Result<()> {
    if opts.rank == 0 {
        return Err(Error::InvalidRank("rank must be at least 1, got 0".into()));
    }
    let positive = |name: &str, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(Error::InvalidOption(format!(
                "{name} must be a finite number > 0, got {v}"
            )))
        }
    };
    positive("rate", opts.rate)?;
    positive("decay", opts.decay)?;
    positive("factr", opts.factr)?;
    positive("dense_limit", opts.dense_limit)?;
    if opts.pgtol.is_nan() || opts.pgtol < 0.0 {
        return Err(Error::InvalidOption(format!(
            "pgtol must be a number ≥ 0, got {}",
            opts.pgtol
        )));
    }
    for (name, v) in [
        ("epochs", opts.epochs),
        ("epoch_iters", opts.epoch_iters),
        ("max_iters", opts.max_iters),
        ("memory", opts.memory),
    ] {
        if v == 0 {
            return Err(Error::InvalidOption(format!(
                "{name} must be at least 1, got 0"
            )));
        }
    }
    Ok(())
}

/// The checks of `opts` against `x`: an order of at least 2 (a rank-R model of a
/// vector is any R vectors that sum to it: nothing to learn), the data the loss needs
/// (the first value it cannot model named with its 1-based coordinates), the initial
/// factors.
pub fn check_data(x: &CooTensor, opts: &GcpOptions) -> Result<()> {
    if x.order() < 2 {
        return Err(Error::InvalidTensor(format!(
            "a decomposition needs a tensor of order ≥ 2, got order {}",
            x.order()
        )));
    }
    if let Some(f) = &opts.init {
        check_init(x.dims(), opts, f)?;
    }
    if !x.norm_sq().is_finite() {
        // The start is scaled to ‖X‖ and every loss is reported in the tensor's units.
        let largest = x.values().iter().fold(0f64, |m, v| m.max(v.abs()));
        return Err(Error::Unsupported(format!(
            "GCP: the values are too large for f64 to hold their sum of squares (the \
             largest is {largest:e}), and so their losses; scale the tensor down"
        )));
    }
    opts.loss.check_data(x.values(), |k| {
        let c: Vec<String> = x.coords(k).iter().map(|i| (i + 1).to_string()).collect();
        format!("({})", c.join(", "))
    })
}

/// Checks initial factors: one per mode, `I_n × R`, finite, within the loss's lower
/// bound, and at most one of them all zero.
fn check_init(dims: &[usize], opts: &GcpOptions, f: &[Matrix<f64>]) -> Result<()> {
    if f.len() != dims.len() {
        return Err(Error::shape(
            "initial factors",
            format!("{} matrices", dims.len()),
            format!("{} matrices", f.len()),
        ));
    }
    let lb = opts.loss.lower_bound();
    for (n, (m, &d)) in f.iter().zip(dims).enumerate() {
        if m.shape() != (d, opts.rank) {
            return Err(Error::shape(
                format!("initial factor of mode {n}"),
                format!("{d}×{}", opts.rank),
                format!("{}×{}", m.rows(), m.cols()),
            ));
        }
        if let Some(v) = m.data().iter().find(|v| !v.is_finite()) {
            return Err(Error::NonFinite(format!(
                "initial factor of mode {n} holds {v}"
            )));
        }
        if let Some(v) = m.data().iter().find(|v| **v < lb) {
            return Err(Error::InvalidOption(format!(
                "initial factor of mode {n} holds {v}; loss {} needs entries ≥ {lb}",
                opts.loss
            )));
        }
    }
    // A mode's gradient is the product of the other modes' factors: with two of them
    // zero, every gradient is zero and the run cannot leave its start. (One zero
    // factor still gets a gradient from the others.)
    let zero: Vec<usize> = (0..f.len())
        .filter(|&n| f[n].data().iter().all(|&v| v == 0.0))
        .collect();
    if let [a, b, ..] = zero[..] {
        return Err(Error::InvalidOption(format!(
            "the initial factors of modes {a} and {b} are all zero; every gradient is zero there, so the run could not leave the start"
        )));
    }
    Ok(())
}

/// What a GCP run of `opts` on `x` holds ([`crate::memplan::MemoryPlan::gcp`]), checked
/// before anything is drawn: a model too large for this machine is a typed error, not an
/// allocation failure.
pub fn memory_plan(x: &CooTensor, opts: &GcpOptions) -> crate::memplan::MemoryPlan {
    match opts.method {
        Method::Sgd => {
            let (value, grad) = sgd::strata(x.dims(), x.nnz(), opts);
            let drawn = |s: &Strata| s.nonzeros as u128 + s.zeros as u128;
            let samples = drawn(&value) + 2 * drawn(&grad);
            crate::memplan::MemoryPlan::gcp(x.dims(), x.nnz(), opts.rank, samples, None)
        }
        Method::Lbfgs => {
            crate::memplan::MemoryPlan::gcp(x.dims(), x.nnz(), opts.rank, 0, Some(opts.memory))
        }
    }
}

/// Seeded uniform factors scaled so that the model's norm is the tensor's (for
/// poisson-log, that of `log(1 + X)`).
pub(super) fn initial_factors(
    x: &CooTensor,
    rank: usize,
    seed: u64,
    loss: &Loss,
) -> Vec<Matrix<f64>> {
    let mut f: Vec<Matrix<f64>> = Matrix::random_factors(x.dims(), &vec![rank; x.order()], seed)
        .iter()
        .map(Matrix::to_f64)
        .collect();
    let xn = match loss {
        Loss::PoissonLog => x.values().iter().map(|v| v.ln_1p().powi(2)).sum::<f64>(),
        _ => x.norm_sq(),
    }
    .sqrt();
    let mn = model_norm_sq(&f).sqrt();
    if xn > 0.0 && mn > 0.0 {
        let s = (xn / mn).powf(1.0 / x.order() as f64);
        for m in &mut f {
            m.data_mut().iter_mut().for_each(|v| *v *= s);
        }
    }
    f
}

/// Unit-norm columns and their norms' products as weights, sorted by decreasing
/// weight.
fn normalize(mut factors: Vec<Matrix<f64>>) -> (Vec<f64>, Vec<Matrix<f64>>) {
    let rank = factors.first().map_or(0, Matrix::cols);
    let mut weights = vec![1.0; rank];
    for f in &mut factors {
        for (r, w) in weights.iter_mut().enumerate() {
            let norm = (0..f.rows())
                .map(|i| f.get(i, r).powi(2))
                .sum::<f64>()
                .sqrt();
            *w *= norm;
            if norm > 0.0 {
                for i in 0..f.rows() {
                    f.set(i, r, f.get(i, r) / norm);
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..rank).collect();
    order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]));
    let factors = factors
        .iter()
        .map(|f| Matrix::from_fn(f.rows(), rank, |i, r| f.get(i, order[r])))
        .collect();
    (order.iter().map(|&r| weights[r]).collect(), factors)
}
