/*
 * completion.cu - the tensor-completion kernels on the HLS form, fp32 on CUDA cores
 * (src/engine/cuda/completion.rs drives them; src/engine/completion.rs defines what
 * each computes). The model is m(i) = offset + sum_r prod_n A_n[i_n, r]; x is a stored
 * value times the tensor's scale.
 *
 * The nonzero order of a session: the sparse part in key order (position q), then the
 * dense tiles in key order, each in bitmap order (position sp_nnz + the value's slot).
 * Every per-nonzero kernel walks both parts with for_each_nonzero:
 * - sparse part: thread g of the grid takes nonzeros g, g + G, ... (G = threads of the
 *   grid): it finds the key block by binary search, decodes every coordinate with
 *   shifts and masks and reads the value.
 * - dense tiles: warp w takes tiles w, w + W, ...; lane l owns bitmap words 2l and
 *   2l + 1, a warp scan of their popcounts gives the lane its first value slot, and the
 *   lane visits its set bits in order (cell p = 64 word + bit, its coordinates the
 *   tile's origin plus the offsets of p, hls_tile.cuh).
 * No shared memory in these walks.
 *
 * Kernels (one thread per nonzero unless said otherwise; 128-thread blocks):
 * - hls_completion_count: counts[count_off[m] + i_m] += 1 for every mode (atomics),
 *   once per session: rows' nonzero counts for SGD's regularization and the grouping.
 * - hls_completion_group: groups the nonzeros by their index in the target mode, as
 *   the CPU's RowGroups: each nonzero takes the next slot of its row (an atomic cursor
 *   from the host's prefix sums of the counts) and writes the other modes' indices and
 *   x - offset there. The order within a row is the order the atomics ran in, so the
 *   normal equations' sums run in an order that may change from run to run.
 * - hls_completion_normal_eq: one warp per segment of a row's slots (the host cuts rows
 *   into segments of at most 1024 nonzeros so that long rows spread over many warps).
 *   Per chunk of up to `chunk` nonzeros the warp forms their Khatri-Rao rows k (lanes
 *   over columns, coalesced factor loads) into its shared-memory block K[chunk][R],
 *   with the values beside them; then lane l sums, for entries l, l + 32, ... of the
 *   row's R*R + R outputs, G[a][b] = sum_j K[j][a] K[j][b] or b[r] = sum_j x_j K[j][r]
 *   over the chunk in registers and adds that to the output row: a plain
 *   read-modify-write when the row has one segment (the warp owns it), an atomicAdd
 *   when it has several. Shared memory (dynamic): per warp chunk * (R + 1) floats.
 * - hls_completion_residual_v{1,4}: residual[q] = x - offset - sum_r prod_n A_n[i_n, r]
 *   (v4: 16-byte factor loads when R % 4 == 0), sums over r in order, as on the CPU.
 * - hls_completion_loss_v{1,4}: sum (x - offset - model)^2: the difference in f32, its
 *   square summed per thread in f64, reduced over the warp by shuffles and added with
 *   one f64 atomicAdd per warp (the order of those additions varies, in f64).
 * - hls_completion_add_column: residual[q] += sign * prod_n A_n[i_n, col].
 * - hls_completion_column_terms: for the nonzero's row i of the target mode, acc[i][0]
 *   += e k and acc[i][1] += k^2 with k = prod_{m != mode} A_m[i_m, col], the products
 *   of f32 values formed and added in f64 (f64 atomics), converted by the host.
 * - hls_completion_set_column: A_mode[i, col] = column[i], one thread per row.
 * - hls_completion_sgd: one SGD epoch, Hogwild (Recht et al. 2011) in warp steps. The
 *   work units are batches of sgd_batch consecutive sparse nonzeros, then each dense
 *   tile in HLS_COMPLETION_TILE_PARTS parts of 16 bitmap words; warp w runs units
 *   w, w + W, ... of a permutation u -> (perm_mul u + perm_add) mod units (the host
 *   draws it from the step's seed; without shuffling it is the identity). A warp runs
 *   its unit's nonzeros one at a time in the session's order: lanes over columns form
 *   the model value (a warp sum), then each lane moves its columns of every mode's row
 *   by lr (e k_n - lambda / count_n(i_n) a_n), all from the values it read before the
 *   step, adding the change with atomicAdd. Rows are read from L2 (ld.global.cg), where
 *   the atomics land, so a warp sees every finished update; steps of different warps
 *   on the same row at the same moment may each miss the other's change (Hogwild's
 *   staleness), never lose it. Steps on disjoint rows give the sequential result in
 *   any order. A step that leaves a non-finite entry raises the flag.
 * Kernels that write per-nonzero values raise `flag` when one is inf or NaN.
 * Register bounds: the per-nonzero kernels and SGD ask for 8 resident blocks per SM (at
 * most 64 registers a thread), the normal equations for 4 (128): left to its own
 * target ptxas spilled a few bytes in several of them, and the gather-bound walks gain
 * from the occupancy.
 * No register array is indexed at run time (loops over modes are unrolled to
 * HLS_MAX_ORDER and test the order).
 */
#pragma once
#include "sparse.cu"

namespace hls {

/* Stored value i of `base` as t.value_type says: the completion kernels run on CUDA
 * cores, where a uniform branch per value costs next to nothing, so one entry serves
 * both types. */
__device__ __forceinline__ float stored_value(const HlsLaunchParams& t, uint64_t base, uint64_t i) {
    return t.value_type == HLS_VALUES_F32 ? load_value<float>(base, i) : load_value<__half>(base, i);
}

constexpr int kChunk = HLS_COMPLETION_CHUNK;
static_assert(kChunk <= kWarp, "lane j loads the value of nonzero j of a chunk");
constexpr int kTileParts = HLS_COMPLETION_TILE_PARTS;
constexpr int kPartWords = HLS_BITMAP_WORDS / HLS_COMPLETION_TILE_PARTS;

/* Factor of mode m. */
__device__ __forceinline__ float* factor_of(const HlsCompletionParams& p, int m) {
    return reinterpret_cast<float*>(p.t.factor[m]);
}

/* The entry of c for mode `mode` (a run-time mode, registers indexed by constants). */
__device__ __forceinline__ uint32_t coord_of(const uint32_t (&c)[kMaxOrder], uint32_t mode) {
    uint32_t v = 0;
#pragma unroll
    for (int m = 0; m < kMaxOrder; ++m)
        if (m == (int)mode) v = c[m];
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
    return v;
}

/*
 * Calls f(q, c, x) for every nonzero this thread visits (see the header): q its
 * position in the session's order, c its coordinates (entries past the order are 0),
 * x its value times the tensor's scale. f must not use warp-wide operations: the lanes
 * of a warp visit different numbers of nonzeros.
 */
template <class F>
__device__ __forceinline__ void for_each_nonzero(const HlsCompletionParams& p, F&& f) {
    const HlsLaunchParams& t = p.t;
    const uint64_t threads = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t gid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t order = t.order;
    uint32_t c[kMaxOrder];

    const uint32_t* keys = reinterpret_cast<const uint32_t*>(t.sp_keys);
    const uint64_t* prefixes = reinterpret_cast<const uint64_t*>(t.sp_block_prefix);
    for (uint64_t q = gid; q < t.sp_nnz; q += threads) {
        const uint64_t prefix = __ldg(prefixes + block_of(t, q));
        const uint32_t low = __ldg(keys + q);
#pragma unroll
        for (int m = 0; m < kMaxOrder; ++m)
            c[m] = m < (int)order ? sparse_coord(prefix, low, t.sp_shift[m], t.sp_mask[m]) : 0u;
        f(q, c, stored_value(t, t.sp_values, q) * t.value_scale);
    }

    const int lane = threadIdx.x & 31;
    const uint64_t warps = threads / kWarp;
    const uint64_t* tkeys = reinterpret_cast<const uint64_t*>(t.tile_keys);
    const uint64_t* bitmaps = reinterpret_cast<const uint64_t*>(t.tile_bitmaps);
    const uint32_t* toffs = reinterpret_cast<const uint32_t*>(t.tile_offsets);
#pragma unroll
    for (int m = kTileOrder; m < kMaxOrder; ++m) c[m] = 0u;
    for (uint64_t tile = gid / kWarp; tile < t.n_tiles; tile += warps) { /* warp-uniform */
        const uint64_t key = __ldg(tkeys + tile);
        uint32_t o[kTileOrder];
#pragma unroll
        for (int m = 0; m < kTileOrder; ++m) o[m] = tile_origin(t, key, m);
        const uint64_t* bm = bitmaps + tile * kBitmapWords + 2 * lane;
        const uint64_t w0 = __ldg(bm), w1 = __ldg(bm + 1);
        const int count = __popcll(w0) + __popcll(w1);
        int incl = count;
#pragma unroll
        for (int d = 1; d < kWarp; d <<= 1) {
            const int y = __shfl_up_sync(kFullMask, incl, d);
            if (lane >= d) incl += y;
        }
        uint64_t slot = __ldg(toffs + tile) + (uint64_t)(incl - count);
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            uint64_t bits = k ? w1 : w0;
            while (bits) {
                cell_coords(o, next_cell((uint32_t)(2 * lane + k), bits), c);
                f(t.sp_nnz + slot, c, stored_value(t, t.tile_values, slot) * t.value_scale);
                ++slot;
            }
        }
    }
}

/* sum_r prod_m A_m[c_m, r] in f32, r in order (V = 4: R % 4 == 0, 16-byte loads). */
template <int V>
__device__ __forceinline__ float model_at(const HlsCompletionParams& p, const uint32_t (&c)[kMaxOrder]) {
    const uint32_t R = p.rank, order = p.t.order;
    float sum = 0.f;
    for (uint32_t r = 0; r < R; r += V) {
        float prod[V];
#pragma unroll
        for (int i = 0; i < V; ++i) prod[i] = 1.f;
#pragma unroll
        for (int m = 0; m < kMaxOrder; ++m) {
            if (m >= (int)order) continue;
            float f[V];
            load_vec<V>(factor_of(p, m) + (size_t)c[m] * R + r, f);
#pragma unroll
            for (int i = 0; i < V; ++i) prod[i] *= f[i];
        }
#pragma unroll
        for (int i = 0; i < V; ++i) sum += prod[i];
    }
    return sum;
}

/* prod_{m != skip} A_m[c_m, col] (skip >= order: every mode). */
__device__ __forceinline__ float column_product(const HlsCompletionParams& p, const uint32_t (&c)[kMaxOrder],
                                                uint32_t skip) {
    const uint32_t R = p.rank, col = p.col, order = p.t.order;
    float k = 1.f;
#pragma unroll
    for (int m = 0; m < kMaxOrder; ++m)
        if (m < (int)order && m != (int)skip) k *= __ldg(factor_of(p, m) + (size_t)c[m] * R + col);
    return k;
}

__device__ __forceinline__ void raise_flag(const HlsCompletionParams& p, bool bad) {
    if (bad) atomicOr(reinterpret_cast<unsigned int*>(p.flag), 1u);
}

template <int V>
__device__ void residual_kernel(const HlsCompletionParams& p) {
    float* res = reinterpret_cast<float*>(p.residual);
    bool bad = false;
    for_each_nonzero(p, [&](uint64_t q, const uint32_t (&c)[kMaxOrder], float x) {
        const float e = x - p.offset - model_at<V>(p, c);
        res[q] = e;
        bad |= !isfinite(e);
    });
    raise_flag(p, bad);
}

template <int V>
__device__ void loss_kernel(const HlsCompletionParams& p) {
    double sum = 0.0;
    for_each_nonzero(p, [&](uint64_t, const uint32_t (&c)[kMaxOrder], float x) {
        const double e = (double)(x - p.offset - model_at<V>(p, c));
        sum = fma(e, e, sum);
    });
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(kFullMask, sum, off);
    if ((threadIdx.x & 31) == 0 && sum != 0.0) atomicAdd(reinterpret_cast<double*>(p.acc), sum);
}

/* One SGD step of the whole warp at nonzero c with value x (see the header). */
__device__ __forceinline__ void sgd_step(const HlsCompletionParams& p, const uint32_t (&c)[kMaxOrder], float x,
                                         int lane, bool& bad) {
    const uint32_t R = p.rank, order = p.t.order;
    float part = 0.f;
    for (uint32_t r = lane; r < R; r += kWarp) {
        float prod = 1.f;
#pragma unroll
        for (int m = 0; m < kMaxOrder; ++m)
            if (m < (int)order) prod *= __ldcg(factor_of(p, m) + (size_t)c[m] * R + r);
        part += prod;
    }
    const float e = x - p.offset - warp_sum(part);
    const uint32_t* counts = reinterpret_cast<const uint32_t*>(p.counts);
    float reg[kMaxOrder];
#pragma unroll
    for (int m = 0; m < kMaxOrder; ++m)
        reg[m] = m < (int)order ? p.lambda / (float)__ldg(counts + p.count_off[m] + c[m]) : 0.f;
    for (uint32_t r = lane; r < R; r += kWarp) {
        float a[kMaxOrder];
#pragma unroll
        for (int m = 0; m < kMaxOrder; ++m)
            a[m] = m < (int)order ? __ldcg(factor_of(p, m) + (size_t)c[m] * R + r) : 1.f;
#pragma unroll
        for (int m = 0; m < kMaxOrder; ++m) {
            if (m >= (int)order) continue;
            float g = e;
#pragma unroll
            for (int n = 0; n < kMaxOrder; ++n)
                if (n != m && n < (int)order) g *= a[n];
            const float delta = p.learning_rate * (g - reg[m] * a[m]);
            const float old = atomicAdd(factor_of(p, m) + (size_t)c[m] * R + r, delta);
            bad |= !isfinite(old + delta);
        }
    }
}

}  // namespace hls

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, 8)
hls_completion_count(const HlsCompletionParams p) {
    using namespace hls;
    unsigned int* counts = reinterpret_cast<unsigned int*>(p.counts);
    const uint32_t order = p.t.order;
    for_each_nonzero(p, [&](uint64_t, const uint32_t (&c)[kMaxOrder], float) {
#pragma unroll
        for (int m = 0; m < kMaxOrder; ++m)
            if (m < (int)order) atomicAdd(counts + p.count_off[m] + c[m], 1u);
    });
}

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, 8)
hls_completion_group(const HlsCompletionParams p) {
    using namespace hls;
    unsigned long long* next = reinterpret_cast<unsigned long long*>(p.group_next);
    uint32_t* idx = reinterpret_cast<uint32_t*>(p.group_idx);
    float* val = reinterpret_cast<float*>(p.group_val);
    const uint32_t order = p.t.order, mode = p.t.mode, d = order - 1;
    for_each_nonzero(p, [&](uint64_t, const uint32_t (&c)[kMaxOrder], float x) {
        const uint64_t slot = atomicAdd(next + coord_of(c, mode), 1ull);
        uint32_t* o = idx + slot * d;
        uint32_t k = 0;
#pragma unroll
        for (int m = 0; m < kMaxOrder; ++m)
            if (m < (int)order && m != (int)mode) o[k++] = c[m];
        val[slot] = x - p.offset;
    });
}

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, 4)
hls_completion_normal_eq(const HlsCompletionParams p) {
    using namespace hls;
    extern __shared__ float smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t R = p.rank, C = p.chunk, order = p.t.order, mode = p.t.mode;
    const uint32_t d = order - 1, width = R * R + R;
    float* K = smem + (size_t)warp * C * (R + 1); /* K[j][r] = K[j * R + r] */
    float* X = K + (size_t)C * R;                 /* the chunk's values */
    const uint64_t* seg_start = reinterpret_cast<const uint64_t*>(p.seg_start);
    const uint32_t* seg_row = reinterpret_cast<const uint32_t*>(p.seg_row);
    const uint32_t* idx = reinterpret_cast<const uint32_t*>(p.group_idx);
    const float* val = reinterpret_cast<const float*>(p.group_val);

    for (uint64_t s = (uint64_t)blockIdx.x * kWarps + warp; s < p.n_segs; s += (uint64_t)gridDim.x * kWarps) {
        const uint32_t row = __ldg(seg_row + s);
        const bool shared = (s > 0 && __ldg(seg_row + s - 1) == row) ||
                            (s + 1 < p.n_segs && __ldg(seg_row + s + 1) == row);
        float* out = reinterpret_cast<float*>(p.t.out) + (size_t)row * width;
        const uint64_t end = __ldg(seg_start + s + 1);
        for (uint64_t c0 = __ldg(seg_start + s); c0 < end; c0 += C) {
            const uint32_t n = (uint32_t)min((uint64_t)C, end - c0);
            for (uint32_t j = 0; j < n; ++j) {
                const uint32_t* ix = idx + (c0 + j) * d;
                for (uint32_t r = lane; r < R; r += kWarp) {
                    float k = 1.f;
#pragma unroll
                    for (int o = 0; o < kMaxOrder - 1; ++o) {
                        if (o >= (int)d) continue;
                        const int m = o < (int)mode ? o : o + 1;
                        k *= __ldg(factor_of(p, m) + (size_t)__ldg(ix + o) * R + r);
                    }
                    K[j * R + r] = k;
                }
            }
            if (lane < (int)n) X[lane] = __ldg(val + c0 + lane);
            __syncwarp();
            for (uint32_t e = lane; e < width; e += kWarp) {
                float acc = 0.f;
                if (e < R * R) {
                    const uint32_t a = e / R, b = e - a * R;
                    for (uint32_t j = 0; j < n; ++j) acc = fmaf(K[j * R + a], K[j * R + b], acc);
                } else {
                    const uint32_t r = e - R * R;
                    for (uint32_t j = 0; j < n; ++j) acc = fmaf(X[j], K[j * R + r], acc);
                }
                if (shared) atomicAdd(out + e, acc);
                else out[e] += acc;
            }
            __syncwarp(); /* K and X are overwritten by the next chunk */
        }
    }
}

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, 8)
hls_completion_residual_v1(const HlsCompletionParams p) {
    hls::residual_kernel<1>(p);
}

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, 8)
hls_completion_residual_v4(const HlsCompletionParams p) {
    hls::residual_kernel<4>(p);
}

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, 8)
hls_completion_loss_v1(const HlsCompletionParams p) {
    hls::loss_kernel<1>(p);
}

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, 8)
hls_completion_loss_v4(const HlsCompletionParams p) {
    hls::loss_kernel<4>(p);
}

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, 8)
hls_completion_add_column(const HlsCompletionParams p) {
    using namespace hls;
    float* res = reinterpret_cast<float*>(p.residual);
    bool bad = false;
    for_each_nonzero(p, [&](uint64_t q, const uint32_t (&c)[kMaxOrder], float) {
        const float e = res[q] + p.sign * column_product(p, c, kMaxOrder);
        res[q] = e;
        bad |= !isfinite(e);
    });
    raise_flag(p, bad);
}

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, 8)
hls_completion_column_terms(const HlsCompletionParams p) {
    using namespace hls;
    const float* res = reinterpret_cast<const float*>(p.residual);
    double* acc = reinterpret_cast<double*>(p.acc);
    const uint32_t mode = p.t.mode;
    for_each_nonzero(p, [&](uint64_t q, const uint32_t (&c)[kMaxOrder], float) {
        const double k = (double)column_product(p, c, mode);
        double* row = acc + 2 * (size_t)coord_of(c, mode);
        atomicAdd(row, (double)res[q] * k);
        atomicAdd(row + 1, k * k);
    });
}

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_completion_set_column(const HlsCompletionParams p) {
    using namespace hls;
    float* a = factor_of(p, p.t.mode);
    const float* v = reinterpret_cast<const float*>(p.column);
    const uint64_t rows = p.t.dims[p.t.mode];
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows;
         i += (uint64_t)gridDim.x * blockDim.x)
        a[i * p.rank + p.col] = v[i];
}

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS, 8)
hls_completion_sgd(const HlsCompletionParams p) {
    using namespace hls;
    const HlsLaunchParams& t = p.t;
    const int lane = threadIdx.x & 31;
    const uint64_t warps = (uint64_t)gridDim.x * kWarps;
    const uint64_t sp_units = (t.sp_nnz + p.sgd_batch - 1) / p.sgd_batch;
    const uint32_t* keys = reinterpret_cast<const uint32_t*>(t.sp_keys);
    const uint64_t* prefixes = reinterpret_cast<const uint64_t*>(t.sp_block_prefix);
    const uint64_t* offsets = reinterpret_cast<const uint64_t*>(t.sp_block_offsets);
    const uint64_t* tkeys = reinterpret_cast<const uint64_t*>(t.tile_keys);
    const uint64_t* bitmaps = reinterpret_cast<const uint64_t*>(t.tile_bitmaps);
    const uint32_t* toffs = reinterpret_cast<const uint32_t*>(t.tile_offsets);
    uint32_t c[kMaxOrder];
    bool bad = false;

    for (uint64_t u = (uint64_t)blockIdx.x * kWarps + (threadIdx.x >> 5); u < p.sgd_units; u += warps) {
        /* perm_mul, u < 2^32: the product fits 64 bits. */
        const uint64_t unit = ((uint64_t)p.perm_mul * u + p.perm_add) % p.sgd_units;
        if (unit < sp_units) {
            const uint64_t begin = unit * p.sgd_batch;
            const uint64_t end = min(begin + (uint64_t)p.sgd_batch, t.sp_nnz);
            uint32_t b = block_of(t, begin);
            for (uint64_t q = begin; q < end; ++q) {
                while (q >= __ldg(offsets + b + 1)) ++b;
                const uint64_t prefix = __ldg(prefixes + b);
                const uint32_t low = __ldg(keys + q);
#pragma unroll
                for (int m = 0; m < kMaxOrder; ++m)
                    c[m] = m < (int)t.order ? sparse_coord(prefix, low, t.sp_shift[m], t.sp_mask[m]) : 0u;
                sgd_step(p, c, stored_value(t, t.sp_values, q) * t.value_scale, lane, bad);
            }
        } else {
            const uint64_t tile = (unit - sp_units) / kTileParts;
            const uint32_t part = (uint32_t)((unit - sp_units) % kTileParts);
            const uint64_t key = __ldg(tkeys + tile);
            uint32_t o[kTileOrder];
#pragma unroll
            for (int m = 0; m < kTileOrder; ++m) o[m] = tile_origin(t, key, m);
            const uint64_t* bm = bitmaps + tile * kBitmapWords;
            uint64_t slot = __ldg(toffs + tile);
            for (uint32_t w = 0; w < part * kPartWords; ++w) slot += __popcll(__ldg(bm + w));
#pragma unroll
            for (int m = kTileOrder; m < kMaxOrder; ++m) c[m] = 0u;
            for (uint32_t w = part * kPartWords; w < (part + 1) * kPartWords; ++w) {
                uint64_t bits = __ldg(bm + w);
                while (bits) { /* warp-uniform: every lane reads the same word */
                    cell_coords(o, next_cell(w, bits), c);
                    sgd_step(p, c, stored_value(t, t.tile_values, slot) * t.value_scale, lane, bad);
                    ++slot;
                }
            }
        }
    }
    raise_flag(p, bad);
}
