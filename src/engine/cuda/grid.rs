//! The shape of a launch: how the sparse kernel spreads an output row over a warp, how
//! many nonzeros each warp takes, and which grids a call runs in which order.

use crate::engine::Launch;

/// How the sparse kernel spreads an output row over a warp (see kernels/sparse.cu).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SparseLayout {
    /// log2 of the lanes that share one nonzero.
    pub lanes_log2: u32,
    /// Consecutive columns per vector (4: 16-byte loads and reductions; else 1).
    pub vec: u32,
    /// Vectors per lane in one pass.
    pub slots: u32,
    /// Columns one pass covers: lanes × slots × vec.
    pub cols_per_pass: u32,
}

/// The lane layout for an output of `out_cols` columns whose gathers may use 16-byte
/// vectors when `vec4` holds, with at most `max_slots` vectors per lane: as few lanes
/// per nonzero as cover the row (so small ranks keep every lane busy), more slots before
/// more passes.
pub fn sparse_layout(out_cols: u32, vec4: bool, max_slots: u32) -> SparseLayout {
    let vec = if vec4 { 4 } else { 1 };
    let vectors = out_cols.div_ceil(vec).max(1);
    let (lanes, slots) = if vectors <= 32 {
        (vectors.next_power_of_two(), 1)
    } else {
        (32, vectors.div_ceil(32).next_power_of_two().min(max_slots))
    };
    SparseLayout {
        lanes_log2: lanes.trailing_zeros(),
        vec,
        slots,
        cols_per_pass: lanes * slots * vec,
    }
}

/// Sparse nonzeros per warp (a multiple of 32): about two waves of the warps that fit
/// on the device at once, at least 64 and at most 4096 nonzeros.
pub fn sparse_batch(sp_nnz: usize, resident_warps: usize) -> u32 {
    let warps = (2 * resident_warps).max(1);
    let per_warp = sp_nnz.div_ceil(warps).clamp(64, 4096);
    per_warp.next_multiple_of(32) as u32
}

/// The grids of one call: `(kernel part, blocks)` in launch order, empty grids left out.
/// Fused: one grid of `n_tiles + sparse_blocks`, unless one part is empty, when the
/// other part's own kernel runs (the fused kernel reserves the dense part's shared
/// memory and registers for every block); sequential and concurrent: the dense tiles,
/// then the sparse batches, each kernel reading the same parameters.
pub fn grids(launch: Launch, n_tiles: usize, sparse_blocks: usize) -> Vec<(Part, usize)> {
    let all = match launch {
        Launch::Fused if n_tiles > 0 && sparse_blocks > 0 => {
            vec![(Part::Fused, n_tiles + sparse_blocks)]
        }
        _ => vec![(Part::Dense, n_tiles), (Part::Sparse, sparse_blocks)],
    };
    all.into_iter().filter(|&(_, b)| b > 0).collect()
}

/// Which kernel one grid of [`grids`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The fused kernel of the op.
    Fused,
    /// The op's dense-tiles-only kernel.
    Dense,
    /// The op's sparse-only kernel.
    Sparse,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_and_concurrent_launch_dense_then_sparse_and_skip_empty_grids() {
        assert_eq!(grids(Launch::Fused, 3, 5), vec![(Part::Fused, 8)]);
        // A fused call with one empty part runs the other part's own kernel.
        assert_eq!(grids(Launch::Fused, 0, 5), vec![(Part::Sparse, 5)]);
        assert_eq!(grids(Launch::Fused, 3, 0), vec![(Part::Dense, 3)]);
        for l in [Launch::Sequential, Launch::Concurrent] {
            assert_eq!(grids(l, 3, 5), vec![(Part::Dense, 3), (Part::Sparse, 5)]);
            assert_eq!(grids(l, 0, 5), vec![(Part::Sparse, 5)]);
            assert_eq!(grids(l, 3, 0), vec![(Part::Dense, 3)]);
        }
        assert!(grids(Launch::Fused, 0, 0).is_empty());
    }

    #[test]
    fn small_ranks_share_a_warp_and_wide_rows_take_slots_then_passes() {
        let l = |c, v, s| sparse_layout(c, v, s);
        // Rank 32 with 16-byte vectors: 8 lanes per nonzero, 4 nonzeros per step.
        assert_eq!(
            l(32, true, 4),
            SparseLayout {
                lanes_log2: 3,
                vec: 4,
                slots: 1,
                cols_per_pass: 32
            }
        );
        // Rank 16: 4 lanes; rank 8: 2 lanes; rank 1: one lane per nonzero.
        assert_eq!(l(16, true, 4).lanes_log2, 2);
        assert_eq!(l(8, true, 4).lanes_log2, 1);
        assert_eq!(
            l(1, false, 4),
            SparseLayout {
                lanes_log2: 0,
                vec: 1,
                slots: 1,
                cols_per_pass: 1
            }
        );
        // Rank 10 (not a multiple of 4): scalar, 16 lanes covering 16 >= 10 columns.
        assert_eq!(
            l(10, false, 4),
            SparseLayout {
                lanes_log2: 4,
                vec: 1,
                slots: 1,
                cols_per_pass: 16
            }
        );
        // Rank 128: one vector per lane over the whole warp; 256: two slots.
        assert_eq!(l(128, true, 4).cols_per_pass, 128);
        assert_eq!(
            l(256, true, 4),
            SparseLayout {
                lanes_log2: 5,
                vec: 4,
                slots: 2,
                cols_per_pass: 256
            }
        );
        // TTMc at 4096 columns with at most 2 slots: 256 per pass, 16 passes.
        let t = l(4096, true, 2);
        assert_eq!((t.slots, t.cols_per_pass), (2, 256));
        // Every layout covers the row in whole passes without a lane past the columns
        // of a single pass going unused by more than one rounding.
        for cols in 1..600 {
            for vec4 in [false, true] {
                for max in [2, 4] {
                    let s = l(cols, vec4, max);
                    assert!(s.cols_per_pass >= 1 && s.slots <= max);
                    assert_eq!(s.cols_per_pass, (1 << s.lanes_log2) * s.slots * s.vec);
                    let passes = cols.div_ceil(s.cols_per_pass);
                    assert!(passes >= 1);
                    if cols <= 32 * s.vec {
                        assert_eq!(passes, 1, "{cols} columns fit one pass");
                    }
                }
            }
        }
    }

    #[test]
    fn batches_are_whole_chunks_sized_to_the_device() {
        assert_eq!(sparse_batch(10, 8448) % 32, 0);
        assert_eq!(sparse_batch(10, 8448), 64);
        assert_eq!(sparse_batch(2_000_000, 132 * 48), 160);
        assert_eq!(sparse_batch(50_000_000, 132 * 48), 3968);
        assert_eq!(sparse_batch(usize::MAX / 2, 1), 4096);
    }
}
