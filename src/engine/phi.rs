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
//! A run works in f64 throughout (the factors, `π`, `μ` and Φ; only the tensor's values
//! are the prepared form's), as pyttb does. MU amplifies rounding: from the same start,
//! f32 factors and `π` put movielens-100k's log-likelihood 1e-5 away from pyttb's after
//! ten outer iterations, f64 keeps it within 2e-13. f64 `π` is twice the bytes of f32:
//! even on the small shared tensors, where a row's `π` stays in cache through the inner
//! iterations (and the conversions are saved), 22–31 % slower on the two large ones.
//!
//! On the CPU the session groups the nonzeros by row of each mode once (as ALS does,
//! [`crate::engine::cpu`]), forms `π` of every nonzero in its mode's row order at each
//! `fix`, and each `phi` streams those rows: per row of `B`, `Σ x / max(B[i]·π, ε) · π`
//! in registers, without gathers, private outputs or a reduction.

use super::{Engine, PhiParams, Prepared, RunStats};
use crate::error::{Error, Result};
pub use crate::math::mu::MuInner;
use crate::math::mu::inner_iterations;
#[cfg(doc)]
use crate::ops::Op;
use rayon::prelude::*;

/// A backend's Φ session (see the [module documentation](self)), in f64 throughout:
/// the factors, `B`, `π` and Φ. The engine's [`PhiRun`] checks every argument before
/// it reaches one. Factors are row-major `I_m × R` slices.
pub trait PhiSession {
    /// Fixes the target `mode` and the factors of the other modes for the calls that
    /// follow (`factors[mode]` is not read; shapes checked by the engine).
    fn fix(&mut self, mode: usize, factors: &[&[f64]]) -> Result<RunStats>;
    /// Φ of the fixed mode with target factor `b` into `out` (`I_n × R`; every entry is
    /// overwritten), with [`RunStats::log_term`] when `params.log_term`.
    fn phi(&mut self, b: &[f64], params: PhiParams, out: &mut [f64]) -> Result<RunStats>;
    /// MU's inner iterations on the fixed mode as [`inner_iterations`] runs them (`b`
    /// updated; `out` the last Φ), with the same result to the bit; backends may run
    /// them in another order (the CPU: row by row, see [`crate::engine::cpu`]).
    fn mu_inner(
        &mut self,
        b: &mut [f64],
        params: PhiParams,
        max_inner: usize,
        tol: f64,
        out: &mut [f64],
    ) -> Result<MuInner> {
        let phi = |b: &[f64], out: &mut [f64]| {
            let s = self.phi(b, params, out)?;
            Ok((s.bytes_to_device, s.bytes_from_device))
        };
        inner_iterations(phi, b, max_inner, tol, out)
    }
}

/// Φ of one prepared tensor for runs of calls with a fixed mode and fixed other
/// factors, in f64 (see the [module documentation](self)).
pub struct PhiRun<'a> {
    session: Box<dyn PhiSession + 'a>,
    dims: Vec<usize>,
    rank: usize,
    mode: Option<usize>,
}

/// [`Error::InvalidOption`] unless Φ's floor `ε` is a finite number > 0.
pub(crate) fn check_eps(eps: f32) -> Result<()> {
    if !(eps.is_finite() && eps > 0.0) {
        return Err(Error::InvalidOption(format!(
            "Φ's floor ε must be a finite number > 0, got {eps}"
        )));
    }
    Ok(())
}

impl PhiRun<'_> {
    /// The mode of the last [`PhiRun::fix`], or the error that asks for one.
    fn fixed_mode(&self) -> Result<usize> {
        self.mode.ok_or_else(|| {
            Error::InvalidOption("Φ: fix a mode and its factors before computing Φ".into())
        })
    }

    /// The rank `R` of every factor.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// [`Error::Shape`] unless `len` values make an `I_mode × R` matrix.
    fn check_shape(&self, what: &str, mode: usize, len: usize) -> Result<()> {
        let want = self.dims[mode] * self.rank;
        if len != want {
            return Err(Error::shape(
                format!("{what} of mode {mode}"),
                format!("{}×{} ({want} values)", self.dims[mode], self.rank),
                format!("{len} values"),
            ));
        }
        Ok(())
    }

    /// Fixes the target `mode` and the other modes' factors (one row-major `I_m × R`
    /// slice per mode; `factors[mode]` is not read) for the next [`PhiRun::phi`] and
    /// [`PhiRun::mu_inner`] calls.
    pub fn fix(&mut self, mode: usize, factors: &[&[f64]]) -> Result<RunStats> {
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
            if m != mode {
                self.check_shape("Φ factor", m, f.len())?;
            }
        }
        self.mode = None;
        let stats = self.session.fix(mode, factors)?;
        self.mode = Some(mode);
        Ok(stats)
    }

    /// Φ of the fixed mode with target factor `b` (`I_n × R`, row-major) into `out`
    /// (resized to `I_n × R`), as [`Op::Phi`] defines it, in f64; [`Error::NonFinite`]
    /// when Φ or its log term is not finite.
    pub fn phi(&mut self, b: &[f64], params: PhiParams, out: &mut Vec<f64>) -> Result<RunStats> {
        let mode = self.fixed_mode()?;
        check_eps(params.eps)?;
        self.check_shape("Φ's target factor B", mode, b.len())?;
        self.sized(mode, out)?;
        let stats = self.session.phi(b, params, out)?;
        if let Some(t) = stats.log_term.filter(|t| !t.is_finite()) {
            return Err(Error::NonFinite(format!(
                "Φ of mode {mode} gave a log term of {t}: the factors or the tensor's values \
                 are too large"
            )));
        }
        self.check_finite("Φ", mode, out)?;
        Ok(stats)
    }

    /// MU's inner iterations on the fixed mode ([`inner_iterations`]', to the bit): `b`
    /// the mode's factor (`I_n × R` row-major), updated; `out` (resized to `I_n × R`)
    /// gets the last Φ. [`Error::NonFinite`] when Φ or `B` is not finite at the end.
    pub fn mu_inner(
        &mut self,
        b: &mut [f64],
        params: PhiParams,
        max_inner: usize,
        tol: f64,
        out: &mut Vec<f64>,
    ) -> Result<MuInner> {
        let mode = self.fixed_mode()?;
        self.check_shape("MU's factor B", mode, b.len())?;
        check_eps(params.eps)?;
        self.sized(mode, out)?;
        let params = PhiParams {
            log_term: false,
            ..params
        };
        let done = self.session.mu_inner(b, params, max_inner, tol, out)?;
        self.check_finite("MU's Φ", mode, out)?;
        self.check_finite("MU's B", mode, b)?;
        Ok(done)
    }

    /// `out` resized to `I_mode × R` (its allocation checked first).
    fn sized(&self, mode: usize, out: &mut Vec<f64>) -> Result<()> {
        let (rows, cols) = (self.dims[mode], self.rank);
        if out.len() != rows * cols {
            crate::matrix::check_alloc("Φ output", rows, cols, 8)?;
            out.resize(rows * cols, 0.0);
        }
        Ok(())
    }

    /// [`Error::NonFinite`] naming the first non-finite entry of `what` (`I_mode × R`).
    fn check_finite(&self, what: &str, mode: usize, data: &[f64]) -> Result<()> {
        let Some(k) = data.par_iter().position_first(|v| !v.is_finite()) else {
            return Ok(());
        };
        let cols = self.rank.max(1);
        Err(Error::NonFinite(format!(
            "{what} of mode {mode} holds {} at ({}, {}): the factors or the tensor's values \
             are too large",
            data[k],
            k / cols,
            k % cols
        )))
    }
}

impl Engine {
    /// Whether [`Engine::phi_run`] may give a session: the CPU's unless its options ask
    /// for Φ per call ([`super::PhiKernel::PerCall`]); CUDA has none.
    pub fn offers_phi_runs(&self) -> bool {
        match self.backend() {
            super::Backend::Cpu(b) => b.options().phi == super::PhiKernel::Session,
            super::Backend::Cuda(_) => false,
        }
    }

    /// A [`PhiRun`] on `p` (prepared for [`Op::Phi`] or [`Op::Mttkrp`]) for factors of
    /// rank `rank`; `None` where the backend has no such path (CUDA today, the CPU
    /// with [`super::PhiKernel::PerCall`]) or the session's buffers would not fit in
    /// memory: run [`Op::Phi`] per call then.
    pub fn phi_run<'a>(&'a self, p: &'a Prepared, rank: usize) -> Result<Option<PhiRun<'a>>> {
        if rank == 0 {
            return Err(Error::InvalidRank("Φ at rank 0".into()));
        }
        Ok(self
            .session::<super::PhiKind>(p, rank)?
            .map(|session| PhiRun {
                session,
                dims: p.dims().to_vec(),
                rank,
                mode: None,
            }))
    }
}
