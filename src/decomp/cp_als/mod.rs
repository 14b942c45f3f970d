//! CP-ALS: a rank-`R` CP model `X ≈ Σ_r λ_r a⁽⁰⁾_r ∘ … ∘ a⁽ᴺ⁻¹⁾_r` by alternating least
//! squares.
//!
//! Per iteration, for each mode `n = 0, 1, …, N−1` in turn:
//!
//! 1. `M = X_(n) (⊙_{m≠n} A_m)` — the MTTKRP, on the engine (f32);
//! 2. `A_n = M V⁺` with `V = ∗_{m≠n} A_mᵀA_m` (Hadamard product of the other Grams,
//!    `R × R`): Cholesky when `V` is positive definite, else the pseudo-inverse from its
//!    eigendecomposition ([`CpModel::pinv_solves`] counts those);
//! 3. column normalization into `λ`: by the column 2-norm in the first iteration, by
//!    `max(1, max_i |A_n[i, r]|)` afterwards — the choice of the MATLAB Tensor Toolbox
//!    and pyttb, which keeps the columns from shrinking toward zero while letting `λ`
//!    settle — except that a column whose entries are all below 1 is divided by the
//!    power of two that brings its largest into `(1/2, 1]` (exact, so the factors are
//!    pyttb's times powers of two; left as they were, entries as small as the
//!    tensor's values made the f32 products underflow: [`crate::engine::cp_max_norm`]).
//!    A column whose norm is 0 is left as it is (weight 0) rather than divided.
//!
//! After the sweep, with `λ` from the last mode's normalization,
//! `‖X̂‖² = λᵀ (∗_m A_mᵀA_m) λ` and `⟨X, X̂⟩ = Σ_r λ_r Σ_i M[i, r] A_{N−1}[i, r]` (`M` the
//! last mode's MTTKRP), so `fit = 1 − sqrt(‖X‖² + ‖X̂‖² − 2⟨X, X̂⟩) / ‖X‖`, with `‖X‖²`
//! of the values as stored (those the MTTKRP saw; a residual below zero by rounding
//! counts as zero), without rebuilding anything. Where that residual is within ten
//! times the backend's rounding of zero (an excellent fit, whose residual the f32
//! inner product cannot resolve), it is taken again in f64 from the stored values
//! (one pass over the nonzeros; see `residual`). So is the fit of the iteration the run
//! stops at (the f32 inner product leaves it about 1e-6 relative off on millions of
//! nonzeros): the final fit is the returned model's, to f64 rounding. The tolerance
//! test reads the f64 fit where it stops. A run stopped by its `control` callback keeps
//! the fit the callback saw (the estimate, where it was one): every recorded fit is the
//! one reported as it happened.
//!
//! The returned model is arranged: every column scaled to unit 2-norm (the scale folded
//! into `λ`) and components sorted by decreasing `λ`. That changes neither `X̂` nor the
//! fit. Signs are left as ALS produced them.
//!
//! Initial factors, unless given: mode `m` is `Matrix::random(I_m, R, seed + m)`
//! (uniform in `[0, 1)`, f32; wrapping add). Mode 0's initial factor is never read (the
//! first update of mode 0 uses only the others), as in pyttb. To give a peer the same
//! start, write these matrices out; `init = Some(…)` feeds them back exactly. Each
//! initial factor is first scaled by the power of two (exact) that brings its largest
//! entry nearest to 1: ALS's iterates do not depend on the factors' scale, but the f32 products of
//! the MTTKRP do (factors scaled by 1e-30 made every product zero and the model zero,
//! and random entries below 1 multiplied to zero over 100 modes).
//!
//! The driver runs a tensor whose modes are mostly empty rows on those modes' used
//! rows ([`UsedRows`](super::used_rows::UsedRows), [`cp_als_on_rows`]), with the same start and the same
//! iterates, and returns the model on every row.
//!
//! A model that collapsed to zero (every weight 0 for a nonzero tensor: products of
//! factor entries that underflow f32, as over very many modes) is an error, never a
//! model of fit 0 returned as a success.

mod rows;
mod update;

pub use rows::cp_als_on_rows;
pub(crate) use update::{RowSums, Update, finish, solve_rows};

use super::dense::{SolveKind, gram, inverse_spd};
use super::{
    IterClock, IterStats, check_common, check_finite, check_init, check_tensor, fit_from, residual,
    residual_rounding,
};
use crate::engine::{Call, ColumnMax, Engine, Prepared};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::Op;
use faer::Mat;
use rayon::prelude::*;
use std::ops::ControlFlow;
use update::update_factor;

/// Options of [`cp_als`].
#[derive(Debug, Clone, PartialEq)]
pub struct CpOptions {
    /// Number of components `R` (≥ 1).
    pub rank: usize,
    /// Most iterations to run (≥ 1).
    pub max_iters: usize,
    /// Stop after an iteration (not the first) whose fit changed by less than this
    /// (≥ 0; 0 runs all `max_iters`).
    pub tol: f64,
    /// Seed of the random initial factors (ignored when `init` is given).
    pub seed: u64,
    /// Initial factors, one `I_m × R` matrix per mode; `None` draws them from `seed`.
    pub init: Option<Vec<Matrix>>,
}

impl Default for CpOptions {
    /// Rank 10, at most 50 iterations, `tol = 1e-5`, seed 0, random initialization.
    fn default() -> Self {
        CpOptions {
            rank: 10,
            max_iters: 50,
            tol: 1e-5,
            seed: 0,
            init: None,
        }
    }
}

impl CpOptions {
    /// The defaults with the given rank.
    pub fn with_rank(rank: usize) -> Self {
        CpOptions {
            rank,
            ..Self::default()
        }
    }

    /// Checks the options against a tensor with extents `dims`.
    pub fn validate(&self, dims: &[usize]) -> Result<()> {
        if self.rank == 0 {
            return Err(Error::InvalidRank("CP rank must be at least 1".into()));
        }
        if let Some(m) = dims.iter().position(|d| d.checked_mul(self.rank).is_none()) {
            return Err(Error::InvalidRank(format!(
                "rank {} times mode {m}'s length {} overflows",
                self.rank, dims[m]
            )));
        }
        check_common(self.max_iters, self.tol)?;
        if let Some(init) = &self.init {
            check_init(init, dims, &vec![self.rank; dims.len()])?;
            // A zero column of a factor other than mode 0's keeps its component at
            // zero in every update.
            for (m, f) in init.iter().enumerate().skip(1) {
                if let Some(r) = (0..self.rank).find(|&r| (0..f.rows()).all(|i| f.get(i, r) == 0.0))
                {
                    return Err(Error::InvalidOption(format!(
                        "column {r} of the initial factor of mode {m} is all zero; its component would stay zero"
                    )));
                }
            }
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

/// A CP model and how it was reached.
#[derive(Debug, Clone, PartialEq)]
pub struct CpModel {
    /// `λ`, one weight per component, in decreasing order.
    pub weights: Vec<f64>,
    /// One `I_m × R` factor per mode, columns of unit 2-norm (or zero).
    pub factors: Vec<Matrix>,
    /// The fit after each iteration.
    pub fits: Vec<f64>,
    /// Statistics of each iteration.
    pub iters: Vec<IterStats>,
    /// How many of the per-mode solves fell back to the pseudo-inverse.
    pub pinv_solves: usize,
}

impl CpModel {
    /// The number of components.
    pub fn rank(&self) -> usize {
        self.weights.len()
    }

    /// The final fit (`None` only for a model that ran no iteration).
    pub fn fit(&self) -> Option<f64> {
        self.fits.last().copied()
    }

    /// The model's value at `coords`: `Σ_r λ_r Π_m A_m[i_m, r]`.
    pub fn entry(&self, coords: &[usize]) -> Result<f64> {
        super::kruskal_entry(&self.weights, &self.factors, coords)
    }
}

/// CP-ALS of the prepared tensor `x` (prepared for [`Op::Mttkrp`])
/// on `engine`; see the [module documentation](self) for the algorithm.
pub fn cp_als(engine: &Engine, x: &Prepared, opts: &CpOptions) -> Result<CpModel> {
    cp_als_with_progress(engine, x, opts, &mut |_| {})
}

/// [`cp_als`], calling `progress` after every iteration (e.g. to print a line).
pub fn cp_als_with_progress(
    engine: &Engine,
    x: &Prepared,
    opts: &CpOptions,
    progress: &mut dyn FnMut(&IterStats),
) -> Result<CpModel> {
    cp_als_with_control(engine, x, opts, &mut |s| {
        progress(s);
        ControlFlow::Continue(())
    })
}

/// [`cp_als`], calling `control` after every iteration; when it returns
/// [`ControlFlow::Break`], the run stops there as if it had converged, and the model of
/// the iterations done so far is returned (arranged like any other). This is how a
/// caller stops a long fit early: a user's callback, an interrupt, a time budget.
pub fn cp_als_with_control(
    engine: &Engine,
    x: &Prepared,
    opts: &CpOptions,
    control: &mut dyn FnMut(&IterStats) -> ControlFlow<()>,
) -> Result<CpModel> {
    opts.validate(x.dims())?;
    run_with(engine, x, opts, control, None)
}

/// [`cp_als_with_control`] once the options are checked, with `left_out` (where the
/// run is on a tensor's used rows, [`rows`]) the Gram of each initial factor's rows
/// left out, added to the Gram of the rows given before the first update; the initial
/// factors are then taken as scaled already.
fn run_with(
    engine: &Engine,
    x: &Prepared,
    opts: &CpOptions,
    control: &mut dyn FnMut(&IterStats) -> ControlFlow<()>,
    left_out: Option<&[Mat<f64>]>,
) -> Result<CpModel> {
    let norm_sq = check_tensor(x, Op::Mttkrp)?;
    run(engine, x, opts, control, norm_sq, left_out)
        .map_err(|e| super::with_overflow_hint(e, norm_sq))
}

/// [`run_with`] once the tensor is checked (`norm_sq`: `‖X‖²`).
fn run(
    engine: &Engine,
    x: &Prepared,
    opts: &CpOptions,
    control: &mut dyn FnMut(&IterStats) -> ControlFlow<()>,
    norm_sq: f64,
    left_out: Option<&[Mat<f64>]>,
) -> Result<CpModel> {
    let dims = x.dims().to_vec();
    let mut plan = crate::memplan::MemoryPlan::cp(&dims, opts.rank);
    if let crate::engine::Backend::Cpu(_) = engine.backend() {
        plan.add_padded_rank(&dims, opts.rank);
    }
    plan.reserve_for_workers(engine.workers()).check()?;
    let order = dims.len();
    let rank = opts.rank;

    // The factors live in f32, as the engine takes them; everything reduced over rows
    // (Grams, column norms, the fit's inner product) is accumulated in f64.
    let mut factors = opts.initial_factors(&dims);
    for f in factors.iter_mut().filter(|_| left_out.is_none()) {
        // Every initial factor, so that the entries of factors with one row each
        // (uniform in [0, 1)) do not multiply to an f32 underflow over many modes
        // (about e^-99 over 99), nor entries above 1 to an overflow: the first
        // iteration normalizes by the 2-norm, which takes a power of two out exactly,
        // so the iterates do not change.
        rescale_to_unit(f, 0.0..0.0);
    }
    let mut grams: Vec<Mat<f64>> = factors.iter().map(gram).collect();
    for (g, l) in grams.iter_mut().zip(left_out.unwrap_or_default()) {
        *g += l;
    }
    // Kept up to date by the updates, so the kernels need not scan the factors.
    let mut col_max = ColumnMax::of(&factors);
    // Which factors changed since the last call, so a device that keeps copies uploads
    // only the one the previous step updated.
    let mut versions = engine.factor_versions(order);
    let mut weights = vec![1.0f64; rank];
    let mut fits = Vec::new();
    let mut iters = Vec::new();
    let mut pinv_solves = 0;
    let mut fit_old = 0.0;

    // Where the backend keeps the factors itself (a GPU), it updates them there and
    // only R × R matrices cross the bus; else the update runs here on the host.
    let mut session = engine.cp_session(x, &factors)?;
    // Kernel outputs, one per mode, reused across iterations.
    let mut outputs: Vec<Matrix> = vec![Matrix::zeros(0, 0); order];
    for it in 0..opts.max_iters {
        let mut clock = IterClock::start();
        let mut inner = Vec::new();
        for n in 0..order {
            let last = n == order - 1;
            if let Some(s) = session.as_mut() {
                let w = clock.linalg(|| -> Result<Vec<f64>> {
                    let (w, kind) = inverse_spd(&hadamard_except(&grams, n, rank))?;
                    if kind == SolveKind::PseudoInverse {
                        pinv_solves += 1;
                    }
                    Ok((0..rank * rank).map(|k| w[(k / rank, k % rank)]).collect())
                })?;
                let mut step = None;
                clock.kernel(|| {
                    let st = s.update(n, &w, it == 0, last)?;
                    let stats = st.stats;
                    step = Some(st);
                    Ok(stats)
                })?;
                let step = step.expect("set by the successful update");
                weights = step.norms;
                grams[n] = Mat::from_fn(rank, rank, |i, j| step.gram[i * rank + j]);
                if last {
                    inner = step.inner;
                }
                continue;
            }
            let m = &mut outputs[n];
            // The update widens the result and checks its finiteness as it goes.
            let call = Call {
                col_max: Some(&col_max),
                check_finite: false,
                versions: Some(&versions),
                ..Call::default()
            };
            clock.kernel(|| engine.run_into_with(Op::Mttkrp, x, n, &factors, &call, m))?;
            let m = &outputs[n];
            let a = &mut factors[n];
            let update = clock.linalg(|| -> Result<Option<Update>> {
                let v = hadamard_except(&grams, n, rank);
                let (w, kind) = inverse_spd(&v)?;
                if kind == SolveKind::PseudoInverse {
                    pinv_solves += 1;
                }
                update_factor(m, &w, a, it == 0, last)
            })?;
            let Some(update) = update else {
                // check_finite names the entry.
                check_finite(m, || format!("MTTKRP of mode {n} in iteration {it}"))?;
                return Err(Error::NonFinite(format!(
                    "MTTKRP of mode {n} in iteration {it}"
                )));
            };
            versions.changed(n);
            weights = update.norms;
            grams[n] = update.gram;
            col_max.max[n] = update.col_max;
            if last {
                inner = update.inner;
            }
        }
        let rounding = residual_rounding(engine);
        let estimate = cp_residual(norm_sq, &weights, &grams, &inner);
        let fit_of = |r: f64| fit_from(norm_sq, r, rounding, || format!("CP-ALS iteration {it}"));
        // Taken again in f64 from the stored values (one pass over the nonzeros) where
        // the residual is lost in the rounding of the kernel's inner product, and for
        // the fit the run stops at: the f32 inner product leaves that about 1e-6
        // relative off on millions of nonzeros.
        let exact = estimate < residual::REFINE_WITHIN * rounding * norm_sq
            || it + 1 == opts.max_iters
            || (it > 0 && (fit_of(estimate)? - fit_old).abs() < opts.tol);
        let resid_sq = if exact {
            let host;
            let f = match session.as_mut() {
                Some(s) => {
                    host = s.factors()?;
                    &host
                }
                None => &factors,
            };
            residual::cp(engine, x, Op::Mttkrp, &weights, f)?
        } else {
            estimate
        };
        let fit = fit_of(resid_sq)?;
        let delta = fit - fit_old;
        let stats = clock.finish(it, fit, delta);
        fits.push(fit);
        iters.push(stats);
        if control(&stats).is_break() || (it > 0 && delta.abs() < opts.tol) {
            break;
        }
        fit_old = fit;
    }

    if let Some(s) = session.as_mut() {
        factors = s.factors()?;
    }
    // The MTTKRP outputs are not needed past here: free them before the model is made.
    drop(outputs);
    let (weights, factors) = arrange(weights, factors);
    if norm_sq > 0.0 && weights.iter().all(|&w| w == 0.0) {
        return Err(Error::Numerical(format!(
            "CP-ALS collapsed to the zero model after {} iterations (every weight is 0, or its factor columns are): the products of factor entries underflow f32 over the tensor's {order} modes, or the initial factors hold no usable column",
            iters.len()
        )));
    }
    Ok(CpModel {
        weights,
        factors,
        fits,
        iters,
        pinv_solves,
    })
}

/// `∗_{m≠n} G_m`, starting from the all-ones matrix.
pub(crate) fn hadamard_except(grams: &[Mat<f64>], n: usize, rank: usize) -> Mat<f64> {
    Mat::from_fn(rank, rank, |i, j| {
        grams
            .iter()
            .enumerate()
            .filter(|&(m, _)| m != n)
            .map(|(_, g)| g[(i, j)])
            .product()
    })
}

/// Scales `a` by the power of two nearest to `1 / m`, `m` its largest entry in
/// magnitude (so that `m` lands in `[2^-½, 2^½)`; exactly: only the exponents change),
/// when `m` is not 0 and lies outside `keep`; any other `a` is left bit for bit. One
/// factor for the whole matrix, so that neither CP-ALS nor HOOI (whose subspaces a
/// per-column scale would turn) take another path.
pub(crate) fn rescale_to_unit(a: &mut Matrix, keep: std::ops::Range<f32>) {
    // In parallel: a long mode's factor is hundreds of MB. The maximum is exact in any
    // order (a NaN is passed over either way).
    let m = (a.data().par_chunks(RESCALE_CHUNK))
        .map(|c| c.iter().fold(0.0f32, |m, v| m.max(v.abs())))
        .reduce(|| 0.0, f32::max);
    rescale_by_max(a, m, keep);
}

/// Entries per task of the rescaling passes.
const RESCALE_CHUNK: usize = 1 << 16;

/// [`rescale_to_unit`] with `m` the largest magnitude of a matrix of which `a` holds
/// some rows (rows spread over processes scale alike).
pub(crate) fn rescale_by_max(a: &mut Matrix, m: f32, keep: std::ops::Range<f32>) {
    if m == 0.0 || !m.is_finite() || keep.contains(&m) {
        return;
    }
    // Multiply by 2^-e, in two powers of two applied in turn so that neither over- nor
    // underflows (m = 2^-149 needs 2^149 in all).
    let e = f64::from(m).log2().round() as i32;
    if e == 0 {
        return;
    }
    let half = -e / 2;
    let (s1, s2) = (2f32.powi(half), 2f32.powi(-e - half));
    a.data_mut().par_chunks_mut(RESCALE_CHUNK).for_each(|c| {
        for v in c {
            *v = *v * s1 * s2;
        }
    });
}

/// `‖X − X̂‖² = ‖X‖² + ‖X̂‖² − 2⟨X, X̂⟩` from `‖X‖²`, `λ`, the Grams and
/// `inner[r] = Σ_i M[i, r] A[i, r]` of the last mode (its MTTKRP `M` and normalized
/// factor `A`).
pub(crate) fn cp_residual(norm_sq: f64, weights: &[f64], grams: &[Mat<f64>], inner: &[f64]) -> f64 {
    let model_sq = residual::cp_model_norm_sq(weights, grams);
    let inner: f64 = inner.iter().zip(weights).map(|(c, w)| c * w).sum();
    norm_sq + model_sq - 2.0 * inner
}

/// Scales every column to unit 2-norm (into the weights) and sorts the components by
/// decreasing weight (stable, so ties keep their order), in place. The norms are summed
/// in f64 row by row and each entry is scaled in f64, then rounded once to f32: the
/// values of the f64 copy this replaces, without its memory (twice the factors').
pub(crate) fn arrange(mut weights: Vec<f64>, mut factors: Vec<Matrix>) -> (Vec<f64>, Vec<Matrix>) {
    let r = weights.len();
    let mut scales = Vec::with_capacity(factors.len());
    for f in &factors {
        let norms = column_norms(f);
        for (w, n) in weights.iter_mut().zip(&norms) {
            *w *= n;
        }
        let inv: Vec<f64> = norms
            .iter()
            .map(|&w| if w > 0.0 { 1.0 / w } else { 1.0 })
            .collect();
        scales.push(inv);
    }
    let mut perm: Vec<usize> = (0..r).collect();
    perm.sort_by(|&i, &j| weights[j].total_cmp(&weights[i]));
    let weights = perm.iter().map(|&p| weights[p]).collect();
    for (f, inv) in factors.iter_mut().zip(&scales) {
        debug_assert_eq!(f.cols(), r, "one column per component");
        if r == 0 {
            continue;
        }
        f.data_mut()
            .par_chunks_mut(r)
            .with_min_len(1024)
            .for_each_init(
                || vec![0f32; r],
                |row_out, row| {
                    for (o, &p) in row_out.iter_mut().zip(&perm) {
                        *o = (f64::from(row[p]) * inv[p]) as f32;
                    }
                    row.copy_from_slice(row_out);
                },
            );
    }
    (weights, factors)
}

/// The 2-norm of every column of `a`, summed in f64 row by row.
fn column_norms(a: &Matrix) -> Vec<f64> {
    let r = a.cols();
    let mut norms = vec![0.0f64; r];
    for row in a.data().chunks(r.max(1)) {
        for (acc, &v) in norms.iter_mut().zip(row) {
            let v = f64::from(v);
            *acc += v * v;
        }
    }
    for w in &mut norms {
        *w = w.sqrt();
    }
    norms
}
