//! The two operations, their argument checks and output shapes, shared by the FP64
//! reference and every engine backend.
//!
//! - MTTKRP, mode n: `M[i_n, r] = Σ x(i) Π_{m≠n} F_m[i_m, r]`, output `I_n × R`.
//! - TTMc, mode n: `Y[i_n, c] = Σ x(i) Π_{m≠n} F_m[i_m, r_m]` where the column `c`
//!   enumerates the tuples `(r_m)_{m≠n}` with modes in increasing order and the last
//!   mode fastest (row-major Kronecker order), output `I_n × Π_{m≠n} R_m`.
//!
//! `factors` always has one matrix per mode; the target mode's matrix is ignored and
//! may have any shape (an empty `0×0` matrix is fine).

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
}

impl Op {
    /// The operations [`crate::engine::Engine::run`] runs (the self-test, benches and
    /// tuning iterate over these).
    pub const ALL: [Op; 2] = [Op::Mttkrp, Op::Ttmc];

    /// Lower-case name, as used in profiles and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Op::Mttkrp => "mttkrp",
            Op::Ttmc => "ttmc",
            Op::Completion => "completion",
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
        if m == mode {
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
            Op::Mttkrp => match rank {
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
    if order == 1 {
        // No other mode: MTTKRP / TTMc degenerate to the tensor itself as a column.
        return Ok((dims[0], 1));
    }
    let cols = match op {
        Op::Mttkrp => rank.expect("order >= 2 has another mode"),
        Op::Ttmc | Op::Completion => cols,
    };
    Ok((dims[mode], cols))
}
