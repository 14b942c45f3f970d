//! The two operations, their argument checks and output shapes, shared by the FP64
//! reference and every engine backend.
//!
//! - MTTKRP, mode n: `M[i_n, r] = Σ x(i) Π_{m≠n} F_m[i_m, r]`, output `I_n × R`.
//! - TTMc, mode n: `Y[i_n, c] = Σ x(i) Π_{m≠n} F_m[i_m, r_m]` where the column `c`
//!   enumerates the tuples `(r_m)_{m≠n}` with modes in increasing order and the last
//!   mode fastest (row-major Kronecker order), output `I_n × Π_{m≠n} R_m`.
//! - Φ (CP-APR's multiplicative update), mode n: with `π(i)[r] = Π_{m≠n} F_m[i_m, r]`
//!   and the model value `μ(i) = Σ_r F_n[i_n, r] π(i)[r]`,
//!   `Φ[i_n, r] = Σ x(i) / max(μ(i), ε) · π(i)[r]` over the nonzeros, output `I_n × R`:
//!   `(X_(n) ⊘ max(B Πᵀ, ε)) Π` with `B = F_n` (Chi & Kolda 2012).
//!
//! `factors` always has one matrix per mode. For MTTKRP and TTMc the target mode's
//! matrix is ignored and may have any shape (an empty `0×0` matrix is fine); Φ reads
//! it (`B`), so it must be `I_n × R` like the others.

use crate::error::{Error, Result};
use crate::matrix::Matrix;

/// Which kernel.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Matricized tensor times Khatri-Rao product (CP decomposition).
    Mttkrp,
    /// Tensor times matrix chain (Tucker decomposition).
    Ttmc,
    /// The tensor-completion kernels (ALS normal equations, CCD++ residual and column
    /// terms, SGD steps): run through an [`Engine::completion_session`], not
    /// [`Engine::run`] (see [`crate::engine::completion`]).
    ///
    /// [`Engine::completion_session`]: crate::engine::Engine::completion_session
    /// [`Engine::run`]: crate::engine::Engine::run
    Completion,
    /// CP-APR's `Φ = (X_(n) ⊘ max(B Πᵀ, ε)) Π`: an MTTKRP whose per-nonzero weight
    /// `x / max(μ, ε)` depends on the target mode's own factor `B` (Poisson CP). Runs
    /// on the form prepared for [`Op::Mttkrp`] (see [`Op::form`]).
    Phi,
}

impl Op {
    /// The two operations every tuning profile, benchmark and self-test covers. Φ runs
    /// on MTTKRP's form and thresholds ([`Op::form`]); the completion kernels run in a
    /// completion session.
    pub const ALL: [Op; 2] = [Op::Mttkrp, Op::Ttmc];

    /// Lower-case name, as used in profiles and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Op::Mttkrp => "mttkrp",
            Op::Ttmc => "ttmc",
            Op::Completion => "completion",
            Op::Phi => "phi",
        }
    }

    /// The op whose HLS form (key order and tuned tile threshold) this op runs on:
    /// itself, except Φ, which walks the nonzeros as MTTKRP does, so one tensor
    /// prepared for MTTKRP serves CP-ALS and CP-APR alike.
    pub fn form(self) -> Op {
        match self {
            Op::Phi => Op::Mttkrp,
            op => op,
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Checks `factors` for `op` on `mode` of a tensor with extents `dims` and returns the
/// output shape `(rows, cols)`.
pub fn output_shape<T: Copy + Default>(
    op: Op,
    dims: &[usize],
    mode: usize,
    factors: &[Matrix<T>],
) -> Result<(usize, usize)> {
    if op == Op::Completion {
        return Err(Error::Unsupported(
            "the completion kernels run in a completion session (Engine::completion_session)"
                .into(),
        ));
    }
    let order = dims.len();
    if mode >= order {
        return Err(Error::ModeOutOfRange { mode, order });
    }
    if factors.len() != order {
        return Err(Error::shape(
            "factor list",
            format!("{order} matrices (one per mode)"),
            format!("{} matrices", factors.len()),
        ));
    }
    let mut cols = 1usize;
    let mut rank = None;
    for (m, f) in factors.iter().enumerate() {
        if m == mode && op != Op::Phi {
            continue;
        }
        if f.rows() != dims[m] {
            return Err(Error::shape(
                format!("factor of mode {m}"),
                format!("{} rows (the mode's length)", dims[m]),
                format!("{} rows", f.rows()),
            ));
        }
        if f.cols() == 0 {
            return Err(Error::InvalidRank(format!("factor of mode {m} has rank 0")));
        }
        match op {
            Op::Mttkrp | Op::Phi => match rank {
                None => rank = Some(f.cols()),
                Some(r) if r != f.cols() => {
                    return Err(Error::shape(
                        format!("factor of mode {m}"),
                        format!("{r} columns (the rank of the other factors)"),
                        format!("{} columns", f.cols()),
                    ));
                }
                Some(_) => {}
            },
            Op::Completion => unreachable!("refused above"),
            Op::Ttmc => {
                cols = cols
                    .checked_mul(f.cols())
                    .ok_or_else(|| Error::InvalidRank("product of TTMc ranks overflows".into()))?;
            }
        }
    }
    if order == 1 && op != Op::Phi {
        // No other mode: MTTKRP / TTMc degenerate to the tensor itself as a column.
        return Ok((dims[0], 1));
    }
    let cols = match op {
        Op::Mttkrp => rank.expect("order >= 2 has another mode"),
        // Φ reads the target's own factor, so even order 1 has a rank (π is all ones).
        Op::Phi => rank.expect("Φ checks the target's factor too"),
        Op::Ttmc | Op::Completion => cols,
    };
    Ok((dims[mode], cols))
}
