//! CP-APR on the rows that hold nonzeros ([`UsedRows`]).
//!
//! A row whose slice is empty has a zero Φ row, so the mode's first multiplicative
//! update zeroes it, and it stays zero (the inadmissible-zero fix needs a positive Φ).
//! Before that update the run on all rows reads such rows twice: the start divides
//! each initial factor's columns by their sums over all rows (into `λ`), and the first
//! KKT violation of each mode in the first iteration is the largest over all rows,
//! where an empty row's is `min(B, 1)`. So the run here divides by the sums over all
//! rows, and counts the rows left out in that first violation ([`LeftOut`]). Where a
//! renumbered mode does not update in the first iteration (its rows held already met
//! the tolerance), the rows left out would have stayed as they were: the run is then
//! redone on all rows, so that the model is always the one the run on all rows gives,
//! up to the order of floating-point sums.

use super::{CpAprIter, CpAprModel, CpAprOptions, column_sums, cp_apr_with_control, run};
use crate::decomp::used_rows::UsedRows;
use crate::engine::{Engine, Prepared, Workload};
use crate::error::Result;
use crate::ops::Op;
use std::ops::ControlFlow;

/// What the run on the used rows needs of the rows it leaves out: per mode, the
/// initial factor's column sums over all rows, and (renumbered modes only) each
/// column's largest entry over the rows left out, divided by that sum.
pub(crate) struct LeftOut {
    pub(crate) sums: Vec<Vec<f64>>,
    pub(crate) largest: Vec<Option<Vec<f64>>>,
}

impl LeftOut {
    /// The KKT violation `max |min(B, 1 − Φ)|` of mode `n`'s rows left out when its
    /// weights `lambda` move in (`B = A diag(λ)`, `Φ = 0` there): `min(max B, 1)`;
    /// `None` for a mode kept whole.
    pub(crate) fn violation(&self, n: usize, lambda: &[f64]) -> Option<f64> {
        let largest = self.largest[n].as_ref()?;
        let b = (largest.iter().zip(lambda)).fold(0.0f64, |m, (a, l)| m.max(a * l));
        Some(b.min(1.0))
    }
}

/// Each column's largest entry of the initial rows `factor` (`rank` values each, the
/// first the tensor's row `first`) that are not among the rows `used` (ascending, all
/// within them), divided by the column's sum over all rows, `sums` (not where that is
/// 0).
pub(crate) fn largest_left_out(
    factor: &[f32],
    rank: usize,
    first: usize,
    used: &[u32],
    sums: &[f64],
) -> Vec<f64> {
    let mut top = vec![0.0f64; rank];
    let mut used = used.iter().peekable();
    for (i, row) in factor.chunks_exact(rank).enumerate() {
        if used.next_if(|&&u| u as usize == first + i).is_some() {
            continue;
        }
        for ((t, &v), &s) in top.iter_mut().zip(row).zip(sums) {
            let v = f64::from(v);
            *t = t.max(if s > 0.0 { v / s } else { v });
        }
    }
    top
}

/// The initial factors of `opts` on the tensor's rows cut to the run's, and what the
/// run needs of the rows left out.
fn start(rows: &UsedRows, opts: &CpAprOptions) -> (Vec<crate::matrix::Matrix>, LeftOut) {
    let rank = opts.rank;
    let (mut factors, mut sums, mut largest) = (Vec::new(), Vec::new(), Vec::new());
    for (m, full) in opts.initial_factors(rows.dims()).into_iter().enumerate() {
        // The sums the run on all rows takes of the f64 copy, to the bit.
        let s = column_sums(full.data(), rank);
        largest.push(
            rows.renumbered(m)
                .then(|| largest_left_out(full.data(), rank, 0, rows.used(m), &s)),
        );
        sums.push(s);
        factors.push(rows.cut(m, full));
    }
    (factors, LeftOut { sums, largest })
}

/// [`cp_apr_with_control`] of the tensor `rows` renumbered, `x` its prepared form:
/// `opts` (their initial factors, if given, on the tensor's own rows) and the model on
/// the tensor's own rows, the one the run on all of them gives (module docs).
pub fn cp_apr_on_rows(
    engine: &Engine,
    x: &Prepared,
    rows: &UsedRows,
    opts: &CpAprOptions,
    control: &mut dyn FnMut(&CpAprIter) -> ControlFlow<()>,
) -> Result<CpAprModel> {
    opts.validate(rows.dims())?;
    let (factors, left) = start(rows, opts);
    let mut cut = opts.clone();
    cut.init = Some(factors);
    if let Some(mut model) = run(engine, x, &cut, control, Some(&left))? {
        model.factors = rows.expand(&model.factors);
        return Ok(model);
    }
    let all = rows.original()?;
    let workload = Workload {
        op: Op::Mttkrp,
        rank: opts.rank,
    };
    let x = engine.prepare(&all, &[workload])?;
    cp_apr_with_control(engine, &x, opts, control)
}
