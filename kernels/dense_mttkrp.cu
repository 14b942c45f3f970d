/*
 * dense_mttkrp.cu - MTTKRP of dense 16^3 tiles on tensor cores (mma.sync m16n8k16,
 * fp16 inputs, fp32 accumulation).
 *
 * Per tile, target mode n (offset e), other modes a < b (offsets ea, eb):
 *   M[e, c] = sum_ea F_a[ea, c] * T_e[ea, c],   T_e = X_e[16 x 16] * F_b(tile rows)[16 x R]
 * The first product runs on tensor cores; the Hadamard product with F_a and the sum over
 * ea run in fp32 on the accumulators, so only the F_b tile rows are rounded to fp16
 * (X is fp16 as stored), and no Khatri-Rao product is formed. f32 values run as two
 * fp16 terms, hi = fp16(v) and lo = fp16(v - hi), and F_b as two terms too (lo_term), in
 * three passes whose MMAs all accumulate in fp32: X_hi F_b, X_hi F_b,lo and X_lo F_b
 * (X_lo F_b,lo is below 2^-22), so what is left is about 2^-22 relative, as f32 sums.
 * A pass apiece, not two MMAs in one, keeps the registers of the fp16 kernel.
 *
 * One block of HLS_BLOCK_THREADS (4 warps) per tile.
 * - All threads: expand the tile into slices X_e[ea][eb] in shared memory (xs).
 * - Each warp, per chunk of 32 output columns: builds the F_b B-fragments in registers
 *   from the fp32 factor, each 16-row tile column scaled by its own power of two (its
 *   largest entry just below 1: no entry of the tile column is lost to fp16's range
 *   unless it is 2^-24 of that column's largest), and keeps the F_a entries its
 *   accumulator positions meet (fp32). Then for each of its slices e = warp + 4k:
 *   ldmatrix X_e, four MMAs (4 x 8 columns), weight rows by F_a, and a transposing
 *   butterfly over the 8 row groups leaves lane l with the sum for one column; one
 *   atomicAdd per lane writes the output row (times the value scale and F_b's column
 *   scale).
 * Shared memory: xs 16 x 16 x 24 fp16 (12 KB) and the scan totals.
 */
#include "hls_common.cuh"

namespace hls {

/* Sums v[i] over the 8 lanes that share lane % 4 (the MMA row groups), leaving lane l
 * with the sum of index g = l / 4. Seven shuffles instead of 24. */
__device__ __forceinline__ float transpose_reduce8(const float (&v)[8], int lane) {
    const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
    float w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float send = b4 ? v[i] : v[i + 4];
        const float keep = b4 ? v[i + 4] : v[i];
        w[i] = keep + __shfl_xor_sync(kFullMask, send, 16);
    }
    float x[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float send = b3 ? w[i] : w[i + 2];
        const float keep = b3 ? w[i + 2] : w[i];
        x[i] = keep + __shfl_xor_sync(kFullMask, send, 8);
    }
    const float send = b2 ? x[0] : x[1];
    const float keep = b2 ? x[1] : x[0];
    return keep + __shfl_xor_sync(kFullMask, send, 4);
}

/* One fp16 term (`what`) of the dense MTTKRP of tile t by the whole block times F_b's
 * first fp16 term, or with `b_lo` its second (lo_term; xs as the previous pass left it),
 * added to out: float[dims[mode]][out_cols]. */
template <typename T>
__device__ void dense_mttkrp_term(const HlsLaunchParams& p, uint64_t t, TileSmem& s, Expand what,
                                  bool b_lo) {
    if (!b_lo) expand_tile<T>(p, t, s, what);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tq = lane & 3;
    int a, b;
    other_modes(p.mode, a, b);
    const uint64_t key = __ldg(reinterpret_cast<const uint64_t*>(p.tile_keys) + t);
    const uint32_t on = tile_origin(p, key, p.mode);
    const uint32_t oa = tile_origin(p, key, a);
    const uint32_t ob = tile_origin(p, key, b);
    const uint32_t R = p.out_cols;
    const uint32_t dim_a = p.dims[a], dim_b = p.dims[b], dim_n = p.dims[p.mode];
    const float* Fa = reinterpret_cast<const float*>(p.factor[a]);
    const float* Fb = reinterpret_cast<const float*>(p.factor[b]);
    float* out = reinterpret_cast<float*>(p.out);

    /* ldmatrix row address of this lane within a slice: matrix q = lane / 8 covers rows
     * (q & 1) * 8.., k (q >> 1) * 8.. of the A operand X_e. */
    const int q = lane >> 3;
    const uint32_t a_off = (uint32_t)(((q & 1) * 8 + (lane & 7)) * kXsLd + (q >> 1) * 8);
    const uint32_t xs0 = smem_addr(s.xs);

    for (uint32_t c0 = 0; c0 < R; c0 += 32) {
        uint32_t bf[4][2];
        float fa[4][4];
        float sb[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            /* B fragment: rows eb = 2tq, 2tq+1, 2tq+8, 2tq+9 of column cb = c0 + 8j + g. */
            const uint32_t cb = c0 + 8 * j + g;
            float v[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t eb = 2 * tq + (i & 1) + 8 * (i >> 1);
                v[i] = (cb < R && ob + eb < dim_b) ? __ldg(Fb + (size_t)(ob + eb) * R + cb) : 0.f;
            }
            float m = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
            m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 1));
            m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 2));
            const int ex = pow2_exponent(m);
            const float inv = exp2i(-ex);
            sb[j] = exp2i(ex);
            if (b_lo) {
#pragma unroll
                for (int i = 0; i < 4; ++i) v[i] = lo_term(v[i] * inv);
                bf[j][0] = pack_half2(v[0], v[1]);
                bf[j][1] = pack_half2(v[2], v[3]);
            } else {
                bf[j][0] = pack_half2(v[0] * inv, v[1] * inv);
                bf[j][1] = pack_half2(v[2] * inv, v[3] * inv);
            }
            /* F_a at the accumulator positions: rows ea = g, g+8; columns 2tq, 2tq+1. */
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t ea = g + 8 * (i >> 1);
                const uint32_t col = c0 + 8 * j + 2 * tq + (i & 1);
                fa[j][i] = (col < R && oa + ea < dim_a) ? __ldg(Fa + (size_t)(oa + ea) * R + col) : 0.f;
            }
        }
        /* After transpose_reduce8 this lane holds column c0 + 8 (g >> 1) + 2 tq + (g & 1),
         * whose F_b scale sits in the lanes with fragment column g' = 2 tq + (g & 1). */
        const uint32_t my_col = c0 + 8 * (g >> 1) + 2 * tq + (g & 1);
        const int src = (2 * tq + (g & 1)) * 4;
        float my_scale = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float sj = __shfl_sync(kFullMask, sb[j], src);
            if (j == (g >> 1)) my_scale = sj;
        }
        const float fold = p.value_scale * my_scale * (b_lo ? kLoBack : 1.f);

        for (int e = warp; e < kTile; e += kWarps) {
            const uint32_t row = on + e;
            if (row >= dim_n) break; /* warp-uniform; later slices are beyond too */
            uint32_t af[4];
            ldmatrix_x4(af, xs0 + 2u * ((uint32_t)e * kXsSlice + a_off));
            float v[8];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float c[4] = {0.f, 0.f, 0.f, 0.f};
                mma_16816(c, af, bf[j][0], bf[j][1]);
                v[2 * j] = c[0] * fa[j][0] + c[2] * fa[j][2];
                v[2 * j + 1] = c[1] * fa[j][1] + c[3] * fa[j][3];
            }
            const float y = transpose_reduce8(v, lane);
            if (my_col < R && y != 0.f) atomicAdd(out + (size_t)row * R + my_col, y * fold);
        }
    }
}

/* Dense MTTKRP of tile t by the whole block: one pass for fp16 values; for f32 values
 * (kValueTerms) X_hi F_b, X_hi F_b,lo and X_lo F_b, all accumulated in fp32 into the
 * output. */
template <typename T>
__device__ void dense_mttkrp_tile(const HlsLaunchParams& p, uint64_t t, TileSmem& s) {
    dense_mttkrp_term<T>(p, t, s, Expand::Hi, false);
    if (kValueTerms<T> > 1) {
        dense_mttkrp_term<T>(p, t, s, Expand::Hi, true); /* reads xs as it is */
        __syncthreads(); /* every warp is done with xs before it is refilled */
        dense_mttkrp_term<T>(p, t, s, Expand::Lo, false);
    }
}

}  // namespace hls

/* Dense tiles only: grid = n_tiles blocks of HLS_BLOCK_THREADS; fp16 values, and f32
 * values (_f32). */
extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_dense_mttkrp(const HlsLaunchParams p) {
    __shared__ __align__(16) hls::TileSmem smem;
    if (blockIdx.x < p.n_tiles) hls::dense_mttkrp_tile<__half>(p, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_dense_mttkrp_f32(const HlsLaunchParams p) {
    __shared__ __align__(16) hls::TileSmem smem;
    if (blockIdx.x < p.n_tiles) hls::dense_mttkrp_tile<float>(p, blockIdx.x, smem);
}
