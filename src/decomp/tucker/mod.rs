//! Tucker-HOOI: a Tucker model `X ≈ G ×₀ U₀ ×₁ U₁ … ×_{N−1} U_{N−1}` with orthonormal
//! factors `U_m` (`I_m × R_m`) by higher-order orthogonal iteration.
//!
//! Per iteration, for each mode `n = 0, 1, …, N−1` in turn:
//!
//! 1. `Y_(n) = X_(n) (⊗_{m≠n} U_m)` — the TTMc, on the engine (f32), `I_n × Π_{m≠n} R_m`;
//! 2. `U_n` = the `R_n` leading left singular vectors of `Y_(n)`, from the
//!    eigendecomposition of its smaller Gram, never an SVD of `Y_(n)`
//!    (`super::leading`): `Y_(n)Y_(n)ᵀ` when `I_n ≤ Π_{m≠n} R_m` (its leading
//!    eigenvectors are `U_n`), otherwise `Y_(n)ᵀY_(n)`, whose leading eigenvectors are
//!    mapped back through `Y_(n)` and made orthonormal by Cholesky QR.
//!
//! The core comes from the last mode's TTMc: `G_(N−1) = U_{N−1}ᵀ Y_(N−1)`, and
//! `fit = 1 − sqrt(‖X‖² − ‖G‖²) / ‖X‖` (exact for orthonormal factors), with `‖X‖²` of
//! the values as stored (those the TTMc saw; a difference below zero by rounding counts
//! as zero). Where that difference is within ten times the backend's rounding of zero,
//! it is taken again in f64 from the stored values (one pass over the nonzeros, about
//! one TTMc's work; see `residual`).
//!
//! Initial factors, unless given: mode `m` is the orthonormal `Q` of a QR (Cholesky QR
//! twice: `R` with a positive diagonal) of `Matrix::random(I_m, R_m, seed + m)`
//! (uniform in `[0, 1)`; wrapping add), drawn and made orthonormal a row block at a
//! time, never held in f64 (`start`); mode 0's is not drawn for a run. Given
//! initial factors are used as they are, not orthonormalized (as pyttb's `tucker_als`
//! does), so a peer fed the same matrices takes the same path — scaled by a power of
//! two where their largest entry is below 2⁻¹⁶ or above 2¹⁶, as CP-ALS scales its own
//! (the subspaces, all HOOI reads, do not change; the f32 TTMc no longer under- or
//! overflows). Mode 0's initial factor is never read: the first update of mode 0 uses
//! only the others.
//!
//! A core that collapsed to zero for a nonzero tensor is an error, never a model of
//! fit 0 returned as a success.

use super::dense::{at_b, orthonormalize};
use super::leading::leading_left_singular;
use super::{
    IterClock, IterStats, check_common, check_finite, check_init, check_tensor, fit_from, residual,
    residual_rounding,
};
use crate::engine::{Call, Engine, Prepared};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::Op;
use std::ops::ControlFlow;

mod rows;
mod start;
pub use rows::tucker_hooi_on_rows;

/// Options of [`tucker_hooi`].
#[derive(Debug, Clone, PartialEq)]
pub struct TuckerOptions {
    /// Rank `R_m` of every mode: one per mode, `1 ≤ R_m ≤ I_m`, and no larger than the
    /// product of the other modes' ranks (a larger one could not be used by the core).
    pub ranks: Vec<usize>,
    /// Most iterations to run (≥ 1).
    pub max_iters: usize,
    /// Stop after an iteration (not the first) whose fit changed by less than this
    /// (≥ 0; 0 runs all `max_iters`).
    pub tol: f64,
    /// Seed of the random initial factors (ignored when `init` is given).
    pub seed: u64,
    /// Initial factors, one `I_m × R_m` matrix per mode; `None` draws them from `seed`.
    pub init: Option<Vec<Matrix>>,
}

impl Default for TuckerOptions {
    /// No ranks (set them), at most 50 iterations, `tol = 1e-5`, seed 0, random
    /// orthonormal initialization.
    fn default() -> Self {
        TuckerOptions {
            ranks: Vec::new(),
            max_iters: 50,
            tol: 1e-5,
            seed: 0,
            init: None,
        }
    }
}

impl TuckerOptions {
    /// The defaults with the given ranks.
    pub fn with_ranks(ranks: Vec<usize>) -> Self {
        TuckerOptions {
            ranks,
            ..Self::default()
        }
    }

    /// Checks the options against a tensor with extents `dims`.
    pub fn validate(&self, dims: &[usize]) -> Result<()> {
        if self.ranks.len() != dims.len() {
            return Err(Error::InvalidRank(format!(
                "Tucker needs one rank per mode (or one for every mode): {} ranks for a tensor of order {}",
                self.ranks.len(),
                dims.len()
            )));
        }
        for (m, (&r, &d)) in self.ranks.iter().zip(dims).enumerate() {
            if r == 0 || r > d {
                return Err(Error::InvalidRank(format!(
                    "rank of mode {m} is {r}; it must be between 1 and the mode's length {d}"
                )));
            }
            let others = self
                .ranks
                .iter()
                .enumerate()
                .filter(|&(k, _)| k != m)
                .try_fold(1usize, |acc, (_, &x)| acc.checked_mul(x))
                .ok_or_else(|| {
                    Error::InvalidRank(format!(
                        "the product of the ranks other than mode {m}'s overflows"
                    ))
                })?;
            if others.checked_mul(d).is_none() {
                return Err(Error::InvalidRank(format!(
                    "the TTMc output of mode {m} ({d} × {others}) is too large to address"
                )));
            }
            if r > others {
                return Err(Error::InvalidRank(format!(
                    "rank of mode {m} is {r}, more than the product of the other ranks \
                     ({others}); the core could not use it"
                )));
            }
        }
        check_common(self.max_iters, self.tol)?;
        if let Some(init) = &self.init {
            check_init(init, dims, &self.ranks)?;
        }
        Ok(())
    }

    /// The initial factors: `init` if given, otherwise the orthonormalized
    /// `Matrix::random(I_m, R_m, seed + m)` for every mode `m`.
    pub fn initial_factors(&self, dims: &[usize]) -> Vec<Matrix> {
        self.start(dims, true)
    }

    /// [`Self::initial_factors`], with mode 0's drawn one zero unless `mode_0`: a run
    /// never reads it.
    fn start(&self, dims: &[usize], mode_0: bool) -> Vec<Matrix> {
        match &self.init {
            Some(f) => f.clone(),
            None => (dims.iter().zip(&self.ranks).enumerate())
                .map(|(m, (&d, &r))| match m {
                    0 if !mode_0 => Matrix::zeros(d, r),
                    _ => drawn_start(d, r, self.seed.wrapping_add(m as u64)),
                })
                .collect(),
        }
    }
}

/// A drawn start of `rows × cols`: the orthonormalized `Matrix::random(rows, cols,
/// seed)`, drawn on the fly ([`start`]), or [`householder_start`] where its columns
/// are numerically dependent.
fn drawn_start(rows: usize, cols: usize, seed: u64) -> Matrix {
    start::drawn(rows, cols, seed, None, rows, 0.0..f32::INFINITY)
        .unwrap_or_else(|| householder_start(rows, cols, seed))
}

/// The draw of [`drawn_start`] held whole and made orthonormal by a Householder QR, for
/// a draw whose columns Cholesky QR cannot take.
fn householder_start(rows: usize, cols: usize, seed: u64) -> Matrix {
    orthonormalize(&Matrix::random(rows, cols, seed).to_f64()).to_f32()
}

/// Scales an initial factor by a power of two where its largest entry is below 2⁻¹⁶
/// or above 2¹⁶ (module docs).
fn scale_start(f: &mut Matrix) {
    super::cp_als::rescale_to_unit(f, start_range());
}

/// Where [`scale_start`] leaves a start's largest entry.
fn start_range() -> std::ops::Range<f32> {
    2f32.powi(-16)..2f32.powi(16)
}

/// A Tucker model and how it was reached.
#[derive(Debug, Clone, PartialEq)]
pub struct TuckerModel {
    /// The core tensor, row-major over `core_dims` (the last mode varies fastest):
    /// entry `(r_0, …, r_{N−1})` sits at `((r_0·R_1 + r_1)·R_2 + …)·R_{N−1} + r_{N−1}`.
    pub core: Vec<f64>,
    /// The core's extents `(R_0, …, R_{N−1})`.
    pub core_dims: Vec<usize>,
    /// One `I_m × R_m` factor per mode with orthonormal columns.
    pub factors: Vec<Matrix>,
    /// The fit after each iteration.
    pub fits: Vec<f64>,
    /// Statistics of each iteration.
    pub iters: Vec<IterStats>,
}

impl TuckerModel {
    /// The final fit (`None` only for a model that ran no iteration).
    pub fn fit(&self) -> Option<f64> {
        self.fits.last().copied()
    }

    /// The model's value at `coords`: `Σ_r G[r] Π_m U_m[i_m, r_m]` (cost `Π R_m`).
    pub fn entry(&self, coords: &[usize]) -> Result<f64> {
        let order = self.core_dims.len();
        if coords.len() != order {
            return Err(Error::shape("coordinates", order, coords.len()));
        }
        for (m, (&i, f)) in coords.iter().zip(&self.factors).enumerate() {
            if i >= f.rows() {
                return Err(Error::InvalidOption(format!(
                    "index {i} in mode {m} is beyond its length {}",
                    f.rows()
                )));
            }
        }
        // Contract the core with one factor row per mode, last mode first.
        let mut cur = self.core.clone();
        for m in (0..order).rev() {
            let r = self.core_dims[m];
            let row = self.factors[m].row(coords[m]);
            cur = cur
                .chunks(r)
                .map(|c| c.iter().zip(row).map(|(&g, &u)| g * u as f64).sum())
                .collect();
        }
        Ok(cur.first().copied().unwrap_or(0.0))
    }
}

/// Tucker-HOOI of the prepared tensor `x` (prepared for [`Op::Ttmc`])
/// on `engine`; see the [module documentation](self) for the algorithm.
pub fn tucker_hooi(engine: &Engine, x: &Prepared, opts: &TuckerOptions) -> Result<TuckerModel> {
    tucker_hooi_with_progress(engine, x, opts, &mut |_| {})
}

/// [`tucker_hooi`], calling `progress` after every iteration (e.g. to print a line).
pub fn tucker_hooi_with_progress(
    engine: &Engine,
    x: &Prepared,
    opts: &TuckerOptions,
    progress: &mut dyn FnMut(&IterStats),
) -> Result<TuckerModel> {
    tucker_hooi_with_control(engine, x, opts, &mut |s| {
        progress(s);
        ControlFlow::Continue(())
    })
}

/// [`tucker_hooi`], calling `control` after every iteration; when it returns
/// [`ControlFlow::Break`], the run stops there as if it had converged, and the model of
/// the iterations done so far (factors and core of the last one) is returned.
pub fn tucker_hooi_with_control(
    engine: &Engine,
    x: &Prepared,
    opts: &TuckerOptions,
    control: &mut dyn FnMut(&IterStats) -> ControlFlow<()>,
) -> Result<TuckerModel> {
    let norm_sq = check_tensor(x, Op::Ttmc)?;
    let dims = x.dims().to_vec();
    opts.validate(&dims)?;
    crate::memplan::MemoryPlan::tucker(&dims, &opts.ranks, rayon::current_num_threads())
        .reserve_for_workers(engine.workers())
        .check()?;
    let order = dims.len();

    let mut factors = opts.start(&dims, false);
    factors.iter_mut().for_each(scale_start);
    let mut core = Vec::new();
    let mut fits = Vec::new();
    let mut iters = Vec::new();
    let mut fit_old = 0.0;

    // One kernel output for every mode, reused: allocated for the largest mode once
    // (an output per mode held them all at once, the sum of the modes' outputs).
    let mut largest = 0;
    for n in 0..order {
        let (rows, cols) = crate::ops::output_shape(Op::Ttmc, &dims, n, &factors)?;
        largest = largest.max(rows * cols);
    }
    crate::matrix::check_alloc("the TTMc output", largest, 1, 4)?;
    let mut y = Matrix::zeros(1, largest);
    // Which factors changed since the last call, so a device that keeps copies uploads
    // only the one the previous step replaced.
    let mut versions = engine.factor_versions(order);
    for it in 0..opts.max_iters {
        let mut clock = IterClock::start();
        for n in 0..order {
            let call = Call {
                check_finite: false, // checked next, naming the iteration
                versions: Some(&versions),
                ..Call::default()
            };
            clock.kernel(|| engine.run_into_with(Op::Ttmc, x, n, &factors, &call, &mut y))?;
            check_finite(&y, || format!("TTMc of mode {n} in iteration {it}"))?;
            // Reductions widen f32 rows to f64 block by block: no f64 copy of `y`. It may
            // keep only its nonzero rows, the vectors' rows those.
            let lead = clock.linalg(|| leading_left_singular(&mut y, opts.ranks[n]))?;
            if n == order - 1 {
                // G_(N−1) = Uᵀ Y: R_{N−1} × Π_{m<N−1} R_m, columns in row-major order of
                // modes 0..N−2; transposing gives the core row-major with the last mode
                // fastest. (Rows `y` dropped are zero in both.)
                let g = clock.linalg(|| at_b(&lead.u, &y));
                core = Matrix::from_fn(g.ncols(), g.nrows(), |c, r| g[(r, c)]).into_data();
            }
            factors[n] = lead.spread().to_f32();
            versions.changed(n);
        }
        let core_sq: f64 = core.iter().map(|g| g * g).sum();
        let rounding = residual_rounding(engine);
        let mut resid_sq = norm_sq - core_sq;
        if resid_sq < residual::REFINE_WITHIN * rounding * norm_sq {
            // Lost in the rounding of the f32 TTMc: take it again from the stored
            // values in f64 (one pass over the nonzeros).
            resid_sq = residual::tucker(engine, x, Op::Ttmc, &core, &opts.ranks, &factors)?;
        }
        let fit = fit_from(norm_sq, resid_sq, rounding, || {
            format!("Tucker-HOOI iteration {it}")
        })?;
        let delta = fit - fit_old;
        let stats = clock.finish(it, fit, delta);
        fits.push(fit);
        iters.push(stats);
        if control(&stats).is_break() || (it > 0 && delta.abs() < opts.tol) {
            break;
        }
        fit_old = fit;
    }

    if norm_sq > 0.0 && core.iter().all(|&g| g == 0.0) {
        return Err(Error::Numerical(format!(
            "Tucker-HOOI collapsed to the zero model after {} iterations (the core is 0): the products of factor entries underflow f32 over the tensor's {order} modes",
            iters.len()
        )));
    }
    Ok(TuckerModel {
        core,
        core_dims: opts.ranks.clone(),
        factors,
        fits,
        iters,
    })
}
