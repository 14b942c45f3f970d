//! CP-APR's Φ for a run of calls in which only the target mode's factor changes.
//!
//! CP-APR's multiplicative updates compute Φ of one mode ten times in a row (its inner
//! iterations) while the other modes' factors stay fixed, so the Khatri-Rao rows `π` of
//! the nonzeros are the same for all ten calls. A [`PhiRun`] lets a backend keep what
//! it can between those calls: [`PhiRun::fix`] names the mode and the other modes'
//! factors, then [`PhiRun::phi`] computes Φ for a new target factor `B` as
//! [`Op::Phi`] does (the same floor `ε`, the same optional log term), on the same
//! prepared tensor (no second prepare). Backends without such a path give `None`
//! ([`Engine::phi_run`]) and the caller runs [`Op::Phi`] per call.
//!
//! On the CPU the session groups the nonzeros by row of each mode once (as ALS does,
//! [`crate::engine::cpu`]), forms `π` of every nonzero in its mode's row order at each
//! `fix`, and each `phi` streams those rows: per row of `B`, `Σ x / max(B[i]·π, ε) · π`
//! in registers, without gathers, private outputs or a reduction.

use super::{Engine, PhiParams, Prepared, RunStats, first_non_finite};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::Op;

/// A backend's Φ session (see the [module documentation](self)); the engine's
/// [`PhiRun`] checks every argument before it reaches one.
pub trait PhiSession {
    /// Fixes the target `mode` and the factors of the other modes for the calls that
    /// follow (`factors[mode]` is not read; shapes checked by the engine).
    fn fix(&mut self, mode: usize, factors: &[Matrix]) -> Result<RunStats>;
    /// Φ of the fixed mode with target factor `b` into `out` (already `I_n × R`; every
    /// entry is overwritten), with [`RunStats::log_term`] when `params.log_term`.
    fn phi(&mut self, b: &Matrix, params: PhiParams, out: &mut Matrix) -> Result<RunStats>;
}

/// Φ of one prepared tensor for runs of calls with a fixed mode and fixed other factors.
pub struct PhiRun<'a> {
    session: Box<dyn PhiSession + 'a>,
    dims: Vec<usize>,
    rank: usize,
    mode: Option<usize>,
}

impl PhiRun<'_> {
    /// The rank `R` of every factor.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Fixes the target `mode` and the other modes' factors (one matrix per mode, mode
    /// `m` of shape `I_m × R`; `factors[mode]` is not read) for the next [`PhiRun::phi`]
    /// calls.
    pub fn fix(&mut self, mode: usize, factors: &[Matrix]) -> Result<RunStats> {
        let order = self.dims.len();
        if mode >= order {
            return Err(Error::ModeOutOfRange { mode, order });
        }
        if factors.len() != order {
            return Err(Error::shape(
                "Φ factors",
                format!("{order} matrices (one per mode)"),
                format!("{} matrices", factors.len()),
            ));
        }
        for (m, f) in factors.iter().enumerate() {
            if m != mode && f.shape() != (self.dims[m], self.rank) {
                return Err(Error::shape(
                    format!("Φ factor of mode {m}"),
                    format!("{}×{}", self.dims[m], self.rank),
                    format!("{}×{}", f.rows(), f.cols()),
                ));
            }
        }
        self.mode = None;
        let stats = self.session.fix(mode, factors)?;
        self.mode = Some(mode);
        Ok(stats)
    }

    /// Φ of the fixed mode with target factor `b` (`I_n × R`) into `out` (resized to
    /// `I_n × R`), as [`Op::Phi`] computes it; [`Error::NonFinite`] when Φ or its log
    /// term is not finite.
    pub fn phi(&mut self, b: &Matrix, params: PhiParams, out: &mut Matrix) -> Result<RunStats> {
        let mode = self.mode.ok_or_else(|| {
            Error::InvalidOption("Φ: fix a mode and its factors before computing Φ".into())
        })?;
        if !(params.eps.is_finite() && params.eps > 0.0) {
            return Err(Error::InvalidOption(format!(
                "Φ's floor ε must be a finite number > 0, got {}",
                params.eps
            )));
        }
        let shape = (self.dims[mode], self.rank);
        if b.shape() != shape {
            return Err(Error::shape(
                format!("Φ's target factor B of mode {mode}"),
                format!("{}×{}", shape.0, shape.1),
                format!("{}×{}", b.rows(), b.cols()),
            ));
        }
        if out.shape() != shape {
            crate::matrix::check_alloc("Φ output", shape.0, shape.1, 4)?;
            *out = Matrix::zeros(shape.0, shape.1);
        }
        let stats = self.session.phi(b, params, out)?;
        if let Some(t) = stats.log_term.filter(|t| !t.is_finite()) {
            return Err(Error::NonFinite(format!(
                "Φ of mode {mode} gave a log term of {t}: the factors or the tensor's values \
                 are too large for f32"
            )));
        }
        if let Some(k) = first_non_finite(out.data()) {
            let cols = out.cols().max(1);
            return Err(Error::NonFinite(format!(
                "{} of mode {mode} gave {} at ({}, {}): the factors or the tensor's values \
                 are too large for f32",
                Op::Phi,
                out.data()[k],
                k / cols,
                k % cols
            )));
        }
        Ok(stats)
    }
}

impl Engine {
    /// A [`PhiRun`] on `p` (prepared for [`Op::Phi`] or [`Op::Mttkrp`]) for factors of
    /// rank `rank`; `None` where the backend has no such path (CUDA today) or the
    /// session's buffers would not fit in memory: run [`Op::Phi`] per call then.
    pub fn phi_run<'a>(&'a self, p: &'a Prepared, rank: usize) -> Result<Option<PhiRun<'a>>> {
        if rank == 0 {
            return Err(Error::InvalidRank("Φ at rank 0".into()));
        }
        Ok(self
            .backend()
            .phi_session(p.part(Op::Phi)?, rank)?
            .map(|session| PhiRun {
                session,
                dims: p.dims().to_vec(),
                rank,
                mode: None,
            }))
    }
}
