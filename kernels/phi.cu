/*
 * phi.cu - CP-APR's Phi (the multiplicative update of Poisson CP) on the HLS form, for
 * the dense tiles and the sparse remainder, fp32 on CUDA cores.
 *
 * For target mode n with B = factor[n] (rank R = out_cols): per nonzero x at i,
 *   pi[r] = prod_{m != n} F_m[i_m, r],   mu = sum_r B[i_n, r] pi[r],
 *   Phi[i_n, r] += x / max(mu, eps) * pi[r],
 * and, when p.phi_log is set, sum x * ln max(mu, eps) over the nonzeros into the
 * double at p.phi_log (the data term of the model's Poisson log-likelihood).
 * Values are widened from fp16 and multiplied by the tensor's scale per nonzero (mu is
 * not linear in x). No tensor cores: the weight x / mu of every nonzero depends on a
 * rank-R dot product with B, and fp16 rounding of mu or of the weights (2^-11) would
 * be repeated by every multiplicative update of the algorithm; in fp32 the dense tiles
 * cost 3R flops per nonzero from rows that stay in L1.
 *
 * Lane layout (the host picks it from R as for MTTKRP, see sparse.cu): a group of
 * L = 2^sp_lanes_log2 lanes shares one nonzero; lane j of a group owns sp_slots vectors
 * of sp_vec consecutive columns, slot s starting at column (s L + j) sp_vec. The whole
 * row must fit one pass (the host refuses wider ranks): mu needs every column. Per
 * nonzero each lane forms its columns of pi in registers, multiplies them by its
 * columns of B's row, and the group sums the partial dot products with log2 L
 * shuffles, after which every lane of the group holds mu.
 *
 * Sparse part (phi_sparse_warp): each warp takes sp_batch consecutive nonzeros in key
 * order, chunks of 32 as in sparse.cu (lane l loads and decodes nonzero l of the chunk;
 * the groups take the chunk's nonzeros in turn, reading coordinates and value by
 * shuffle), and keeps its weighted sums in registers while the output row repeats,
 * adding them to global memory (vector reductions on sm_90) when the row changes and at
 * the batch's end. No shared memory.
 *
 * Dense tiles (phi_dense_tile): one block of 4 warps per tile. All threads expand the
 * tile into shared memory as 16 slices X_e[ea][eb] of the target mode (hls_common.cuh,
 * 12 KB, fp16 as stored; for f32 values each cell holds its value's slot plus one and
 * the value is read whole from global memory, Φ not being linear in x). Warp w takes slices e = w, w + 4, w + 8, w + 12 (output rows
 * origin + e): it keeps B's row of the slice in registers, scans the slice's 256 cells
 * in 8 rounds of 32 (one cell per lane, a ballot of the nonzero ones), and the groups
 * take the round's nonzeros in turn (group g the g-th remaining set bit), reading the
 * rows of the two other factors through the read-only cache. After the slice the
 * groups' sums are added across the warp by shuffles and group 0 adds them to the
 * output row: one reduction per slot and slice.
 *
 * The log term is summed per lane in double, reduced over the warp and added with one
 * atomic per warp.
 */
#pragma once
#include "sparse.cu"

namespace hls {

/* max(mu, eps), with NaN passed through (fmaxf would turn it into eps and hide a bad
 * factor). */
__device__ __forceinline__ float phi_floor(float mu, float eps) {
    return mu != mu ? mu : fmaxf(mu, eps);
}

/* Sum of v over the L = 2^lg lanes of this lane's group (every lane gets it). */
__device__ __forceinline__ float group_sum(float v, uint32_t lg) {
#pragma unroll
    for (uint32_t k = 0; k < 5; ++k)
        if (k < lg) v += __shfl_xor_sync(kFullMask, v, 1 << k);
    return v;
}

/* Adds this warp's log-term sums to the double at p.phi_log (one atomic per warp). */
__device__ __forceinline__ void phi_log_flush(const HlsLaunchParams& p, double lsum) {
    if (!p.phi_log) return;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) lsum += __shfl_xor_sync(kFullMask, lsum, off);
    if ((threadIdx.x & 31) == 0 && lsum != 0.0) atomicAdd(reinterpret_cast<double*>(p.phi_log), lsum);
}

/* Phi of warp `gwarp`'s batch of sparse nonzeros (global warp index among the sparse
 * blocks). */
template <int V, int S, typename T>
__device__ void phi_sparse_warp(const HlsLaunchParams& p, uint64_t gwarp) {
    const uint64_t begin = gwarp * p.sp_batch;
    if (begin >= p.sp_nnz) return;
    const uint64_t end = min(begin + (uint64_t)p.sp_batch, p.sp_nnz);
    const int lane = threadIdx.x & 31;
    const uint32_t lg = p.sp_lanes_log2;
    const int L = 1 << lg;
    const int sub = lane & (L - 1);
    const int gbase = lane & ~(L - 1);
    const uint32_t C = p.out_cols, order = p.order, mode = p.mode;
    const uint32_t* keys = reinterpret_cast<const uint32_t*>(p.sp_keys);
    const uint64_t* prefixes = reinterpret_cast<const uint64_t*>(p.sp_block_prefix);
    const uint64_t* offsets = reinterpret_cast<const uint64_t*>(p.sp_block_offsets);
    const float* B = reinterpret_cast<const float*>(p.factor[mode]);
    float* out = reinterpret_cast<float*>(p.out);

    uint32_t col[S];
    bool ok[S];
#pragma unroll
    for (int s = 0; s < S; ++s) {
        col[s] = (uint32_t)((s << lg) + sub) * V;
        ok[s] = col[s] < C;
    }
    uint32_t blk = block_of(p, begin);
    float acc[S][V];
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
        for (int i = 0; i < V; ++i) acc[s][i] = 0.f;
    uint32_t cur = kNoRow;
    double lsum = 0.0;

    for (uint64_t q0 = begin; q0 < end; q0 += kWarp) {
        const uint64_t q = q0 + lane;
        const bool valid = q < end;
        uint32_t low = 0;
        float val = 0.f;
        uint32_t b = blk;
        if (valid) {
            low = __ldg(keys + q);
            val = load_value<T>(p.sp_values, q) * p.value_scale;
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
            const float x = __shfl_sync(kFullMask, val, src);
            const uint32_t row = __shfl_sync(kFullMask, my_row, src);
            float prod[S][V];
#pragma unroll
            for (int s = 0; s < S; ++s)
#pragma unroll
                for (int i = 0; i < V; ++i) prod[s][i] = 1.f;
#pragma unroll
            for (int m = 0; m < kMaxOrder; ++m) {
                if (m >= (int)order || m == (int)mode) continue; /* warp-uniform */
                const uint32_t c = __shfl_sync(kFullMask, coord[m], src);
                const float* F = reinterpret_cast<const float*>(p.factor[m]) + (size_t)c * C;
#pragma unroll
                for (int s = 0; s < S; ++s) {
                    if (!ok[s]) continue;
                    float f[V];
                    load_vec<V>(F + col[s], f);
#pragma unroll
                    for (int i = 0; i < V; ++i) prod[s][i] *= f[i];
                }
            }
            float part = 0.f;
            const float* Brow = B + (size_t)row * C;
#pragma unroll
            for (int s = 0; s < S; ++s) {
                if (!ok[s]) continue;
                float bv[V];
                load_vec<V>(Brow + col[s], bv);
#pragma unroll
                for (int i = 0; i < V; ++i) part = fmaf(bv[i], prod[s][i], part);
            }
            const float mu = phi_floor(group_sum(part, lg), p.phi_eps);
            const float w = x / mu;
            if (src < n_here) { /* uniform within the group */
                if (row != cur) {
                    flush_row<V, S>(out, C, cur, col, ok, 1.f, acc);
                    cur = row;
                }
#pragma unroll
                for (int s = 0; s < S; ++s)
#pragma unroll
                    for (int i = 0; i < V; ++i) acc[s][i] = fmaf(w, prod[s][i], acc[s][i]);
                if (p.phi_log && sub == 0) lsum += (double)x * (double)logf(mu);
            }
        }
    }
    flush_row<V, S>(out, C, cur, col, ok, 1.f, acc);
    phi_log_flush(p, lsum);
}

/* Phi of dense tile t by the whole block. */
template <int V, int S, typename T>
__device__ void phi_dense_tile(const HlsLaunchParams& p, uint64_t t, TileSmem& sm) {
    /* Φ is not linear in x: f32 values are read whole, through their slots. */
    constexpr bool by_slot = kValueTerms<T> > 1;
    expand_tile<T>(p, t, sm, by_slot ? Expand::Slot : Expand::Hi);
    const uint64_t first = __ldg(reinterpret_cast<const uint32_t*>(p.tile_offsets) + t);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t lg = p.sp_lanes_log2;
    const int L = 1 << lg;
    const int G = kWarp >> lg; /* nonzeros in flight per step */
    const int sub = lane & (L - 1);
    const int grp = lane >> lg;
    int a, b;
    other_modes(p.mode, a, b);
    const uint64_t key = __ldg(reinterpret_cast<const uint64_t*>(p.tile_keys) + t);
    const uint32_t on = tile_origin(p, key, p.mode);
    const uint32_t oa = tile_origin(p, key, a);
    const uint32_t ob = tile_origin(p, key, b);
    const uint32_t C = p.out_cols, dim_n = p.dims[p.mode];
    const float* B = reinterpret_cast<const float*>(p.factor[p.mode]);
    const float* Fa = reinterpret_cast<const float*>(p.factor[a]);
    const float* Fb = reinterpret_cast<const float*>(p.factor[b]);
    float* out = reinterpret_cast<float*>(p.out);
    const bool want_log = p.phi_log != 0;

    uint32_t col[S];
    bool ok[S];
#pragma unroll
    for (int s = 0; s < S; ++s) {
        col[s] = (uint32_t)((s << lg) + sub) * V;
        ok[s] = col[s] < C;
    }
    double lsum = 0.0;

    for (int e = warp; e < kTile; e += kWarps) {
        const uint32_t row = on + e;
        if (row >= dim_n) break; /* warp-uniform; later slices are beyond too */
        float brow[S][V], acc[S][V];
#pragma unroll
        for (int s = 0; s < S; ++s) {
#pragma unroll
            for (int i = 0; i < V; ++i) {
                brow[s][i] = 0.f;
                acc[s][i] = 0.f;
            }
            if (ok[s]) load_vec<V>(B + (size_t)row * C + col[s], brow[s]);
        }
        const __half* slice = sm.xs + e * kXsSlice;
        for (int round = 0; round < kTile * kTile / kWarp; ++round) {
            const int cell = round * kWarp + lane;
            const __half h = slice[(cell >> 4) * kXsLd + (cell & 15)];
            const unsigned short s1 = __half_as_ushort(h);
            const float mine = !by_slot ? __half2float(h)
                               : s1 ? load_value<T>(p.tile_values, first + s1 - 1) : 0.f;
            uint32_t mask = __ballot_sync(kFullMask, mine != 0.f);
            while (mask) { /* warp-uniform */
                uint32_t mm = mask;
                for (int k = 0; k < grp; ++k) mm &= mm - 1;
                const bool has = mm != 0;
                const int bit = has ? __ffs(mm) - 1 : 0;
                const float x = __shfl_sync(kFullMask, mine, bit) * p.value_scale;
                const int c = round * kWarp + bit;
                const uint32_t ea = has ? (uint32_t)(c >> 4) : 0u;
                const uint32_t eb = has ? (uint32_t)(c & 15) : 0u;
                const float* ra = Fa + (size_t)(oa + ea) * C;
                const float* rb = Fb + (size_t)(ob + eb) * C;
                float prod[S][V];
                float part = 0.f;
#pragma unroll
                for (int s = 0; s < S; ++s) {
                    float fa[V], fb[V];
#pragma unroll
                    for (int i = 0; i < V; ++i) fa[i] = fb[i] = 0.f;
                    if (ok[s]) {
                        load_vec<V>(ra + col[s], fa);
                        load_vec<V>(rb + col[s], fb);
                    }
#pragma unroll
                    for (int i = 0; i < V; ++i) {
                        prod[s][i] = fa[i] * fb[i];
                        part = fmaf(brow[s][i], prod[s][i], part);
                    }
                }
                const float mu = phi_floor(group_sum(part, lg), p.phi_eps);
                if (has) {
                    const float w = x / mu;
#pragma unroll
                    for (int s = 0; s < S; ++s)
#pragma unroll
                        for (int i = 0; i < V; ++i) acc[s][i] = fmaf(w, prod[s][i], acc[s][i]);
                    if (want_log && sub == 0) lsum += (double)x * (double)logf(mu);
                }
                for (int k = 0; k < G; ++k) mask &= mask - 1;
            }
        }
        /* The groups' sums over the warp, then group 0 writes the row. */
#pragma unroll
        for (int s = 0; s < S; ++s)
#pragma unroll
            for (int i = 0; i < V; ++i)
                for (int off = L; off < kWarp; off <<= 1)
                    acc[s][i] += __shfl_xor_sync(kFullMask, acc[s][i], off);
        if (grp == 0) {
#pragma unroll
            for (int s = 0; s < S; ++s)
                if (ok[s]) add_vec<V>(out + (size_t)row * C + col[s], acc[s]);
        }
    }
    phi_log_flush(p, lsum);
}

}  // namespace hls

/*
 * Entry points per lane layout (V, S), as for MTTKRP: the fused grid (blocks below
 * n_tiles run dense tiles, the rest sparse batches), the sparse batches alone and the
 * dense tiles alone, each for fp16 values and (suffix _f32) for f32 values. The first
 * two ask for at least 4 resident blocks per SM (at most 128 registers a thread):
 * without the bound ptxas spilled 8 bytes in some sparse layouts. The host picks the
 * entries by name (src/engine/cuda/kernels.rs).
 */
#define HLS_PHI_ENTRIES_T(V, S, T, SUFFIX)                                                  \
    extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, 4)                      \
    hls_fused_phi_v##V##s##S##SUFFIX(const HlsLaunchParams p) {                             \
        __shared__ __align__(16) hls::TileSmem smem;                                        \
        if (blockIdx.x < p.n_tiles) {                                                       \
            hls::phi_dense_tile<V, S, T>(p, blockIdx.x, smem);                              \
        } else {                                                                            \
            hls::phi_sparse_warp<V, S, T>(                                                  \
                p, (blockIdx.x - p.n_tiles) * hls::kWarps + (threadIdx.x >> 5));            \
        }                                                                                   \
    }                                                                                       \
    extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, 4)                      \
    hls_sparse_phi_v##V##s##S##SUFFIX(const HlsLaunchParams p) {                            \
        hls::phi_sparse_warp<V, S, T>(p, (uint64_t)blockIdx.x * hls::kWarps + (threadIdx.x >> 5)); \
    }                                                                                       \
    extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)                         \
    hls_dense_phi_v##V##s##S##SUFFIX(const HlsLaunchParams p) {                             \
        __shared__ __align__(16) hls::TileSmem smem;                                        \
        if (blockIdx.x < p.n_tiles) hls::phi_dense_tile<V, S, T>(p, blockIdx.x, smem);      \
    }
#define HLS_PHI_ENTRIES(V, S)             \
    HLS_PHI_ENTRIES_T(V, S, __half, )     \
    HLS_PHI_ENTRIES_T(V, S, float, _f32)
HLS_PHI_ENTRIES(4, 1)
HLS_PHI_ENTRIES(4, 2)
HLS_PHI_ENTRIES(4, 4)
HLS_PHI_ENTRIES(1, 1)
HLS_PHI_ENTRIES(1, 2)
HLS_PHI_ENTRIES(1, 4)
