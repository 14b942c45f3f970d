//! `sptmc tune`: measure where a dense tile becomes cheaper than its nonzeros on the
//! sparse path, per op and rank, on whatever backend the engine runs.
//!
//! 1. **Sweep.** For each tile density `t` of [`TuneOptions::tile_nnz`] generate a
//!    3rd-order block-dense tensor whose nonzeros all sit in 16³ tiles of exactly `t`
//!    nonzeros (same extents and about the same nonzero count for every `t`). Prepare
//!    it twice — threshold 1 (every tile dense) and `u32::MAX` (every nonzero sparse) —
//!    and time the op on all modes on each, interleaved, [`TuneOptions::repetitions`]
//!    times after a warm-up. The median divided by the number of tiles is the cost of a
//!    tile on each path.
//! 2. **Crossover.** The threshold is where the two per-tile cost curves cross
//!    ([`crossover`]), in `[1, 4097]`; 4097 means the dense path never pays.
//! 3. **Verification.** On one mixed tensor whose tiles span the whole density range,
//!    time the op at `T/2`, `T` and `2T` ([`verify_threshold`]) and record the ratios.
//!
//! Every measurement is kept in the [`TuneReport`], not only the winner; the report
//! renders as a table, as CSV for plots, as JSON, and as a profile for `tuning/`
//! ([`TuneReport::save_profile`]; the engine reads profiles with
//! [`crate::engine::profile`]).
//!
//! Split by job: `sweep` runs the procedure, `verify` times thresholds side by side,
//! `report` holds and writes the results.

pub mod crossover;
mod report;
mod sweep;
mod verify;

pub use report::{OpRankTuning, SweepRow, TensorSummary, TuneReport, VERIFY_CSV_HEADER, VerifyRow};
pub use sweep::{TuneOptions, TuneProgress, TuneStage, geometric_sweep, tune};
pub use verify::{ThresholdTiming, compare_thresholds, mixed_block_dense, verify_threshold};
