/*
 * dense_ttmc.cu - TTM-chain of dense 16^3 tiles on tensor cores (WMMA m16n16k16,
 * fp16 inputs, fp32 accumulation).
 *
 * Per tile, target mode n, other modes a < b, and slice e_n:
 *   T[Ra x 16]  = F_a(tile rows)^T [Ra x 16] * X(e_n,:,:) [16 x 16]
 *   Y[Ra x Rb] += T * F_b(tile rows) [16 x Rb]
 * Output row I_n = tile origin + e_n, column ra * Rb + rb.
 *
 * One block of HLS_BLOCK_THREADS (4 warps) per tile.
 * - All threads: expand the tile into X_(n) in shared memory, every value times 1/16
 *   (exact, folded back at the end) so T, a sum of 16 products with |F| <= 1, stays
 *   within fp16's range; stage the 16 tile rows of F_a and F_b (fp16, padded to a
 *   multiple of 16 columns with zeros).
 * - Warps: work item = (slice e_n, 16-row chunk of ra), item w, w+4, ... for warp w.
 *   Per item one WMMA gives T's 16 x 16 chunk in fp32, rounded to fp16 in the warp's
 *   own buffer, then one WMMA per 16-column chunk of rb gives 16 x 16 of Y, which the
 *   warp's lanes scale and atomicAdd into the output (each output entry once per tile).
 * Shared memory (static, ~24 KB): X_(n) 16 x 272 fp16, F_a/F_b 2 x 16 x 72 fp16,
 * per-warp scratch 4 x 16 x 16 fp32 and 4 x 16 x 16 fp16.
 * Preconditions: ranks[a], ranks[b] <= HLS_TTMC_MAX_RANK (the host checks).
 */
#include "hls_common.cuh"

namespace hls {

constexpr int kFLd = HLS_TTMC_MAX_RANK + 8; /* factor tile row stride (halves) */

struct TtmcSmem {
    __half xs[kXHalves];                   /* X_(n)[16][kXLd] / 16 */
    __half fa[kTile * kFLd];               /* F_a tile rows [16][kFLd] */
    __half fb[kTile * kFLd];               /* F_b tile rows [16][kFLd] */
    float scratch[kWarps][kTile * kTile];  /* per-warp fp32 16 x 16 */
    __half th[kWarps][kTile * kTile];      /* per-warp T chunk in fp16 */
    int warp_tot[kWarps];
};

/* Dense TTMc of tile t by the whole block. out: float[dims[mode]][Ra * Rb]. */
__device__ void dense_ttmc_tile(const HlsLaunchParams& p, uint64_t t, TtmcSmem& s) {
    using namespace nvcuda;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    constexpr float kPre = 1.0f / 16.0f;
    expand_tile(p, t, s.xs, kPre, s.warp_tot);

    int a, b;
    other_modes(p.mode, a, b);
    const uint64_t key = reinterpret_cast<const uint64_t*>(p.tile_keys)[t];
    const uint32_t on = tile_coord(p, key, p.mode) * kTile;
    const uint32_t oa = tile_coord(p, key, a) * kTile;
    const uint32_t ob = tile_coord(p, key, b) * kTile;
    const uint32_t Ra = p.ranks[a], Rb = p.ranks[b];
    const __half* Fa = reinterpret_cast<const __half*>(p.factor_h[a]);
    const __half* Fb = reinterpret_cast<const __half*>(p.factor_h[b]);
    const float* sa = reinterpret_cast<const float*>(p.col_scale[a]);
    const float* sb = reinterpret_cast<const float*>(p.col_scale[b]);
    float* out = reinterpret_cast<float*>(p.out);
    const __half zero = __float2half_rn(0.f);

    for (int i = tid; i < kTile * kFLd; i += kThreads) {
        const uint32_t e = i / kFLd, c = i % kFLd;
        s.fa[i] = (c < Ra && oa + e < p.dims[a]) ? Fa[(size_t)(oa + e) * Ra + c] : zero;
        s.fb[i] = (c < Rb && ob + e < p.dims[b]) ? Fb[(size_t)(ob + e) * Rb + c] : zero;
    }
    __syncthreads();

    const int nra = (int)((Ra + kTile - 1) / kTile), nrb = (int)((Rb + kTile - 1) / kTile);
    const float fold = p.value_scale * 16.0f;
    for (int item = warp; item < kTile * nra; item += kWarps) {
        const int en = item / nra, rc = item % nra;
        const uint32_t row = on + en;
        if (row >= p.dims[p.mode]) continue; /* warp-uniform */
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::col_major> fat;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> xsl;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        wmma::load_matrix_sync(fat, s.fa + rc * kTile, kFLd);
        wmma::load_matrix_sync(xsl, s.xs + en * kXLd, kTile);
        wmma::mma_sync(acc, fat, xsl, acc);
        wmma::store_matrix_sync(s.scratch[warp], acc, kTile, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < kTile * kTile; e += kWarp)
            s.th[warp][e] = __float2half_rn(s.scratch[warp][e]);
        __syncwarp();
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> tf;
        wmma::load_matrix_sync(tf, s.th[warp], kTile);
        for (int cb = 0; cb < nrb; ++cb) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fbf;
            wmma::load_matrix_sync(fbf, s.fb + cb * kTile, kFLd);
            wmma::fill_fragment(acc, 0.0f);
            wmma::mma_sync(acc, tf, fbf, acc);
            wmma::store_matrix_sync(s.scratch[warp], acc, kTile, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < kTile * kTile; e += kWarp) {
                const uint32_t ra = rc * kTile + (e >> 4), rb = cb * kTile + (e & 15);
                const float v = s.scratch[warp][e];
                if (ra < Ra && rb < Rb && v != 0.f)
                    atomicAdd(out + (size_t)row * p.out_cols + ra * Rb + rb, v * fold * sa[ra] * sb[rb]);
            }
            __syncwarp();
        }
    }
}

}  // namespace hls

/* Dense tiles only: grid = n_tiles blocks of HLS_BLOCK_THREADS. */
extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_dense_ttmc(const HlsLaunchParams p) {
    __shared__ __align__(32) hls::TtmcSmem smem;
    if (blockIdx.x < p.n_tiles) hls::dense_ttmc_tile(p, blockIdx.x, smem);
}
