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
//!
//! Tucker-HOOI likewise ([`UsedRows::of_tucker`], `tucker::tucker_hooi_on_rows`): an
//! empty slice's row of a TTMc output is zero, so is its row of the leading singular
//! vectors; there a row costs the output's width, the product of the other ranks, and
//! the TTMc outputs over all rows were most of the run's memory (11 GB on a 3 M × 2.5 M
//! × 50 × 8 tensor with 624 k nonzeros at ranks 8, 0.77 GB on its used rows).

use crate::error::Result;
use crate::matrix::Matrix;
use crate::memplan::MemoryPlan;
use crate::tensor::CooTensor;
use crate::tensor::relabel::{Relabelled, empty_rows};

/// A mode runs on its used rows when at least this share of its rows is empty: below
/// it, the row work saved was not measurable beside the MTTKRP (600 k × 800 k × 12 with
/// 30–40 % of the long modes' rows empty ran as fast either way).
pub const EMPTY_SHARE: f64 = 0.5;

/// The modes of a tensor of extents `dims` with `nnz` nonzeros and `empty[m]` empty
/// rows in mode `m` that a run holds on their used rows, `None` where none pays: those
/// with at least [`EMPTY_SHARE`] of their rows empty and at least `least(m)` used, where
/// their empty rows, `width(m)` entries each, hold at least as many entries as the
/// tensor has nonzeros.
pub fn modes_to_renumber(
    empty: &[usize],
    dims: &[usize],
    nnz: usize,
    width: impl Fn(usize) -> usize,
    least: impl Fn(usize) -> usize,
) -> Option<Vec<bool>> {
    let which: Vec<bool> = (empty.iter().zip(dims).enumerate())
        .map(|(m, (&e, &dim))| e > 0 && e as f64 >= EMPTY_SHARE * dim as f64 && dim - e >= least(m))
        .collect();
    let saved = (empty.iter().zip(&which).enumerate())
        .filter(|(_, (_, w))| **w)
        .fold(0usize, |s, (m, (&e, _))| {
            s.saturating_add(e.saturating_mul(width(m)))
        });
    (which.contains(&true) && saved >= nnz).then_some(which)
}

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
        Self::choose(x, |_| rank, |_| 1)
    }

    /// The renumbering a Tucker model of `ranks` runs `x` on, `None` where no mode pays
    /// for it. A row of mode `n` costs a row of its TTMc output (`Π_{m≠n} R_m` entries)
    /// and of its factor (`R_n`); a mode with fewer used rows than its rank keeps them
    /// all (its factor's `R_n` orthonormal columns need the room).
    pub fn of_tucker(x: &CooTensor, ranks: &[usize]) -> Result<Option<Self>> {
        let others = |n: usize| {
            (ranks.iter().enumerate())
                .filter(|&(m, _)| m != n)
                .fold(1usize, |p, (_, &r)| p.saturating_mul(r))
        };
        Self::choose(x, |n| others(n).saturating_add(ranks[n]), |n| ranks[n])
    }

    /// Renumbers the modes [`modes_to_renumber`] picks.
    fn choose(
        x: &CooTensor,
        width: impl Fn(usize) -> usize,
        least: impl Fn(usize) -> usize,
    ) -> Result<Option<Self>> {
        let empty = empty_rows(x);
        let Some(which) = modes_to_renumber(&empty, x.dims(), x.nnz(), width, least) else {
            return Ok(None);
        };
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
    /// with `ranks[m]` columns in mode `m` on the tensor's rows (f32).
    pub fn add_to_plan(&self, plan: &mut MemoryPlan, ranks: &[usize]) {
        let entries = (self.rows.dims.iter().zip(ranks))
            .fold(0u128, |s, (&d, &r)| s.saturating_add(d as u128 * r as u128));
        plan.add(
            "the tensor as given, beside its renumbered copy",
            self.tensor().coo_bytes() as u128,
            1,
        )
        .add("the model on the tensor's own rows", entries, 4);
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
