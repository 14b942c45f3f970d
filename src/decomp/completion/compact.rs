//! Completion on the rows that have training entries.
//!
//! A row without training entries is fixed at zero by every solver (module docs of
//! [`super`]), yet each epoch's host work — copying the factors, the penalty, the
//! extrapolated step, setting a mode's factor — and the CPU session's per-mode copies
//! of the other factors walk every row. Recommender data often has far more rows than
//! rows with entries: a 4-way tensor of 200 000 entries over modes of 0.5–3 M rows has
//! 9 % of its 6.5 M rows in use, and its ALS epochs spent about 2 s on the rows against
//! well under that on the entries. So a mode where at least [`EMPTY_SHARE`] of the rows
//! have no training entry runs on its used rows plus one spare row, where the
//! validation entries at the other rows go ([`Relabelled::of_modes`]); the penalty and
//! the mean biases count the rows left out as the zero rows they are
//! ([`super::bias::Layout::absent`]), and the model goes back to the tensor's rows at the
//! end. The initial factors are drawn (or given) on the tensor's rows and cut to the
//! used ones, so the run is the one on all rows, up to the order of floating-point
//! sums.

use super::CompletionModel;
use crate::error::Result;
use crate::tensor::CooTensor;
use crate::tensor::relabel::{Relabelled, empty_rows};

/// A mode runs on its used rows when at least this share of its rows has no training
/// entry: below it the saving is at most that share of the row-proportional work, and
/// renumbering costs a sort of the mode's indices.
pub const EMPTY_SHARE: f64 = 1.0 / 8.0;

/// A training tensor with its sparsely used modes renumbered, and the validation
/// entries on the same rows.
#[derive(Debug, Clone)]
pub struct Compaction {
    /// The renumbered training tensor and the way back.
    pub rows: Relabelled,
    /// The validation entries on the renumbered rows.
    pub validation: CooTensor,
}

impl Compaction {
    /// The compaction of `train` (with `validation`, of the same extents), `None` when
    /// no mode has [`EMPTY_SHARE`] of its rows without training entries.
    pub fn of(train: &CooTensor, validation: &CooTensor) -> Result<Option<Self>> {
        let which: Vec<bool> = (empty_rows(train).iter().zip(train.dims()))
            .map(|(&empty, &dim)| empty as f64 >= EMPTY_SHARE * dim as f64 && empty > 0)
            .collect();
        if !which.contains(&true) {
            return Ok(None);
        }
        let rows = Relabelled::of_modes(train, &which)?;
        let validation = rows.entries(validation)?;
        Ok(Some(Compaction { rows, validation }))
    }

    /// The renumbered training tensor.
    pub fn train(&self) -> &CooTensor {
        &self.rows.tensor
    }

    /// A line saying which modes run on their used rows.
    pub fn note(&self) -> String {
        let modes: Vec<String> = (0..self.rows.dims.len())
            .filter(|&m| self.rows.spare[m])
            .map(|m| {
                format!(
                    "mode {m}: {} of {} rows",
                    self.rows.used[m].len(),
                    self.rows.dims[m]
                )
            })
            .collect();
        format!(
            "completion runs on the rows with training entries ({}); the others stay at zero",
            modes.join(", ")
        )
    }

    /// `model`, fitted on the renumbered rows, on the tensor's own rows: zero where a
    /// row has no training entry.
    pub fn expand(&self, mut model: CompletionModel) -> CompletionModel {
        let r = &self.rows;
        model.factors = (model.factors.iter().enumerate())
            .map(|(m, f)| r.expand(m, f))
            .collect();
        model.biases = (model.biases.iter().enumerate())
            .map(|(m, b)| r.expand_values(m, b))
            .collect();
        model
    }
}
