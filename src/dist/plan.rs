//! What a rank allocates for its block, checked before it allocates any of it: its
//! model's buffers (its slabs of the factors, the rows it owns, what a mode's exchange
//! receives and gathers), and what a single process holds for a tensor of the block's
//! extents and nonzeros (the tensor, the prepared form and its build, the CPU's row
//! groups and streamed blocks). Each rank checks its own;
//! [`super::comm::Channel::agree`] then stops every rank with the lowest failing rank's
//! error, before any rank draws its factors or prepares its block.

use super::exchange::{Block, UsedIndices};
use super::partition::Partition;
use crate::engine::cpu::{CacheSizes, add_streamed_to_plan, phi_width};
use crate::engine::{Backend, Engine, Workload};
use crate::memplan::{MemoryPlan, rank_hint};

/// The rows of rank `me` in every mode: its slabs' and its owned rows' sums, and per
/// mode its slab rows, owned rows and the partial rows it receives for them (one
/// piece from every member of its layer).
struct Rows {
    slabs: u128,
    owned: u128,
    per_mode: Vec<(u128, u128, u128)>,
}

impl Rows {
    fn of(part: &Partition, order: usize, me: usize) -> Rows {
        let per_mode: Vec<(u128, u128, u128)> = (0..order)
            .map(|m| {
                let owned = part.owned(m, me).len() as u128;
                let members = part.members(m, me).len() as u128;
                (part.slab(m, me).len() as u128, owned, owned * members)
            })
            .collect();
        Rows {
            slabs: per_mode.iter().map(|p| p.0).sum(),
            owned: per_mode.iter().map(|p| p.1).sum(),
            per_mode,
        }
    }

    /// Every mode's routes (`super::routes`): at most each slab row's index in the
    /// lists it keeps of the rows its block uses, and each of its owned rows' once per
    /// member, u32.
    fn route_lists(&self) -> u128 {
        self.per_mode.iter().map(|&(s, _, got)| s + got).sum()
    }

    /// The widest slab.
    fn widest_slab(&self) -> u128 {
        self.widest_mode(|s, _, _| s)
    }

    /// The most over the modes of `f(slab rows, owned rows, received rows)`.
    fn widest_mode(&self, f: impl Fn(u128, u128, u128) -> u128) -> u128 {
        (self.per_mode.iter())
            .map(|&(s, o, r)| f(s, o, r))
            .max()
            .unwrap_or(0)
    }
}

/// Distributed CP-ALS's own buffers on rank `me` at rank `rank` ([`super::cp_als`]):
/// its slabs of every factor, the block's partial rows of one mode and the rows it
/// owns (f32); the Grams and the solve; one mode's reduction (the partial rows it
/// receives and their sums, f32), and the rows packed for it where only the used rows
/// travel; the routes' row lists. The updated rows are gathered into the slab.
pub(super) fn cp_als_model(part: &Partition, order: usize, rank: usize, me: usize) -> MemoryPlan {
    let rows = Rows::of(part, order, me);
    let r = rank as u128;
    let widest_owned = rows.widest_mode(|_, o, _| o);
    let mut p = MemoryPlan::new("CP-ALS", "");
    p.add(
        format!("the factors' slab rows ({} rows × {rank}, f32)", rows.slabs),
        rows.slabs.saturating_mul(r),
        4,
    )
    .add(
        format!(
            "a mode's partial rows ({} slab rows × {rank}, f32)",
            rows.widest_slab()
        ),
        rows.widest_slab().saturating_mul(r),
        4,
    )
    .add(
        format!("the rows it owns ({} rows × {rank}, f32)", rows.owned),
        rows.owned.saturating_mul(r),
        4,
    )
    .add(
        format!("a mode's reduction (the partial rows received and their sums × {rank}, f32)"),
        rows.widest_mode(|_, o, got| got.saturating_add(o))
            .saturating_mul(r),
        4,
    )
    .add(
        format!("a mode's rows packed for the exchange (at most the slab × {rank}, f32)"),
        rows.widest_slab().saturating_mul(r),
        4,
    )
    .add(
        "the routes' lists of the rows each block uses (u32)".to_string(),
        rows.route_lists(),
        4,
    )
    .add_cp_solve(order, widest_owned as usize, rank);
    p
}

/// Distributed CP-APR's own buffers on rank `me` at rank `rank` on a block of `nnz`
/// nonzeros ([`super::cp_apr`]): its slabs of every factor and every mode's last Φ of
/// the rows it owns (f64); the block's Φ of a slab (f64); one slab-sized buffer at a
/// time besides (the target rows gathered, then the partial Φ rows received, or the
/// log-likelihood's scaled copy, f64), and the rows packed for a mode's exchange where
/// only the used rows travel (f64); the routes' row lists; with `sessions` (the engine offers Φ sessions)
/// the CPU's `π` (the product of the other modes' factor rows of every nonzero, f64),
/// without them the f32 copies of the slabs and of a slab's Φ that [`crate::Op::Phi`] per call
/// reads and writes.
pub(super) fn cp_apr_model(
    part: &Partition,
    order: usize,
    (nnz, rank): (usize, usize),
    me: usize,
    sessions: bool,
) -> MemoryPlan {
    let rows = Rows::of(part, order, me);
    let r = rank as u128;
    let w = phi_width(rank) as u128;
    let mut p = MemoryPlan::new("CP-APR", "");
    p.add(
        format!(
            "the factors' slab rows and the owned rows' last Φ ({} and {} rows × {rank}, f64)",
            rows.slabs, rows.owned
        ),
        rows.slabs.saturating_add(rows.owned).saturating_mul(r),
        8,
    )
    .add(
        format!(
            "the block's Φ of a slab ({} slab rows × {rank}, f64)",
            rows.widest_slab()
        ),
        rows.widest_slab().saturating_mul(r),
        8,
    )
    .add(
        format!(
            "a mode's exchange (the slab gathered, then the partial Φ rows received, f64) × {rank}"
        ),
        rows.widest_mode(|s, _, got| s.max(got)).saturating_mul(r),
        8,
    )
    .add(
        format!(
            "a mode's rows packed for the exchange (at most the slab and the rows received, f64) × {rank}"
        ),
        rows.widest_mode(|s, _, got| s.saturating_add(got))
            .saturating_mul(r),
        8,
    )
    .add(
        "the routes' lists of the rows each block uses (u32)".to_string(),
        rows.route_lists(),
        4,
    );
    if sessions {
        p.add(
            format!("the CPU's π ({nnz} nonzeros × {w}, f64)"),
            (nnz as u128).saturating_mul(w),
            8,
        );
    } else {
        p.add(
            format!(
                "Φ per call: the slabs and a slab's Φ ({} and {} rows × {rank}, f32)",
                rows.slabs,
                rows.widest_slab()
            ),
            rows.slabs
                .saturating_add(rows.widest_slab())
                .saturating_mul(r),
            4,
        );
    }
    p
}

/// Adds to `model` the tensor's rows rank `me` draws for one mode's start where the
/// run holds only the used rows `rows` ([`super::init::start_rows`]): the most of any
/// mode's, its slab's first to last used row or the rows its owned ones stand for.
pub(super) fn add_start_draw(
    model: &mut MemoryPlan,
    part: &Partition,
    rows: &UsedIndices,
    rank: usize,
    me: usize,
) {
    let drawn = (0..rows.used.len())
        .map(|m| {
            let (slab, owned) = (part.slab(m, me), part.owned(m, me));
            match &rows.used[m] {
                Some(u) if !slab.is_empty() => {
                    let range = (u[slab.end - 1] - u[slab.start]) as usize + 1;
                    range.max(rows.span(m, owned).len())
                }
                _ => slab.len(),
            }
        })
        .max()
        .unwrap_or(0);
    model.add(
        format!("a mode's start drawn on the tensor's rows ({drawn} rows × {rank}, f32)"),
        drawn as u128 * rank as u128,
        4,
    );
}

/// The plan of rank `me` for `block` prepared for `workload`, with `model` the plan of
/// the model named `name` on this rank ([`cp_als_model`], [`cp_apr_model`]); `mttkrp`
/// when the model's kernel is MTTKRP (CP-ALS), whose CPU form keeps padded copies and
/// streamed blocks besides the row groups (CP-APR's Φ does not).
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
    let mut plan = MemoryPlan::new(
        format!(
            "{name} rank {rank} on MPI rank {me}'s block ({nnz} nonzeros, slabs of {dims:?} rows)"
        ),
        format!("{}, or run on more ranks", rank_hint(&[rank], &block.dims)),
    );
    // A rank without nonzeros prepares nothing: it only owns and exchanges rows.
    let build = (nnz > 0).then(|| {
        let (threshold, values) = engine.form_for(x, workload);
        (threshold, workload.op, values)
    });
    plan.extend(model)
        .add_run_on_tensor(dims, nnz, engine.workers(), build);
    if nnz > 0
        && mttkrp
        && let Backend::Cpu(_) = engine.backend()
    {
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
