/*
 * hls_common.cuh - helpers shared by every kernel family: the ABI, fp16 and WMMA
 * headers, tile-coordinate decoding and the block-wide scan used to find a value's
 * slot in a tile.
 */
#pragma once
#include <cuda_fp16.h>
#include <mma.h>
#include "hls_abi.h"

namespace hls {

constexpr int kTile = HLS_TILE;
constexpr int kThreads = HLS_BLOCK_THREADS;
constexpr int kWarps = HLS_BLOCK_WARPS;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
/* Row stride (halves) of the expanded 16 x 256 tile: 544 bytes keeps every 16-column
 * WMMA operand 32-byte aligned and shifts rows across banks. */
constexpr int kXLd = 256 + 16;
/* Halves of the expanded tile in shared memory. */
constexpr int kXHalves = kTile * kXLd;

/* Coordinate m (0..2) of a dense tile key. */
__device__ __forceinline__ uint32_t tile_coord(const HlsLaunchParams& p, uint64_t key, int m) {
    return (uint32_t)(key >> p.tile_shift[m]) & p.tile_mask[m];
}

/* The other two modes of a 3rd-order tensor, in increasing order. */
__device__ __forceinline__ void other_modes(uint32_t mode, int& a, int& b) {
    a = mode == 0 ? 1 : 0;
    b = mode == 2 ? 1 : 2;
}

/*
 * Expands dense tile t into xs[16][kXLd] as the mode-n unfolding X_(n): row e_n,
 * column e_a * 16 + e_b (a < b the other modes), every value times `pre`.
 * Thread `tid` owns the 32-bit half (tid & 1) of bitmap word (tid >> 1); a block-wide
 * exclusive scan of the halves' popcounts gives each bit its value slot.
 * Ends with a barrier: xs is ready for every thread.
 */
__device__ void expand_tile(const HlsLaunchParams& p, uint64_t t, __half* xs,
                            float pre, int* warp_tot) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint32_t* xs32 = reinterpret_cast<uint32_t*>(xs);
    for (int i = tid; i < kXHalves / 2; i += kThreads) xs32[i] = 0u;

    const uint64_t* bm = reinterpret_cast<const uint64_t*>(p.tile_bitmaps) + t * HLS_BITMAP_WORDS;
    const uint64_t word = bm[tid >> 1];
    uint32_t bits = (uint32_t)(word >> (32 * (tid & 1)));
    const int count = __popc(bits);
    int incl = count;
#pragma unroll
    for (int d = 1; d < kWarp; d <<= 1) {
        int y = __shfl_up_sync(kFullMask, incl, d);
        if (lane >= d) incl += y;
    }
    if (lane == kWarp - 1) warp_tot[warp] = incl;
    __syncthreads();
    int slot = incl - count;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
        if (w < warp) slot += warp_tot[w];

    const uint32_t* offsets = reinterpret_cast<const uint32_t*>(p.tile_offsets);
    const __half* vals = reinterpret_cast<const __half*>(p.tile_values) + offsets[t];
    int a, b;
    other_modes(p.mode, a, b);
    const uint32_t base_bit = (uint32_t)tid * 32u;
    while (bits) {
        const uint32_t pos = base_bit + (uint32_t)(__ffs(bits) - 1);
        bits &= bits - 1;
        const uint32_t e0 = pos >> 8, e1 = (pos >> 4) & 15u, e2 = pos & 15u;
        const uint32_t en = p.mode == 0 ? e0 : (p.mode == 1 ? e1 : e2);
        const uint32_t ea = a == 0 ? e0 : e1;
        const uint32_t eb = b == 1 ? e1 : e2;
        const float v = __half2float(vals[slot++]) * pre;
        xs[en * kXLd + ea * kTile + eb] = __float2half_rn(v);
    }
    __syncthreads();
}

}  // namespace hls
