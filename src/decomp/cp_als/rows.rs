//! CP-ALS on the rows that hold nonzeros ([`UsedRows`]).
//!
//! It is the run on all rows, up to the order of floating-point sums. The initial
//! factors are drawn (or given) on the tensor's rows, scaled as the run scales them
//! (`rescale_to_unit`, over all rows), and cut to the used ones. Only the first
//! iteration reads a row left out: the Gram of each initial factor other than mode
//! 0's (which is never read) sums every row, so the Gram of the rows left out is added
//! to the cut factor's before the first update.

use super::{CpModel, CpOptions, rescale_to_unit, run_with};
use crate::decomp::IterStats;
use crate::decomp::dense::gram;
use crate::decomp::used_rows::UsedRows;
use crate::engine::{Engine, Prepared};
use crate::error::Result;
use crate::matrix::Matrix;
use faer::Mat;
use std::ops::ControlFlow;

/// The initial factors of `opts` on the tensor's rows, each scaled over all its rows,
/// cut to the run's; and per mode the Gram of the rows left out (zero for mode 0, whose
/// initial factor is never read, and for modes kept whole).
fn start(rows: &UsedRows, opts: &CpOptions) -> (Vec<Matrix>, Vec<Mat<f64>>) {
    let rank = opts.rank;
    let mut factors = Vec::with_capacity(rows.dims().len());
    let mut left_out = Vec::with_capacity(rows.dims().len());
    for (m, mut full) in opts.initial_factors(rows.dims()).into_iter().enumerate() {
        rescale_to_unit(&mut full, 0.0..0.0);
        if !rows.renumbered(m) || m == 0 {
            left_out.push(Mat::zeros(rank, rank));
            factors.push(rows.cut(m, full));
            continue;
        }
        factors.push(rows.copy_used(m, &full));
        // The used rows zeroed: the Gram of the rest (which skips zero rows).
        for &u in rows.used(m) {
            let u = u as usize * rank;
            full.data_mut()[u..u + rank].fill(0.0);
        }
        left_out.push(gram(&full));
    }
    (factors, left_out)
}

/// [`super::cp_als_with_control`] of the tensor `rows` renumbered, `x` its prepared
/// form: `opts` (their initial factors, if given, on the tensor's own rows) and the
/// model on the tensor's own rows, as for a run on all of them.
pub fn cp_als_on_rows(
    engine: &Engine,
    x: &Prepared,
    rows: &UsedRows,
    opts: &CpOptions,
    control: &mut dyn FnMut(&IterStats) -> ControlFlow<()>,
) -> Result<CpModel> {
    opts.validate(rows.dims())?;
    let (factors, left_out) = start(rows, opts);
    let cut = CpOptions {
        rank: opts.rank,
        max_iters: opts.max_iters,
        tol: opts.tol,
        seed: opts.seed,
        init: Some(factors),
    };
    let mut model = run_with(engine, x, &cut, control, Some(&left_out))?;
    model.factors = rows.expand(&model.factors);
    Ok(model)
}
