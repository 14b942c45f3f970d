/*
 * sparse.cu - the linearized sparse remainder (HLS-S) on CUDA cores, any order up to
 * HLS_MAX_ORDER, MTTKRP or TTMc.
 *
 * Each warp takes a batch of sp_batch consecutive nonzeros (key order, so runs of the
 * same output row are common) and walks it in chunks of 32:
 * - Lane l loads key and value of nonzero l of the chunk (one coalesced load each),
 *   finds its key block and decodes every coordinate once, with shifts and masks.
 * - The warp is split into groups of L = 2^sp_lanes_log2 lanes; group k takes nonzeros
 *   kL .. kL+L-1 of the chunk in turn, reading their coordinates and value from the
 *   owning lanes by shuffle. So 32 / L nonzeros are in flight per step: at rank 16 and
 *   below no lane idles, and every gather is a 16-byte load when the columns allow.
 * - Lane j of a group owns sp_slots vectors of sp_vec (1 or 4) consecutive output
 *   columns, slot s starting at column col0 + (s L + j) sp_vec, so a group's loads of a
 *   factor row are coalesced. Per nonzero it forms value * prod_{m != n} F_m[i_m, r_m]
 *   (MTTKRP: r_m = the column; TTMc: r_m = (column / col_stride[m]) % ranks[m], computed
 *   once per lane and pass, not per nonzero) in registers.
 * - Segmented reduction: each group keeps its sums in registers while its output row
 *   repeats and adds them to global memory (one vector reduction per slot on sm_90)
 *   only when the row changes and at the batch's end. Values are summed as stored
 *   (fp16 or f32 widened) and the sums multiplied by the tensor's scale then, so values far
 *   below f32's normal range still contribute when their products are not.
 * Outputs wider than one pass (sp_cols_per_pass columns) are done in several passes over
 * the batch. Factors are fp32 as the caller holds them, read through the read-only path.
 * No shared memory.
 */
#pragma once
#include "hls_common.cuh"

namespace hls {

constexpr int kMaxOrder = HLS_MAX_ORDER;
constexpr uint32_t kNoRow = 0xffffffffu;

/* Coordinate of mode m (shift s, mask) from a split key. */
__device__ __forceinline__ uint32_t sparse_coord(uint64_t prefix, uint32_t low, uint32_t s,
                                                 uint64_t mask) {
    const uint64_t v = s >= 32 ? (prefix >> (s - 32)) : ((prefix << (32 - s)) | (uint64_t)(low >> s));
    return (uint32_t)(v & mask);
}

/* The key block holding nonzero q: the last b with block_offsets[b] <= q (block
 * indices are 32-bit: the host refuses more blocks; a 64-bit index carried across the
 * chunk loop costs a spill). */
__device__ __forceinline__ uint32_t block_of(const HlsLaunchParams& p, uint64_t q) {
    const uint64_t* off = reinterpret_cast<const uint64_t*>(p.sp_block_offsets);
    uint32_t lo = 0, hi = (uint32_t)p.sp_blocks; /* off[lo] <= q < off[hi] */
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (__ldg(off + mid) <= q) lo = mid; else hi = mid;
    }
    return lo;
}

/* Loads V consecutive floats (16-byte aligned when V == 4). */
template <int V>
__device__ __forceinline__ void load_vec(const float* f, float (&x)[V]) {
    if constexpr (V == 4) {
        const float4 y = __ldg(reinterpret_cast<const float4*>(f));
        x[0] = y.x; x[1] = y.y; x[2] = y.z; x[3] = y.w;
    } else {
#pragma unroll
        for (int i = 0; i < V; ++i) x[i] = __ldg(f + i);
    }
}

/* out[0..V) += x (16-byte aligned when V == 4). */
template <int V>
__device__ __forceinline__ void add_vec(float* out, const float (&x)[V]) {
    if constexpr (V == 4) {
        red_add4(out, x[0], x[1], x[2], x[3]);
    } else {
#pragma unroll
        for (int i = 0; i < V; ++i) atomicAdd(out + i, x[i]);
    }
}

/* Adds a group's sums for output row `row`, times the tensor's value scale, to global
 * memory and clears them. */
template <int V, int S>
__device__ __forceinline__ void flush_row(float* out, uint32_t C, uint32_t row, const uint32_t (&col)[S],
                                          const bool (&ok)[S], float scale, float (&acc)[S][V]) {
    if (row == kNoRow) return;
    float* orow = out + (size_t)row * C;
#pragma unroll
    for (int s = 0; s < S; ++s) {
#pragma unroll
        for (int i = 0; i < V; ++i) acc[s][i] *= scale;
        if (ok[s]) add_vec<V>(orow + col[s], acc[s]);
#pragma unroll
        for (int i = 0; i < V; ++i) acc[s][i] = 0.f;
    }
}

/* One pass of a warp over nonzeros [begin, end) for output columns col0 .. col0 +
 * sp_cols_per_pass. V: columns per vector; S: vectors per lane; TTMC: the op. */
template <int V, int S, bool TTMC, typename T>
__device__ void sparse_pass(const HlsLaunchParams& p, uint64_t begin, uint64_t end, uint32_t col0) {
    const int lane = threadIdx.x & 31;
    const uint32_t lg = p.sp_lanes_log2;
    const int L = 1 << lg;
    const int sub = lane & (L - 1);
    const int gbase = lane & ~(L - 1);
    const uint32_t C = p.out_cols, order = p.order, mode = p.mode;
    const uint32_t* keys = reinterpret_cast<const uint32_t*>(p.sp_keys);
    const uint64_t* prefixes = reinterpret_cast<const uint64_t*>(p.sp_block_prefix);
    const uint64_t* offsets = reinterpret_cast<const uint64_t*>(p.sp_block_offsets);
    float* out = reinterpret_cast<float*>(p.out);

    uint32_t col[S];
    bool ok[S];
#pragma unroll
    for (int s = 0; s < S; ++s) {
        col[s] = col0 + (uint32_t)((s << lg) + sub) * V;
        ok[s] = col[s] < C;
    }
    /* TTMc: factor column of every other mode for each slot, two 16-bit fields per word
     * (mode m in word m / 2), so the loops below index registers with constants only. */
    uint32_t rpk[TTMC ? S : 1][kMaxOrder / 2];
    if constexpr (TTMC) {
#pragma unroll
        for (int s = 0; s < S; ++s) {
#pragma unroll
            for (int w = 0; w < kMaxOrder / 2; ++w) {
                uint32_t packed = 0;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const uint32_t m = 2 * w + h;
                    uint32_t r = 0;
                    if (m < order && m != mode && ok[s]) r = (col[s] / p.col_stride[m]) % p.ranks[m];
                    packed |= r << (16 * h);
                }
                rpk[s][w] = packed;
            }
        }
    }

    uint32_t blk = block_of(p, begin);
    float acc[S][V];
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
        for (int i = 0; i < V; ++i) acc[s][i] = 0.f;
    uint32_t cur = kNoRow;

    for (uint64_t q0 = begin; q0 < end; q0 += kWarp) {
        const uint64_t q = q0 + lane;
        const bool valid = q < end;
        uint32_t low = 0;
        float val = 0.f;
        uint32_t b = blk;
        if (valid) {
            low = __ldg(keys + q);
            val = load_value<T>(p.sp_values, q); /* as stored; scaled once per flush */
            while (q >= __ldg(offsets + b + 1)) ++b;
        }
        const uint64_t prefix = __ldg(prefixes + b);
        blk = __shfl_sync(kFullMask, b, kWarp - 1); /* used only if lane 31 was valid */
        uint32_t coord[kMaxOrder];
#pragma unroll
        for (int m = 0; m < kMaxOrder; ++m)
            coord[m] = (m < (int)order) ? sparse_coord(prefix, low, p.sp_shift[m], p.sp_mask[m]) : 0u;
        const uint32_t my_row = sparse_coord(prefix, low, p.sp_shift[mode], p.sp_mask[mode]);
        const int n_here = (int)min((uint64_t)kWarp, end - q0);

        for (int t = 0; t < L; ++t) {
            const int src = gbase + t;
            const float v = __shfl_sync(kFullMask, val, src);
            const uint32_t row = __shfl_sync(kFullMask, my_row, src);
            float prod[S][V];
#pragma unroll
            for (int s = 0; s < S; ++s)
#pragma unroll
                for (int i = 0; i < V; ++i) prod[s][i] = v;
#pragma unroll
            for (int m = 0; m < kMaxOrder; ++m) {
                if (m >= (int)order || m == (int)mode) continue; /* warp-uniform */
                const uint32_t c = __shfl_sync(kFullMask, coord[m], src);
                const uint32_t rm = p.ranks[m];
                const float* F = reinterpret_cast<const float*>(p.factor[m]) + (size_t)c * rm;
#pragma unroll
                for (int s = 0; s < S; ++s) {
                    if (!ok[s]) continue;
                    if constexpr (!TTMC) {
                        float x[V];
                        load_vec<V>(F + col[s], x);
#pragma unroll
                        for (int i = 0; i < V; ++i) prod[s][i] *= x[i];
                    } else {
                        const uint32_t r = (rpk[s][m >> 1] >> (16 * (m & 1))) & 0xffffu;
                        if (m == (int)p.ttmc_last) {
                            float x[V];
                            load_vec<V>(F + r, x);
#pragma unroll
                            for (int i = 0; i < V; ++i) prod[s][i] *= x[i];
                        } else {
                            const float x = __ldg(F + r);
#pragma unroll
                            for (int i = 0; i < V; ++i) prod[s][i] *= x;
                        }
                    }
                }
            }
            if (src < n_here) { /* uniform within the group */
                if (row != cur) {
                    flush_row<V, S>(out, C, cur, col, ok, p.value_scale, acc);
                    cur = row;
                }
#pragma unroll
                for (int s = 0; s < S; ++s)
#pragma unroll
                    for (int i = 0; i < V; ++i) acc[s][i] += prod[s][i];
            }
        }
    }
    flush_row<V, S>(out, C, cur, col, ok, p.value_scale, acc);
}

/* Every pass of warp `gwarp`'s batch (global warp index among the sparse blocks). */
template <int V, int S, bool TTMC, typename T>
__device__ void sparse_warp(const HlsLaunchParams& p, uint64_t gwarp) {
    const uint64_t begin = gwarp * p.sp_batch;
    if (begin >= p.sp_nnz) return;
    const uint64_t end = min(begin + (uint64_t)p.sp_batch, p.sp_nnz);
    for (uint32_t col0 = 0; col0 < p.out_cols; col0 += p.sp_cols_per_pass)
        sparse_pass<V, S, TTMC, T>(p, begin, end, col0);
}

}  // namespace hls

/*
 * Entry points, one per op, lane layout (vector width V, slots S) and value type (the
 * f32 ones end in _f32), so that each is compiled with only the registers its layout
 * needs. The host picks the one matching sp_vec / sp_slots and the tensor's values
 * (src/engine/cuda/kernels.rs names them). Sparse part only: grid =
 * ceil(sp_nnz / (sp_batch * HLS_BLOCK_WARPS)) blocks.
 */
#define HLS_SPARSE_ENTRY_T(name, V, S, TTMC, T)                                     \
    extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)                  \
    name(const HlsLaunchParams p) {                                                  \
        hls::sparse_warp<V, S, TTMC, T>(p, (uint64_t)blockIdx.x * hls::kWarps + (threadIdx.x >> 5)); \
    }
#define HLS_SPARSE_ENTRY(name, V, S, TTMC)        \
    HLS_SPARSE_ENTRY_T(name, V, S, TTMC, __half) \
    HLS_SPARSE_ENTRY_T(name##_f32, V, S, TTMC, float)
HLS_SPARSE_ENTRY(hls_sparse_mttkrp_v4s1, 4, 1, false)
HLS_SPARSE_ENTRY(hls_sparse_mttkrp_v4s2, 4, 2, false)
HLS_SPARSE_ENTRY(hls_sparse_mttkrp_v4s4, 4, 4, false)
HLS_SPARSE_ENTRY(hls_sparse_mttkrp_v1s1, 1, 1, false)
HLS_SPARSE_ENTRY(hls_sparse_mttkrp_v1s2, 1, 2, false)
HLS_SPARSE_ENTRY(hls_sparse_mttkrp_v1s4, 1, 4, false)
HLS_SPARSE_ENTRY(hls_sparse_ttmc_v4s1, 4, 1, true)
HLS_SPARSE_ENTRY(hls_sparse_ttmc_v4s2, 4, 2, true)
HLS_SPARSE_ENTRY(hls_sparse_ttmc_v1s1, 1, 1, true)
HLS_SPARSE_ENTRY(hls_sparse_ttmc_v1s2, 1, 2, true)
