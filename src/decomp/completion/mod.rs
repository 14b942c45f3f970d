//! Tensor completion: predict the missing entries of a tensor whose unstored entries are
//! *unknown* (not zero), e.g. user × item × time ratings.
//!
//! The model is `m(i) = μ + Σ_r Π_n A⁽ⁿ⁾[i_n, r]`, `μ` the mean of the training values
//! (as stored; 0 without [`CompletionOptions::center`]), fitted to the observed training entries only (every stored entry is
//! observed, an explicit zero included) by minimizing
//! `Σ_observed (x − m)² + λ Σ_n ‖A⁽ⁿ⁾‖²` with one of three solvers ([`Solver`]); every
//! pass over the nonzeros runs on the engine ([`crate::engine::completion`]):
//!
//! - **ALS**: per mode, the normal equations of every row on the engine
//!   (`G_i = Σ k kᵀ`, `b_i = Σ (x − μ) k` over the row's observed entries), then
//!   `a_i = (G_i + λI)⁻¹ b_i` in f64 (Cholesky; the pseudo-inverse when `G_i + λI` is
//!   singular, which only `λ = 0` allows).
//! - **CCD++** (Yu et al. 2012): per column `r`, take component `r` out of the residual,
//!   update column `r` of every mode in turn by the exact one-variable minimizers
//!   `a_ir = Σ ê k / (λ + Σ k²)` ([`CompletionOptions::ccd_inner`] sweeps), put it
//!   back. The residual is recomputed from the factors at the start of every epoch, so
//!   f32 rounding does not pile up.
//! - **SGD**: one engine pass of per-nonzero gradient steps per epoch (on the CPU in
//!   stratified blocks, lock-free). Learning rate schedule: the *bold driver* — after
//!   an epoch that lowered the objective the rate grows by 5 %; an epoch that raised it
//!   (or made a factor non-finite) is undone and the rate halved. After
//!   [`MAX_HALVINGS`] halvings in a row the run stops with [`Error::Numerical`].
//!
//! One epoch is one sweep over every mode (ALS), every column (CCD++) or every nonzero
//! (SGD). After each, the training RMSE (`sqrt(loss / nnz)`) and the validation RMSE
//! are reported; the run keeps the factors of the epoch with the lowest validation
//! RMSE and stops after [`CompletionOptions::patience`] epochs without a lower one, or
//! after [`CompletionOptions::max_epochs`]. The returned model is that best one.
//!
//! Documented behaviour on awkward input:
//! - A row with no training entries (e.g. a user whose every rating went to the test
//!   set) has no information: its factor row is set to zero and kept there by every
//!   solver, so the model predicts `μ + 0` for the entries that touch it.
//!   [`CompletionModel::empty_rows`] counts those rows per mode.
//! - `λ < 0` or not finite, a learning rate ≤ 0 or not finite, rank 0, 0 epochs, an
//!   empty validation set (early stopping needs one) or one whose extents differ from
//!   the training tensor's: [`Error::InvalidOption`] / [`Error::Shape`] before any work.
//! - `λ = 0` is allowed (ALS falls back to the pseudo-inverse where a row has fewer
//!   entries than the rank; [`CompletionModel::pinv_solves`] counts it).
//!
//! Initial factors, unless given: mode `m` is `(2u − 1)·s` with `u` from
//! `Matrix::random(I_m, R, seed + m)` and `s = sqrt(3)·(0.25 / R)^(1/(2N))`, so that the
//! initial model (without `μ`) has a standard deviation near 0.5; rows without training
//! entries are zeroed. Deterministic for a given seed, options, backend and thread
//! count.

use crate::engine::{Engine, Prepared, RowCounts, SgdStep};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::Op;
use crate::tensor::CooTensor;
use std::time::Instant;

mod model;
mod solve;

use model::rmse_of;
pub use model::{BIAS_REG, BIAS_SWEEPS, Baselines, CompletionModel, Split, split};
use solve::{column_update, solve_rows, sq_norm};

/// SGD gives up after this many halvings of the learning rate in a row.
pub const MAX_HALVINGS: usize = 30;

/// The completion solver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Solver {
    /// Alternating least squares, per-row `R × R` systems.
    Als,
    /// CCD++: rank-one column updates by coordinate descent.
    Ccd,
    /// Stochastic gradient descent with the bold-driver learning rate.
    Sgd,
}

impl Solver {
    /// Lower-case name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Solver::Als => "als",
            Solver::Ccd => "ccd",
            Solver::Sgd => "sgd",
        }
    }
}

impl std::fmt::Display for Solver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Options of [`complete`].
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionOptions {
    /// Rank `R` of the model (≥ 1).
    pub rank: usize,
    /// The solver.
    pub solver: Solver,
    /// The regularization `λ` (≥ 0) of `λ Σ‖A⁽ⁿ⁾‖²`.
    pub lambda: f64,
    /// Most epochs to run (≥ 1).
    pub max_epochs: usize,
    /// Stop after this many epochs without a lower validation RMSE (≥ 1).
    pub patience: usize,
    /// Seed of the initial factors and of SGD's visiting order.
    pub seed: u64,
    /// SGD's initial learning rate (> 0; ignored by the other solvers).
    pub learning_rate: f64,
    /// CCD++'s sweeps over the modes per column (≥ 1; ignored by the others).
    pub ccd_inner: usize,
    /// Initial factors, one `I_m × R` matrix per mode; `None` draws them from `seed`.
    pub init: Option<Vec<Matrix>>,
    /// Model `μ` = the training mean (`true`, for data such as ratings whose mean is far
    /// from 0) or `μ = 0`, a pure CP model (`false`: a rank-`R` CP tensor is then fitted
    /// exactly by rank `R`, whereas a nonzero `μ` adds a constant, rank-one term).
    pub center: bool,
}

impl Default for CompletionOptions {
    /// Rank 16, ALS, `λ = 15`, at most 100 epochs, patience 5, seed 0, SGD rate 0.05,
    /// one CCD++ sweep per column, centered (values from MovieLens-100k, see
    /// `bench/results/2026-11-23-cpu-completion-epyc`).
    fn default() -> Self {
        CompletionOptions {
            rank: 16,
            solver: Solver::Als,
            lambda: 15.0,
            max_epochs: 100,
            patience: 5,
            seed: 0,
            learning_rate: 0.05,
            ccd_inner: 1,
            init: None,
            center: true,
        }
    }
}

impl CompletionOptions {
    /// Checks the options (independently of any tensor).
    pub fn validate(&self) -> Result<()> {
        if self.rank == 0 {
            return Err(Error::InvalidRank(
                "completion rank must be at least 1".into(),
            ));
        }
        if !(self.lambda.is_finite() && self.lambda >= 0.0) {
            return Err(Error::InvalidOption(format!(
                "the regularization λ must be a number ≥ 0, got {}",
                self.lambda
            )));
        }
        if self.max_epochs == 0 {
            return Err(Error::InvalidOption("max_epochs must be at least 1".into()));
        }
        if self.patience == 0 {
            return Err(Error::InvalidOption("patience must be at least 1".into()));
        }
        if self.solver == Solver::Sgd
            && !(self.learning_rate.is_finite() && self.learning_rate > 0.0)
        {
            return Err(Error::InvalidOption(format!(
                "the SGD learning rate must be a number > 0, got {}",
                self.learning_rate
            )));
        }
        if self.ccd_inner == 0 {
            return Err(Error::InvalidOption("ccd_inner must be at least 1".into()));
        }
        Ok(())
    }
}

/// What one epoch reached and cost.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochStats {
    /// 0-based epoch number.
    pub epoch: usize,
    /// RMSE over the training entries after the epoch.
    pub train_rmse: f64,
    /// RMSE over the validation entries after the epoch.
    pub validation_rmse: f64,
    /// `Σ (x − m)² + λ Σ‖A⁽ⁿ⁾‖²` over the training entries.
    pub objective: f64,
    /// The learning rate the epoch ran with (SGD only).
    pub learning_rate: Option<f64>,
    /// Whether the epoch was undone (SGD: it raised the objective or overflowed).
    pub undone: bool,
    /// Seconds in engine kernels.
    pub seconds_kernel: f64,
    /// Seconds of the whole epoch, the RMSEs included.
    pub seconds: f64,
}

/// The initial factors (see the module docs), with rows without entries zeroed.
fn initial_factors(opts: &CompletionOptions, dims: &[usize], counts: &[Vec<u32>]) -> Vec<Matrix> {
    let n = dims.len() as f64;
    let s = (3.0f64.sqrt() * (0.25 / opts.rank as f64).powf(1.0 / (2.0 * n))) as f32;
    let mut f = match &opts.init {
        Some(f) => f.clone(),
        None => Matrix::random_factors(dims, &vec![opts.rank; dims.len()], opts.seed)
            .into_iter()
            .map(|m| m.map(|u| (2.0 * u - 1.0) * s))
            .collect(),
    };
    zero_empty_rows(&mut f, counts);
    f
}

/// Sets the rows without training entries to zero.
fn zero_empty_rows(factors: &mut [Matrix], counts: &[Vec<u32>]) {
    for (f, c) in factors.iter_mut().zip(counts) {
        let r = f.cols();
        for (row, &n) in f.data_mut().chunks_exact_mut(r).zip(c) {
            if n == 0 {
                row.fill(0.0);
            }
        }
    }
}

/// Completion of the training tensor `train` (prepared for [`Op::Completion`]) on
/// `engine`, stopping on the RMSE over `validation` (same extents, at least one entry);
/// see the [module documentation](self).
pub fn complete(
    engine: &Engine,
    train: &Prepared,
    validation: &CooTensor,
    opts: &CompletionOptions,
) -> Result<CompletionModel> {
    complete_with_progress(engine, train, validation, opts, &mut |_| {})
}

/// [`complete`], calling `progress` after every epoch.
pub fn complete_with_progress(
    engine: &Engine,
    train: &Prepared,
    validation: &CooTensor,
    opts: &CompletionOptions,
    progress: &mut dyn FnMut(&EpochStats),
) -> Result<CompletionModel> {
    opts.validate()?;
    let dims = train.dims().to_vec();
    if dims.len() < 2 {
        return Err(Error::InvalidTensor(format!(
            "completion needs a tensor of order ≥ 2, got order {}",
            dims.len()
        )));
    }
    if validation.nnz() == 0 {
        return Err(Error::InvalidOption(
            "the validation set is empty: completion stops on the validation RMSE and returns the best epoch's model; give it entries (a validation fraction > 0)".into(),
        ));
    }
    if validation.dims() != dims.as_slice() {
        return Err(Error::shape(
            "validation tensor extents",
            format!("{dims:?} (the training tensor's)"),
            format!("{:?}", validation.dims()),
        ));
    }
    crate::memplan::MemoryPlan::cp(&dims, opts.rank).check()?;
    let RowCounts { counts, mean } = engine.row_counts(train, Op::Completion)?;
    let offset = if opts.center { mean } else { 0.0 };
    let nnz = train.nnz() as f64;
    let empty_rows: Vec<usize> = counts
        .iter()
        .map(|c| c.iter().filter(|&&n| n == 0).count())
        .collect();
    let factors = initial_factors(opts, &dims, &counts);
    let mut session = engine.completion_session(train, &factors, offset as f32)?;
    // The session models offset as f32; predictions use the same value.
    let offset = f64::from(offset as f32);
    let lambda = opts.lambda;

    let mut state = Run {
        epochs: Vec::new(),
        best: (f64::INFINITY, 0, factors),
        pinv_solves: 0,
    };
    let mut lr = opts.learning_rate;
    let mut halvings = 0;
    let mut prev_objective = {
        let f = session.factors()?;
        session.loss()? + lambda * sq_norm(&f)
    };
    let mut scratch = Matrix::zeros(1, 1);
    for epoch in 0..opts.max_epochs {
        let start = Instant::now();
        let mut kernel = 0.0;
        let mut timed = |f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
            let t = Instant::now();
            let r = f();
            kernel += t.elapsed().as_secs_f64();
            r
        };
        let mut undone = false;
        let mut rate = None;
        match opts.solver {
            Solver::Als => {
                for (mode, count) in counts.iter().enumerate() {
                    timed(&mut || session.normal_equations(mode, &mut scratch).map(|_| ()))?;
                    let (a, pinv) = solve_rows(&scratch, opts.rank, lambda, count)?;
                    state.pinv_solves += pinv;
                    timed(&mut || session.set_factor(mode, &a).map(|_| ()))?;
                }
            }
            Solver::Ccd => {
                timed(&mut || session.reset_residual().map(|_| ()))?;
                for col in 0..opts.rank {
                    timed(&mut || session.add_column(col, 1.0).map(|_| ()))?;
                    for _ in 0..opts.ccd_inner {
                        for (mode, count) in counts.iter().enumerate() {
                            timed(&mut || {
                                session.column_terms(mode, col, &mut scratch).map(|_| ())
                            })?;
                            let v = column_update(&scratch, lambda, count);
                            timed(&mut || session.set_column(mode, col, &v).map(|_| ()))?;
                        }
                    }
                    timed(&mut || session.add_column(col, -1.0).map(|_| ()))?;
                }
            }
            Solver::Sgd => {
                let before = session.factors()?;
                let step = SgdStep {
                    learning_rate: lr as f32,
                    lambda: lambda as f32,
                    seed: opts.seed.wrapping_add(epoch as u64),
                    shuffle: true,
                };
                rate = Some(lr);
                let mut outcome = Ok(());
                timed(&mut || {
                    outcome = session.sgd_epoch(&step).map(|_| ());
                    Ok(())
                })?;
                let objective = match outcome {
                    Ok(()) => match session.loss() {
                        Ok(l) => Some(l + lambda * sq_norm(&session.factors()?)),
                        Err(Error::NonFinite(_)) => None,
                        Err(e) => return Err(e),
                    },
                    Err(Error::NonFinite(_)) => None,
                    Err(e) => return Err(e),
                };
                match objective {
                    Some(o) if o.is_finite() && o <= prev_objective => {
                        prev_objective = o;
                        lr *= 1.05;
                        halvings = 0;
                    }
                    _ => {
                        for (m, f) in before.iter().enumerate() {
                            session.set_factor(m, f)?;
                        }
                        undone = true;
                        lr *= 0.5;
                        halvings += 1;
                        if halvings > MAX_HALVINGS {
                            return Err(Error::Numerical(format!(
                                "SGD: {MAX_HALVINGS} epochs in a row raised the objective or overflowed, down to learning rate {lr:e}"
                            )));
                        }
                    }
                }
            }
        }
        let f = session.factors()?;
        let loss = session.loss()?;
        let train_rmse = (loss / nnz).sqrt();
        let validation_rmse = rmse_of(offset, &f, validation).expect("validation has entries");
        if !validation_rmse.is_finite() {
            return Err(Error::NonFinite(format!(
                "validation RMSE {validation_rmse} after epoch {epoch}"
            )));
        }
        let objective = loss + lambda * sq_norm(&f);
        let stats = EpochStats {
            epoch,
            train_rmse,
            validation_rmse,
            objective,
            learning_rate: rate,
            undone,
            seconds_kernel: kernel,
            seconds: start.elapsed().as_secs_f64(),
        };
        progress(&stats);
        state.epochs.push(stats);
        if validation_rmse < state.best.0 {
            state.best = (validation_rmse, epoch, f);
        } else if epoch - state.best.1 >= opts.patience {
            break;
        }
    }
    let (_, best_epoch, factors) = state.best;
    Ok(CompletionModel {
        solver: opts.solver,
        offset,
        factors,
        epochs: state.epochs,
        best_epoch,
        empty_rows,
        pinv_solves: state.pinv_solves,
    })
}

/// The bookkeeping of a run: its epochs, the best validation RMSE with its epoch and
/// factors, and the pseudo-inverse fallbacks.
struct Run {
    epochs: Vec<EpochStats>,
    best: (f64, usize, Vec<Matrix>),
    pinv_solves: usize,
}
