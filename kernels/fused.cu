/*
 * fused.cu - one launch for a whole HLS tensor: blocks b < n_tiles run dense tile b on
 * tensor cores (dense_mttkrp.cu / dense_ttmc.cu), blocks b >= n_tiles run sparse
 * batches on CUDA cores (sparse.cu), warp w of such a block taking batch
 * (b - n_tiles) * HLS_BLOCK_WARPS + w. Grid = n_tiles + ceil(sp_nnz /
 * (sp_batch * HLS_BLOCK_WARPS)) blocks of HLS_BLOCK_THREADS threads.
 * Shared memory: the dense family's static layout (sparse blocks use none).
 */
#include "dense_mttkrp.cu"
#include "dense_ttmc.cu"
#include "sparse.cu"

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_fused_mttkrp(const HlsLaunchParams p) {
    __shared__ __align__(32) hls::MttkrpSmem smem;
    if (blockIdx.x < p.n_tiles) {
        hls::dense_mttkrp_tile(p, blockIdx.x, smem);
    } else {
        hls::sparse_warp(p, (blockIdx.x - p.n_tiles) * hls::kWarps + (threadIdx.x >> 5));
    }
}

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_fused_ttmc(const HlsLaunchParams p) {
    __shared__ __align__(32) hls::TtmcSmem smem;
    if (blockIdx.x < p.n_tiles) {
        hls::dense_ttmc_tile(p, blockIdx.x, smem);
    } else {
        hls::sparse_warp(p, (blockIdx.x - p.n_tiles) * hls::kWarps + (threadIdx.x >> 5));
    }
}
