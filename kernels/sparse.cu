/*
 * sparse.cu - the linearized sparse remainder (HLS-S) on CUDA cores, any order up to
 * HLS_MAX_ORDER, MTTKRP or TTMc.
 *
 * Each warp takes a batch of sp_batch consecutive nonzeros (key order, so runs of the
 * same output row are common) and walks them one by one; all lanes see the same
 * nonzero. Lane l owns output columns col_base + l + 32 j (j < CPL), so factor-row
 * gathers are coalesced across the warp.
 * Per nonzero: decode every coordinate from (block prefix << 32 | low key) with shift
 * and mask, then add value * prod_{m != n} F_m[i_m, r_m(col)] to the lane's
 * accumulators (MTTKRP: r_m = col; TTMc: r_m = (col / col_stride[m]) % ranks[m]).
 * Segmented reduction: accumulators stay in registers while the output row repeats;
 * they are written with atomicAdd only when the row changes and at the batch's end.
 * Outputs wider than 32 * CPL columns are done in several passes over the batch.
 * Factors here are fp32 (factor_f), unscaled: the gathers cost the same memory traffic
 * pattern either way, and fp32 keeps the remainder as accurate as the CPU backend.
 * No shared memory.
 */
#include "hls_common.cuh"

namespace hls {

constexpr int kMaxOrder = HLS_MAX_ORDER;
constexpr int kMaxCpl = HLS_SPARSE_COLS_PER_PASS / kWarp; /* 8 */

/* Coordinate of mode m (shift s, mask) from a split key. */
__device__ __forceinline__ uint32_t sparse_coord(uint64_t prefix, uint32_t low, uint32_t s,
                                                 uint64_t mask) {
    const uint64_t v = s >= 32 ? (prefix >> (s - 32)) : ((prefix << (32 - s)) | (uint64_t)(low >> s));
    return (uint32_t)(v & mask);
}

/* The key block holding nonzero q: the last b with block_offsets[b] <= q. */
__device__ __forceinline__ uint64_t block_of(const HlsLaunchParams& p, uint64_t q) {
    const uint64_t* off = reinterpret_cast<const uint64_t*>(p.sp_block_offsets);
    uint64_t lo = 0, hi = p.sp_blocks; /* off[lo] <= q < off[hi] */
    while (hi - lo > 1) {
        const uint64_t mid = (lo + hi) / 2;
        if (off[mid] <= q) lo = mid; else hi = mid;
    }
    return lo;
}

template <int CPL>
__device__ void sparse_warp_pass(const HlsLaunchParams& p, uint64_t begin, uint64_t end,
                                 uint32_t col_base) {
    const int lane = threadIdx.x & 31;
    const uint32_t* keys = reinterpret_cast<const uint32_t*>(p.sp_keys);
    const __half* vals = reinterpret_cast<const __half*>(p.sp_values);
    const uint64_t* prefixes = reinterpret_cast<const uint64_t*>(p.sp_block_prefix);
    const uint64_t* offsets = reinterpret_cast<const uint64_t*>(p.sp_block_offsets);
    float* out = reinterpret_cast<float*>(p.out);
    const bool ttmc = p.op == HLS_OP_TTMC;

    uint64_t blk = block_of(p, begin);
    uint64_t prefix = prefixes[blk];
    uint64_t blk_end = offsets[blk + 1];

    float acc[CPL];
#pragma unroll
    for (int j = 0; j < CPL; ++j) acc[j] = 0.f;
    uint32_t cur_row = 0xffffffffu;

    for (uint64_t q = begin; q < end; ++q) {
        while (q >= blk_end) { /* warp-uniform */
            ++blk;
            prefix = prefixes[blk];
            blk_end = offsets[blk + 1];
        }
        const uint32_t low = keys[q];
        const float v = __half2float(vals[q]) * p.value_scale;
        const uint32_t row = sparse_coord(prefix, low, p.sp_shift[p.mode], p.sp_mask[p.mode]);
        if (row != cur_row) {
            if (cur_row != 0xffffffffu) {
#pragma unroll
                for (int j = 0; j < CPL; ++j) {
                    const uint32_t col = col_base + lane + kWarp * j;
                    if (col < p.out_cols && acc[j] != 0.f)
                        atomicAdd(out + (size_t)cur_row * p.out_cols + col, acc[j]);
                    acc[j] = 0.f;
                }
            }
            cur_row = row;
        }
        /* prod[j] = v * prod_{m != n} F_m[i_m, r_m(col_j)], modes walked outermost so
         * every register index is a compile-time constant. */
        float prod[CPL];
#pragma unroll
        for (int j = 0; j < CPL; ++j) prod[j] = v;
#pragma unroll
        for (int m = 0; m < kMaxOrder; ++m) {
            if (m < (int)p.order && m != (int)p.mode) {
                const uint32_t cm = sparse_coord(prefix, low, p.sp_shift[m], p.sp_mask[m]);
                const uint32_t rm = p.ranks[m];
                const float* F = reinterpret_cast<const float*>(p.factor_f[m]) + (size_t)cm * rm;
#pragma unroll
                for (int j = 0; j < CPL; ++j) {
                    const uint32_t col = col_base + lane + kWarp * j;
                    if (col < p.out_cols) {
                        const uint32_t r = ttmc ? (col / p.col_stride[m]) % rm : col;
                        prod[j] *= F[r];
                    }
                }
            }
        }
#pragma unroll
        for (int j = 0; j < CPL; ++j) acc[j] += prod[j];
    }
    if (cur_row != 0xffffffffu) {
#pragma unroll
        for (int j = 0; j < CPL; ++j) {
            const uint32_t col = col_base + lane + kWarp * j;
            if (col < p.out_cols && acc[j] != 0.f)
                atomicAdd(out + (size_t)cur_row * p.out_cols + col, acc[j]);
        }
    }
}

/* Sparse batch of warp `gwarp` (global warp index among the sparse blocks). */
__device__ void sparse_warp(const HlsLaunchParams& p, uint64_t gwarp) {
    const uint64_t begin = gwarp * p.sp_batch;
    if (begin >= p.sp_nnz) return;
    const uint64_t end = min(begin + (uint64_t)p.sp_batch, p.sp_nnz);
    const uint32_t cols = p.out_cols;
    if (cols <= 32) {
        sparse_warp_pass<1>(p, begin, end, 0);
    } else if (cols <= 64) {
        sparse_warp_pass<2>(p, begin, end, 0);
    } else if (cols <= 128) {
        sparse_warp_pass<4>(p, begin, end, 0);
    } else {
        for (uint32_t base = 0; base < cols; base += kWarp * kMaxCpl)
            sparse_warp_pass<kMaxCpl>(p, begin, end, base);
    }
}

}  // namespace hls

/* Sparse part only: grid = ceil(sp_nnz / (sp_batch * HLS_BLOCK_WARPS)) blocks. */
extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_sparse(const HlsLaunchParams p) {
    hls::sparse_warp(p, (uint64_t)blockIdx.x * hls::kWarps + (threadIdx.x >> 5));
}
