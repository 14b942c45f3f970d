//! What a rank allocates for its block, checked before it allocates any of it: the
//! plan a single process makes for a tensor of the block's extents (its slabs) and
//! nonzeros (the model's factors and buffers, the tensor, the prepared form and its
//! build, the CPU's row groups and streamed blocks), plus the buffers through which a
//! mode's rows are exchanged. Each rank checks its own; [`super::comm::Channel::agree`]
//! then stops every rank with the lowest failing rank's error, before any rank draws
//! its factors or prepares its block.

use super::exchange::Block;
use crate::engine::cpu::{CacheSizes, add_streamed_to_plan};
use crate::engine::{Backend, Engine, Workload};
use crate::memplan::{MemoryPlan, rank_hint};

/// The plan of rank `me` for `block` prepared for `workload`, with `model` the plan of
/// the model named `name` for the block's extents ([`MemoryPlan::cp`],
/// [`MemoryPlan::cp_apr`]); `mttkrp` when the model's kernel is MTTKRP (CP-ALS), whose
/// CPU form keeps padded copies and streamed blocks besides the row groups (CP-APR's Φ
/// does not).
pub(super) fn block_plan(
    engine: &Engine,
    block: &Block,
    workload: Workload,
    (name, model): (&str, &MemoryPlan),
    mttkrp: bool,
    me: usize,
) -> MemoryPlan {
    let x = &block.tensor;
    let (dims, nnz, rank) = (x.dims(), x.nnz(), workload.rank);
    let widest = dims.iter().copied().max().unwrap_or(0) as u128;
    let mut plan = MemoryPlan::new(
        format!(
            "{name} rank {rank} on MPI rank {me}'s block ({nnz} nonzeros, slabs of {dims:?} rows)"
        ),
        format!("{}, or run on more ranks", rank_hint(&[rank], &block.dims)),
    );
    plan.extend(model).add(
        format!(
            "a mode's rows in the exchange ({widest} slab rows × {rank}: received f32, summed f64, gathered f32)"
        ),
        widest.saturating_mul(rank as u128),
        16,
    );
    let workers = engine.install(rayon::current_num_threads);
    plan.add_tensor(nnz, x.order()).reserve_for_workers(workers);
    if nnz == 0 {
        // No block to prepare: the rank only owns and exchanges rows.
        return plan;
    }
    let values = engine.values().resolve_values(x.values());
    let threshold = engine.threshold_for(workload, values).threshold;
    plan.add_row_groups(dims, nnz, workers).add_prepare(
        nnz,
        x.order(),
        1,
        threshold,
        workload.op,
        values,
    );
    if mttkrp && let Backend::Cpu(_) = engine.backend() {
        plan.add_padded_rank(dims, rank);
        let modes: Vec<usize> = (0..dims.len()).collect();
        add_streamed_to_plan(
            &mut plan,
            dims,
            nnz,
            rank,
            &modes,
            CacheSizes::of_this_machine(),
        );
    }
    plan
}
