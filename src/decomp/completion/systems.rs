//! How many rows of a mode one ALS call builds the normal equations of: a budget of
//! bytes that grows with the entries and the factors, never with the rows times `R²`.

use super::bias::Layout;

/// The least bytes of normal equations one ALS call may build ([`systems_budget`]).
const MIN_SYSTEMS_BYTES: usize = 64 << 20;

/// The bytes of normal equations one ALS call may build: the most of
/// [`MIN_SYSTEMS_BYTES`], twice the training entries' indices and values, and the
/// factors. ALS builds and solves only the rows with entries, and a mode whose
/// systems (`R²` floats per row) are larger than this in several calls, so its
/// memory grows with the entries and the factors, not with the rows times `R²` (a
/// mode of 30 M rows at rank 8 with biases: 14 GB of systems at once). Each call also
/// reads the other modes' factors whole (padded copies on the CPU), so a call's
/// systems are never fewer bytes than the factors.
pub(super) fn systems_budget(nnz: usize, dims: &[usize], width: usize) -> usize {
    #[cfg(test)]
    if let Some(b) = tests::BUDGET.with(|b| b.get()) {
        return b;
    }
    let entries = nnz.saturating_mul(dims.len() + 1).saturating_mul(4);
    let factors = dims
        .iter()
        .sum::<usize>()
        .saturating_mul(width)
        .saturating_mul(4);
    MIN_SYSTEMS_BYTES
        .max(entries.saturating_mul(2))
        .max(factors)
}

/// The bytes of one row's ALS normal equations: the session's system (`K² + K`
/// floats, built whole where the backend reduces it to the bias layout) and, with
/// biases, the reduced one.
fn row_bytes(layout: &Layout) -> usize {
    let k = layout.width();
    let w = layout.rank + 1;
    let reduced = if layout.biases { w * w + w } else { 0 };
    (k * k + k + reduced) * 4
}

/// The rows of a mode whose ALS normal equations ([`row_bytes`]) fit in `budget` bytes
/// ([`systems_budget`]), at least 1.
pub(super) fn rows_per_call(budget: usize, layout: &Layout) -> usize {
    (budget / row_bytes(layout).max(1)).max(1)
}

/// ALS's buffers of normal equations for `nnz` training entries on extents `dims` at
/// CP rank `rank`: their bytes summed over the modes (one buffer per mode, of the rows
/// one call builds) and the most rows one call builds.
pub fn als_systems_bytes(nnz: usize, dims: &[usize], rank: usize, biases: bool) -> (u128, usize) {
    let layout = Layout {
        rank,
        order: dims.len(),
        biases,
        anchors: Vec::new(),
        absent: Vec::new(),
    };
    let per_call = rows_per_call(systems_budget(nnz, dims, layout.width()), &layout);
    let row = row_bytes(&layout) as u128;
    // A mode's rows with entries are at most its rows and the entries.
    let bytes = dims
        .iter()
        .map(|&d| d.min(nnz).min(per_call) as u128 * row)
        .sum();
    (bytes, per_call)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomp::completion::{CompletionOptions, complete, split};
    use crate::engine::Workload;
    use crate::ops::Op;
    use crate::tensor::generate::{GenSpec, Pattern, generate};
    use std::cell::Cell;

    thread_local! {
        /// This thread's systems budget in place of [`systems_budget`]'s.
        pub(super) static BUDGET: Cell<Option<usize>> = const { Cell::new(None) };
    }

    /// ALS taking each mode's rows in lists of a few rows gives the model it gives in
    /// one list per mode. Each row's solve reads only its own system, so the factors
    /// are the same bits; the loss that judges an extrapolated step comes from mode 0's
    /// systems in one list and from a pass over the entries in several, which differ
    /// by f32 rounding of the systems (about 1e-7 relative), so a step at that edge
    /// may be kept in one run and not the other. The validation RMSEs must agree to
    /// 1e-9 relative (no step flipped: the same factors up to the order of the f64
    /// sums) — a fixed seed, since the claim is about one computation done two ways.
    #[test]
    fn als_in_row_lists_gives_the_model_of_one_list() {
        // Rows 0..60 of 200 in mode 0 and 0..150 of 400 in mode 1 only: many rows
        // without entries.
        let x = generate(&GenSpec {
            dims: vec![60, 150, 30],
            nnz: 4000,
            pattern: Pattern::Uniform,
            seed: 11,
        })
        .unwrap();
        let idx: Vec<Vec<u32>> = (0..3).map(|m| x.indices(m).to_vec()).collect();
        let x = crate::CooTensor::new(vec![200, 400, 30], idx, x.values().to_vec()).unwrap();
        let s = split(&x, [0.8, 0.1, 0.1], 5).unwrap();
        let engine = crate::engine::Engine::cpu();
        let p = engine
            .prepare(
                &s.train,
                &[Workload {
                    op: Op::Completion,
                    rank: 4,
                }],
            )
            .unwrap();
        let o = CompletionOptions {
            rank: 4,
            lambda: Some(0.5),
            max_epochs: 12,
            patience: 12,
            ..CompletionOptions::default()
        };
        let layout = Layout {
            rank: 4,
            order: 3,
            biases: o.biases,
            anchors: Vec::new(),
            absent: Vec::new(),
        };
        let one = complete(&engine, &p, &s.validation, &o).unwrap();
        // Seven rows' systems per call.
        let seven = 7 * row_bytes(&layout);
        BUDGET.with(|b| b.set(Some(seven)));
        assert_eq!(rows_per_call(seven, &layout), 7);
        let many = complete(&engine, &p, &s.validation, &o);
        BUDGET.with(|b| b.set(None));
        let many = many.unwrap();
        assert_eq!(one.epochs.len(), many.epochs.len());
        for (a, b) in one.epochs.iter().zip(&many.epochs) {
            let rel = (a.validation_rmse - b.validation_rmse).abs() / a.validation_rmse;
            assert!(
                a.validation_rmse.is_finite() && rel <= 1e-9,
                "epoch {}: {} vs {}",
                a.epoch,
                a.validation_rmse,
                b.validation_rmse
            );
        }
        // The rows without entries stay at zero in both.
        for (fa, fb) in one.factors.iter().zip(&many.factors) {
            assert_eq!(fa.shape(), fb.shape());
            for (va, vb) in fa.data().iter().zip(fb.data()) {
                assert!((va - vb).abs() <= 1e-6 * va.abs().max(1e-3), "{va} vs {vb}");
            }
        }
        assert!(one.factors[0].row(150).iter().all(|&v| v == 0.0));
    }
}
