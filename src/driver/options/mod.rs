//! The requests of each model under the names users give their options, and their one
//! validation. The messages name an option as the Python keyword does (`rank`, `iters`,
//! `ranks[1]`); the command line's flag is the same word (`--rank`), and both front
//! ends print the message as it is.

use crate::decomp::completion::{Baselines, Compaction, ValueScale};
use crate::decomp::used_rows::UsedRows;
use crate::decomp::{
    AprScale, CompletionOptions, CpAprOptions, CpOptions, NonInteger, ScaledRun, Solver,
    TuckerOptions,
};
use crate::driver::value_scale::ScaledValues;
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::tensor::CooTensor;

/// `value` of the integer option `name` as a count. A front end whose integers may be
/// negative (Python's) converts them here; the command line's parser refuses them
/// itself.
pub fn count(name: &str, value: i64) -> Result<usize> {
    usize::try_from(value)
        .map_err(|_| Error::InvalidOption(format!("{name} must not be negative, got {value}")))
}

/// `name must be at least least, got value`, as a rank error.
fn rank_at_least(name: &str, value: usize) -> Result<()> {
    if value == 0 {
        return Err(Error::InvalidRank(format!(
            "{name} must be at least 1, got {value}"
        )));
    }
    Ok(())
}

/// Refuses a zero count for the option `name`.
fn at_least_one(name: &str, value: usize) -> Result<()> {
    if value == 0 {
        return Err(Error::InvalidOption(format!(
            "{name} must be at least 1, got {value}"
        )));
    }
    Ok(())
}

/// Refuses a tolerance below 0 or NaN.
fn check_tol(tol: f64) -> Result<()> {
    if tol.is_nan() || tol < 0.0 {
        return Err(Error::InvalidOption(format!(
            "tol must be a number ≥ 0 (0 runs every iteration), got {tol}"
        )));
    }
    Ok(())
}

/// A CP-ALS run as a user asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct CpRequest {
    /// The number of components.
    pub rank: usize,
    /// The most iterations.
    pub iters: usize,
    /// The change of fit that stops the run (0 runs every iteration).
    pub tol: f64,
    /// The seed of the random initial factors.
    pub seed: u64,
    /// Initial factors, one `I_m × rank` matrix per mode, instead of random ones.
    pub init: Option<Vec<Matrix>>,
}

/// A validated CP-ALS run.
#[derive(Debug, Clone)]
pub struct CpJob {
    /// The options of the model's loop.
    pub options: CpOptions,
    pub(super) dims: Vec<usize>,
    /// The tensor's nonzeros (the whole tensor's, where it is split over processes).
    pub(super) nnz: usize,
    /// The tensor with its values times a power of two, where they are far from 1
    /// ([`ScaledValues`]).
    pub scaled: Option<ScaledValues>,
    /// The tensor with its mostly empty modes renumbered to their used rows, where
    /// that pays ([`UsedRows`]): what the run prepares and fits.
    pub rows: Option<UsedRows>,
}

impl CpRequest {
    /// The checks that need no tensor (a front end may run them before reading one;
    /// [`CpRequest::validate`] runs them too).
    pub fn check(&self) -> Result<()> {
        rank_at_least("rank", self.rank)?;
        at_least_one("iters", self.iters)?;
        check_tol(self.tol)
    }

    /// Every check of the request against `x`; the run to do.
    pub fn validate(self, x: &CooTensor) -> Result<CpJob> {
        let rank = self.rank;
        let mut job = self.validate_shape(x.dims(), x.nnz() as u64)?;
        job.scaled = ScaledValues::of(x);
        job.rows = UsedRows::of(job.scaled.as_ref().map_or(x, |s| &s.tensor), rank)?;
        Ok(job)
    }

    /// [`CpRequest::validate`] against a tensor known by its extents and nonzeros (one
    /// split over processes, which no process holds whole).
    pub fn validate_shape(self, dims: &[usize], nnz: u64) -> Result<CpJob> {
        self.check()?;
        // As the HLS build says it for the other models, before the rank is weighed.
        if nnz == 0 {
            return Err(Error::InvalidTensor("the tensor has no nonzeros".into()));
        }
        if self.rank as u64 > nnz {
            return Err(Error::InvalidRank(format!(
                "rank {} exceeds the tensor's {} nonzeros: a CP model of that many components already fits it exactly",
                self.rank, nnz
            )));
        }
        let options = CpOptions {
            rank: self.rank,
            max_iters: self.iters,
            tol: self.tol,
            seed: self.seed,
            init: self.init,
        };
        options.validate(dims)?;
        Ok(CpJob {
            options,
            dims: dims.to_vec(),
            nnz: usize::try_from(nnz).unwrap_or(usize::MAX),
            scaled: None,
            rows: None,
        })
    }
}

/// A Tucker-HOOI run as a user asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct TuckerRequest {
    /// One rank per mode.
    pub ranks: Vec<usize>,
    /// The most iterations.
    pub iters: usize,
    /// The change of fit that stops the run (0 runs every iteration).
    pub tol: f64,
    /// The seed of the random initial factors.
    pub seed: u64,
    /// Initial factors, one `I_m × ranks[m]` matrix per mode, instead of random ones.
    pub init: Option<Vec<Matrix>>,
}

/// A validated Tucker-HOOI run.
#[derive(Debug, Clone)]
pub struct TuckerJob {
    /// The options of the model's loop.
    pub options: TuckerOptions,
    pub(super) dims: Vec<usize>,
    pub(super) nnz: usize,
    /// The tensor with its values times a power of two, where they are far from 1
    /// ([`ScaledValues`]).
    pub scaled: Option<ScaledValues>,
    /// The tensor with its mostly empty modes renumbered to their used rows, where
    /// that pays ([`UsedRows::of_tucker`]): what the run prepares and fits.
    pub rows: Option<UsedRows>,
}

/// The Tucker rank of every mode when none is given: at most this.
pub const DEFAULT_TUCKER_RANK: usize = 8;

/// The Tucker ranks a front end asks for on a tensor with extents `dims`: several given,
/// as they are (checked by [`TuckerRequest::validate`]); one given (or none:
/// [`DEFAULT_TUCKER_RANK`]), that rank for every mode, lowered where a mode is shorter
/// and then where a rank exceeds the product of the others (a core could not use it),
/// so that one rank fits any shape.
pub fn tucker_ranks(given: Option<&[usize]>, dims: &[usize]) -> Vec<usize> {
    let cap = match given {
        Some([r]) => *r,
        Some(v) => return v.to_vec(),
        None => DEFAULT_TUCKER_RANK,
    };
    if cap == 0 {
        // Refused by the validation, as given.
        return vec![0; dims.len()];
    }
    let mut ranks: Vec<usize> = dims.iter().map(|&d| d.clamp(1, cap)).collect();
    // Lowering one rank can lower the product bounding another: repeat until none
    // moves (each pass lowers a rank or ends, so it ends).
    loop {
        let mut moved = false;
        for m in 0..ranks.len() {
            let others = (ranks.iter().enumerate())
                .filter(|&(k, _)| k != m)
                .fold(1usize, |acc, (_, &r)| acc.saturating_mul(r));
            if ranks[m] > others.max(1) {
                ranks[m] = others.max(1);
                moved = true;
            }
        }
        if !moved {
            return ranks;
        }
    }
}

impl TuckerRequest {
    /// The checks that need no tensor.
    pub fn check(&self) -> Result<()> {
        for (m, &r) in self.ranks.iter().enumerate() {
            rank_at_least(&format!("ranks[{m}]"), r)?;
        }
        at_least_one("iters", self.iters)?;
        check_tol(self.tol)
    }

    /// Every check of the request against `x`; the run to do.
    pub fn validate(self, x: &CooTensor) -> Result<TuckerJob> {
        self.check()?;
        let options = TuckerOptions {
            ranks: self.ranks,
            max_iters: self.iters,
            tol: self.tol,
            seed: self.seed,
            init: self.init,
        };
        options.validate(x.dims())?;
        let scaled = ScaledValues::of(x);
        let rows = UsedRows::of_tucker(scaled.as_ref().map_or(x, |s| &s.tensor), &options.ranks)?;
        Ok(TuckerJob {
            options,
            dims: x.dims().to_vec(),
            nnz: x.nnz(),
            scaled,
            rows,
        })
    }
}

/// A CP-APR (Poisson CP) run as a user asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct CpAprRequest {
    /// The number of components.
    pub rank: usize,
    /// The most outer iterations.
    pub iters: usize,
    /// The most inner iterations per mode.
    pub inner: usize,
    /// The KKT tolerance that ends the run.
    pub tol: f64,
    /// The most seconds to run.
    pub stoptime: f64,
    /// The smallest value a factor entry may take.
    pub eps: f64,
    /// How far inadmissible zeros are moved off zero.
    pub kappa: f64,
    /// How close to zero an entry counts as a zero.
    pub kappa_tol: f64,
    /// The seed of the random initial factors.
    pub seed: u64,
    /// Initial factors, one `I_m × rank` matrix per mode, instead of random ones.
    pub init: Option<Vec<Matrix>>,
    /// What a non-integer value of the tensor does.
    pub non_integer: NonInteger,
}

/// A validated CP-APR run.
#[derive(Debug, Clone)]
pub struct CpAprJob {
    /// The options of the model's loop (given initial factors in the run's units).
    pub options: CpAprOptions,
    /// The power of two the values run divided by, where their RMS is far below 1
    /// ([`AprScale`]); `λ` and the log-likelihoods come back in the given units.
    pub scale: Option<AprScale>,
    pub(super) dims: Vec<usize>,
    pub(super) nnz: usize,
    /// The run's tensor and what the given values' checks said, where scaled.
    pub(super) scaled: Option<ScaledRun>,
    /// The run's tensor with its mostly empty modes renumbered to their used rows,
    /// where that pays ([`UsedRows`]): what the run prepares and fits.
    pub rows: Option<UsedRows>,
}

impl CpAprRequest {
    /// The request with pyttb's defaults ([`CpAprOptions::default`]; rank 10, seed 0).
    pub fn defaults() -> Self {
        let o = CpAprOptions::default();
        CpAprRequest {
            rank: o.rank,
            iters: o.max_iters,
            inner: o.max_inner,
            tol: o.tol,
            stoptime: o.max_seconds,
            eps: o.eps,
            kappa: o.kappa,
            kappa_tol: o.kappa_tol,
            seed: o.seed,
            init: None,
            non_integer: o.non_integer,
        }
    }

    /// The checks that need no tensor.
    pub fn check(&self) -> Result<()> {
        rank_at_least("rank", self.rank)?;
        at_least_one("iters", self.iters)?;
        check_tol(self.tol)?;
        at_least_one("inner", self.inner)?;
        if self.stoptime.is_nan() || self.stoptime <= 0.0 {
            return Err(Error::InvalidOption(format!(
                "stoptime must be > 0, got {}",
                self.stoptime
            )));
        }
        Ok(())
    }

    /// Every check of the request against `x`; the run to do (on values far below 1
    /// multiplied by a power of two, [`ScaledRun`]).
    pub fn validate(self, x: &CooTensor) -> Result<CpAprJob> {
        let mut job = self.validate_shape(x.dims(), x.nnz() as u64)?;
        if let Some(run) = ScaledRun::of(x, job.options.non_integer)? {
            run.adapt(&mut job.options)?;
            job.scale = Some(run.scale);
            job.scaled = Some(run);
        }
        let run_on = job.scaled.as_ref().map_or(x, |run| &run.tensor);
        job.rows = UsedRows::of(run_on, job.options.rank)?;
        Ok(job)
    }

    /// [`CpAprRequest::validate`] against a tensor known by its extents and nonzeros
    /// (one split over processes, which no process holds whole).
    pub fn validate_shape(self, dims: &[usize], nnz: u64) -> Result<CpAprJob> {
        self.check()?;
        let options = CpAprOptions {
            rank: self.rank,
            max_iters: self.iters,
            max_inner: self.inner,
            tol: self.tol,
            max_seconds: self.stoptime,
            eps: self.eps,
            kappa: self.kappa,
            kappa_tol: self.kappa_tol,
            seed: self.seed,
            init: self.init,
            non_integer: self.non_integer,
        };
        options.validate(dims)?;
        Ok(CpAprJob {
            options,
            scale: None,
            dims: dims.to_vec(),
            nnz: nnz as usize,
            scaled: None,
            rows: None,
        })
    }
}

/// A tensor completion run as a user asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    /// The number of components.
    pub rank: usize,
    /// The solver.
    pub solver: Solver,
    /// The regularization `λ`; `None`: chosen on the validation entries (a short path
    /// over a grid derived from the data).
    pub lambda: Option<f64>,
    /// The most epochs.
    pub epochs: usize,
    /// Epochs without a lower validation RMSE that stop the run.
    pub patience: usize,
    /// The seed of the initial factors and of SGD's order.
    pub seed: u64,
    /// SGD's initial learning rate; `None`: from the values' spread and the rank.
    pub learning_rate: Option<f64>,
    /// CCD++'s sweeps per column.
    pub ccd_inner: usize,
    /// Whether the model adds the training mean.
    pub center: bool,
    /// Whether the model learns a bias per row of every mode.
    pub biases: bool,
    /// The biases' regularization, in pseudo-entries.
    pub bias_lambda: f64,
}

/// A validated completion run: its options and the validation entries it stops on.
#[derive(Debug, Clone)]
pub struct CompletionJob<'a> {
    /// The options of the model's loop.
    pub options: CompletionOptions,
    pub(super) dims: Vec<usize>,
    /// The training entries.
    pub(super) nnz: usize,
    pub(super) validation: &'a CooTensor,
    /// The mean and bias baselines, fitted to the training entries.
    pub baselines: Baselines,
    /// The modes with many rows without training entries renumbered to the others:
    /// the run's tensor, where there are such modes (of the scaled values, where
    /// `scale` is set).
    pub compaction: Option<Compaction>,
    /// The power of two the run multiplies the values by, where their spread is far
    /// from 1 ([`ValueScale`]); the model and every RMSE come back in the given units.
    pub scale: Option<ValueScale>,
    /// The training and validation entries times `scale`, where it is set and no
    /// compaction holds them.
    pub(super) scaled: Option<(CooTensor, CooTensor)>,
}

impl CompletionRequest {
    /// The request with every option at its default: rank 16, ALS, λ chosen on
    /// validation, 100 epochs, patience 5, seed 1, SGD's rate from the data, one CCD++
    /// sweep, centered, biases regularized by 5 pseudo-entries.
    pub fn defaults() -> Self {
        let o = CompletionOptions::default();
        CompletionRequest {
            rank: o.rank,
            solver: o.solver,
            lambda: o.lambda,
            epochs: o.max_epochs,
            patience: o.patience,
            seed: 1,
            learning_rate: o.learning_rate,
            ccd_inner: o.ccd_inner,
            center: o.center,
            biases: o.biases,
            bias_lambda: o.bias_lambda,
        }
    }

    /// The options of the model's loop (without initial factors).
    fn options(&self) -> CompletionOptions {
        CompletionOptions {
            rank: self.rank,
            solver: self.solver,
            lambda: self.lambda,
            max_epochs: self.epochs,
            patience: self.patience,
            seed: self.seed,
            learning_rate: self.learning_rate,
            ccd_inner: self.ccd_inner,
            init: None,
            center: self.center,
            biases: self.biases,
            bias_lambda: self.bias_lambda,
        }
    }

    /// The checks that need no tensor.
    pub fn check(&self) -> Result<()> {
        rank_at_least("rank", self.rank)?;
        at_least_one("epochs", self.epochs)?;
        at_least_one("patience", self.patience)?;
        at_least_one("ccd_inner", self.ccd_inner)?;
        // λ and the learning rate, in the model's own words.
        self.options().validate()
    }

    /// Every check of the request against the training entries `train`; the run to
    /// do, stopping on the RMSE over `validation`.
    pub fn validate<'a>(
        &self,
        train: &CooTensor,
        validation: &'a CooTensor,
    ) -> Result<CompletionJob<'a>> {
        self.check()?;
        if train.nnz() == 0 {
            return Err(Error::InvalidOption("no training entries".into()));
        }
        let scale = ValueScale::of(train, self.center)?;
        let mut scaled = match scale {
            Some(s) => Some((s.tensor(train)?, s.tensor(validation)?)),
            None => None,
        };
        let (run_train, run_validation) = match &scaled {
            Some((t, v)) => (t, v),
            None => (train, validation),
        };
        // Extents that differ are refused by the fit, in its words.
        let compaction = if validation.dims() == train.dims() {
            Compaction::of(run_train, run_validation)?
        } else {
            None
        };
        if compaction.is_some() {
            // The compaction holds its own copies of the scaled entries.
            scaled = None;
        }
        Ok(CompletionJob {
            options: self.options(),
            dims: train.dims().to_vec(),
            nnz: train.nnz(),
            validation,
            baselines: Baselines::fit(train)?,
            compaction,
            scale,
            scaled,
        })
    }
}

#[cfg(test)]
mod tests;
