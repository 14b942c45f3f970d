/*
 * dense_mttkrp.cu - MTTKRP of dense 16^3 tiles on tensor cores (WMMA m16n16k16,
 * fp16 inputs, fp32 accumulation).
 *
 * Per tile and target mode n (a < b the other modes):
 *   M_tile[16 x R] = X_(n)[16 x 256] * KR[256 x R],  KR row (ea*16+eb) = F_a[ea,:] o F_b[eb,:]
 *
 * One block of HLS_BLOCK_THREADS (4 warps) per tile.
 * - All threads: expand the tile's bitmap + values into X_(n) in shared memory
 *   (value slot = tile offset + popcount of the bitmap below the bit).
 * - The rank is walked in groups of kGroup = 32 columns. Per group, all threads stage
 *   the 16 x 32 rows of F_a and F_b (fp16 -> fp32) and build KR[256 x 32] (fp16) in
 *   shared memory.
 * - Warps: the group's 1 or 2 column chunks of 16 are split into 4 work items, a chunk
 *   times a quarter (or half) of K = 256; warp w runs item w with WMMA and stores its
 *   16 x 16 fp32 partial in its own scratch tile.
 * - All threads: sum the partials of each chunk, multiply by the tensor's value scale
 *   and the factors' column scales, and atomicAdd the 16 rows into the output (one
 *   atomic per output entry and tile).
 * Shared memory (static, ~37 KB): X_(n) 16 x 272 fp16, KR 256 x 40 fp16,
 * F_a/F_b rows 2 x 16 x 32 fp32, scratch 4 x 16 x 16 fp32.
 */
#include "hls_common.cuh"

namespace hls {

constexpr int kGroup = 32;               /* rank columns per KR group */
constexpr int kKrLd = kGroup + 8;        /* KR row stride (halves), 80 bytes */
constexpr int kKSteps = 256 / kTile;     /* WMMA k-steps over one unfolded tile row */

struct MttkrpSmem {
    __half xs[kXHalves];                 /* X_(n)[16][kXLd] */
    __half kr[256 * kKrLd];              /* KR[256][kKrLd], columns g0 .. g0+31 */
    float fa[kTile][kGroup];             /* F_a tile rows, this group's columns */
    float fb[kTile][kGroup];             /* F_b tile rows, this group's columns */
    float scratch[kWarps][kTile * kTile];/* per-warp 16 x 16 partials */
    int warp_tot[kWarps];                /* scan totals of expand_tile */
};

/* Dense MTTKRP of tile t by the whole block. out: float[dims[mode]][out_cols]. */
__device__ void dense_mttkrp_tile(const HlsLaunchParams& p, uint64_t t, MttkrpSmem& s) {
    using namespace nvcuda;
    const int tid = threadIdx.x, warp = tid >> 5;
    expand_tile(p, t, s.xs, 1.0f, s.warp_tot);

    int a, b;
    other_modes(p.mode, a, b);
    const uint64_t key = reinterpret_cast<const uint64_t*>(p.tile_keys)[t];
    const uint32_t on = tile_coord(p, key, p.mode) * kTile;
    const uint32_t oa = tile_coord(p, key, a) * kTile;
    const uint32_t ob = tile_coord(p, key, b) * kTile;
    const uint32_t R = p.out_cols;
    const __half* Fa = reinterpret_cast<const __half*>(p.factor_h[a]);
    const __half* Fb = reinterpret_cast<const __half*>(p.factor_h[b]);
    const float* sa = reinterpret_cast<const float*>(p.col_scale[a]);
    const float* sb = reinterpret_cast<const float*>(p.col_scale[b]);
    float* out = reinterpret_cast<float*>(p.out);

    for (uint32_t g0 = 0; g0 < R; g0 += kGroup) {
        /* Stage this group's factor rows (zero outside the tensor and the rank). */
        for (int i = tid; i < kTile * kGroup; i += kThreads) {
            const int e = i / kGroup, c = i % kGroup;
            const uint32_t col = g0 + c;
            float va = 0.f, vb = 0.f;
            if (col < R && oa + e < p.dims[a]) va = __half2float(Fa[(size_t)(oa + e) * R + col]);
            if (col < R && ob + e < p.dims[b]) vb = __half2float(Fb[(size_t)(ob + e) * R + col]);
            s.fa[e][c] = va;
            s.fb[e][c] = vb;
        }
        __syncthreads();
        for (int i = tid; i < 256 * kGroup; i += kThreads) {
            const int row = i / kGroup, c = i % kGroup;
            s.kr[row * kKrLd + c] = __float2half_rn(s.fa[row >> 4][c] * s.fb[row & 15][c]);
        }
        __syncthreads();

        const uint32_t cols = min((uint32_t)kGroup, R - g0);
        const int chunks = (int)((cols + kTile - 1) / kTile); /* 1 or 2 */
        const int split = kWarps / chunks;                     /* 4 or 2 warps per chunk */
        const int chunk = warp / split, part = warp % split;
        const int ks_per = kKSteps / split;
        {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa_frag;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb_frag;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int ks = part * ks_per; ks < (part + 1) * ks_per; ++ks) {
                wmma::load_matrix_sync(fa_frag, s.xs + ks * kTile, kXLd);
                wmma::load_matrix_sync(fb_frag, s.kr + ks * kTile * kKrLd + chunk * kTile, kKrLd);
                wmma::mma_sync(acc, fa_frag, fb_frag, acc);
            }
            wmma::store_matrix_sync(s.scratch[warp], acc, kTile, wmma::mem_row_major);
        }
        __syncthreads();
        for (int o = tid; o < chunks * kTile * kTile; o += kThreads) {
            const int c = o >> 8, e = o & 255;
            float sum = 0.f;
            for (int q = 0; q < split; ++q) sum += s.scratch[c * split + q][e];
            const uint32_t row = on + (e >> 4);
            const uint32_t col = g0 + c * kTile + (e & 15);
            if (col < R && row < p.dims[p.mode] && sum != 0.f)
                atomicAdd(out + (size_t)row * R + col, sum * p.value_scale * sa[col] * sb[col]);
        }
        __syncthreads();
    }
}

}  // namespace hls

/* Dense tiles only: grid = n_tiles blocks of HLS_BLOCK_THREADS. */
extern "C" __global__ void __launch_bounds__(HLS_BLOCK_THREADS)
hls_dense_mttkrp(const HlsLaunchParams p) {
    __shared__ __align__(32) hls::MttkrpSmem smem;
    if (blockIdx.x < p.n_tiles) hls::dense_mttkrp_tile(p, blockIdx.x, smem);
}
