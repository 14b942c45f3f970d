/*
 * dense_ttmc.cu - TTM-chain of dense 16^3 tiles on tensor cores (mma.sync m16n8k16,
 * fp16 inputs, fp32 accumulation).
 *
 * Per tile, target mode n (offset e), other modes a < b, and slice X_e[ea][eb]:
 *   Y_e[ra, rb] = sum_{ea, eb} F_a[ea, ra] X_e[ea, eb] F_b[eb, rb]
 * as two chained products per slice, computed transposed so that the first product's
 * accumulators are already the second one's A operand (no trip through memory):
 *   P = F_b^T X_e^T   [Rb x 16]  (M = rb, K = eb, N = ea)
 *   Q = P' F_a        [Rb x Ra]  (M = rb, K = ea, N = ra),  Y_e = Q^T
 * P' is P with each row scaled by a power of two (its largest entry just below 1) and
 * rounded to fp16; the scales are folded back when Q is written. f32 values run as two
 * fp16 terms of X (hi = fp16(v), lo = fp16(v - hi)), in two passes added in fp32, and in
 * the hi pass F_b, P' and F_a as two terms each too (lo_term; the products of two second
 * terms are dropped), so what is left is about 2^-22 relative, as f32 sums. Output row
 * I_n = tile origin + e, column ra * Rb + rb.
 *
 * One block of HLS_BLOCK_THREADS (4 warps) per tile.
 * - All threads: expand the tile into slices X_e[ea][eb] in shared memory (xs).
 * - Each warp: builds F_b^T as A fragments and F_a as B fragments in registers from the
 *   fp32 factors, each 16-row tile column scaled by its own power of two; then for each
 *   of its slices e = warp + 4k: ldmatrix X_e (as the B operand X_e^T), two MMAs per
 *   16 rows of rb for P, row scales by shuffles among the 4 lanes of a row, one MMA per
 *   8 columns of ra for Q, and one atomicAdd per output entry.
 * Shared memory: xs 16 x 16 x 24 fp16 (12 KB) and the scan totals.
 * Preconditions: ranks[a], ranks[b] <= HLS_TTMC_MAX_RANK (the host checks).
 */
#include "hls_common.cuh"

namespace hls {

constexpr int kTtmcMT = HLS_TTMC_MAX_RANK / 16; /* 16-row tiles of rb */
constexpr int kTtmcNT = HLS_TTMC_MAX_RANK / 8;  /* 8-column tiles of ra */

/* One fp16 term (`what`) of the dense TTMc of tile t by the whole block, added to
 * out: float[dims[mode]][Ra * Rb]. */
template <typename T>
__device__ void dense_ttmc_term(const HlsLaunchParams& p, uint64_t t, TileSmem& s, Expand what) {
    expand_tile<T>(p, t, s, what);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tq = lane & 3;
    int a, b;
    other_modes(p.mode, a, b);
    const uint64_t key = __ldg(reinterpret_cast<const uint64_t*>(p.tile_keys) + t);
    const uint32_t on = tile_origin(p, key, p.mode);
    const uint32_t oa = tile_origin(p, key, a);
    const uint32_t ob = tile_origin(p, key, b);
    const uint32_t Ra = p.ranks[a], Rb = p.ranks[b], C = p.out_cols;
    const uint32_t dim_a = p.dims[a], dim_b = p.dims[b], dim_n = p.dims[p.mode];
    const float* Fa = reinterpret_cast<const float*>(p.factor[a]);
    const float* Fb = reinterpret_cast<const float*>(p.factor[b]);
    float* out = reinterpret_cast<float*>(p.out);
    const int mt_n = (int)((Rb + 15) / 16), nt_n = (int)((Ra + 7) / 8);

    /* A operand F_b^T, per 16 rows of rb: a0 = (rb g, eb 2tq..), a1 = (rb g+8, eb 2tq..),
     * a2 = (rb g, eb 2tq+8..), a3 = (rb g+8, eb 2tq+8..); rows scaled by F_b's column
     * scales sbr[mt][0] (rb = g) and sbr[mt][1] (rb = g + 8). */
    /* f32 values: the operands' second terms in the hi pass. */
    const bool split = kValueTerms<T> > 1 && what == Expand::Hi;
    uint32_t fbt[kTtmcMT][4];
    uint32_t fbl[kTtmcMT][4];
    float sbr[kTtmcMT][2];
#pragma unroll
    for (int mt = 0; mt < kTtmcMT; ++mt) {
        float v[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint32_t rb = 16 * mt + g + 8 * h;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t eb = 2 * tq + (i & 1) + 8 * (i >> 1);
                v[h][i] = (mt < mt_n && rb < Rb && ob + eb < dim_b)
                              ? __ldg(Fb + (size_t)(ob + eb) * Rb + rb)
                              : 0.f;
            }
        }
        float inv[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float m = fmaxf(fmaxf(fabsf(v[h][0]), fabsf(v[h][1])), fmaxf(fabsf(v[h][2]), fabsf(v[h][3])));
            m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 1));
            m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 2));
            const int ex = pow2_exponent(m);
            inv[h] = exp2i(-ex);
            sbr[mt][h] = exp2i(ex);
        }
        fbt[mt][0] = pack_half2(v[0][0] * inv[0], v[0][1] * inv[0]);
        fbt[mt][1] = pack_half2(v[1][0] * inv[1], v[1][1] * inv[1]);
        fbt[mt][2] = pack_half2(v[0][2] * inv[0], v[0][3] * inv[0]);
        fbt[mt][3] = pack_half2(v[1][2] * inv[1], v[1][3] * inv[1]);
        if (split) {
            fbl[mt][0] = pack_half2(lo_term(v[0][0] * inv[0]), lo_term(v[0][1] * inv[0]));
            fbl[mt][1] = pack_half2(lo_term(v[1][0] * inv[1]), lo_term(v[1][1] * inv[1]));
            fbl[mt][2] = pack_half2(lo_term(v[0][2] * inv[0]), lo_term(v[0][3] * inv[0]));
            fbl[mt][3] = pack_half2(lo_term(v[1][2] * inv[1]), lo_term(v[1][3] * inv[1]));
        }
    }
    /* B operand F_a, per 8 columns of ra: b0 = (ea 2tq..2tq+1, ra g), b1 = (ea 2tq+8.., ra
     * g), scaled per column; sac[nt][h] is the scale of column ra = 8nt + 2tq + h, the
     * columns this lane's Q accumulators hold (fetched from the lanes that built them). */
    uint32_t fab[kTtmcNT][2];
    uint32_t fal[kTtmcNT][2];
    float sac[kTtmcNT][2];
#pragma unroll
    for (int nt = 0; nt < kTtmcNT; ++nt) {
        const uint32_t ra = 8 * nt + g;
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t ea = 2 * tq + (i & 1) + 8 * (i >> 1);
            v[i] = (nt < nt_n && ra < Ra && oa + ea < dim_a) ? __ldg(Fa + (size_t)(oa + ea) * Ra + ra) : 0.f;
        }
        float m = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
        m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 1));
        m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 2));
        const int ex = pow2_exponent(m);
        const float inv = exp2i(-ex);
        const float sa = exp2i(ex);
        fab[nt][0] = pack_half2(v[0] * inv, v[1] * inv);
        fab[nt][1] = pack_half2(v[2] * inv, v[3] * inv);
        if (split) {
            fal[nt][0] = pack_half2(lo_term(v[0] * inv), lo_term(v[1] * inv));
            fal[nt][1] = pack_half2(lo_term(v[2] * inv), lo_term(v[3] * inv));
        }
        sac[nt][0] = __shfl_sync(kFullMask, sa, (2 * tq) * 4);
        sac[nt][1] = __shfl_sync(kFullMask, sa, (2 * tq + 1) * 4);
    }

    /* ldmatrix row address of this lane for X_e^T as the B operand (K = eb, N = ea):
     * matrix q = lane / 8 covers ea (q >> 1) * 8.., eb (q & 1) * 8..; registers 0, 1 are
     * the fragment of ea 0..7 and registers 2, 3 that of ea 8..15. */
    const int q = lane >> 3;
    const uint32_t b_off = (uint32_t)(((q >> 1) * 8 + (lane & 7)) * kXsLd + (q & 1) * 8);
    const uint32_t xs0 = smem_addr(s.xs);

    for (int e = warp; e < kTile; e += kWarps) {
        const uint32_t row = on + e;
        if (row >= dim_n) break; /* warp-uniform; later slices are beyond too */
        uint32_t xb[4];
        ldmatrix_x4(xb, xs0 + 2u * ((uint32_t)e * kXsSlice + b_off));
        float* orow = out + (size_t)row * C;
#pragma unroll
        for (int mt = 0; mt < kTtmcMT; ++mt) {
            if (mt >= mt_n) break;
            float p0[4] = {0.f, 0.f, 0.f, 0.f}, p1[4] = {0.f, 0.f, 0.f, 0.f};
            mma_16816(p0, fbt[mt], xb[0], xb[1]); /* P(rb, ea 0..7) */
            mma_16816(p1, fbt[mt], xb[2], xb[3]); /* P(rb, ea 8..15) */
            if (split) {
                float l0[4] = {0.f, 0.f, 0.f, 0.f}, l1[4] = {0.f, 0.f, 0.f, 0.f};
                mma_16816(l0, fbl[mt], xb[0], xb[1]);
                mma_16816(l1, fbl[mt], xb[2], xb[3]);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    p0[i] += l0[i] * kLoBack;
                    p1[i] += l1[i] * kLoBack;
                }
            }
            float m0 = fmaxf(fmaxf(fabsf(p0[0]), fabsf(p0[1])), fmaxf(fabsf(p1[0]), fabsf(p1[1])));
            float m1 = fmaxf(fmaxf(fabsf(p0[2]), fabsf(p0[3])), fmaxf(fabsf(p1[2]), fabsf(p1[3])));
            m0 = fmaxf(m0, __shfl_xor_sync(kFullMask, m0, 1));
            m0 = fmaxf(m0, __shfl_xor_sync(kFullMask, m0, 2));
            m1 = fmaxf(m1, __shfl_xor_sync(kFullMask, m1, 1));
            m1 = fmaxf(m1, __shfl_xor_sync(kFullMask, m1, 2));
            const int x0 = pow2_exponent(m0), x1 = pow2_exponent(m1);
            const float d0 = exp2i(-x0), d1 = exp2i(-x1);
            const uint32_t pa[4] = {pack_half2(p0[0] * d0, p0[1] * d0), pack_half2(p0[2] * d1, p0[3] * d1),
                                    pack_half2(p1[0] * d0, p1[1] * d0), pack_half2(p1[2] * d1, p1[3] * d1)};
            uint32_t pl[4] = {0u, 0u, 0u, 0u};
            if (split) {
                pl[0] = pack_half2(lo_term(p0[0] * d0), lo_term(p0[1] * d0));
                pl[1] = pack_half2(lo_term(p0[2] * d1), lo_term(p0[3] * d1));
                pl[2] = pack_half2(lo_term(p1[0] * d0), lo_term(p1[1] * d0));
                pl[3] = pack_half2(lo_term(p1[2] * d1), lo_term(p1[3] * d1));
            }
            const float f0 = p.value_scale * sbr[mt][0] * exp2i(x0);
            const float f1 = p.value_scale * sbr[mt][1] * exp2i(x1);
            const uint32_t rb0 = 16 * mt + g, rb1 = rb0 + 8;
#pragma unroll
            for (int nt = 0; nt < kTtmcNT; ++nt) {
                if (nt >= nt_n) break;
                float y[4] = {0.f, 0.f, 0.f, 0.f};
                mma_16816(y, pa, fab[nt][0], fab[nt][1]); /* Q(rb, ra 8nt..) */
                if (split) {
                    float l[4] = {0.f, 0.f, 0.f, 0.f};
                    mma_16816(l, pl, fab[nt][0], fab[nt][1]);
                    mma_16816(l, pa, fal[nt][0], fal[nt][1]);
#pragma unroll
                    for (int i = 0; i < 4; ++i) y[i] += l[i] * kLoBack;
                }
                const uint32_t ra0 = 8 * nt + 2 * tq, ra1 = ra0 + 1;
                if (rb0 < Rb) {
                    if (ra0 < Ra && y[0] != 0.f) atomicAdd(orow + ra0 * Rb + rb0, y[0] * f0 * sac[nt][0]);
                    if (ra1 < Ra && y[1] != 0.f) atomicAdd(orow + ra1 * Rb + rb0, y[1] * f0 * sac[nt][1]);
                }
                if (rb1 < Rb) {
                    if (ra0 < Ra && y[2] != 0.f) atomicAdd(orow + ra0 * Rb + rb1, y[2] * f1 * sac[nt][0]);
                    if (ra1 < Ra && y[3] != 0.f) atomicAdd(orow + ra1 * Rb + rb1, y[3] * f1 * sac[nt][1]);
                }
            }
        }
    }
}

/* Dense TTMc of tile t by the whole block: one pass per fp16 term of the values
 * (kValueTerms: f32 values as hi + lo, two MMAs per fragment, both accumulated in fp32
 * into the output). */
template <typename T>
__device__ void dense_ttmc_tile(const HlsLaunchParams& p, uint64_t t, TileSmem& s) {
    dense_ttmc_term<T>(p, t, s, Expand::Hi);
    if (kValueTerms<T> > 1) {
        __syncthreads(); /* every warp is done with xs before it is refilled */
        dense_ttmc_term<T>(p, t, s, Expand::Lo);
    }
}

}  // namespace hls

/* Dense tiles only: grid = n_tiles blocks of HLS_BLOCK_THREADS; fp16 values, and f32
 * values (_f32). */
extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_dense_ttmc(const HlsLaunchParams p) {
    __shared__ __align__(16) hls::TileSmem smem;
    if (blockIdx.x < p.n_tiles) hls::dense_ttmc_tile<__half>(p, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_dense_ttmc_f32(const HlsLaunchParams p) {
    __shared__ __align__(16) hls::TileSmem smem;
    if (blockIdx.x < p.n_tiles) hls::dense_ttmc_tile<float>(p, blockIdx.x, smem);
}
