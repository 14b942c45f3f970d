//! Decompositions on the rows that hold nonzeros.
//!
//! A row of a mode whose slice holds no nonzero is zero in a CP-ALS or CP-APR model
//! after the mode's first update (its MTTKRP row, its Φ row, is zero), and stays zero.
//! Yet every iteration walks it: the kernel output is written whole, the update reads
//! and writes it, the fit and the normalization go over it. On tensors with long,
//! mostly empty modes that is most of the time: 1.5 M × 2 M × 12 with 615 k nonzeros
//! uses 5 % of either long mode's rows, and a rank-16 CP-ALS iteration took 127 ms on
//! all rows against 39 ms on the used ones (two threads, AMD EPYC).
//!
//! So where a mode has at least [`EMPTY_SHARE`] of its rows empty, and the empty rows
//! of such modes hold at least as many factor entries as the tensor has nonzeros (else
//! renumbering, a sort of the mode's indices and a copy of the tensor, is not repaid),
//! those models run on the tensor with those modes renumbered to their used indices
//! ([`Relabelled::of_used_rows`]), from the start the run on all rows takes, and the
//! model goes back to the tensor's rows at the end, zero on the empty ones
//! (`cp_als::cp_als_on_rows`, `cp_apr::cp_apr_on_rows`).

use crate::error::Result;
use crate::matrix::Matrix;
use crate::memplan::MemoryPlan;
use crate::tensor::CooTensor;
use crate::tensor::relabel::{Relabelled, empty_rows};

/// A mode runs on its used rows when at least this share of its rows is empty: below
/// it, the row work saved was not measurable beside the MTTKRP (600 k × 800 k × 12 with
/// 30–40 % of the long modes' rows empty ran as fast either way).
pub const EMPTY_SHARE: f64 = 0.5;

/// A tensor with its mostly empty modes renumbered to their used rows.
#[derive(Debug, Clone)]
pub struct UsedRows {
    rows: Relabelled,
    which: Vec<bool>,
}

impl UsedRows {
    /// The renumbering a CP model of rank `rank` runs `x` on, `None` where no mode
    /// pays for it (module docs).
    pub fn of(x: &CooTensor, rank: usize) -> Result<Option<Self>> {
        let empty = empty_rows(x);
        let which: Vec<bool> = (empty.iter().zip(x.dims()))
            .map(|(&e, &dim)| e > 0 && e as f64 >= EMPTY_SHARE * dim as f64)
            .collect();
        let saved = (empty.iter().zip(&which))
            .filter(|(_, w)| **w)
            .fold(0usize, |s, (&e, _)| {
                s.saturating_add(e.saturating_mul(rank))
            });
        if !which.contains(&true) || saved < x.nnz() {
            return Ok(None);
        }
        let rows = Relabelled::of_used_rows(x, &which)?;
        Ok(Some(UsedRows { rows, which }))
    }

    /// The renumbered tensor, the one to prepare.
    pub fn tensor(&self) -> &CooTensor {
        &self.rows.tensor
    }

    /// The tensor's own extents.
    pub fn dims(&self) -> &[usize] {
        &self.rows.dims
    }

    /// Whether mode `m` runs on its used rows.
    pub fn renumbered(&self, m: usize) -> bool {
        self.which[m]
    }

    /// The tensor's rows of mode `m` the run holds, ascending (every row where the
    /// mode is not renumbered).
    pub fn used(&self, m: usize) -> &[u32] {
        &self.rows.used[m]
    }

    /// A line saying which modes `what` runs on their used rows.
    pub fn note(&self, what: &str) -> String {
        let modes: Vec<String> = (0..self.which.len())
            .filter(|&m| self.which[m])
            .map(|m| {
                let (used, dim) = (self.rows.used[m].len(), self.rows.dims[m]);
                format!("mode {m}: {used} of {dim} rows")
            })
            .collect();
        format!(
            "{what} runs on the rows with nonzeros ({}); the others are zero in the model",
            modes.join(", ")
        )
    }

    /// The tensor on its own rows again, for a run that has to go over all of them.
    pub fn original(&self) -> Result<CooTensor> {
        let t = &self.rows.tensor;
        let indices = (0..t.order())
            .map(|m| {
                let used = &self.rows.used[m];
                t.indices(m).iter().map(|&k| used[k as usize]).collect()
            })
            .collect();
        CooTensor::new(self.rows.dims.clone(), indices, t.values().to_vec())
    }

    /// Adds to `plan` (the run's, on the renumbered extents) what running on the used
    /// rows holds besides: the given tensor beside its renumbered copy, and the model
    /// of rank `rank` put back on the tensor's rows (f32).
    pub fn add_to_plan(&self, plan: &mut MemoryPlan, rank: usize) {
        let rows: usize = self.rows.dims.iter().sum();
        plan.add(
            "the tensor as given, beside its renumbered copy",
            self.tensor().coo_bytes() as u128,
            1,
        )
        .add(
            "the model on the tensor's own rows",
            rows as u128 * rank as u128,
            4,
        );
    }

    /// A factor on the tensor's rows of mode `m` cut to the run's.
    pub fn cut(&self, m: usize, full: Matrix) -> Matrix {
        match self.which[m] {
            true => self.copy_used(m, &full),
            false => full,
        }
    }

    /// A copy of the rows of mode `m` the run holds, of a factor on the tensor's rows.
    pub fn copy_used(&self, m: usize, full: &Matrix) -> Matrix {
        self.rows.compress(m, full)
    }

    /// The run's factors on the tensor's own rows: zero where a row's slice is empty.
    pub fn expand(&self, factors: &[Matrix]) -> Vec<Matrix> {
        (factors.iter().enumerate())
            .map(|(m, f)| match self.which[m] {
                true => self.rows.expand(m, f),
                false => f.clone(),
            })
            .collect()
    }
}
