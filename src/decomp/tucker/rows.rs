//! Tucker-HOOI on the rows that hold nonzeros ([`UsedRows`]).
//!
//! HOOI reads a factor only through the TTMc, which reads only the rows of indices the
//! tensor uses; and the leading left singular vectors of a TTMc output are zero on its
//! zero rows (those of empty slices), so every update is the one on all rows, up to the
//! order of floating-point sums. Each renumbered mode keeps at least its rank of rows
//! (`UsedRows::of_tucker`): where the output has fewer nonzero singular values than
//! the rank, the remaining columns are any orthonormal completion on either path.
//!
//! The initial factors are the run on all rows' cut to the run's rows: given ones
//! scaled and cut; drawn ones formed on the kept rows alone (`super::start`, the same
//! entries to the bit), mode 0's not at all (HOOI never reads it). The model goes back
//! to the tensor's rows at the end, zero on the empty ones (its columns stay
//! orthonormal). On a
//! 3 M × 2.5 M × 50 × 8 tensor with 624 k nonzeros (33 k used rows in either long
//! mode), the TTMc outputs over all rows held 11 GB.

use super::{TuckerModel, TuckerOptions, start, tucker_hooi_with_control};
use crate::decomp::IterStats;
use crate::decomp::used_rows::UsedRows;
use crate::engine::{Engine, Prepared};
use crate::error::Result;
use crate::matrix::Matrix;
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
    let start = match &opts.init {
        Some(given) => (given.iter().enumerate())
            .map(|(m, f)| {
                let mut f = f.clone();
                super::scale_start(&mut f);
                rows.cut(m, f)
            })
            .collect(),
        None => (0..rows.dims().len())
            .map(|m| drawn_on_rows(rows, opts, m))
            .collect(),
    };
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

/// Mode `m`'s drawn start cut to the run's rows: the rows of the one on all rows
/// (module docs), streamed where the mode is renumbered; zero for mode 0, which HOOI
/// never reads.
fn drawn_on_rows(rows: &UsedRows, opts: &TuckerOptions, m: usize) -> Matrix {
    let (d, r) = (rows.dims()[m], opts.ranks[m]);
    let seed = opts.seed.wrapping_add(m as u64);
    let held = rows.tensor().dims()[m];
    if m == 0 {
        return Matrix::zeros(held, r);
    }
    let (used, out_rows) = match rows.renumbered(m) {
        true => (Some(rows.used(m)), held),
        false => (None, d),
    };
    if let Some(s) = start::drawn(d, r, seed, used, out_rows, super::start_range()) {
        return s;
    }
    let mut full = super::householder_start(d, r, seed);
    super::scale_start(&mut full);
    rows.cut(m, full)
}
