/*
 * fused.cu - one launch for a whole HLS tensor: blocks b < n_tiles run dense tile b on
 * tensor cores (dense_mttkrp.cu / dense_ttmc.cu), blocks b >= n_tiles run sparse
 * batches on CUDA cores (sparse.cu), warp w of such a block taking batch
 * (b - n_tiles) * HLS_BLOCK_WARPS + w. Grid = n_tiles + ceil(sp_nnz /
 * (sp_batch * HLS_BLOCK_WARPS)) blocks of HLS_BLOCK_THREADS threads.
 * One entry point per op, sparse lane layout and value type (see sparse.cu). The entries ask for at
 * least 4 (MTTKRP) or 3 (TTMc) resident blocks per SM, i.e. at most 128 or 170
 * registers a thread: left to its own target, ptxas squeezes the union of the dense and
 * sparse paths into 64 registers and spills.
 * Shared memory: the dense tiles' 12 KB (sparse blocks use none but reserve it).
 *
 * This file is the entry of the core kernel family (MTTKRP and TTMc: its own entries
 * and those of the three files it includes), compiled and loaded on its own; the CP
 * update (cp_update.cu), Phi (phi.cu) and completion (completion.cu) are families of
 * their own, so that one failing to compile or load leaves the others usable
 * (src/engine/cuda/kernels.rs).
 */
#include "dense_mttkrp.cu"
#include "dense_ttmc.cu"
#include "sparse.cu"

#define HLS_FUSED_ENTRY_T(name, dense, V, S, TTMC, MIN_BLOCKS, T)                    \
    extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, MIN_BLOCKS)      \
    name(const HlsLaunchParams p) {                                                  \
        __shared__ __align__(16) hls::TileSmem smem;                                 \
        if (blockIdx.x < p.n_tiles) {                                                \
            hls::dense<T>(p, blockIdx.x, smem);                                      \
        } else {                                                                     \
            hls::sparse_warp<V, S, TTMC, T>(                                         \
                p, (blockIdx.x - p.n_tiles) * hls::kWarps + (threadIdx.x >> 5));     \
        }                                                                            \
    }
/* One entry for fp16 values and one (_f32) for f32 values. */
#define HLS_FUSED_ENTRY(name, dense, V, S, TTMC, MIN_BLOCKS)              \
    HLS_FUSED_ENTRY_T(name, dense, V, S, TTMC, MIN_BLOCKS, __half)       \
    HLS_FUSED_ENTRY_T(name##_f32, dense, V, S, TTMC, MIN_BLOCKS, float)
HLS_FUSED_ENTRY(hls_fused_mttkrp_v4s1, dense_mttkrp_tile, 4, 1, false, 4)
HLS_FUSED_ENTRY(hls_fused_mttkrp_v4s2, dense_mttkrp_tile, 4, 2, false, 4)
HLS_FUSED_ENTRY(hls_fused_mttkrp_v4s4, dense_mttkrp_tile, 4, 4, false, 4)
HLS_FUSED_ENTRY(hls_fused_mttkrp_v1s1, dense_mttkrp_tile, 1, 1, false, 4)
HLS_FUSED_ENTRY(hls_fused_mttkrp_v1s2, dense_mttkrp_tile, 1, 2, false, 4)
HLS_FUSED_ENTRY(hls_fused_mttkrp_v1s4, dense_mttkrp_tile, 1, 4, false, 4)
HLS_FUSED_ENTRY(hls_fused_ttmc_v4s1, dense_ttmc_tile, 4, 1, true, 3)
HLS_FUSED_ENTRY(hls_fused_ttmc_v4s2, dense_ttmc_tile, 4, 2, true, 3)
HLS_FUSED_ENTRY(hls_fused_ttmc_v1s1, dense_ttmc_tile, 1, 1, true, 3)
HLS_FUSED_ENTRY(hls_fused_ttmc_v1s2, dense_ttmc_tile, 1, 2, true, 3)
