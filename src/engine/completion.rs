//! The tensor-completion kernels of the engine ([`Op::Completion`]), run through a
//! [`CompletionSession`] that keeps the factors (and CCD++'s residual) where the
//! kernels run: host memory on the CPU, device memory on CUDA.
//!
//! Completion fits a CP model `m(i) = μ + Σ_r Π_n A⁽ⁿ⁾[i_n, r]` to the *observed*
//! entries only (`μ` is the session's `offset`, e.g. the training mean; every stored
//! entry is observed, an explicit zero included). Each kernel is one pass over the
//! stored nonzeros of the HLS form, sparse part and dense tiles alike:
//!
//! - [`CompletionSession::normal_equations`] (ALS): for every row `i` of the target
//!   mode `n`, `G_i = Σ k kᵀ` and `b_i = Σ (x − μ) k` over the row's nonzeros, `k` the
//!   Hadamard product of the other modes' factor rows (its Khatri-Rao row).
//! - [`CompletionSession::reset_residual`], [`CompletionSession::add_column`] and
//!   [`CompletionSession::column_terms`] (CCD++): the per-nonzero residual
//!   `e = x − m(i)`, its rank-one updates, and per row `Σ e k` and `Σ k²` of one column.
//! - [`CompletionSession::sgd_epoch`] (SGD): one pass of per-nonzero gradient steps.
//! - [`CompletionSession::loss`]: `Σ (x − m(i))²` over the nonzeros.
//!
//! The *nonzero order* of a session, in which [`CompletionSession::residual`] lists the
//! residual: the sparse part in key order, then the dense tiles in key order, each in
//! bitmap order ([`crate::hls::HlsTensor::for_each_nonzero`]). Values are the stored
//! fp16 times the tensor's scale (exact for integer ratings).

use super::{Engine, Prepared, RunStats};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
#[cfg(doc)]
use crate::ops::Op;

/// One SGD epoch's settings ([`CompletionSession::sgd_epoch`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SgdStep {
    /// The learning rate `η` (> 0).
    pub learning_rate: f32,
    /// The regularization `λ` (≥ 0), applied at every step to the rows it touches.
    pub lambda: f32,
    /// Seed of the visiting order.
    pub seed: u64,
    /// Visit the nonzeros in a seeded random order (`false`: in the session's nonzero
    /// order, where the backend's scheme allows; for tests against a sequential
    /// reference). The CPU runs stratified blocks, in that order within each block;
    /// CUDA runs Hogwild warps over a seeded permutation of work units (the identity
    /// without shuffling), many units at once, so there a sequential result is only
    /// reproduced where concurrent steps touch disjoint rows.
    pub shuffle: bool,
    /// Bias terms folded into the factors (`None`: a plain CP model); see [`SgdBias`].
    pub bias: Option<SgdBias>,
    /// Per mode, how its CP columns are regularized ([`Anchor`]); empty: every mode's
    /// toward 0 with weight 1.
    pub anchors: Vec<Anchor>,
}

/// How one mode's CP columns are regularized in an SGD step: by
/// `w λ ‖A⁽ⁿ⁾ − c‖²` instead of `λ ‖A⁽ⁿ⁾‖²`, so that a step moves a row entry `a` by
/// `η (g − w λ / count · (a − c))`, `count` the row's nonzeros.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Anchor {
    /// The value `c` the columns are shrunk toward (finite).
    pub value: f32,
    /// The weight `w` of `λ` (finite, ≥ 0).
    pub weight: f32,
}

impl Anchor {
    /// Toward 0 with weight 1: the plain `λ ‖A⁽ⁿ⁾‖²`.
    pub const ZERO: Anchor = Anchor {
        value: 0.0,
        weight: 1.0,
    };

    /// Whether this is [`Anchor::ZERO`].
    pub fn is_zero(&self) -> bool {
        *self == Anchor::ZERO
    }
}

/// Bias terms carried as extra factor columns in an SGD step: of the session's rank
/// `K`, the last `N` columns (`N` the order) are biases, column `K − N + n` holding
/// mode `n`'s bias in mode `n` and a fixed 1 in every other mode, so that the model
/// `Σ_r Π_m A⁽ᵐ⁾[i_m, r]` adds `Σ_n b⁽ⁿ⁾[i_n]`. A step moves a bias by
/// `η_b (e − λ_b / c_n(i_n) · (b − m_n))`, `m_n` mode `n`'s center, and never moves the
/// fixed ones.
#[derive(Debug, Clone, PartialEq)]
pub struct SgdBias {
    /// The biases' learning rate `η_b` (> 0).
    pub learning_rate: f32,
    /// The biases' regularization `λ_b` (≥ 0).
    pub lambda: f32,
    /// Per mode, the value `m_n` its biases are shrunk toward (finite; empty: all 0).
    pub centers: Vec<f32>,
}

/// The completion kernels on one prepared tensor, with the factors kept by the backend.
///
/// Every method checks its arguments and returns a typed error; a kernel whose result
/// is not finite returns [`Error::NonFinite`]. Implementations: the CPU's (rayon,
/// `engine/cpu/completion.rs`) and CUDA's (`engine/cuda/completion.rs`, kernels in
/// `kernels/completion.cu`), whose sums may run in an order that changes from run to
/// run (atomics).
pub trait CompletionSession {
    /// The rank `R` of the model.
    fn rank(&self) -> usize;
    /// The factors as they are now (one `I_n × R` matrix per mode), copied out.
    fn factors(&mut self) -> Result<Vec<Matrix>>;
    /// Replaces the factor of `mode` (shape `I_n × R`, finite).
    fn set_factor(&mut self, mode: usize, factor: &Matrix) -> Result<RunStats>;
    /// Replaces column `col` of the factor of `mode` with `values` (`I_n` finite
    /// entries).
    fn set_column(&mut self, mode: usize, col: usize, values: &[f32]) -> Result<RunStats>;
    /// ALS: the normal equations of the rows `rows` of `mode` (ascending, distinct,
    /// checked) into `out` (resized to `rows.len() × (R² + R)`): row `k` holds row
    /// `rows[k]`'s `G_i` row-major (`R × R`), then `b_i` (`R`). The systems are `R²`
    /// floats per row against the factor's `R`: a caller bounds its memory by asking
    /// for a long mode's rows in several lists, and its time by leaving out rows
    /// without entries (their systems are zero).
    fn normal_equations(&mut self, mode: usize, rows: &[u32], out: &mut Matrix)
    -> Result<RunStats>;
    /// ALS in the bias layout of [`SgdBias`] (the session's rank `K = rank + N`, `N`
    /// the order): for every row `i = rows[k]` of `mode` (`rows` as for
    /// [`CompletionSession::normal_equations`]), the normal equations of its
    /// `w = rank + 1` unknowns (the `rank` CP columns, then the mode's bias column
    /// `rank + mode`), the other modes' bias columns (fixed at 1 in this mode) moved to
    /// the right-hand side, into row `k` of `out` (resized to `rows.len() × (w² + w)`):
    /// `G_i` row-major, then `b_i`. By
    /// default reduced from [`CompletionSession::normal_equations`] at rank `K`
    /// ([`reduce_to_bias`]); a backend may build the smaller system directly.
    ///
    /// A backend that builds it directly may also give, in `squares` (resized to
    /// `rows.len()`), every row's `Σ y²`, `y` its targets (the values minus `μ` and the other
    /// modes' biases): with `G_i` and `b_i` they give the row's squared error at any
    /// `a`, `Σ y² − 2aᵀb_i + aᵀG_i a`, so that the loss after a sweep's last mode
    /// needs no pass over the entries. One that does not (the default) leaves
    /// `squares` empty.
    fn bias_normal_equations(
        &mut self,
        mode: usize,
        rank: usize,
        rows: &[u32],
        out: &mut Matrix,
        squares: &mut Vec<f64>,
    ) -> Result<RunStats> {
        check_bias_layout(self.rank(), rank, mode)?;
        let mut full = Matrix::zeros(0, 0);
        let stats = self.normal_equations(mode, rows, &mut full)?;
        *out = reduce_to_bias(&full, self.rank(), rank, mode);
        squares.clear();
        Ok(stats)
    }
    /// CCD++: sets every nonzero's residual to `x − m(i)` with the current factors.
    fn reset_residual(&mut self) -> Result<RunStats>;
    /// CCD++: adds `sign · Π_n A⁽ⁿ⁾[i_n, col]` to every nonzero's residual (`+1` takes
    /// column `col` out of the model, `−1` puts it back).
    fn add_column(&mut self, col: usize, sign: f32) -> Result<RunStats>;
    /// CCD++: for every row `i` of `mode`, `Σ e k` and `Σ k²` over the row's nonzeros,
    /// `e` the residual and `k = Π_{m≠mode} A⁽ᵐ⁾[i_m, col]`, into `out` (resized to
    /// `I_n × 2`).
    fn column_terms(&mut self, mode: usize, col: usize, out: &mut Matrix) -> Result<RunStats>;
    /// The residual of every nonzero, in the session's nonzero order (see the module
    /// docs), as the last CCD++ kernel left it.
    fn residual(&mut self) -> Result<Vec<f32>>;
    /// SGD: one pass over every nonzero. At nonzero `x` at `i`, with `e = x − m(i)`
    /// and `k_n` the Hadamard product of the other modes' rows, every mode's row moves
    /// by `η (e k_n − λ / c_n(i_n) · A⁽ⁿ⁾[i_n, :])`, all from the rows as they were
    /// before the step, `c_n(i_n)` the nonzeros of row `i_n` of mode `n`: a pass spreads
    /// `λ Σ‖A⁽ⁿ⁾‖²` over the nonzeros, so SGD descends the objective ALS and CCD++
    /// minimize.
    fn sgd_epoch(&mut self, step: &SgdStep) -> Result<RunStats>;
    /// `Σ (x − m(i))²` over every nonzero, with the current factors, in f64.
    fn loss(&mut self) -> Result<f64>;
}

/// Checks that `rows` lists rows of `mode` (which has `len`) in ascending order, each
/// once.
pub(crate) fn check_rows(mode: usize, rows: &[u32], len: usize) -> Result<()> {
    let ascending = rows.windows(2).all(|w| w[0] < w[1]);
    match rows.last() {
        Some(&last) if !ascending || last as usize >= len => Err(Error::InvalidOption(format!(
            "the rows asked of mode {mode} (which has {len}) must ascend, each once, below {len}"
        ))),
        _ => Ok(()),
    }
}

/// Checks that a session of rank `k` holds the bias layout of rank `rank` with a bias
/// column for `mode` ([`CompletionSession::bias_normal_equations`]).
pub(crate) fn check_bias_layout(k: usize, rank: usize, mode: usize) -> Result<()> {
    if rank + mode >= k {
        return Err(Error::InvalidRank(format!(
            "a bias layout of CP rank {rank} needs a column {} for mode {mode}'s bias; the session has {k} columns",
            rank + mode
        )));
    }
    Ok(())
}

/// The bias-layout system of [`CompletionSession::bias_normal_equations`] from the
/// full normal equations `ne` at rank `k` (`I × (k² + k)`): the rows and columns of
/// the `rank` CP columns and of column `rank + mode`, the fixed columns' part (`G`
/// times 1) subtracted from the right-hand side.
pub fn reduce_to_bias(ne: &Matrix, k: usize, rank: usize, mode: usize) -> Matrix {
    let w = rank + 1;
    let free = |p: usize| if p < rank { p } else { rank + mode };
    let fixed: Vec<usize> = (rank..k).filter(|&c| c != rank + mode).collect();
    let mut out = Matrix::zeros(ne.rows(), w * w + w);
    for (src, dst) in ne
        .data()
        .chunks_exact(k * k + k)
        .zip(out.data_mut().chunks_exact_mut(w * w + w))
    {
        for p in 0..w {
            let gp = &src[free(p) * k..(free(p) + 1) * k];
            for q in 0..w {
                dst[p * w + q] = gp[free(q)];
            }
            let moved: f64 = fixed.iter().map(|&x| f64::from(gp[x])).sum();
            dst[w * w + p] = (f64::from(src[k * k + free(p)]) - moved) as f32;
        }
    }
    out
}

/// Checks `factors` for a completion session on a tensor of extents `dims`: one per
/// mode, mode `n` of shape `dims[n] × R` with one `R ≥ 1`, every entry finite. Returns
/// `R`.
pub fn check_factors(dims: &[usize], factors: &[Matrix]) -> Result<usize> {
    if factors.len() != dims.len() {
        return Err(Error::shape(
            "completion factors",
            format!("{} matrices (one per mode)", dims.len()),
            format!("{} matrices", factors.len()),
        ));
    }
    let rank = factors[0].cols();
    if rank == 0 {
        return Err(Error::InvalidRank("completion rank 0".into()));
    }
    for (m, f) in factors.iter().enumerate() {
        if f.shape() != (dims[m], rank) {
            return Err(Error::shape(
                format!("completion factor of mode {m}"),
                format!("{}×{rank}", dims[m]),
                format!("{}×{}", f.rows(), f.cols()),
            ));
        }
        if let Some(p) = f.data().iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite(format!(
                "completion factor of mode {m}, entry ({}, {}) is {}",
                p / rank,
                p % rank,
                f.data()[p]
            )));
        }
    }
    Ok(rank)
}

/// Checks a new factor for `mode` of a session on extents `dims` at rank `rank` (for
/// [`CompletionSession::set_factor`]): a mode in range, shape `dims[mode] × rank`,
/// every entry finite.
pub(crate) fn check_new_factor(
    dims: &[usize],
    rank: usize,
    mode: usize,
    factor: &Matrix,
) -> Result<()> {
    check_mode(mode, dims.len())?;
    if factor.shape() != (dims[mode], rank) {
        return Err(Error::shape(
            format!("completion factor of mode {mode}"),
            format!("{}×{}", dims[mode], rank),
            format!("{}×{}", factor.rows(), factor.cols()),
        ));
    }
    if let Some(v) = factor.data().iter().find(|v| !v.is_finite()) {
        return Err(Error::NonFinite(format!(
            "completion factor of mode {mode} holds {v}"
        )));
    }
    Ok(())
}

/// Checks a new column `col` of `mode` (for [`CompletionSession::set_column`]): mode
/// and column in range, `dims[mode]` values, every one finite.
pub(crate) fn check_new_column(
    dims: &[usize],
    rank: usize,
    mode: usize,
    col: usize,
    values: &[f32],
) -> Result<()> {
    check_mode(mode, dims.len())?;
    check_col(col, rank)?;
    let rows = dims[mode];
    if values.len() != rows {
        return Err(Error::shape(
            format!("column of mode {mode}"),
            rows,
            values.len(),
        ));
    }
    if let Some(v) = values.iter().find(|v| !v.is_finite()) {
        return Err(Error::NonFinite(format!(
            "column {col} of mode {mode} holds {v}"
        )));
    }
    Ok(())
}

/// Checks a mode number against the order.
pub(crate) fn check_mode(mode: usize, order: usize) -> Result<()> {
    if mode >= order {
        return Err(Error::ModeOutOfRange { mode, order });
    }
    Ok(())
}

/// Checks a column number against the rank.
pub(crate) fn check_col(col: usize, rank: usize) -> Result<()> {
    if col >= rank {
        return Err(Error::InvalidOption(format!(
            "column {col} is out of range for rank {rank}"
        )));
    }
    Ok(())
}

/// Checks that a session of rank `rank` on a tensor of order `order` has room for the
/// bias columns `step` asks for (at least one CP column besides them).
pub(crate) fn check_bias_columns(step: &SgdStep, rank: usize, order: usize) -> Result<()> {
    if step.bias.is_some() && rank <= order {
        return Err(Error::InvalidOption(format!(
            "SGD with bias columns needs a rank above the order {order} (the last {order} columns are biases), got {rank}"
        )));
    }
    if let Some(b) = &step.bias
        && !(b.centers.is_empty() || b.centers.len() == order)
    {
        return Err(Error::shape(
            "SGD bias centers",
            format!("{order} (one per mode) or none"),
            b.centers.len(),
        ));
    }
    if !(step.anchors.is_empty() || step.anchors.len() == order) {
        return Err(Error::shape(
            "SGD anchors",
            format!("{order} (one per mode) or none"),
            step.anchors.len(),
        ));
    }
    Ok(())
}

/// Checks an SGD step's learning rate and regularization.
pub(crate) fn check_step(step: &SgdStep) -> Result<()> {
    if !(step.learning_rate.is_finite() && step.learning_rate > 0.0) {
        return Err(Error::InvalidOption(format!(
            "the SGD learning rate must be a number > 0, got {}",
            step.learning_rate
        )));
    }
    if !(step.lambda.is_finite() && step.lambda >= 0.0) {
        return Err(Error::InvalidOption(format!(
            "the regularization λ must be a number ≥ 0, got {}",
            step.lambda
        )));
    }
    if let Some(a) = step
        .anchors
        .iter()
        .find(|a| !(a.value.is_finite() && a.weight.is_finite() && a.weight >= 0.0))
    {
        return Err(Error::InvalidOption(format!(
            "an SGD anchor needs a finite value and a finite weight ≥ 0, got {a:?}"
        )));
    }
    if let Some(b) = &step.bias {
        if !(b.learning_rate.is_finite() && b.learning_rate > 0.0) {
            return Err(Error::InvalidOption(format!(
                "the SGD bias learning rate must be a number > 0, got {}",
                b.learning_rate
            )));
        }
        if !(b.lambda.is_finite() && b.lambda >= 0.0) {
            return Err(Error::InvalidOption(format!(
                "the bias regularization must be a number ≥ 0, got {}",
                b.lambda
            )));
        }
        if let Some(c) = b.centers.iter().find(|c| !c.is_finite()) {
            return Err(Error::InvalidOption(format!(
                "the SGD bias centers must be finite, got {c}"
            )));
        }
    }
    Ok(())
}

impl Engine {
    /// A completion session on `p` (prepared for [`Op::Completion`]) starting from
    /// `factors` (see [`check_factors`]), modelling `offset + CP`.
    pub fn completion_session<'a>(
        &'a self,
        p: &'a Prepared,
        factors: &[Matrix],
        offset: f32,
    ) -> Result<Box<dyn CompletionSession + 'a>> {
        check_factors(p.dims(), factors)?;
        if !offset.is_finite() {
            return Err(Error::NonFinite(format!("completion offset {offset}")));
        }
        self.session::<super::CompletionKind>(p, (factors, offset))
    }
}
