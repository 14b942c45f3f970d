//! CP-APR's options and their checks.

use crate::decomp::check_common;
use crate::error::{Error, Result};
use crate::matrix::Matrix;

/// What to do with tensor values that are not integers (Poisson assumes counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NonInteger {
    /// Run, with a warning in [`CpAprModel::warnings`](super::CpAprModel::warnings) saying how many there are.
    #[default]
    Warn,
    /// Refuse the tensor ([`Error::InvalidTensor`]).
    Error,
    /// Run without a word: the caller has checked the values (a run on values in
    /// other units than the user's, [`super::units`]).
    Allow,
}

/// Options of [`cp_apr()`](super::cp_apr()), named after and defaulting to pyttb's (see the
/// [module documentation](super)).
#[derive(Debug, Clone, PartialEq)]
pub struct CpAprOptions {
    /// Number of components `R` (≥ 1).
    pub rank: usize,
    /// Most outer iterations (≥ 1; pyttb `maxiters`).
    pub max_iters: usize,
    /// Most multiplicative updates of one mode per outer iteration (≥ 1; pyttb
    /// `maxinneriters`).
    pub max_inner: usize,
    /// KKT-violation tolerance: a mode stops its updates once its violation is below
    /// this, and the run once no mode updated (≥ 0; 0 runs every iteration; pyttb
    /// `stoptol`).
    pub tol: f64,
    /// Stop after the first iteration that ends later than this many seconds after the
    /// start (> 0; pyttb `stoptime`).
    pub max_seconds: f64,
    /// The floor `ε` of the model value in `x / max(m, ε)` (> 0, at least f32's
    /// smallest normal number; pyttb `epsDivZero`).
    pub eps: f64,
    /// What is added to an inadmissible zero (≥ 0; pyttb `kappa`).
    pub kappa: f64,
    /// Entries below this whose `Φ` is positive are inadmissible zeros (≥ 0; pyttb
    /// `kappatol`).
    pub kappa_tol: f64,
    /// Seed of the random initial factors (ignored when `init` is given).
    pub seed: u64,
    /// Initial factors, one nonnegative `I_m × R` matrix per mode; `None` draws them
    /// from `seed`.
    pub init: Option<Vec<Matrix>>,
    /// What a value that is not an integer does.
    pub non_integer: NonInteger,
}

impl Default for CpAprOptions {
    /// pyttb's defaults with rank 10 and seed 0.
    fn default() -> Self {
        CpAprOptions {
            rank: 10,
            max_iters: 1000,
            max_inner: 10,
            tol: 1e-4,
            max_seconds: 1e6,
            eps: 1e-10,
            kappa: 0.01,
            kappa_tol: 1e-10,
            seed: 0,
            init: None,
            non_integer: NonInteger::Warn,
        }
    }
}

impl CpAprOptions {
    /// The defaults with the given rank.
    pub fn with_rank(rank: usize) -> Self {
        CpAprOptions {
            rank,
            ..Self::default()
        }
    }

    /// Checks the options against a tensor with extents `dims`.
    pub fn validate(&self, dims: &[usize]) -> Result<()> {
        if self.rank == 0 {
            return Err(Error::InvalidRank("CP-APR rank must be at least 1".into()));
        }
        if let Some(m) = dims.iter().position(|d| d.checked_mul(self.rank).is_none()) {
            return Err(Error::InvalidRank(format!(
                "rank {} times mode {m}'s length {} overflows",
                self.rank, dims[m]
            )));
        }
        check_common(self.max_iters, self.tol)?;
        if !self.tol.is_finite() {
            return Err(Error::InvalidOption(format!(
                "tol must be finite, got {}",
                self.tol
            )));
        }
        if self.max_inner == 0 {
            return Err(Error::InvalidOption("max_inner must be at least 1".into()));
        }
        if self.max_seconds.is_nan() || self.max_seconds <= 0.0 {
            return Err(Error::InvalidOption(format!(
                "max_seconds must be > 0, got {}",
                self.max_seconds
            )));
        }
        if !(self.eps.is_finite() && self.eps >= f64::from(f32::MIN_POSITIVE)) {
            return Err(Error::InvalidOption(format!(
                "eps must be a finite number ≥ {:e} (f32's smallest normal number), got {}",
                f32::MIN_POSITIVE,
                self.eps
            )));
        }
        for (name, v) in [("kappa", self.kappa), ("kappa_tol", self.kappa_tol)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::InvalidOption(format!(
                    "{name} must be a finite number ≥ 0, got {v}"
                )));
            }
        }
        if let Some(init) = &self.init {
            check_init(init, dims, self.rank)?;
        }
        Ok(())
    }

    /// The initial factors: `init` if given, otherwise `Matrix::random(I_m, R, seed + m)`
    /// for every mode `m`.
    pub fn initial_factors(&self, dims: &[usize]) -> Vec<Matrix> {
        match &self.init {
            Some(f) => f.clone(),
            None => Matrix::random_factors(dims, &vec![self.rank; dims.len()], self.seed),
        }
    }
}

/// Checks user-given initial factors: one per mode of shape `dims[m] × rank`, finite,
/// nonnegative, none all zero.
fn check_init(init: &[Matrix], dims: &[usize], rank: usize) -> Result<()> {
    if init.len() != dims.len() {
        return Err(Error::shape(
            "initial factors",
            format!("{} matrices (one per mode)", dims.len()),
            format!("{} matrices", init.len()),
        ));
    }
    for (m, f) in init.iter().enumerate() {
        if f.shape() != (dims[m], rank) {
            return Err(Error::shape(
                format!("initial factor of mode {m}"),
                format!("{}×{rank}", dims[m]),
                format!("{}×{}", f.rows(), f.cols()),
            ));
        }
        let at = |p: usize| format!("entry ({}, {})", p / rank, p % rank);
        if let Some(p) = f.data().iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite(format!(
                "initial factor of mode {m}, {} is {}",
                at(p),
                f.data()[p]
            )));
        }
        if let Some(p) = f.data().iter().position(|&v| v < 0.0) {
            return Err(Error::InvalidOption(format!(
                "initial factor of mode {m}, {} is {}: CP-APR's factors are nonnegative",
                at(p),
                f.data()[p]
            )));
        }
        if f.data().iter().all(|&v| v == 0.0) {
            return Err(Error::InvalidOption(format!(
                "initial factor of mode {m} is all zero; the model would stay zero"
            )));
        }
    }
    Ok(())
}
