/*
 * cp_update.cu - the CP-ALS factor update on the device, so that an iteration moves
 * only R x R matrices across the bus (src/engine/cuda/cp.rs drives it).
 *
 * For mode n, with M the mode's MTTKRP result (rows x R, fp32, on the device) and W
 * the inverse of the Hadamard product of the other factors' Grams (R x R, fp64, from
 * the host):
 *   hls_cp_update_rows: A = M W in fp64, stored as fp32 into the factor; per column
 *     the sum of squares (two_norm) or the largest magnitude, the Gram A^T A and, when
 *     asked, sum_i M[i, c] A[i, c]; any non-finite entry of M raises a flag.
 *   hls_cp_normalize: divides the columns of A by the norms the host derived.
 * The host then scales the Gram and the inner products by the same norms.
 *
 * hls_cp_update_rows: blocks of HLS_BLOCK_THREADS threads stride over tiles of
 * HLS_CP_TILE_ROWS rows. Thread t owns column c = t % R of rows t / R, t / R + P, ...
 * of a tile (P = 128 / R rows at a time; threads past P * R idle in this phase) and
 * keeps that column's norm and inner-product partials in registers; in the Gram phase
 * thread t owns Gram entries t, t + 128, ... and keeps their partials in registers.
 * Everything is added to global memory once per block at the end (fp64 atomics; for
 * the max norm, atomicMax on the bit patterns of non-negative doubles, which order
 * like the values). Shared memory: W (R x R fp64) and the tile of A (fp64).
 * Preconditions (the host checks): 1 <= R <= HLS_CP_MAX_RANK.
 */
#include "hls_common.cuh"

namespace hls {

constexpr int kCpMaxRank = HLS_CP_MAX_RANK;
constexpr int kCpTile = HLS_CP_TILE_ROWS;
/* Gram entries per thread: R^2 / 128 at the largest rank. */
constexpr int kCpGramPerThread = (kCpMaxRank * kCpMaxRank + kThreads - 1) / kThreads;

__device__ __forceinline__ void atomic_max_nonneg(double* addr, double v) {
    atomicMax(reinterpret_cast<unsigned long long*>(addr), (unsigned long long)__double_as_longlong(v));
}

}  // namespace hls

extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_cp_update_rows(const HlsCpParams p) {
    using namespace hls;
    __shared__ double w[kCpMaxRank * kCpMaxRank];
    __shared__ double at[kCpTile * kCpMaxRank];
    const int t = threadIdx.x;
    const uint32_t R = p.rank;
    const float* m = reinterpret_cast<const float*>(p.m);
    float* a = reinterpret_cast<float*>(p.a);
    const double* wg = reinterpret_cast<const double*>(p.w);
    for (uint32_t i = t; i < R * R; i += kThreads) w[i] = wg[i];
    __syncthreads();

    const uint32_t P = kThreads / R; /* rows per pass (>= 2 for R <= 64) */
    const uint32_t c = t % R, rsub = t / R;
    const bool active = rsub < P;
    double norm = 0.0, inner = 0.0;
    double g[kCpGramPerThread];
#pragma unroll
    for (int k = 0; k < kCpGramPerThread; ++k) g[k] = 0.0;
    bool finite = true;

    for (uint64_t r0 = (uint64_t)blockIdx.x * kCpTile; r0 < p.rows; r0 += (uint64_t)gridDim.x * kCpTile) {
        const uint32_t n = (uint32_t)min((uint64_t)kCpTile, p.rows - r0);
        if (active) {
            for (uint32_t rr = rsub; rr < n; rr += P) {
                const float* mrow = m + (r0 + rr) * R;
                double s = 0.0;
                for (uint32_t k = 0; k < R; ++k) {
                    const float x = mrow[k];
                    finite &= isfinite(x);
                    s = fma((double)x, w[k * R + c], s);
                }
                at[rr * R + c] = s;
                a[(r0 + rr) * R + c] = (float)s;
                if (p.two_norm) norm = fma(s, s, norm);
                else norm = fmax(norm, fabs(s));
                if (p.with_inner) inner = fma((double)mrow[c], s, inner);
            }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kCpGramPerThread; ++k) {
            const uint32_t e = t + k * kThreads;
            if (e < R * R) {
                const uint32_t i = e / R, j = e % R;
                double s = 0.0;
                for (uint32_t rr = 0; rr < n; ++rr) s = fma(at[rr * R + i], at[rr * R + j], s);
                g[k] += s;
            }
        }
        __syncthreads(); /* the tile of A is overwritten next */
    }

    double* gram = reinterpret_cast<double*>(p.acc);
    double* norms = gram + R * R;
    double* inners = norms + R;
#pragma unroll
    for (int k = 0; k < kCpGramPerThread; ++k) {
        const uint32_t e = t + k * kThreads;
        if (e < R * R) atomicAdd(gram + e, g[k]);
    }
    if (active) {
        if (p.two_norm) atomicAdd(norms + c, norm);
        else atomic_max_nonneg(norms + c, norm);
        if (p.with_inner) atomicAdd(inners + c, inner);
    }
    if (!finite) atomicOr(reinterpret_cast<unsigned int*>(p.flag), 1u);
}

/* a[i, c] *= inv[c] over rows x R, grid-stride. */
extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_cp_normalize(const HlsCpParams p) {
    float* a = reinterpret_cast<float*>(p.a);
    const double* inv = reinterpret_cast<const double*>(p.w);
    const uint64_t total = p.rows * p.rank;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (uint64_t)gridDim.x * blockDim.x)
        a[i] = (float)((double)a[i] * inv[i % p.rank]);
}
