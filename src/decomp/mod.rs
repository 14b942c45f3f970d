//! CP and Tucker decompositions on top of the [`Engine`](crate::engine::Engine).
//!
//! - [`cp_als()`]: CP by alternating least squares — per mode an MTTKRP on the engine,
//!   then a small `R × R` solve with the Hadamard product of the other factors' Grams.
//! - [`tucker_hooi`]: Tucker by higher-order orthogonal iteration — per mode a TTMc on
//!   the engine, then the leading left singular vectors of the (tall, thin) result.
//! - [`completion`]: tensor completion (missing entries unknown, not zero) by ALS,
//!   CCD++ or SGD, on the engine's completion kernels; its model, RMSEs and stopping
//!   rule (on the validation RMSE) are described there.
//! - [`cp_apr()`]: nonnegative CP of count tensors under a Poisson likelihood, by
//!   multiplicative updates — per mode and inner iteration a Φ on the engine. Its
//!   iterations and stopping rule are pyttb's (see its module).
//!
//! What follows is about the first two (the least-squares decompositions).
//!
//! Both compute their fit `1 − ‖X − X̂‖ / ‖X‖` from `‖X‖²` (FP64, of the values as
//! stored in fp16, which the kernels see) and quantities they already have, never by
//! rebuilding the tensor; a residual lost in the kernels' f32 rounding (fits within
//! about `√(10 ε)` of 1) is taken again in f64 by one pass over the stored nonzeros,
//! so the fit is that of the model returned. Sparse
//! kernels run in f32 on the engine; all dense linear algebra runs in f64 through
//! `faer`. Both are deterministic for a given seed, options, backend and thread count.
//! A progress callback receives an [`IterStats`] after every iteration; the
//! `*_with_control` forms let it stop the run there ([`std::ops::ControlFlow::Break`]).
//!
//! Iteration and stopping rule (both): iteration `k` updates every mode in the order
//! `0, 1, …, N−1`, then computes the fit; the run stops after `max_iters` iterations
//! or after the first iteration `k ≥ 1` whose fit changed by less than `tol` in
//! absolute value. With `tol = 0` it always runs `max_iters` iterations.

pub(crate) mod block_krylov;
pub(crate) mod dense;
pub(crate) mod leading;
pub(crate) mod residual;
pub(crate) mod small_cholesky;
pub(crate) mod zero_rows;

pub mod completion;
pub mod cp_als;
pub mod cp_apr;
pub mod gcp;
pub mod tucker;
pub mod used_rows;

pub use completion::{
    Compaction, CompletionModel, CompletionOptions, EpochStats, Solver, complete,
    complete_compacted, complete_with_control, complete_with_progress,
};
pub use cp_als::{CpModel, CpOptions, cp_als, cp_als_with_control, cp_als_with_progress};
pub use cp_apr::{
    AprScale, CpAprIter, CpAprModel, CpAprOptions, NonInteger, ScaledRun, cp_apr,
    cp_apr_with_control, cp_apr_with_progress,
};
pub use gcp::{GcpIter, GcpModel, GcpOptions, Loss, Method, gcp};
pub use tucker::{
    TuckerModel, TuckerOptions, tucker_hooi, tucker_hooi_with_control, tucker_hooi_with_progress,
};

use crate::engine::{Prepared, RunStats};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::Op;
use rayon::prelude::*;
use std::time::Instant;

/// What one iteration did and cost.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IterStats {
    /// 0-based iteration number.
    pub iter: usize,
    /// Fit `1 − ‖X − X̂‖ / ‖X‖` after this iteration.
    pub fit: f64,
    /// Fit minus the previous iteration's fit (the first iteration's is measured from
    /// a fit of 0).
    pub delta: f64,
    /// Seconds in engine kernels (MTTKRP or TTMc), including result transfers.
    pub seconds_kernel: f64,
    /// Seconds in dense linear algebra (Grams, solves, eigen/SVD, QR, normalization).
    pub seconds_linalg: f64,
    /// Everything else: conversions between f32 and f64, the fit, bookkeeping.
    pub seconds_other: f64,
    /// Bytes the engine copied from host to device (a GPU backend uploads the factors
    /// that changed since its last call: one factor per step; 0 on the CPU).
    #[serde(default)]
    pub bytes_to_device: u64,
    /// Bytes the engine copied from device to host (the kernel outputs; 0 on the CPU).
    #[serde(default)]
    pub bytes_from_device: u64,
}

/// Accumulates the three timing buckets of an iteration.
#[derive(Debug)]
pub(crate) struct IterClock {
    kernel: f64,
    linalg: f64,
    start: Instant,
    to_device: u64,
    from_device: u64,
}

impl IterClock {
    pub(crate) fn start() -> Self {
        IterClock {
            kernel: 0.0,
            linalg: 0.0,
            start: Instant::now(),
            to_device: 0,
            from_device: 0,
        }
    }

    /// Runs the engine call `f`, adding its time to the kernel bucket and the bytes it
    /// moved to the iteration's counts.
    pub(crate) fn kernel(&mut self, f: impl FnOnce() -> Result<RunStats>) -> Result<()> {
        let t = Instant::now();
        let out = f();
        self.kernel += t.elapsed().as_secs_f64();
        let stats = out?;
        self.to_device += stats.bytes_to_device;
        self.from_device += stats.bytes_from_device;
        Ok(())
    }

    /// Runs `f`, adding its time to the linear-algebra bucket.
    pub(crate) fn linalg<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        self.linalg += t.elapsed().as_secs_f64();
        out
    }

    /// The iteration's statistics; `other` is the wall time not in the two buckets.
    pub(crate) fn finish(&self, iter: usize, fit: f64, delta: f64) -> IterStats {
        let total = self.start.elapsed().as_secs_f64();
        IterStats {
            iter,
            fit,
            delta,
            seconds_kernel: self.kernel,
            seconds_linalg: self.linalg,
            seconds_other: (total - self.kernel - self.linalg).max(0.0),
            bytes_to_device: self.to_device,
            bytes_from_device: self.from_device,
        }
    }
}

/// The value at `coords` of the CP (Kruskal) model `Σ_r λ_r Π_m A_m[i_m, r]`, with
/// the coordinates checked against the factors (CP-ALS and CP-APR models).
fn kruskal_entry(weights: &[f64], factors: &[Matrix], coords: &[usize]) -> Result<f64> {
    if coords.len() != factors.len() {
        return Err(Error::shape("coordinates", factors.len(), coords.len()));
    }
    for (m, (&i, f)) in coords.iter().zip(factors).enumerate() {
        if i >= f.rows() {
            return Err(Error::InvalidOption(format!(
                "index {i} in mode {m} is beyond its length {}",
                f.rows()
            )));
        }
    }
    Ok(weights
        .iter()
        .enumerate()
        .map(|(r, &w)| {
            coords
                .iter()
                .zip(factors)
                .fold(w, |acc, (&i, f)| acc * f.get(i, r) as f64)
        })
        .sum())
}

/// Checks the options shared by both decompositions.
fn check_common(max_iters: usize, tol: f64) -> Result<()> {
    if max_iters == 0 {
        return Err(Error::InvalidOption(
            "max_iters must be at least 1".to_string(),
        ));
    }
    if tol.is_nan() || tol < 0.0 {
        return Err(Error::InvalidOption(format!(
            "tol must be a number ≥ 0, got {tol}"
        )));
    }
    Ok(())
}

/// Checks that `x` can be decomposed with `op` (order ≥ 2, a nonzero norm: the fit
/// divides by `‖X‖`) and returns `‖X‖²` of the values as stored for `op`: the fit's
/// `⟨X, X̂⟩` comes from kernels on those values, and mixing it with the exact input's
/// norm made an exact model's fit read 0.98755 for a single value.
fn check_tensor(x: &Prepared, op: Op) -> Result<f64> {
    if x.order() < 2 {
        return Err(Error::InvalidTensor(format!(
            "a decomposition needs a tensor of order ≥ 2, got order {}",
            x.order()
        )));
    }
    let stats = x.hls(op)?.stats();
    let n = stats.norm_sq;
    if !(n.is_finite() && n > 0.0) {
        let why = if stats.quant.flushed_to_zero > 0 {
            let ty = match stats.values {
                crate::hls::ValueType::F16 => "fp16",
                crate::hls::ValueType::F32 => "f32",
            };
            format!("every value rounds to zero in {ty} storage")
        } else {
            "the fit is undefined".to_string()
        };
        return Err(Error::InvalidTensor(format!(
            "the tensor's squared norm is {n}: {why}"
        )));
    }
    Ok(n)
}

/// A residual `‖X − X̂‖²` this far below zero, relative to `‖X‖²`, is rounding even
/// with exact kernels (f64 reductions of f32 results): the residual of a model that
/// fits exactly. Kernels that round more widen it ([`residual_rounding`]).
const RESIDUAL_ROUNDING: f64 = 1e-4;

/// The tolerance [`fit_from`] gives a negative residual on `engine`: the residual
/// cancels `2⟨X, X̂⟩` (whose kernel result carries the backend's relative error)
/// against `‖X‖² + ‖X̂‖²`, so twice that error, and never less than
/// [`RESIDUAL_ROUNDING`].
pub(crate) fn residual_rounding(engine: &crate::engine::Engine) -> f64 {
    RESIDUAL_ROUNDING.max(2.0 * engine.backend().relative_error())
}

/// `1 − ‖X − X̂‖ / ‖X‖` from `‖X‖²` and `‖X − X̂‖²`, both from the same stored values.
/// A residual below zero within `rounding` (relative to `‖X‖²`; see
/// [`residual_rounding`]) counts as zero; one further below means the two do not come
/// from the same values, and no fit is made up.
pub(crate) fn fit_from(
    norm_sq: f64,
    resid_sq: f64,
    rounding: f64,
    what: impl FnOnce() -> String,
) -> Result<f64> {
    if resid_sq < -rounding * norm_sq || !resid_sq.is_finite() {
        return Err(Error::Numerical(format!(
            "{}: ‖X − X̂‖² is {resid_sq:e} with ‖X‖² = {norm_sq:e}; no fit can be computed",
            what()
        )));
    }
    Ok(1.0 - resid_sq.max(0.0).sqrt() / norm_sq.sqrt())
}

/// Checks user-given initial factors: one per mode, mode `m` of shape
/// `dims[m] × ranks[m]`, all values finite.
fn check_init(init: &[Matrix], dims: &[usize], ranks: &[usize]) -> Result<()> {
    if init.len() != dims.len() {
        return Err(Error::shape(
            "initial factors",
            format!("{} matrices (one per mode)", dims.len()),
            format!("{} matrices", init.len()),
        ));
    }
    for (m, f) in init.iter().enumerate() {
        if f.shape() != (dims[m], ranks[m]) {
            return Err(Error::shape(
                format!("initial factor of mode {m}"),
                format!("{}×{}", dims[m], ranks[m]),
                format!("{}×{}", f.rows(), f.cols()),
            ));
        }
        if let Some(p) = f.data().iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite(format!(
                "initial factor of mode {m}, entry ({}, {}) is {}",
                p / ranks[m],
                p % ranks[m],
                f.data()[p]
            )));
        }
        // Mode 0's initial factor is never read; any other that is all zero leaves
        // every update zero (a fit of 0 and zero weights).
        if m > 0 && f.data().iter().all(|&v| v == 0.0) {
            return Err(Error::InvalidOption(format!(
                "initial factor of mode {m} is all zero; the iterations cannot leave zero"
            )));
        }
    }
    Ok(())
}

/// Fails with [`Error::NonFinite`] when a kernel result holds NaN or Inf.
/// `e` with a hint where it is a non-finite result of a tensor whose norm reaches 2^100
/// (about 1.3e30): a model's f32 kernel sums of such values overflow f32 (3.4e38),
/// which the values alone need not. Below that norm, a row's sum of values with factor
/// entries at most 1 stays under 2^116 for rows of up to 2^32 nonzeros, so an overflow
/// has another cause and `e` is returned as it is.
pub(crate) fn with_overflow_hint(e: Error, norm_sq: f64) -> Error {
    let norm = norm_sq.sqrt();
    match e {
        Error::NonFinite(what) if norm >= 2f64.powi(100) => Error::NonFinite(format!(
            "{what} (the tensor's norm is {norm:.1e}: f32 sums of values that large overflow past 3.4e38; divide the values by a power of two)"
        )),
        e => e,
    }
}

/// The RMS of `values` about `offset`, without overflow or underflow in between (the
/// deviations are divided by the largest one first); 0 for no deviation. The scale by
/// which completion and GCP-SGD judge values far from 1.
pub(crate) fn rms_about(values: &[f64], offset: f64) -> f64 {
    let most = values
        .iter()
        .map(|v| (v - offset).abs())
        .fold(0.0f64, f64::max);
    if most == 0.0 || !most.is_finite() {
        return most;
    }
    let sum: f64 = values.iter().map(|v| ((v - offset) / most).powi(2)).sum();
    most * (sum / values.len() as f64).sqrt()
}

fn check_finite(m: &Matrix, what: impl FnOnce() -> String) -> Result<()> {
    // A parallel scan without early exit (so it vectorizes); the position only when
    // something is wrong. TTMc outputs are millions of floats.
    let finite = m
        .data()
        .par_chunks(1 << 16)
        .all(|c| c.iter().fold(true, |ok, v| ok & v.is_finite()));
    if finite {
        return Ok(());
    }
    if let Some(p) = m.data().iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite(format!(
            "{} entry {p} is {}",
            what(),
            m.data()[p]
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
