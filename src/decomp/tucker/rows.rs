//! Tucker-HOOI on the rows that hold nonzeros ([`UsedRows`]).
//!
//! HOOI reads a factor only through the TTMc, which reads only the rows of indices the
//! tensor uses; and the leading left singular vectors of a TTMc output are zero on its
//! zero rows (those of empty slices), so every update is the one on all rows, up to the
//! order of floating-point sums. Each renumbered mode keeps at least its rank of rows
//! (`UsedRows::of_tucker`): where the output has fewer nonzero singular values than
//! the rank, the remaining columns are any orthonormal completion on either path.
//!
//! The initial factors are drawn (or given) on the tensor's rows, orthonormalized and
//! scaled as the run on all rows does it, and cut; the model goes back to the tensor's
//! rows at the end, zero on the empty ones (its columns stay orthonormal). On a
//! 3 M × 2.5 M × 50 × 8 tensor with 624 k nonzeros (33 k used rows in either long
//! mode), the TTMc outputs over all rows held 11 GB.

use super::{TuckerModel, TuckerOptions, tucker_hooi_with_control};
use crate::decomp::IterStats;
use crate::decomp::used_rows::UsedRows;
use crate::engine::{Engine, Prepared};
use crate::error::Result;
use std::ops::ControlFlow;

/// [`tucker_hooi_with_control`] of the tensor `rows` renumbered, `x` its prepared form:
/// `opts` (their initial factors, if given, on the tensor's own rows) and the model on
/// the tensor's own rows, as for a run on all of them.
pub fn tucker_hooi_on_rows(
    engine: &Engine,
    x: &Prepared,
    rows: &UsedRows,
    opts: &TuckerOptions,
    control: &mut dyn FnMut(&IterStats) -> ControlFlow<()>,
) -> Result<TuckerModel> {
    opts.validate(rows.dims())?;
    let start = (opts.initial_factors(rows.dims()).into_iter().enumerate())
        .map(|(m, mut full)| {
            super::scale_start(&mut full);
            rows.cut(m, full)
        })
        .collect();
    let cut = TuckerOptions {
        ranks: opts.ranks.clone(),
        max_iters: opts.max_iters,
        tol: opts.tol,
        seed: opts.seed,
        init: Some(start),
    };
    let mut model = tucker_hooi_with_control(engine, x, &cut, control)?;
    model.factors = rows.expand(&model.factors);
    Ok(model)
}
