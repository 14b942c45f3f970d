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

use super::dense::{cholesky_solve_small, cholesky_solve_x4, inverse_spd};
use crate::engine::{Engine, Prepared, RowCounts, SgdStep};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::Op;
use crate::tensor::CooTensor;
use faer::MatRef;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rayon::prelude::*;
use std::time::Instant;

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

/// A completion model and how it was reached.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionModel {
    /// The solver that fitted it.
    pub solver: Solver,
    /// `μ`: the mean of the training values as stored, or 0 (uncentered).
    pub offset: f64,
    /// One `I_m × R` factor per mode (those of the best epoch).
    pub factors: Vec<Matrix>,
    /// Every epoch run, in order.
    pub epochs: Vec<EpochStats>,
    /// The epoch whose factors these are (lowest validation RMSE).
    pub best_epoch: usize,
    /// Per mode, the rows with no training entry (kept at zero).
    pub empty_rows: Vec<usize>,
    /// ALS row solves that fell back to the pseudo-inverse.
    pub pinv_solves: usize,
}

impl CompletionModel {
    /// A model from its offset and factors (e.g. read back from files): one factor per
    /// mode (at least two), all of one rank ≥ 1, every value finite. No epochs.
    pub fn from_parts(solver: Solver, offset: f64, factors: Vec<Matrix>) -> Result<Self> {
        if factors.len() < 2 {
            return Err(Error::shape(
                "completion factors",
                "≥ 2 modes",
                factors.len(),
            ));
        }
        let dims: Vec<usize> = factors.iter().map(Matrix::rows).collect();
        crate::engine::completion::check_factors(&dims, &factors)?;
        if !offset.is_finite() {
            return Err(Error::NonFinite(format!("completion offset {offset}")));
        }
        Ok(CompletionModel {
            solver,
            offset,
            empty_rows: vec![0; factors.len()],
            factors,
            epochs: Vec::new(),
            best_epoch: 0,
            pinv_solves: 0,
        })
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.factors.first().map_or(0, Matrix::cols)
    }

    /// The extents the model covers.
    pub fn dims(&self) -> Vec<usize> {
        self.factors.iter().map(Matrix::rows).collect()
    }

    /// The best epoch's statistics.
    pub fn best(&self) -> Option<&EpochStats> {
        self.epochs.get(self.best_epoch)
    }

    /// The prediction at `coords` (0-based): `μ + Σ_r Π_m A_m[i_m, r]`.
    pub fn predict(&self, coords: &[u32]) -> Result<f64> {
        predict_at(self.offset, &self.factors, coords)
    }

    /// The RMSE of the model's predictions over the entries of `x` (`None` when `x`
    /// holds none). `x` must have the model's order and no index beyond its extents.
    pub fn rmse(&self, x: &CooTensor) -> Result<Option<f64>> {
        check_covers(&self.dims(), x)?;
        Ok(rmse_of(self.offset, &self.factors, x))
    }
}

/// `μ + Σ_r Π_m F_m[c_m, r]` in f64, with the coordinates checked.
fn predict_at(offset: f64, factors: &[Matrix], coords: &[u32]) -> Result<f64> {
    if coords.len() != factors.len() {
        return Err(Error::shape("coordinates", factors.len(), coords.len()));
    }
    for (m, (&i, f)) in coords.iter().zip(factors).enumerate() {
        if i as usize >= f.rows() {
            return Err(Error::InvalidOption(format!(
                "index {i} in mode {m} is beyond the model's length {}",
                f.rows()
            )));
        }
    }
    Ok(offset + model_at(factors, coords))
}

/// `Σ_r Π_m F_m[c_m, r]` in f64 (coordinates in range).
fn model_at(factors: &[Matrix], c: &[u32]) -> f64 {
    let r = factors[0].cols();
    let mut rows = factors.iter().zip(c).map(|(f, &i)| f.row(i as usize));
    let first = rows.next().expect("at least one mode");
    // Row by row (contiguous) into a stack buffer of products for the usual ranks.
    let mut buf = [0f64; 64];
    let mut heap = Vec::new();
    let p: &mut [f64] = if r <= buf.len() {
        &mut buf[..r]
    } else {
        heap.resize(r, 0.0);
        &mut heap
    };
    for (pk, &a) in p.iter_mut().zip(first) {
        *pk = f64::from(a);
    }
    for row in rows {
        for (pk, &a) in p.iter_mut().zip(row) {
            *pk *= f64::from(a);
        }
    }
    p.iter().sum()
}

/// Checks that `x` has `dims.len()` modes and no index beyond `dims`.
fn check_covers(dims: &[usize], x: &CooTensor) -> Result<()> {
    if x.order() != dims.len() {
        return Err(Error::shape("tensor order", dims.len(), x.order()));
    }
    for (m, &d) in dims.iter().enumerate() {
        if x.dims()[m] > d
            && let Some(&i) = x.indices(m).iter().find(|&&i| i as usize >= d)
        {
            return Err(Error::InvalidOption(format!(
                "index {i} in mode {m} is beyond the model's length {d}"
            )));
        }
    }
    Ok(())
}

/// The RMSE of `offset + CP(factors)` over `x` (`None` when empty); f64, in parallel
/// over fixed chunks summed in order (deterministic).
fn rmse_of(offset: f64, factors: &[Matrix], x: &CooTensor) -> Option<f64> {
    rmse_with(x, |c| offset + model_at(factors, c))
}

/// The RMSE of `predict` over the entries of `x` (`None` when empty).
fn rmse_with(x: &CooTensor, predict: impl Fn(&[u32]) -> f64 + Sync) -> Option<f64> {
    let n = x.nnz();
    if n == 0 {
        return None;
    }
    const CHUNK: usize = 4096;
    let parts: Vec<f64> = (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|k| {
            let mut c = vec![0u32; x.order()];
            let mut s = 0.0;
            for e in k * CHUNK..((k + 1) * CHUNK).min(n) {
                for (m, cm) in c.iter_mut().enumerate() {
                    *cm = x.indices(m)[e];
                }
                let d = x.values()[e] - predict(&c);
                s += d * d;
            }
            s
        })
        .collect();
    Some((parts.iter().sum::<f64>() / n as f64).sqrt())
}

/// A deterministic split of a tensor's entries into training, validation and test
/// sets (each keeps the tensor's extents and its entries in their original order).
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// The training entries.
    pub train: CooTensor,
    /// The validation entries (early stopping).
    pub validation: CooTensor,
    /// The test entries (reported, never used for fitting).
    pub test: CooTensor,
}

/// Splits the entries of `x` by `fractions` (train, validation, test: each ≥ 0, summing
/// to 1 within 1e-6): the entries are shuffled by a generator seeded with `seed`
/// (Xoshiro256++), the first `round(f_train·n)` go to training, the next
/// `round(f_validation·n)` to validation, the rest to test. Same `x`, fractions and
/// seed, same split, on every machine. An empty training set is an error.
pub fn split(x: &CooTensor, fractions: [f64; 3], seed: u64) -> Result<Split> {
    if fractions.iter().any(|f| !(f.is_finite() && *f >= 0.0)) {
        return Err(Error::InvalidOption(format!(
            "split fractions must be numbers ≥ 0, got {fractions:?}"
        )));
    }
    let total: f64 = fractions.iter().sum();
    if (total - 1.0).abs() > 1e-6 {
        return Err(Error::InvalidOption(format!(
            "split fractions must add up to 1, got {fractions:?} (sum {total})"
        )));
    }
    let n = x.nnz();
    let n_train = ((fractions[0] * n as f64).round() as usize).min(n);
    let n_val = ((fractions[1] * n as f64).round() as usize).min(n - n_train);
    if n_train == 0 {
        return Err(Error::InvalidOption(format!(
            "the split {fractions:?} of {n} entries leaves no training entry"
        )));
    }
    let mut perm: Vec<usize> = (0..n).collect();
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    perm.shuffle(&mut rng);
    let part = |sel: &mut [usize]| -> Result<CooTensor> {
        sel.sort_unstable();
        let indices = (0..x.order())
            .map(|m| sel.iter().map(|&e| x.indices(m)[e]).collect())
            .collect();
        let values = sel.iter().map(|&e| x.values()[e]).collect();
        CooTensor::new(x.dims().to_vec(), indices, values)
    };
    let (train, rest) = perm.split_at_mut(n_train);
    let (val, test) = rest.split_at_mut(n_val);
    Ok(Split {
        train: part(train)?,
        validation: part(val)?,
        test: part(test)?,
    })
}

/// The simple baselines every completion run is compared with, fitted to the training
/// entries: the global mean `μ`, and `μ + b⁽⁰⁾[i_0] + b⁽¹⁾[i_1]` (per-user + per-item
/// bias: modes 0 and 1), each bias the regularized mean of the residual of its row
/// (`Σ (x − μ − other bias) / (BIAS_REG + count)`), alternated [`BIAS_SWEEPS`] times.
#[derive(Debug, Clone, PartialEq)]
pub struct Baselines {
    /// The mean of the training values.
    pub mean: f64,
    /// The biases of modes 0 and 1 (a row without training entries has bias 0).
    pub bias: [Vec<f64>; 2],
}

/// Regularization of the bias baseline (a row's bias shrinks toward 0 like a mean with
/// this many extra entries at 0).
pub const BIAS_REG: f64 = 5.0;
/// Alternating sweeps of the bias baseline.
pub const BIAS_SWEEPS: usize = 10;

impl Baselines {
    /// Fits both baselines to `train` (order ≥ 2, at least one entry).
    pub fn fit(train: &CooTensor) -> Result<Self> {
        if train.order() < 2 || train.nnz() == 0 {
            return Err(Error::InvalidTensor(format!(
                "baselines need a tensor of order ≥ 2 with entries, got order {} with {}",
                train.order(),
                train.nnz()
            )));
        }
        let n = train.nnz();
        let mean = train.values().iter().sum::<f64>() / n as f64;
        let mut bias = [vec![0.0; train.dims()[0]], vec![0.0; train.dims()[1]]];
        for _ in 0..BIAS_SWEEPS {
            for m in 0..2 {
                let o = 1 - m;
                let mut sum = vec![0.0; train.dims()[m]];
                let mut cnt = vec![0.0; train.dims()[m]];
                for e in 0..n {
                    let i = train.indices(m)[e] as usize;
                    let j = train.indices(o)[e] as usize;
                    sum[i] += train.values()[e] - mean - bias[o][j];
                    cnt[i] += 1.0;
                }
                bias[m] = sum
                    .iter()
                    .zip(&cnt)
                    .map(|(s, c)| s / (BIAS_REG + c))
                    .collect();
            }
        }
        Ok(Baselines { mean, bias })
    }

    /// The RMSE of the global mean over `x` (`None` when empty).
    pub fn mean_rmse(&self, x: &CooTensor) -> Option<f64> {
        rmse_with(x, |_| self.mean)
    }

    /// The RMSE of the bias baseline over `x` (`None` when empty; an index beyond the
    /// training extents has bias 0).
    pub fn bias_rmse(&self, x: &CooTensor) -> Option<f64> {
        let b = |m: usize, i: u32| self.bias[m].get(i as usize).copied().unwrap_or(0.0);
        rmse_with(x, |c| self.mean + b(0, c[0]) + b(1, c[1]))
    }
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

/// `Σ_n ‖A⁽ⁿ⁾‖²` in f64.
fn sq_norm(factors: &[Matrix]) -> f64 {
    factors
        .iter()
        .flat_map(|f| f.data())
        .map(|&v| f64::from(v) * f64::from(v))
        .sum()
}

/// ALS: every row's `a_i = (G_i + λI)⁻¹ b_i` from the normal equations `ne`
/// (`I × (R² + R)`), rows without entries at zero; the count of pseudo-inverse
/// fallbacks.
fn solve_rows(ne: &Matrix, r: usize, lambda: f64, counts: &[u32]) -> Result<(Matrix, usize)> {
    let rows = ne.rows();
    let mut out = Matrix::zeros(rows, r);
    let pinv = out
        .data_mut()
        .par_chunks_mut(4 * r.max(1))
        .enumerate()
        .with_min_len(4)
        .map(|(c, a)| -> Result<usize> {
            let first = 4 * c;
            let n = a.len() / r;
            let solved = match r {
                8 => solve_x4::<8>(ne, first, n, lambda, counts, a),
                16 => solve_x4::<16>(ne, first, n, lambda, counts, a),
                32 => solve_x4::<32>(ne, first, n, lambda, counts, a),
                _ => [false; 4],
            };
            let mut pinv = 0;
            for (l, a) in a.chunks_exact_mut(r).enumerate() {
                let i = first + l;
                if counts[i] > 0 && !solved[l] {
                    pinv += usize::from(solve_one(ne.row(i), r, lambda, a)?);
                }
                if let Some(v) = a.iter().find(|v| !v.is_finite()) {
                    return Err(Error::NonFinite(format!("ALS solve of row {i} gave {v}")));
                }
            }
            Ok(pinv)
        })
        .sum::<Result<usize>>()?;
    Ok((out, pinv))
}

/// The `n ≤ 4` rows `first..first + n` of [`solve_rows`] for rank `R`, four at a time
/// ([`cholesky_solve_x4`]) into `out` (`n × R`); per row, whether it is done (rows
/// without entries are, at zero; a row whose system was not positive definite is not).
fn solve_x4<const R: usize>(
    ne: &Matrix,
    first: usize,
    n: usize,
    lambda: f64,
    counts: &[u32],
    out: &mut [f32],
) -> [bool; 4] {
    let mut g = [[[0f64; 4]; R]; R];
    let mut b = [[0f64; 4]; R];
    for l in 0..4 {
        if l >= n || counts[first + l] == 0 {
            // A placeholder system, I x = 0.
            for (p, gp) in g.iter_mut().enumerate() {
                gp[p][l] = 1.0;
            }
            continue;
        }
        let row = ne.row(first + l);
        for (p, gp) in g.iter_mut().enumerate() {
            for (q, gpq) in gp.iter_mut().enumerate().skip(p) {
                gpq[l] = f64::from(row[p * R + q]);
            }
            gp[p][l] += lambda;
            b[p][l] = f64::from(row[R * R + p]);
        }
    }
    let ok = cholesky_solve_x4(&mut g, &mut b);
    let mut done = [false; 4];
    for (l, a) in out.chunks_exact_mut(R).enumerate() {
        if counts[first + l] == 0 {
            done[l] = true;
        } else if ok[l] {
            for (v, bp) in a.iter_mut().zip(&b) {
                *v = bp[l] as f32;
            }
            done[l] = true;
        }
    }
    done
}

/// One row of [`solve_rows`]: `a = (G + λI)⁻¹ b` by Cholesky, or by the
/// pseudo-inverse when `G + λI` is singular (only `λ = 0` allows it); whether it took
/// the pseudo-inverse.
fn solve_one(row: &[f32], r: usize, lambda: f64, a: &mut [f32]) -> Result<bool> {
    let system = || {
        let g: Vec<f64> = (0..r * r)
            .map(|p| f64::from(row[p]) + if p / r == p % r { lambda } else { 0.0 })
            .collect();
        let x: Vec<f64> = row[r * r..].iter().map(|&v| f64::from(v)).collect();
        (g, x)
    };
    let (mut g, mut x) = system();
    let pinv = !cholesky_solve_small(&mut g, &mut x, r);
    if pinv {
        let (g, b) = system();
        let (inv, _) = inverse_spd(&MatRef::from_row_major_slice(&g, r, r).to_owned())?;
        for (p, xv) in x.iter_mut().enumerate() {
            *xv = (0..r).map(|q| inv[(p, q)] * b[q]).sum();
        }
    }
    for (v, &xv) in a.iter_mut().zip(&x) {
        *v = xv as f32;
    }
    Ok(pinv)
}

/// CCD++: a column's new values `Σ ê k / (λ + Σ k²)` from its terms (`I × 2`); rows
/// without entries (or with `λ + Σ k² = 0`) at zero.
fn column_update(terms: &Matrix, lambda: f64, counts: &[u32]) -> Vec<f32> {
    terms
        .data()
        .chunks_exact(2)
        .zip(counts)
        .map(|(t, &n)| {
            let den = lambda + f64::from(t[1]);
            if n == 0 || den <= 0.0 {
                0.0
            } else {
                (f64::from(t[0]) / den) as f32
            }
        })
        .collect()
}
