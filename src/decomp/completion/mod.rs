//! Tensor completion: predict the missing entries of a tensor whose unstored entries are
//! *unknown* (not zero), e.g. user × item × time ratings.
//!
//! The model, as recommender systems fit it, is
//! `m(i) = μ + Σ_n b⁽ⁿ⁾[i_n] + Σ_r Π_n A⁽ⁿ⁾[i_n, r]`: `μ` the mean of the training values
//! (0 without [`CompletionOptions::center`]), one bias per row of every mode (without
//! [`CompletionOptions::biases`], none) and a rank-`R` CP model, fitted to the observed
//! training entries only (every stored entry is observed, an explicit zero included)
//! by minimizing `Σ_observed (x − m)² + λ Σ_n w_n ‖A⁽ⁿ⁾ − c_n‖² + λ_b Σ_n ‖b⁽ⁿ⁾ − b̄⁽ⁿ⁾‖²`
//! (`b̄⁽ⁿ⁾` the mean of mode `n`'s biases: each mode's mean bias is free, so the model's
//! constant is not tied to `μ` when the CP part has a mean of its own). `c_n = 0`,
//! `w_n = 1` except on the *context modes* of a tensor of order `N ≥ 3`: the `N − 2`
//! modes with the most training entries per row (a MovieLens tensor's weeks) start at
//! and are shrunk toward the constant `c = (t² / R)^(1/(2N))` (the initial factors'
//! size, below), with `w_n` their entries per row over the geometric mean of the two
//! other modes'. Shrinking every mode toward 0 penalizes a component of size `σ` like
//! `N λ σ^(2/N)` (rescaling its factors is free): matrix factorization's soft
//! threshold for `N = 2`, but for `N ≥ 3` a penalty that removes small components and
//! leaves large ones nearly unshrunk, so that no `λ` both keeps a CP part and stops it
//! overfitting (MovieLens-100k: the bias model for `λ ≥ 13`, overfitting from the
//! first epoch below). With the context modes held near a constant the CP part is a
//! matrix factorization of the other two modes, modulated per context row where the
//! data say so (`tune.rs`). The biases
//! are learned with the factors by every solver: they ride along as extra factor
//! columns (`bias.rs`), so every pass over the nonzeros runs on the engine
//! ([`crate::engine::completion`]). Biases of every mode, not only users and items:
//! a tensor's third mode (time, context) has its own offsets, and the solvers treat all
//! modes alike. `λ_b` ([`CompletionOptions::bias_lambda`]) is a count of pseudo-entries
//! (a row's bias shrinks like a mean with that many extra entries at the mode's mean
//! bias), so unlike `λ`
//! it does not depend on the values' scale.
//!
//! - **ALS**: per mode, the normal equations of every row on the engine
//!   (`G_i = Σ k kᵀ`, `b_i = Σ (x − μ) k` over the row's observed entries), then
//!   `a_i = (G_i + λI)⁻¹ b_i` in f64 (Cholesky; the pseudo-inverse when `G_i + λI` is
//!   singular, which only `λ = 0` allows); with biases, the row's bias is one more
//!   unknown of the same system.
//! - **CCD++** (Yu et al. 2012): per column `r`, take component `r` out of the residual,
//!   update column `r` of every mode in turn by the exact one-variable minimizers
//!   `a_ir = Σ ê k / (λ + Σ k²)` ([`CompletionOptions::ccd_inner`] sweeps), put it
//!   back; the biases first, each by its exact update. The residual is recomputed from
//!   the factors at the start of every epoch, so f32 rounding does not pile up.
//! - **SGD**: one engine pass of per-nonzero gradient steps per epoch (on the CPU in
//!   stratified blocks, lock-free). Learning rate schedule: the *bold driver* — after
//!   an epoch that lowered the objective the rate grows by 5 %; an epoch that raised it
//!   (or made a factor non-finite) is undone and the rate halved. After
//!   [`MAX_HALVINGS`] halvings in a row the run stops with [`Error::Numerical`]. The
//!   biases step at their own rate, a fixed multiple of the factors' (their gradient
//!   has no factor product in it).
//!
//! One epoch is one sweep over every mode (ALS), every column (CCD++) or every nonzero
//! (SGD). After each, the training RMSE (`sqrt(loss / nnz)`) and the validation RMSE
//! are reported; the run keeps the factors of the epoch with the lowest validation
//! RMSE and stops after [`CompletionOptions::patience`] epochs without a lower one, or
//! after [`CompletionOptions::max_epochs`]. The returned model is that best one.
//!
//! **λ chosen on validation** ([`CompletionOptions::lambda`] `None`, the default): a
//! short path over a geometric grid of `λ`, large to small, each point warm-started
//! from the previous one's best factors and run for a few epochs, scored by its best
//! validation RMSE (`tune.rs`); the best point's `λ` then runs to the end as above. The
//! grid comes from the data: its top is the `λ` at which a row with the mean number of
//! entries is shrunk by half (`λ = c̄ κ`, `c̄` the geometric mean over modes of the
//! entries per nonempty row, `κ = (s²/R)^((N−1)/N)` the size of a Khatri-Rao entry when
//! the CP part has the values' spread `s`), and it descends by `√10`. SGD's initial
//! rate, unless given, comes from the same scale: `0.1 / (R κ)`.
//!
//! Documented behaviour on awkward input:
//! - A row with no training entries (e.g. a user whose every rating went to the test
//!   set) has no information: its factor row and its bias are set to zero and kept
//!   there by every solver, so the model predicts `μ +` the other modes' biases for the
//!   entries that touch it. [`CompletionModel::empty_rows`] counts those rows per mode.
//!   Where many of a mode's rows are such rows, the run leaves them out
//!   ([`complete_compacted`], which the driver uses: `compact.rs`).
//! - `λ < 0` or not finite, a learning rate ≤ 0 or not finite, rank 0, 0 epochs, an
//!   empty validation set (early stopping needs one) or one whose extents differ from
//!   the training tensor's: [`Error::InvalidOption`] / [`Error::Shape`] before any work.
//! - `λ = 0` is allowed (ALS falls back to the pseudo-inverse where a row has fewer
//!   entries than the rank; [`CompletionModel::pinv_solves`] counts it).
//! - SGD with biases on the CUDA backend: [`Error::Unsupported`] (its kernel cannot
//!   keep the fixed bias columns yet).
//!
//! Initial factors, unless given: mode `m` is `(2u − 1)·s` with `u` from
//! `Matrix::random(I_m, R, seed + m)` and `s = sqrt(3)·c`, `c = (t² / R)^(1/(2N))`, so
//! that the initial CP part has a standard deviation near `t`, the spread of the
//! training values about `μ` (1 when they have none); a context mode is `c` in every
//! entry instead; biases start at 0; rows without training entries are zeroed. Deterministic for a given seed, options, backend and thread
//! count.

use crate::engine::{Engine, Prepared, RowCounts};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::Op;
use crate::tensor::CooTensor;
use std::ops::ControlFlow;

mod bias;
mod compact;
mod epochs;
pub mod files;
mod model;
mod scale;
mod solve;
mod systems;
mod tune;

use crate::tensor::relabel::Relabelled;
use bias::Layout;
pub use compact::{Compaction, EMPTY_SHARE};
use epochs::{Best, Fitter};
pub use model::{BIAS_REG, BIAS_SWEEPS, Baselines, CompletionModel, PathPoint, Split, split};
pub use scale::ValueScale;
pub use systems::als_systems_bytes;
pub use tune::{PATH_EPOCHS, PATH_PATIENCE, PATH_POINTS, Scale};

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
    /// Stochastic gradient descent with the bold-driver learning rate. It shrinks a
    /// direction the training entries do not see at only `η λ` per epoch: at a small
    /// `λ`, a spare component that settles there stays (ALS and CCD++ remove it in one
    /// solve), so a second start from another seed, kept on validation RMSE, is worth
    /// its time where SGD's validation RMSE is far above its training RMSE.
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
    /// The regularization `λ` (≥ 0) of `λ Σ‖A⁽ⁿ⁾‖²`; `None`: chosen on the validation
    /// entries by a short path over a grid derived from the data (module docs).
    pub lambda: Option<f64>,
    /// Most epochs of the fit at the final `λ` (≥ 1). Where `λ` is chosen, each point
    /// of the path before it runs at most [`PATH_EPOCHS`] or this, the fewer; so a run
    /// can take more epochs in all.
    pub max_epochs: usize,
    /// Stop after this many epochs without a lower validation RMSE (≥ 1).
    pub patience: usize,
    /// Seed of the initial factors and of SGD's visiting order.
    pub seed: u64,
    /// SGD's initial learning rate (> 0; ignored by the other solvers); `None`: from the
    /// values' spread and the rank (module docs).
    pub learning_rate: Option<f64>,
    /// CCD++'s sweeps over the modes per column (≥ 1; ignored by the others).
    pub ccd_inner: usize,
    /// Initial factors, one `I_m × R` matrix per mode; `None` draws them from `seed`.
    pub init: Option<Vec<Matrix>>,
    /// Model `μ` = the training mean (`true`, for data such as ratings whose mean is far
    /// from 0) or `μ = 0`, a pure CP model (`false`: a rank-`R` CP tensor is then fitted
    /// exactly by rank `R`, whereas a nonzero `μ` adds a constant, rank-one term).
    pub center: bool,
    /// Learn a bias per row of every mode with the factors (`true`, recommender
    /// practice) or fit `μ + CP` alone.
    pub biases: bool,
    /// `λ_b` (≥ 0) of `λ_b Σ‖b⁽ⁿ⁾ − b̄⁽ⁿ⁾‖²`, in pseudo-entries (module docs).
    pub bias_lambda: f64,
}

impl Default for CompletionOptions {
    /// Rank 16, ALS, `λ` chosen on validation, at most 100 epochs, patience 5, seed
    /// 0, SGD's rate from the data, one CCD++ sweep per column, centered, with biases
    /// regularized by [`BIAS_REG`] pseudo-entries (as the bias baseline).
    fn default() -> Self {
        CompletionOptions {
            rank: 16,
            solver: Solver::Als,
            lambda: None,
            max_epochs: 100,
            patience: 5,
            seed: 0,
            learning_rate: None,
            ccd_inner: 1,
            init: None,
            center: true,
            biases: true,
            bias_lambda: BIAS_REG,
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
        // A row's normal equations hold about (R + order + 1)² floats: a rank whose
        // square's bytes overflow 64 bits is no rank any machine holds.
        let width = self.rank.checked_add(64);
        if width
            .and_then(|k| k.checked_mul(k))
            .and_then(|k| k.checked_mul(16))
            .is_none()
        {
            return Err(Error::InvalidRank(format!(
                "completion rank {} overflows: a row's normal equations hold its square \
                 of floats",
                self.rank
            )));
        }
        if let Some(lambda) = self.lambda
            && !(lambda.is_finite() && lambda >= 0.0)
        {
            return Err(Error::InvalidOption(format!(
                "the regularization λ must be a number ≥ 0, got {lambda}"
            )));
        }
        if !(self.bias_lambda.is_finite() && self.bias_lambda >= 0.0) {
            return Err(Error::InvalidOption(format!(
                "the bias regularization must be a number ≥ 0, got {}",
                self.bias_lambda
            )));
        }
        if self.max_epochs == 0 {
            return Err(Error::InvalidOption("max_epochs must be at least 1".into()));
        }
        if self.patience == 0 {
            return Err(Error::InvalidOption("patience must be at least 1".into()));
        }
        if self.solver == Solver::Sgd
            && let Some(lr) = self.learning_rate
            && !(lr.is_finite() && lr > 0.0)
        {
            return Err(Error::InvalidOption(format!(
                "the SGD learning rate must be a number > 0, got {lr}"
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
    /// 0-based epoch number (over the whole run, the λ path included).
    pub epoch: usize,
    /// The `λ` the epoch ran with.
    pub lambda: f64,
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

/// The initial CP factors (`R` columns; see the module docs) for values of spread
/// `spread` about `μ`.
fn initial_factors(opts: &CompletionOptions, dims: &[usize], spread: f64) -> Vec<Matrix> {
    if let Some(f) = &opts.init {
        return f.clone();
    }
    let s = (3.0f64.sqrt() * initial_scale(opts, dims.len(), spread)) as f32;
    Matrix::random_factors(dims, &vec![opts.rank; dims.len()], opts.seed)
        .into_iter()
        .map(|m| m.map(|u| (2.0 * u - 1.0) * s))
        .collect()
}

/// The root mean square `(t² / R)^(1/(2N))` of the initial factors' entries, `t` the
/// values' spread about `μ` (1 when they have none): the CP part of `N` such factors
/// then has spread `t`.
fn initial_scale(opts: &CompletionOptions, order: usize, spread: f64) -> f64 {
    let t = if spread > 0.0 && spread.is_finite() {
        spread
    } else {
        1.0
    };
    (t * t / opts.rank as f64).powf(1.0 / (2.0 * order as f64))
}

/// Refuses values whose spread about the offset (`spread`, the RMS) leaves the f32
/// range of the normal equations, which the kernels sum in f32: with factors started
/// at the model's scale ([`initial_scale`]: entries of `(spread / √R)^(1/N)`), a row of
/// `L` entries sums right-hand sides of about `L · spread · (spread / √R)^((N−1)/N)`.
/// Above 1/64 of f32's largest value (room for the factors to grow while fitting), or
/// where the spread itself overflowed, the run could only end in an infinity several
/// epochs in. Where one term `spread · (spread / √R)^((N−1)/N)` is below 2⁸ times
/// f32's smallest normal value (room for the residuals to shrink), the kernels flush
/// the terms to zero and the run would quietly return the bias model. The driver
/// multiplies such values by a power of two first ([`ValueScale`]).
fn check_spread(spread: f64, counts: &[Vec<u32>], rank: usize) -> Result<()> {
    let order = counts.len() as f64;
    let longest = (counts.iter().flatten().copied().max()).unwrap_or(0) as f64;
    let factor = (spread / (rank as f64).sqrt()).powf((order - 1.0) / order);
    let term = spread * factor;
    let sums = longest * term;
    let least = f64::from(f32::MIN_POSITIVE) * 256.0;
    if spread.is_finite() && sums <= f64::from(f32::MAX) / 64.0 && (spread == 0.0 || term >= least)
    {
        return Ok(());
    }
    let why = if term < least {
        format!(
            "one term of the sums would be about {term:.1e}, below f32's 1.2e-38 (flushed to zero)"
        )
    } else {
        format!("a row of {longest} entries would sum to about {sums:.1e}, beyond f32's 3.4e38")
    };
    Err(Error::InvalidTensor(format!(
        "the values spread {spread:.3e} (RMS) about their mean: completion sums its normal \
         equations in f32, and {why}; multiply the values by a power of two (the driver's \
         runs do: ValueScale)"
    )))
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

/// [`complete`], calling `progress` after every epoch (those of the λ path included).
pub fn complete_with_progress(
    engine: &Engine,
    train: &Prepared,
    validation: &CooTensor,
    opts: &CompletionOptions,
    progress: &mut dyn FnMut(&EpochStats),
) -> Result<CompletionModel> {
    complete_with_control(engine, train, validation, opts, &mut |s| {
        progress(s);
        ControlFlow::Continue(())
    })
}

/// [`complete`], calling `control` after every epoch (those of the λ path included):
/// [`ControlFlow::Break`] stops the run there and returns the best model so far (at
/// the best λ of the path so far).
pub fn complete_with_control(
    engine: &Engine,
    train: &Prepared,
    validation: &CooTensor,
    opts: &CompletionOptions,
    control: &mut dyn FnMut(&EpochStats) -> ControlFlow<()>,
) -> Result<CompletionModel> {
    complete_on(engine, train, validation, opts, None, control)
}

/// [`complete_with_control`] on the training tensor of `compaction`, prepared as
/// `train`: the run on the rows with training entries, its model on the tensor's own
/// rows (`compact.rs`). `opts.init`, if given, is on the tensor's own rows.
pub fn complete_compacted(
    engine: &Engine,
    train: &Prepared,
    compaction: &Compaction,
    opts: &CompletionOptions,
    control: &mut dyn FnMut(&EpochStats) -> ControlFlow<()>,
) -> Result<CompletionModel> {
    let c = compaction;
    let model = complete_on(engine, train, &c.validation, opts, Some(&c.rows), control)?;
    Ok(c.expand(model))
}

/// [`complete_with_control`], on the rows `rows` keeps of the tensor's where it is
/// given: the initial factors are drawn (or given) on the tensor's own rows and cut to
/// those, and the rows left out count in the penalty and the empty rows.
fn complete_on(
    engine: &Engine,
    train: &Prepared,
    validation: &CooTensor,
    opts: &CompletionOptions,
    rows: Option<&Relabelled>,
    control: &mut dyn FnMut(&EpochStats) -> ControlFlow<()>,
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
    // The model's extents: the session's, or the tensor's own where `rows` renumbers.
    let full_dims = rows.map_or_else(|| dims.clone(), |r| r.dims.clone());
    let mut layout = Layout {
        rank: opts.rank,
        order: dims.len(),
        biases: opts.biases,
        anchors: Vec::new(),
        absent: (full_dims.iter().zip(&dims))
            .map(|(f, d)| f.saturating_sub(*d))
            .collect(),
    };
    if let Some(init) = &opts.init {
        crate::engine::completion::check_factors(&full_dims, init)?;
        if init[0].cols() != opts.rank {
            return Err(Error::shape(
                "initial factors' columns",
                opts.rank,
                init[0].cols(),
            ));
        }
    }
    crate::memplan::MemoryPlan::cp(&dims, layout.width()).check()?;
    let RowCounts { counts, mean } = engine.row_counts(train, Op::Completion)?;
    let offset = if opts.center { mean } else { 0.0 };
    let empty_rows: Vec<usize> = (counts.iter().zip(&layout.absent))
        .map(|(c, a)| c.iter().filter(|&&n| n == 0).count() + a)
        .collect();
    // A session at zero first: its loss gives the values' spread about μ.
    let zeros: Vec<Matrix> = dims
        .iter()
        .map(|&d| Matrix::zeros(d, layout.width()))
        .collect();
    let session = engine.completion_session(train, &zeros, offset as f32)?;
    // The session models offset as f32; predictions use the same value.
    let offset = f64::from(offset as f32);
    let mut fitter = Fitter {
        session,
        engine,
        active: counts
            .iter()
            .map(|c| {
                (0..c.len())
                    .filter(|&i| c[i] > 0)
                    .map(|i| i as u32)
                    .collect()
            })
            .collect(),
        counts,
        layout: layout.clone(),
        solver: opts.solver,
        ccd_inner: opts.ccd_inner,
        seed: opts.seed,
        offset,
        nnz: train.nnz() as f64,
        bias_lambda: opts.bias_lambda,
        lr: 0.0,
        lr_start: 0.0,
        bias_rate: 1.0,
        halvings: 0,
        beta: 1.0,
        pinv_solves: 0,
        epochs: Vec::new(),
        scratch: vec![Matrix::zeros(1, 1); dims.len()],
        systems_bytes: systems::systems_budget(train.nnz(), &dims, layout.width()),
        squares: Vec::new(),
        mode0_ready: false,
        stopped: false,
    };
    let spread = (fitter.session.loss()? / fitter.nnz).sqrt();
    check_spread(spread, &fitter.counts, opts.rank)?;
    let scale = Scale::of(&fitter.counts, fitter.nnz, spread, opts.rank);
    layout.anchors = tune::anchors(
        &fitter.counts,
        fitter.nnz,
        initial_scale(opts, dims.len(), spread),
    );
    fitter.layout = layout.clone();
    let mut init = initial_factors(opts, &full_dims, spread);
    if let Some(r) = rows {
        init = (init.iter().enumerate())
            .map(|(m, f)| r.compress(m, f))
            .collect();
    }
    if opts.init.is_none() {
        // The context modes start at their anchor: a constant.
        for (m, f) in init.iter_mut().enumerate() {
            let a = layout.anchor(m);
            if !a.is_zero() {
                *f = f.map(|_| a.value);
            }
        }
    }
    let mut init = layout.widen(init);
    layout.zero_empty_rows(&mut init, &fitter.counts);
    fitter.set_factors(&init)?;
    fitter.lr_start = opts.learning_rate.unwrap_or_else(|| scale.learning_rate());
    fitter.lr = fitter.lr_start;
    fitter.bias_rate = scale.bias_rate();
    let learning_rate = (opts.solver == Solver::Sgd).then_some(fitter.lr);

    let (lambda, lambda_path, start) = match opts.lambda {
        Some(l) => (l, Vec::new(), None),
        None => {
            let (l, path, best) =
                tune::path(&mut fitter, &scale, &init, opts, validation, control)?;
            fitter.set_factors(&best.factors)?;
            (l, path, Some(best))
        }
    };
    let last = fitter.phase(lambda, opts.max_epochs, opts.patience, validation, control)?;
    let best: Best = match (start, last) {
        (Some(s), Some(l)) if s.rmse <= l.rmse => s,
        (_, Some(l)) => l,
        (Some(s), None) => s,
        (None, None) => {
            return Err(Error::InvalidOption(
                "the completion run stopped before its first epoch".into(),
            ));
        }
    };
    let (factors, biases) = layout.split(&best.factors);
    Ok(CompletionModel {
        solver: opts.solver,
        offset,
        factors,
        biases,
        lambda,
        bias_lambda: opts.bias_lambda,
        learning_rate,
        lambda_path,
        epochs: fitter.epochs,
        best_epoch: best.epoch,
        empty_rows,
        pinv_solves: fitter.pinv_solves,
    })
}
