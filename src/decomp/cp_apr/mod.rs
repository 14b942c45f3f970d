//! CP-APR: a nonnegative rank-`R` CP model of a count tensor under a Poisson likelihood,
//! by alternating Poisson regression with multiplicative updates ("MU"; E. C. Chi and
//! T. G. Kolda, "On tensors, sparsity, and nonnegative factorizations", SIAM J. Matrix
//! Anal. Appl. 33(4), 2012, Algorithm 3), with the options and defaults of pyttb's
//! `cp_apr(..., algorithm="mu")`.
//!
//! The model is `M = Σ_r λ_r a⁽⁰⁾_r ∘ … ∘ a⁽ᴺ⁻¹⁾_r` with nonnegative factors whose
//! columns sum to 1. It maximizes the log-likelihood `Σ x log m − Σ m` (without the
//! constant `Σ log x!`), the first sum over the nonzeros, the second over every cell.
//!
//! Start: the initial factors' columns are divided by their sums into `λ` (`λ = 1`
//! before). Outer iteration `k`, for each mode `n = 0, 1, …, N−1` in turn:
//!
//! 1. from `k = 1` on, entries with `A_n < κ_tol` whose last `Φ` of this mode was
//!    positive (inadmissible zeros: the update could never move them) get `κ` added;
//! 2. `B = A_n diag(λ)`, `λ = 1` (the weights move into the mode);
//! 3. up to `max_inner` times: `Φ = (X_(n) ⊘ max(B Πᵀ, ε)) Π` on the engine
//!    ([`Op::Phi`]: `Π` row-wise the Hadamard product of the other
//!    factors' rows, never formed); the mode's KKT violation `max |min(B, 1 − Φ)|`;
//!    stop when it is below `tol`, else `B ← B ∗ Φ`;
//! 4. the columns of `B` are divided by their sums into `λ` (a zero column is left).
//!
//! After the sweep: the iteration's KKT violation (the largest of the modes'), the
//! log-likelihood (one more Φ call gives `Σ x log m` from the engine; `Σ m =
//! Σ_r λ_r Π_n Σ_i A_n[i, r]`, so the dense model is never formed), and the time. The
//! run stops when no mode updated in an iteration (every mode's first KKT violation was
//! below `tol`; `tol = 0` never stops early), after `max_iters` iterations, or once the
//! run has taken more than `max_seconds`. The model returned has its components sorted
//! by decreasing `λ`.
//!
//! | pyttb `cp_apr` (`algorithm="mu"`) | here | default |
//! |---|---|---|
//! | `rank` | [`CpAprOptions::rank`] | — |
//! | `stoptol` | [`CpAprOptions::tol`] | 1e-4 |
//! | `stoptime` | [`CpAprOptions::max_seconds`] | 1e6 |
//! | `maxiters` | [`CpAprOptions::max_iters`] | 1000 |
//! | `init` | [`CpAprOptions::init`] / [`CpAprOptions::seed`] | random |
//! | `maxinneriters` | [`CpAprOptions::max_inner`] | 10 |
//! | `epsDivZero` | [`CpAprOptions::eps`] | 1e-10 |
//! | `printitn` | the progress callback of [`cp_apr_with_progress`] | every iteration |
//! | — | the control callback of [`cp_apr_with_control`]: stops after an iteration | never |
//! | `kappa` | [`CpAprOptions::kappa`] | 0.01 |
//! | `kappatol` | [`CpAprOptions::kappa_tol`] | 1e-10 |
//!
//! Numbers: the factors, `λ`, the KKT violations and the log-likelihood are kept in
//! f64. Where the backend offers a [`PhiRun`](crate::engine::PhiRun) (the CPU) Φ is computed in f64 too, as
//! pyttb computes it: MU amplifies rounding, and f32 factors put movielens-100k's
//! log-likelihood 1e-5 away from pyttb's after ten outer iterations. Elsewhere (CUDA
//! today) [`Op::Phi`] computes Φ in f32 from f32 copies of the factors. A model value below `ε` at a nonzero counts
//! as `ε` in the log-likelihood (pyttb would report −∞); the model's warnings say at
//! how many nonzeros the final model does so (`rates`).
//!
//! Initial factors, unless given: mode `m` is `Matrix::random(I_m, R, seed + m)`
//! (uniform in `[0, 1)`), as for [`cp_als()`](super::cp_als()). Given ones must be finite,
//! nonnegative and not all zero.
//!
//! The tensor's values (as stored) must be nonnegative: Poisson models counts. A value
//! that is not an integer is a warning in [`CpAprModel::warnings`] or an error, per
//! [`CpAprOptions::non_integer`]. A tensor with no nonzero value gives the zero model
//! (log-likelihood 0) with a warning. A model that collapsed for a tensor with a
//! positive value (every weight 0, or a weight or factor entry not finite) is an error
//! ([`Error::Numerical`]), never a model: e.g. initial factors whose nonzero rows meet
//! none of the tensor's nonzeros, where every `Φ` is 0.
//!
//! The tolerances are pyttb's, absolute: values far below 1 meet them before the model
//! moves. The driver runs such values multiplied by a power of two ([`units`]), and a
//! tensor whose modes are mostly empty rows on those modes' used rows
//! ([`cp_apr_on_rows`]: the same run, and the model on every row).

use crate::engine::{Call, Engine, PhiParams, Prepared, RunStats, ValueCensus};
use crate::error::{Error, Result};
use crate::math::mu::MuInner;
use crate::matrix::Matrix;
use crate::ops::Op;
use std::ops::ControlFlow;
use std::time::Instant;

mod mu;
mod options;
mod rates;
mod rows;
pub mod units;

use mu::{log_likelihood, mark_support, mu_inner_seq};
// The element-wise passes, shared with CP-APR across processes (`crate::dist`).
pub(crate) use mu::{
    column_sums, fill_patterns, fix_inadmissible, has_unsure_zero, normalize, scale_columns, to_f32,
};
pub use options::{CpAprOptions, NonInteger};
pub use rows::cp_apr_on_rows;
pub(crate) use rows::{LeftOut, largest_left_out};
pub use units::{AprScale, ScaledRun};

/// What one outer iteration did and cost.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpAprIter {
    /// 0-based iteration number.
    pub iter: usize,
    /// `Σ x log m − Σ m` of the model after this iteration.
    pub log_likelihood: f64,
    /// The largest of the modes' KKT violations `max |min(B, 1 − Φ)|`, each the last
    /// one its inner loop computed.
    pub kkt_violation: f64,
    /// Multiplicative-update steps (Φ computations) of all modes in this iteration.
    pub inner_iters: usize,
    /// Modes in which inadmissible zeros were moved by `κ` in this iteration.
    pub violations: usize,
    /// Wall seconds of this iteration.
    pub seconds: f64,
    /// Seconds in engine calls (the Φ kernels and the log-likelihood's), including
    /// result transfers.
    pub seconds_kernel: f64,
    /// Bytes the engine copied from host to device (0 on the CPU).
    pub bytes_to_device: u64,
    /// Bytes the engine copied from device to host (0 on the CPU).
    pub bytes_from_device: u64,
}

/// A CP-APR model and how it was reached.
#[derive(Debug, Clone, PartialEq)]
pub struct CpAprModel {
    /// `λ`, one weight per component, in decreasing order.
    pub weights: Vec<f64>,
    /// One `I_m × R` nonnegative factor per mode, columns summing to 1 (or zero).
    pub factors: Vec<Matrix>,
    /// The final log-likelihood `Σ x log m − Σ m`.
    pub log_likelihood: f64,
    /// Statistics of each outer iteration.
    pub iters: Vec<CpAprIter>,
    /// Whether the run stopped because no mode needed an update (the KKT tolerance was
    /// met), rather than at `max_iters` or `max_seconds`.
    pub converged: bool,
    /// What the caller should tell the user (non-integer values, a zero tensor).
    pub warnings: Vec<String>,
}

impl CpAprModel {
    /// The number of components.
    pub fn rank(&self) -> usize {
        self.weights.len()
    }

    /// The log-likelihood after each outer iteration.
    pub fn log_likelihoods(&self) -> Vec<f64> {
        self.iters.iter().map(|s| s.log_likelihood).collect()
    }

    /// The model's value at `coords`: `Σ_r λ_r Π_m A_m[i_m, r]`.
    pub fn entry(&self, coords: &[usize]) -> Result<f64> {
        super::kruskal_entry(&self.weights, &self.factors, coords)
    }
}

/// The refusal of negative values: `count` of them, the first `first`.
pub(crate) fn negative_values(count: u64, first: f64) -> Error {
    Error::InvalidTensor(format!(
        "CP-APR models counts, but {count} values are negative (the first: {first}); a Poisson model needs values ≥ 0"
    ))
}

/// What is said of `count` of `nnz` values that are not integers, the first `first`.
pub(crate) fn non_integer_values(count: u64, nnz: u64, first: f64) -> String {
    format!(
        "{count} of {nnz} values are not integers (the first: {first}); CP-APR's Poisson model assumes counts"
    )
}

/// The checks of the values of census `c` (of `nnz` values): negative values refused,
/// non-integers a warning or an error per `non_integer`. Returns the warnings.
pub(crate) fn check_values(
    c: &ValueCensus,
    nnz: usize,
    non_integer: NonInteger,
) -> Result<Vec<String>> {
    if c.negative > 0 {
        return Err(negative_values(
            c.negative as u64,
            c.first_negative.unwrap_or(f64::NAN),
        ));
    }
    let what = || {
        non_integer_values(
            c.non_integer as u64,
            nnz as u64,
            c.first_non_integer.unwrap_or(f64::NAN),
        )
    };
    match non_integer {
        _ if c.non_integer == 0 => Ok(Vec::new()),
        NonInteger::Warn => Ok(vec![what()]),
        NonInteger::Error => Err(Error::InvalidTensor(what())),
        NonInteger::Allow => Ok(Vec::new()),
    }
}

/// CP-APR of the prepared tensor `x` (prepared for [`Op::Mttkrp`] or [`Op::Phi`]) on
/// `engine`; see the [module documentation](self) for the algorithm.
pub fn cp_apr(engine: &Engine, x: &Prepared, opts: &CpAprOptions) -> Result<CpAprModel> {
    cp_apr_with_progress(engine, x, opts, &mut |_| {})
}

/// The engine's state of the factors and the kernel time spent on it.
struct Clock {
    kernel: f64,
    to_device: u64,
    from_device: u64,
}

impl Clock {
    fn kernel(&mut self, f: impl FnOnce() -> Result<RunStats>) -> Result<RunStats> {
        let t = Instant::now();
        let out = f();
        self.kernel += t.elapsed().as_secs_f64();
        let stats = out?;
        self.to_device += stats.bytes_to_device;
        self.from_device += stats.bytes_from_device;
        Ok(stats)
    }

    fn kernel_of(&mut self, f: impl FnOnce() -> Result<MuInner>) -> Result<MuInner> {
        let t = Instant::now();
        let out = f();
        self.kernel += t.elapsed().as_secs_f64();
        let inner = out?;
        self.to_device += inner.bytes_to_device;
        self.from_device += inner.bytes_from_device;
        Ok(inner)
    }
}

/// [`cp_apr`], calling `progress` after every outer iteration.
pub fn cp_apr_with_progress(
    engine: &Engine,
    x: &Prepared,
    opts: &CpAprOptions,
    progress: &mut dyn FnMut(&CpAprIter),
) -> Result<CpAprModel> {
    cp_apr_with_control(engine, x, opts, &mut |s| {
        progress(s);
        ControlFlow::Continue(())
    })
}

/// [`cp_apr`], calling `control` after every outer iteration: [`ControlFlow::Break`]
/// ends the run there and returns the model of that iteration (not
/// [`CpAprModel::converged`], unless the iteration also met the KKT tolerance).
pub fn cp_apr_with_control(
    engine: &Engine,
    x: &Prepared,
    opts: &CpAprOptions,
    control: &mut dyn FnMut(&CpAprIter) -> ControlFlow<()>,
) -> Result<CpAprModel> {
    let model = run(engine, x, opts, control, None)?;
    Ok(model.expect("a run on all rows always ends in a model"))
}

/// [`cp_apr_with_control`], with `left` (where the run is on a tensor's used rows,
/// [`rows`]) the initial factors' column sums over all rows and the rows left out;
/// `None` where a mode renumbered there did not update in the first iteration, so the
/// run on all rows would have gone otherwise ([`rows::LeftOut`]).
fn run(
    engine: &Engine,
    x: &Prepared,
    opts: &CpAprOptions,
    control: &mut dyn FnMut(&CpAprIter) -> ControlFlow<()>,
    left: Option<&rows::LeftOut>,
) -> Result<Option<CpAprModel>> {
    if x.order() < 2 {
        return Err(Error::InvalidTensor(format!(
            "a decomposition needs a tensor of order ≥ 2, got order {}",
            x.order()
        )));
    }
    let dims = x.dims().to_vec();
    opts.validate(&dims)?;
    crate::memplan::MemoryPlan::cp_apr(&dims, x.nnz(), opts.rank).check()?;
    // The values as read: fp16 storage rounds 100000.5 to an integer, 1e-30 to 0.
    let mut warnings = check_values(x.census(), x.nnz(), opts.non_integer)?;
    if x.census().nonzero == 0 {
        warnings.push("the tensor has no nonzero value: the model is zero".into());
    }

    let order = dims.len();
    let rank = opts.rank;
    let eps = opts.eps as f32;
    // The model in f64 (what a PhiRun reads); Op::Phi and the support's MTTKRP get f32
    // copies (`eng[n]`: `B` while mode n updates, the normalized factor otherwise).
    let init = opts.initial_factors(&dims);
    let mut a: Vec<Vec<f64>> = init
        .iter()
        .map(|f| f.data().iter().map(|&v| f64::from(v)).collect())
        .collect();
    let mut lambda = vec![1.0f64; rank];
    for (m, f) in a.iter_mut().enumerate() {
        // Over all of the tensor's rows, where some are left out.
        let sums = left.map_or_else(|| column_sums(f, rank), |l| l.sums[m].clone());
        normalize(f, &sums);
        for (l, s) in lambda.iter_mut().zip(&sums) {
            *l *= s;
        }
    }
    let mut eng: Vec<Matrix> = dims.iter().map(|&d| Matrix::zeros(d, rank)).collect();
    for (e, f) in eng.iter_mut().zip(&a) {
        to_f32(f, e.data_mut());
    }
    // Which of `eng` changed since the last Op::Phi call, so a device that keeps copies
    // uploads only those: every write to `eng[n]` (a swap included) is one change.
    let mut versions = engine.factor_versions(order);
    // The last Φ of each mode (for the inadmissible zeros; f64, from Op::Phi's f32 Φ
    // `phi32` where there is no PhiRun).
    let mut phis: Vec<Vec<f64>> = vec![Vec::new(); order];
    let mut phi32 = Matrix::zeros(0, 0);
    // Φ with the inner iterations' fixed Khatri-Rao rows kept between calls, where the
    // backend offers it (the CPU); otherwise Op::Phi per call.
    let mut phi_run = engine.phi_run(x, rank)?;
    // With it, the log-likelihood runs on the last mode, whose fixed rows are the final
    // factors of the others when the outer iteration ends: no new rows to form.
    let ll_mode = if phi_run.is_some() {
        order - 1
    } else {
        (0..order).min_by_key(|&m| dims[m]).expect("order ≥ 2")
    };
    let mut ll_b = Matrix::zeros(dims[ll_mode], rank);
    let mut ll_out = Matrix::zeros(0, 0);
    let (mut ll_b64, mut ll_out64) = (Vec::new(), Vec::new());
    let call = Call {
        col_max: None,
        check_finite: true,
        phi: PhiParams {
            eps,
            log_term: false,
        },
        versions: None,
    };
    let ll_call = Call {
        phi: PhiParams {
            eps,
            log_term: true,
        },
        ..call
    };

    let mut support = (Vec::new(), Matrix::zeros(0, 0));
    let start = Instant::now();
    let mut iters = Vec::new();
    let mut kkt = vec![0.0f64; order];
    let mut converged = false;
    for it in 0..opts.max_iters {
        let t0 = Instant::now();
        let mut clock = Clock {
            kernel: 0.0,
            to_device: 0,
            from_device: 0,
        };
        let mut all_met = true;
        let mut inner_iters = 0;
        let mut violations = 0;
        for n in 0..order {
            // 1. Inadmissible zeros: entries the update cannot move off zero.
            if it > 0 && fix_inadmissible(&mut a[n], &phis[n], opts.kappa_tol, opts.kappa) {
                violations += 1;
            }
            // The violation of the rows left out, in the first iteration (the only
            // one they are not zero in).
            let left_violation = left
                .filter(|_| it == 0)
                .and_then(|l| l.violation(n, &lambda));
            // 2. The weights into this mode.
            scale_columns(&mut a[n], &lambda);
            lambda.fill(1.0);
            to_f32(&a[n], eng[n].data_mut());
            versions.changed(n);
            // 3. Multiplicative updates (the other modes' factors fixed throughout).
            let inner = match &mut phi_run {
                Some(run) => {
                    let all: Vec<&[f64]> = a.iter().map(Vec::as_slice).collect();
                    clock.kernel(|| run.fix(n, &all))?;
                    clock.kernel_of(|| {
                        run.mu_inner(&mut a[n], call.phi, opts.max_inner, opts.tol, &mut phis[n])
                    })?
                }
                None => {
                    // B's f32 copy goes in and out of the factors around each Φ.
                    let mut b32 = std::mem::replace(&mut eng[n], Matrix::zeros(0, 0));
                    let versions = &mut versions;
                    let phi = |b32: &mut Matrix, out: &mut Matrix| {
                        std::mem::swap(&mut eng[n], b32);
                        // B is new at every call; the other modes stay as they were.
                        versions.changed(n);
                        let call = Call {
                            versions: Some(&*versions),
                            ..call
                        };
                        let stats = engine.run_into_with(Op::Phi, x, n, &eng, &call, out);
                        std::mem::swap(&mut eng[n], b32);
                        stats
                    };
                    let (b, out) = (&mut a[n], &mut phi32);
                    let inner = clock.kernel_of(|| {
                        mu_inner_seq(phi, b, &mut b32, opts.max_inner, opts.tol, out)
                    });
                    eng[n] = b32;
                    inner?
                }
            };
            inner_iters += inner.evaluations;
            if inner.evaluations > 0 {
                kkt[n] = inner.violation;
            }
            if let Some(v) = left_violation {
                if !inner.updated {
                    return Ok(None);
                }
                // The first evaluation's violation counted them; an update zeroed them.
                if inner.evaluations == 1 {
                    kkt[n] = crate::math::mu::nan_max(kkt[n], v);
                }
            }
            if inner.updated {
                all_met = false;
            }
            // 4. The weights back out of this mode.
            let sums = column_sums(&a[n], rank);
            normalize(&mut a[n], &sums);
            lambda.copy_from_slice(&sums);
            to_f32(&a[n], eng[n].data_mut());
            versions.changed(n);
            // 5. With Op::Phi's f32 Φ: where the next iteration's inadmissible-zero test
            //    would read a Φ of 0 that f64 keeps positive (π underflowed in f32), mark
            //    it positive.
            if phi_run.is_none() {
                if opts.kappa > 0.0 && has_unsure_zero(&a[n], phi32.data(), opts.kappa_tol) {
                    mark_support(engine, x, n, &a, &mut support, &mut phi32, &mut clock)?;
                }
                phis[n].clear();
                phis[n].extend(phi32.data().iter().map(|&v| f64::from(v)));
            }
        }
        let log_likelihood = log_likelihood(
            engine,
            x,
            (&mut eng, &mut versions),
            (
                ll_mode,
                &mut ll_b,
                &mut ll_out,
                (&mut ll_b64, &mut ll_out64),
            ),
            &a,
            &lambda,
            &ll_call,
            phi_run.as_mut(),
            &mut clock,
        )?;
        let stats = CpAprIter {
            iter: it,
            log_likelihood,
            kkt_violation: kkt.iter().copied().fold(0.0, f64::max),
            inner_iters,
            violations,
            seconds: t0.elapsed().as_secs_f64(),
            seconds_kernel: clock.kernel,
            bytes_to_device: clock.to_device,
            bytes_from_device: clock.from_device,
        };
        iters.push(stats);
        let stop = control(&stats).is_break();
        if all_met {
            converged = true;
            break;
        }
        if stop {
            break;
        }
        if start.elapsed().as_secs_f64() > opts.max_seconds {
            break;
        }
    }

    // Components by decreasing weight (stable: ties keep their order).
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.sort_by(|&i, &j| lambda[j].total_cmp(&lambda[i]));
    let weights: Vec<f64> = perm.iter().map(|&p| lambda[p]).collect();
    check_not_collapsed(x.census().nonzero > 0, &weights, &a, iters.len())?;
    warnings.extend(rates::floored_rates(x.hls(Op::Phi)?, &a, &lambda, opts.eps));
    let factors = a
        .iter()
        .zip(&dims)
        .map(|(f, &d)| Matrix::from_fn(d, rank, |i, j| f[i * rank + perm[j]] as f32))
        .collect();
    Ok(Some(CpAprModel {
        weights,
        factors,
        log_likelihood: iters.last().map_or(0.0, |s| s.log_likelihood),
        iters,
        converged,
        warnings,
    }))
}

/// [`Error::Numerical`] when the model collapsed for a tensor with a positive value:
/// every weight 0, or a weight or factor entry not finite.
pub(crate) fn check_not_collapsed(
    positive: bool,
    weights: &[f64],
    factors: &[Vec<f64>],
    iters: usize,
) -> Result<()> {
    let finite =
        weights.iter().all(|w| w.is_finite()) && factors.iter().flatten().all(|v| v.is_finite());
    if !finite {
        return Err(Error::Numerical(format!(
            "CP-APR's model is not finite after {iters} iterations (a weight or factor entry is inf or NaN)"
        )));
    }
    if positive && weights.iter().all(|&w| w == 0.0) {
        return Err(Error::Numerical(format!(
            "CP-APR collapsed to the zero model after {iters} iterations (every weight is 0): no component reaches a nonzero of the tensor, as when the initial factors' nonzero rows meet none"
        )));
    }
    Ok(())
}
