/*
 * hls_tile.cuh - the geometry of dense tiles on the device, the mirror of
 * src/hls/tile.rs and the only place kernels decode tile keys and bit positions.
 *
 * Coordinate i of a mode lies in tile i >> HLS_TILE_BITS at offset i & (HLS_TILE - 1).
 * The cell at in-tile offsets (e_0, ..., e_{N-1}) is bit
 * p = sum_m e_m << HLS_TILE_BITS (N - 1 - m) of the tile's bitmap (mode 0 most
 * significant; word p / 64, bit p % 64), and a tile's values are stored in increasing
 * bit order. Tile keys linearize the tile coordinates with HlsLaunchParams.tile_shift
 * and tile_mask. N = HLS_TILE_ORDER, the order the kernels are compiled for;
 * HlsLaunchParams.tile_order carries the tensor's, and the host refuses any other.
 * Everything here is a register computation: no memory, no thread roles.
 */
#pragma once
#include "hls_abi.h"

namespace hls {

constexpr int kTile = HLS_TILE;
constexpr int kTileBits = HLS_TILE_BITS;
constexpr int kTileOrder = HLS_TILE_ORDER;
constexpr int kBitmapWords = HLS_BITMAP_WORDS;

/* Tile coordinate m (0 .. HLS_TILE_ORDER - 1) of a dense tile key. */
__device__ __forceinline__ uint32_t tile_coord(const HlsLaunchParams& p, uint64_t key, int m) {
    return (uint32_t)(key >> p.tile_shift[m]) & p.tile_mask[m];
}

/* Coordinate m of the first cell of the tile with key `key`. */
__device__ __forceinline__ uint32_t tile_origin(const HlsLaunchParams& p, uint64_t key, int m) {
    return tile_coord(p, key, m) * kTile;
}

/* Mode m's in-tile offset of bit position `pos` (m a compile-time constant after
 * unrolling, so this is a shift and a mask). */
__device__ __forceinline__ uint32_t cell_offset(uint32_t pos, int m) {
    return (pos >> (kTileBits * (kTileOrder - 1 - m))) & (uint32_t)(kTile - 1);
}

/* The bit position of the lowest set bit of `bits`, bitmap word `word` of a tile, and
 * that bit cleared: successive calls walk the word's cells in increasing bit order. */
__device__ __forceinline__ uint32_t next_cell(uint32_t word, uint64_t& bits) {
    const uint32_t pos = word * 64u + (uint32_t)(__ffsll(bits) - 1);
    bits &= bits - 1;
    return pos;
}

/* c[m] = origin[m] + mode m's offset of bit `pos`, for every mode of the tile. */
__device__ __forceinline__ void cell_coords(const uint32_t (&origin)[kTileOrder], uint32_t pos,
                                            uint32_t* c) {
#pragma unroll
    for (int m = 0; m < kTileOrder; ++m) c[m] = origin[m] + cell_offset(pos, m);
}

}  // namespace hls
