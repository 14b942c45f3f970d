//! Memory plans: what a command will allocate, computed from the shapes before any work
//! starts, and checked against the memory this process may really use.
//!
//! The memory a process may use is the smallest of (Linux; elsewhere nothing is known
//! and every plan passes):
//! - `MemAvailable` of `/proc/meminfo`;
//! - the soft `RLIMIT_AS` (`ulimit -v`) less the address space in use (`VmSize`);
//! - the soft `RLIMIT_DATA` (`ulimit -d`) less the data segment in use (`VmData`);
//! - the memory cgroup's limit less its usage, over the process's cgroup and its
//!   ancestors (cgroup v2), or the v1 memory controller.
//!
//! These are read from `/proc` and `/sys/fs/cgroup` text, which needs no dependency
//! (`limits`). Sizes are summed in `u128` and saturate, so no rank or extent a user
//! can type overflows a plan.
//!
//! `ulimit -v` also counts address space a run reserves but never touches, which the
//! other limits do not: each worker thread's malloc arena (glibc reserves 64 MiB per
//! arena) and the packing buffer faer's matrix products keep per thread (twice the
//! last-level cache). A plan counts these as [`MemoryPlan::reserve_for_workers`] says,
//! against `ulimit -v` alone; the command line asks glibc for a single arena when
//! `ulimit -v` is set ([`share_one_malloc_arena`]), so there only the buffers count.

mod limits;
mod models;

pub use limits::{
    Available, available, human_bytes, last_level_cache_bytes, peak_rss, share_one_malloc_arena,
};

use crate::error::{Error, Result};
use crate::ops::Op;
use limits::{ARENA_RESERVE, ONE_ARENA, THREAD_STACK, available_reserving};
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest plan [`MemoryPlan::check`] has passed or refused in this process.
static LARGEST_CHECKED: AtomicU64 = AtomicU64::new(0);

/// The bytes of the largest plan checked so far in this process (0: none): what a
/// command reports as its planned memory.
pub fn largest_checked() -> u64 {
    LARGEST_CHECKED.load(Ordering::Relaxed)
}

/// Fewest nonzeros per chunk of the CPU's row-group build.
pub const ROW_GROUPS_CHUNK_NNZ: usize = 1 << 16;
/// Whether `workers` build the row groups of a tensor of `nnz` nonzeros side by side:
/// under [`ROW_GROUPS_CHUNK_NNZ`] per worker, one mode's chunks leave workers idle.
pub fn row_groups_side_by_side(nnz: usize, workers: usize) -> bool {
    nnz < ROW_GROUPS_CHUNK_NNZ.saturating_mul(workers)
}

/// What a command will allocate, part by part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    what: String,
    hint: String,
    parts: Vec<(String, u128)>,
    /// Per part, when it is held.
    phases: Vec<Phase>,
    /// Address space reserved but not used (counted against `ulimit -v` only).
    reserved: u128,
}

/// When a part of a plan is held: the tensor and its prepared form for the whole run;
/// the HLS build's scratch only while the form is built, before the fit allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Whole,
    Build,
    Fit,
}

impl MemoryPlan {
    /// An empty plan for `what` (e.g. `cp rank 16`); `hint` says which option reduces
    /// it ([`rank_hint`]).
    pub fn new(what: impl Into<String>, hint: impl Into<String>) -> Self {
        MemoryPlan {
            what: what.into(),
            hint: hint.into(),
            parts: Vec::new(),
            phases: Vec::new(),
            reserved: 0,
        }
    }

    /// The plan renamed: `what` it is for and the `hint` that lowers it.
    pub fn named(mut self, what: impl Into<String>, hint: impl Into<String>) -> Self {
        self.what = what.into();
        self.hint = hint.into();
        self
    }

    /// Adds `count` elements of `elem_bytes` each, described by `part`.
    pub fn add(&mut self, part: impl Into<String>, count: u128, elem_bytes: u128) -> &mut Self {
        self.add_in(Phase::Fit, part, count, elem_bytes)
    }

    /// [`MemoryPlan::add`], held during `phase`.
    fn add_in(
        &mut self,
        phase: Phase,
        part: impl Into<String>,
        count: u128,
        elem_bytes: u128,
    ) -> &mut Self {
        self.parts
            .push((part.into(), count.saturating_mul(elem_bytes)));
        self.phases.push(phase);
        self
    }

    /// Adds every part of `other`.
    pub fn extend(&mut self, other: &MemoryPlan) -> &mut Self {
        self.parts.extend(other.parts.iter().cloned());
        self.phases.extend(other.phases.iter().copied());
        self.reserved = self.reserved.saturating_add(other.reserved);
        self
    }

    /// Counts the address space `workers` threads doing the run's dense algebra reserve
    /// without using it: faer's per-thread packing buffer (twice the last-level cache),
    /// a stack each and, unless [`share_one_malloc_arena`] took effect, a malloc arena
    /// each. It counts against `ulimit -v` only, never in [`MemoryPlan::bytes`] (which
    /// is resident memory). Threads that already reserved theirs in an earlier run of
    /// this process are counted again: the plan errs toward refusing.
    pub fn reserve_for_workers(&mut self, workers: usize) -> &mut Self {
        let gemm = 2 * last_level_cache_bytes().unwrap_or(0) as u128;
        let arena = if ONE_ARENA.load(Ordering::Relaxed) {
            0
        } else {
            ARENA_RESERVE
        };
        let per = gemm + arena + THREAD_STACK;
        self.reserved = self
            .reserved
            .saturating_add((workers as u128).saturating_mul(per));
        self
    }

    /// The address space [`MemoryPlan::reserve_for_workers`] counted, saturating.
    pub fn reserved_bytes(&self) -> u64 {
        u64::try_from(self.reserved).unwrap_or(u64::MAX)
    }

    /// The parts: a description and bytes each.
    pub fn parts(&self) -> &[(String, u128)] {
        &self.parts
    }

    /// Bytes at the peak, saturating at `u64::MAX`: the parts held for the whole run,
    /// plus the larger of the HLS build's scratch and what the fit allocates (the
    /// scratch is freed before the fit starts).
    pub fn bytes(&self) -> u64 {
        let sum = |phase: Phase| {
            (self.parts.iter().zip(&self.phases))
                .filter(|&(_, &p)| p == phase)
                .fold(0u128, |s, ((_, b), _)| s.saturating_add(*b))
        };
        let total = sum(Phase::Whole).saturating_add(sum(Phase::Build).max(sum(Phase::Fit)));
        u64::try_from(total).unwrap_or(u64::MAX)
    }

    /// Checks the plan against [`available`].
    pub fn check(&self) -> Result<()> {
        LARGEST_CHECKED.fetch_max(self.bytes(), Ordering::Relaxed);
        self.check_against(available_reserving(self.reserved_bytes()).as_ref())
    }

    /// Checks the plan against `available` (`None`: nothing known, the plan passes
    /// unless it exceeds the address space).
    pub fn check_against(&self, available: Option<&Available>) -> Result<()> {
        let needed = self.bytes();
        let (room, limited_by) = match available {
            Some(a) => (a.bytes, a.limited_by.clone()),
            None => (isize::MAX as u64, "the address space".to_string()),
        };
        if needed <= room {
            return Ok(());
        }
        let (part, bytes) = self
            .parts
            .iter()
            .max_by_key(|(_, b)| *b)
            .cloned()
            .unwrap_or_default();
        Err(Error::Memory {
            what: self.what.clone(),
            needed,
            available: room,
            limited_by,
            largest: format!(
                "{part}: {}",
                human_bytes(u64::try_from(bytes).unwrap_or(u64::MAX))
            ),
            hint: self.hint.clone(),
        })
    }

    /// The HLS build for `op` of a tensor of `nnz` nonzeros and `order` modes into
    /// `forms` forms with tile threshold at least `threshold`: the builder's scratch
    /// ([`crate::hls::HlsBuilder::scratch_bytes_per_nonzero`], for `op`'s key order and
    /// with the slabs where 3rd-order tiles are classified), freed before the fit; and
    /// per form its sparse part and dense tiles (at most `nnz / threshold` tiles, each
    /// with its key, bitmap and value offset), its values stored as `values`.
    pub fn add_prepare(
        &mut self,
        nnz: usize,
        order: usize,
        forms: usize,
        threshold: u32,
        op: Op,
        values: crate::hls::ValueType,
    ) -> &mut Self {
        let nnz = nnz as u128;
        let forms = forms.max(1) as u128;
        let tiles = if order == crate::hls::TILE_ORDER {
            nnz / threshold.max(1) as u128
        } else {
            0
        };
        let key_order = crate::hls::KeyOrder::for_op(op);
        let classifies =
            order == crate::hls::TILE_ORDER && threshold as usize <= crate::hls::DenseTile::CELLS;
        let scratch =
            crate::hls::HlsBuilder::scratch_bytes_per_nonzero(key_order, classifies, values);
        let what = format!(
            "HLS build: {values} values, keys{}{}",
            match key_order {
                crate::hls::KeyOrder::Mode => " in mode order",
                crate::hls::KeyOrder::ByExtent => " sorted with their positions",
            },
            if classifies { " and tile slabs" } else { "" }
        );
        self.add_in(Phase::Build, what, nnz, scratch as u128)
            .add_in(
                Phase::Whole,
                format!("HLS form(s): sparse part, {values} values"),
                nnz.saturating_mul(forms),
                // A 4-byte key, the value, and 3 bytes of block metadata and slack.
                7 + values.bytes() as u128,
            )
            .add_in(
                Phase::Whole,
                "HLS form(s): dense tiles",
                tiles.saturating_mul(forms),
                crate::hls::DenseTile::META_BYTES as u128,
            )
    }

    /// The CPU walk's private outputs: `floats` per worker but the first
    /// ([`crate::engine::cpu::private_output_floats`]), kept between calls.
    pub fn add_private_outputs(&mut self, workers: usize, floats: usize) -> &mut Self {
        if floats == 0 || workers < 2 {
            return self;
        }
        let others = workers - 1;
        let what = format!("the CPU's private outputs ({others} workers × {floats} floats)");
        self.add(what, (others as u128).saturating_mul(floats as u128), 4)
    }

    /// The CPU's MTTKRP at a rank other than its specialized widths: column blocks of
    /// the factors padded to the next width and outputs of those widths, during each
    /// call ([`crate::engine::cpu::mttkrp_width`]); nothing at a specialized rank.
    pub fn add_padded_rank(&mut self, dims: &[usize], rank: usize) -> &mut Self {
        let Some(w) = crate::engine::cpu::mttkrp_width(rank) else {
            return self;
        };
        let rows: u128 = dims.iter().fold(0, |s, &d| s.saturating_add(d as u128));
        let widest = dims.iter().copied().max().unwrap_or(0) as u128;
        self.add(
            format!("the CPU's MTTKRP copies of rank {rank}, {w} columns (f32)"),
            rows.saturating_add(widest).saturating_mul(w as u128),
            4,
        )
    }

    /// The tensor as read (COO: a `u32` index per mode and an `f64` value per nonzero).
    pub fn add_tensor(&mut self, nnz: usize, order: usize) -> &mut Self {
        self.add_in(
            Phase::Whole,
            format!("the tensor ({nnz} nonzeros, COO)"),
            nnz as u128,
            4 * order as u128 + 8,
        )
    }

    /// What a run on a tensor of extents `dims` with `nnz` nonzeros holds besides its
    /// model, on `workers` threads: the tensor as read ([`MemoryPlan::add_tensor`]), the
    /// threads' reserves ([`MemoryPlan::reserve_for_workers`]), the CPU's row groups
    /// (every op groups the nonzeros by row: [`MemoryPlan::add_row_groups`]) and, with
    /// `build` (the threshold, op and value type of [`Engine::form_for`](crate::engine::Engine::form_for)), the
    /// HLS build of one form ([`MemoryPlan::add_prepare`]). Without `build` the form is
    /// one kept from an earlier call, or there are no nonzeros to prepare.
    pub fn add_run_on_tensor(
        &mut self,
        dims: &[usize],
        nnz: usize,
        workers: usize,
        build: Option<(u32, Op, crate::hls::ValueType)>,
    ) -> &mut Self {
        self.add_tensor(nnz, dims.len())
            .reserve_for_workers(workers)
            .add_row_groups(dims, nnz, workers);
        if let Some((threshold, op, values)) = build {
            self.add_prepare(nnz, dims.len(), 1, threshold, op, values);
        }
        self
    }

    /// The CPU's nonzeros grouped by row of every mode, built by the first MTTKRP,
    /// TTMc, Φ or completion call: per mode and nonzero the other modes' `u32` indices and
    /// an `f32` value (`N² · 4` bytes per nonzero in all), per mode the rows' offsets,
    /// and a `u32` row label per nonzero of the mode being built (of every mode, built
    /// side by side, where [`row_groups_side_by_side`]).
    pub fn add_row_groups(&mut self, dims: &[usize], nnz: usize, workers: usize) -> &mut Self {
        let order = dims.len() as u128;
        let rows: u128 = dims.iter().fold(0, |s, &d| s.saturating_add(d as u128 + 1));
        let (labelled, which) = if row_groups_side_by_side(nnz, workers) {
            (order, "every mode")
        } else {
            (1, "the mode being grouped")
        };
        self.add(
            format!("the CPU's row groups ({order} modes × {nnz} nonzeros)"),
            (nnz as u128).saturating_mul(order.saturating_mul(order)),
            4,
        )
        .add(format!("the row groups' offsets ({rows} rows)"), rows, 8)
        .add(
            format!("the row labels of {which} ({nnz} nonzeros)"),
            (nnz as u128).saturating_mul(labelled),
            4,
        )
    }
}

/// What lowers a plan of `ranks` over modes of lengths `dims`, in the command line's
/// words: a lower `--rank` or `--ranks`, or where every rank is 1 already, nothing but
/// more memory (the lengths say why).
pub fn rank_hint(ranks: &[usize], dims: &[usize]) -> String {
    if ranks.iter().all(|&r| r <= 1) {
        format!(
            "at --rank 1 already: the modes' lengths {dims:?} need more memory than is available"
        )
    } else if ranks.len() == 1 {
        format!("lower --rank (the modes' lengths are {dims:?})")
    } else {
        format!("lower --ranks (the modes' lengths are {dims:?})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_saturate_instead_of_overflowing() {
        let p = MemoryPlan::tucker(&[1 << 32; 20], &[1 << 20; 20], 4);
        assert_eq!(p.bytes(), u64::MAX);
        let e = p.check_against(None).unwrap_err().to_string();
        assert!(
            e.contains("not enough memory") && e.contains("--ranks"),
            "{e}"
        );
        let c = MemoryPlan::cp(&[usize::MAX, 3], usize::MAX);
        assert_eq!(c.bytes(), u64::MAX);
    }

    #[test]
    fn a_plan_fails_against_a_smaller_limit_and_names_it() {
        let p = MemoryPlan::cp(&[1000, 1000, 1000], 10_000);
        // Gram-sized parts dominate: (3 + 6) × 10^8 × 8 bytes and more.
        assert!(p.bytes() > 7_200_000_000, "{}", p.bytes());
        let small = Available {
            bytes: 4_000_000_000,
            limited_by: "ulimit -v".into(),
        };
        let e = p.check_against(Some(&small)).unwrap_err().to_string();
        for w in ["CP-ALS rank 10000", "ulimit -v", "--rank", "GiB"] {
            assert!(e.contains(w), "{w}: {e}");
        }
        let big = Available {
            bytes: u64::MAX,
            limited_by: "x".into(),
        };
        p.check_against(Some(&big)).unwrap();
    }
}
