//! The plans of the models and the kernel command: what each allocates besides the
//! tensor and its prepared form, from the shapes and ranks alone.

use super::{MemoryPlan, rank_hint};
use crate::ops::Op;

impl MemoryPlan {
    /// CP-ALS of rank `rank` on a tensor of extents `dims`: factors and kernel outputs
    /// (f32), the f64 copies a front end makes of the returned factors (after the
    /// outputs are freed: 4 bytes per entry more than the run held), the `R × R` Grams
    /// and solve, and the per-block Grams of a mode's update. The update and the model's
    /// arrangement work in place (the update widens cache-sized sub-blocks to f64, not
    /// whole factors).
    pub fn cp(dims: &[usize], rank: usize) -> Self {
        let mut p = MemoryPlan::new(format!("CP-ALS rank {rank}"), rank_hint(&[rank], dims));
        let r = rank as u128;
        let rows: u128 = dims.iter().fold(0, |s, &d| s.saturating_add(d as u128));
        let widest = dims.iter().copied().max().unwrap_or(0);
        p.add(
            format!("factors and MTTKRP outputs ({rows} rows × {rank}, f32)"),
            rows.saturating_mul(r),
            8,
        )
        .add(
            format!("the model's factors as returned ({rows} rows × {rank}, f64 for f32 outputs)"),
            rows.saturating_mul(r),
            4,
        )
        .add_cp_solve(dims.len(), widest, rank);
        p
    }

    /// CP-ALS's dense algebra at rank `rank` on `order` modes whose longest factor has
    /// `rows` rows: the `R × R` Grams and solve, and the per-block Grams of a mode's
    /// update (f64).
    pub fn add_cp_solve(&mut self, order: usize, rows: usize, rank: usize) -> &mut Self {
        let rr = (rank as u128).saturating_mul(rank as u128);
        self.add(
            format!(
                "Grams and the solve ({} matrices of {rank} × {rank}, f64)",
                order + 6
            ),
            (order as u128 + 6).saturating_mul(rr),
            8,
        )
        .add(
            format!("a mode's update ({} per-block Grams, f64)", blocks(rows)),
            blocks(rows).saturating_mul(rr),
            8,
        )
    }

    /// CP-APR of rank `rank` on a tensor of extents `dims` with `nnz` nonzeros: the
    /// model's factors (f64), their f32 copies for the engine, every mode's last Φ
    /// (f32), the log-likelihood's scratch and the CPU's `π` (the product of the other
    /// modes' factor rows of every nonzero, f64).
    pub fn cp_apr(dims: &[usize], nnz: usize, rank: usize) -> Self {
        // The CPU's Φ session runs at the next specialized width.
        let w = crate::engine::cpu::phi_width(rank);
        let mut p = MemoryPlan::new(format!("CP-APR rank {rank}"), rank_hint(&[rank], dims));
        let r = rank as u128;
        let rows: u128 = dims.iter().fold(0, |s, &d| s.saturating_add(d as u128));
        let shortest = dims.iter().copied().min().unwrap_or(0) as u128;
        let widest = dims.iter().copied().max().unwrap_or(0) as u128;
        p.add(
            format!("the model's factors ({rows} rows × {rank}, f64 and f32)"),
            rows.saturating_mul(r),
            12,
        )
        .add(
            format!("every mode's Φ ({rows} rows × {rank}, f32)"),
            rows.saturating_mul(r),
            4,
        )
        .add(
            format!("the log-likelihood's scratch ({shortest} rows × {rank}, f32, twice)"),
            shortest.saturating_mul(r),
            8,
        )
        .add(
            format!("a mode's Φ and its update ({widest} rows × {rank}, f64, twice)"),
            widest.saturating_mul(r),
            16,
        )
        .add(
            format!("the CPU's π ({nnz} nonzeros × {w}, f64)"),
            (nnz as u128).saturating_mul(w as u128),
            8,
        );
        p
    }

    /// Tucker-HOOI with `ranks` on a tensor of extents `dims` on `workers` threads:
    /// factors, the largest mode's TTMc output (`I_n × Π_{m≠n} R_m`, f32; one buffer
    /// serves every mode), the largest mode's SVD or Gram eigendecomposition (f64) and
    /// the core.
    pub fn tucker(dims: &[usize], ranks: &[usize], workers: usize) -> Self {
        let mut p = MemoryPlan::new(
            format!("Tucker-HOOI ranks {ranks:?}"),
            rank_hint(ranks, dims),
        );
        let factors = factor_entries(dims, ranks);
        // The start is drawn and made orthonormal a row block at a time, into the f32 factors.
        p.add("factors (f32)", factors, 4);
        let mut outputs = 0u128;
        let mut worst = 0u128;
        for n in 0..dims.len() {
            let (rows, cols) = (dims[n] as u128, others(ranks, n));
            let k = ranks[n] as u128;
            // One output buffer serves every mode: the largest mode's.
            outputs = outputs.max(rows.saturating_mul(cols));
            let linalg = if rows <= cols {
                // f64 copy, the SVD's workspace and its factors.
                rows.saturating_mul(cols)
                    .saturating_mul(3)
                    .saturating_add(rows.saturating_mul(rows))
            } else {
                // Per-block Grams (a wave of one per worker at a time), the Gram, its
                // eigenvectors and workspace, Y·V and QR.
                let gram = (blocks(dims[n]).min(workers.max(1) as u128) + 4)
                    .saturating_mul(cols.saturating_mul(cols))
                    .saturating_add(rows.saturating_mul(k).saturating_mul(3));
                // Or, where block Krylov runs on the output itself (a row block widened
                // at a time, no f64 copy of it), the solver's workspace and a product's
                // `Y x` (freed before any fall back to the Gram).
                let on_y = usize::try_from(cols).is_ok_and(|c| {
                    crate::decomp::leading::krylov_on_y_is_cheaper(dims[n], c, ranks[n])
                });
                let krylov = if on_y {
                    let block =
                        crate::decomp::block_krylov::workspace_entries(cols as usize, ranks[n])
                            as u128;
                    let width = crate::decomp::block_krylov::block_width(ranks[n]) as u128;
                    block.saturating_add(rows.saturating_mul(width))
                } else {
                    0
                };
                gram.max(krylov)
            };
            worst = worst.max(linalg);
        }
        let last = dims.len().saturating_sub(1);
        let core = ranks
            .get(last)
            .map_or(0, |&r| r as u128)
            .saturating_mul(others(ranks, last));
        p.add("the largest mode's TTMc output (f32)", outputs, 4)
            .add(
                "the largest mode's SVD or Gram eigendecomposition (f64)",
                worst,
                8,
            )
            .add(
                "the core and its per-block partial products (f64)",
                (blocks(dims.get(last).copied().unwrap_or(0)) + 2).saturating_mul(core),
                8,
            );
        p
    }

    /// GCP of rank `rank` on a tensor of extents `dims` with `nnz` stored entries, drawing
    /// `samples` entries at a time in all (its gradient samples and loss sample; 0 for
    /// L-BFGS-B, which keeps the stored entries as one sample), with L-BFGS-B's history
    /// of `lbfgs_memory` pairs when given: the model's parameters `P = Σ I_m · R` as
    /// f64 vectors (SGD: the factors, Adam's two moments, the three kept at the best
    /// epoch, the gradient and the initial draw; L-BFGS-B: its pairs and workspace), and
    /// the entries the sampler or the objective indexes.
    pub fn gcp(
        dims: &[usize],
        nnz: usize,
        rank: usize,
        samples: u128,
        lbfgs_memory: Option<usize>,
    ) -> Self {
        let mut p = MemoryPlan::new(format!("GCP rank {rank}"), rank_hint(&[rank], dims));
        let rows: u128 = dims.iter().fold(0, |s, &d| s.saturating_add(d as u128));
        let params = rows.saturating_mul(rank as u128);
        // Per entry: its `order` u32 indices, the value and a weight or linear key.
        let entry = 4 * dims.len() as u128 + 16;
        // The model's norm: its Gram matrices, summed from partial ones.
        let grams = (crate::decomp::gcp::GRAM_PARTS as u128 + 2)
            .saturating_mul(rank as u128)
            .saturating_mul(rank as u128);
        p.add(
            format!("the model's Gram matrices ({rank} × {rank}, f64)"),
            grams,
            8,
        );
        match lbfgs_memory {
            None => p
                .add(
                    format!("factors, Adam's moments, their kept copies and the gradient ({params} parameters × 9, f64)"),
                    params.saturating_mul(9),
                    8,
                )
                .add("the initial factors as drawn (f32)", params, 4)
                .add(
                    "the sampler's entries and their hash set",
                    nnz as u128,
                    entry.saturating_mul(2),
                )
                .add("the samples (two gradient samples and the loss sample)", samples, entry),
            Some(m) => p
                .add(
                    format!("L-BFGS-B's {m} pairs, bounds and workspace ({params} parameters, f64)"),
                    // The 2m history vectors, and about 28 more of P: the bounds, the
                    // optimizer's Cauchy-point, subspace and line-search vectors, and the
                    // objective's point, gradient and factor-shaped buffers (the count
                    // read from a run's peak at m = 10: 48 vectors of P).
                    params.saturating_mul(2 * m as u128 + 28),
                    8,
                )
                .add("the stored entries as the objective's sample", nnz as u128, entry),
        };
        p
    }

    /// One `op` on `mode` (`mttkrp`/`ttmc` on the command line) with factor ranks
    /// `ranks`: the factors, the result (two while repetitions replace it), and with
    /// `check` the FP64 reference, with `out` the f64 copy written.
    pub fn kernel(
        op: Op,
        dims: &[usize],
        mode: usize,
        ranks: &[usize],
        check: bool,
        out: bool,
    ) -> Self {
        let mut p = MemoryPlan::new(
            format!("{op} of mode {mode} with ranks {ranks:?}"),
            rank_hint(ranks, dims),
        );
        let factors = factor_entries(dims, ranks);
        let cols = match op {
            Op::Mttkrp | Op::Phi | Op::Completion => (0..dims.len())
                .filter(|&m| m != mode || op == Op::Phi)
                .map(|m| ranks[m] as u128)
                .max()
                .unwrap_or(1),
            Op::Ttmc => others(ranks, mode),
        };
        let rows = dims.get(mode).map_or(0, |&d| d as u128);
        let result = rows.saturating_mul(cols);
        p.add("factors (f32)", factors, 4).add(
            format!("the result ({rows} × {cols}, f32, twice)"),
            result,
            8,
        );
        if check {
            p.add("the FP64 reference result", result, 8);
        }
        if out {
            p.add("the result widened for writing (f64)", result, 8);
        }
        p
    }
}

/// `Σ_m I_m · R_m`: the entries of factors of ranks `ranks` over modes of lengths
/// `dims`, saturating.
fn factor_entries(dims: &[usize], ranks: &[usize]) -> u128 {
    (dims.iter().zip(ranks)).fold(0u128, |s, (&d, &r)| {
        s.saturating_add((d as u128).saturating_mul(r as u128))
    })
}

/// `Π_{m≠n} R_m`, saturating.
fn others(ranks: &[usize], n: usize) -> u128 {
    ranks
        .iter()
        .enumerate()
        .filter(|&(m, _)| m != n)
        .fold(1u128, |acc, (_, &r)| acc.saturating_mul(r as u128))
}

/// Row blocks of a reduction over `n` rows in [`crate::decomp`] (at most 64).
fn blocks(n: usize) -> u128 {
    n.div_ceil(n.div_ceil(64).max(1024)).max(1) as u128
}
