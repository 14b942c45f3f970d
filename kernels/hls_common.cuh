/*
 * hls_common.cuh - helpers shared by every kernel family: the ABI, the fp16 header,
 * the tile geometry (hls_tile.cuh), the tensor-core instructions used by the dense kernels (ldmatrix and the m16n8k16
 * fp16 MMA with fp32 accumulation, whose register layouts the PTX ISA documents),
 * power-of-two scales, vector reductions to global memory, and the expansion of a
 * dense tile into shared memory.
 */
#pragma once
#include <cuda_fp16.h>
#include "hls_abi.h"
#include "hls_tile.cuh"

namespace hls {

constexpr int kThreads = HLS_BLOCK_THREADS;
constexpr int kWarps = HLS_BLOCK_WARPS;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

/* The expanded tile: slice e (target-mode offset) is a 16 x 16 fp16 matrix X_e[ea][eb]
 * (a < b the other two modes), rows padded to 24 halves (48 bytes) so the eight rows an
 * ldmatrix reads land in distinct banks. */
constexpr int kXsLd = 24;
constexpr int kXsSlice = kTile * kXsLd;
constexpr int kXsHalves = kTile * kXsSlice;

/* Shared memory of a dense-tile block (12.3 KB). */
struct TileSmem {
    __half xs[kXsHalves];
    int warp_tot[kWarps];
};

/* Stored values: T is the type a tensor's values are stored in (__half, or float for
 * p.value_type == HLS_VALUES_F32). Every kernel that reads values is a template over
 * it, with one entry point per type (the f32 ones named with an _f32 suffix), so the
 * fp16 kernels are compiled exactly as without f32 and each type's loops have no
 * branch on it. */
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(float v) { return v; }

/* Stored value i of `base` (tile_values or sp_values), widened, not scaled. */
template <typename T>
__device__ __forceinline__ float load_value(uint64_t base, uint64_t i) {
    return widen(reinterpret_cast<const T*>(base)[i]);
}

/* How many fp16 terms a dense tile's values are split into for the tensor cores: one
 * for fp16 values, two for f32 (hi = fp16(v), lo = fp16(v - hi), ~22 bits together). */
template <typename T>
constexpr int kValueTerms = sizeof(T) == sizeof(float) ? 2 : 1;

/* What expand_tile writes into a cell: the value's first fp16 term, its second, or
 * (for kernels that need the exact value) the value's slot in the tile plus one, as a
 * 16-bit integer (at most 4096; 0 is an empty cell). */
enum class Expand { Hi, Lo, Slot };

/* What expand_tile writes for the value in `slot` (see Expand): an fp16 value as it is
 * (it has one term), an f32 value's hi or lo term, or the slot. */
__device__ __forceinline__ __half cell_value(const __half* vals, int slot, Expand what) {
    return what == Expand::Slot ? __ushort_as_half((unsigned short)(slot + 1)) : vals[slot];
}
__device__ __forceinline__ __half cell_value(const float* vals, int slot, Expand what) {
    if (what == Expand::Slot) return __ushort_as_half((unsigned short)(slot + 1));
    const float v = vals[slot];
    const __half hi = __float2half_rn(v);
    return what == Expand::Hi ? hi : __float2half_rn(v - __half2float(hi));
}

/* The other two modes of a 3rd-order tensor, in increasing order. */
__device__ __forceinline__ void other_modes(uint32_t mode, int& a, int& b) {
    a = mode == 0 ? 1 : 0;
    b = mode == 2 ? 1 : 2;
}

/* Shared-memory address of a generic pointer into shared memory (for ldmatrix). */
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Two fp32 values rounded to fp16 and packed, `lo` in the low half (the element with
 * the smaller column index in every MMA fragment register). */
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

/* The second fp16 term of an operand x with |x| < 1 (a tile column after its scale), for
 * f32 values' dense tiles: (x - fp16(x)) * 2^12, which is at most 1 in size, so that the
 * term keeps fp16's full precision instead of falling into its subnormals; products
 * with it are scaled back by kLoBack. Operands split so, with the values' own hi + lo,
 * leave MMA products off by about 2^-22 relative instead of fp16's 2^-11. */
constexpr float kLoBack = 1.f / 4096.f;
__device__ __forceinline__ float lo_term(float x) {
    return (x - __half2float(__float2half_rn(x))) * 4096.f;
}

/* Four 8x8 fp16 matrices from shared memory: lanes 8q..8q+7 give the row addresses of
 * matrix q; register q receives matrix q's (row lane/4, columns 2(lane%4), +1). */
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* d += A[16x16] * B[16x8], fp16 inputs, fp32 accumulation. With g = lane / 4 and
 * t = lane % 4: a0 = A(g, 2t..2t+1), a1 = A(g+8, 2t..), a2 = A(g, 2t+8..), a3 =
 * A(g+8, 2t+8..); b0 = B(2t..2t+1, g), b1 = B(2t+8..2t+9, g); d0, d1 = D(g, 2t..2t+1),
 * d2, d3 = D(g+8, 2t..2t+1). */
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The exponent E of the power of two 2^E with m / 2^E in [0.5, 1) (m > 0; 0 for m == 0),
 * clamped to [-126, 126] so that 2^E and 2^-E are both normal floats. Scaling a tile
 * column by 2^-E brings its largest entry just below 1, where fp16 is densest. */
__device__ __forceinline__ int pow2_exponent(float m) {
    int e = 0;
    frexpf(m, &e);
    return min(max(e, -126), 126);
}

/* 2^e for e in [-126, 127]. */
__device__ __forceinline__ float exp2i(int e) {
    return __int_as_float((127 + e) << 23);
}

/* out[0..3] += v[0..3] (16-byte aligned), as one vector reduction on sm_90. */
__device__ __forceinline__ void red_add4(float* out, float v0, float v1, float v2, float v3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(out), "f"(v0),
                 "f"(v1), "f"(v2), "f"(v3)
                 : "memory");
#else
    atomicAdd(out, v0);
    atomicAdd(out + 1, v1);
    atomicAdd(out + 2, v2);
    atomicAdd(out + 3, v3);
#endif
}

/*
 * Expands dense tile t into s.xs as slices X_e[ea][eb] for the target mode (e = the
 * target coordinate's offset, a < b the other modes): per cell what `what` says
 * (Expand::Hi: fp16 values as stored, or an f32 value's fp16 term hi; Expand::Lo: an
 * f32 value's second term v - hi, 0 for fp16 values; Expand::Slot: slot + 1).
 * Thread `tid` owns the 32-bit half (tid & 1) of bitmap word (tid >> 1); a block-wide
 * exclusive scan of the halves' popcounts gives each set bit its value slot. Cells
 * without a nonzero are zero. Ends with a barrier: xs is ready for every thread.
 */
template <typename T>
__device__ void expand_tile(const HlsLaunchParams& p, uint64_t t, TileSmem& s, Expand what) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint4* z = reinterpret_cast<uint4*>(s.xs);
    for (int i = tid; i < kXsHalves / 8; i += kThreads) z[i] = make_uint4(0u, 0u, 0u, 0u);

    const uint64_t* bm = reinterpret_cast<const uint64_t*>(p.tile_bitmaps) + t * kBitmapWords;
    const uint64_t word = __ldg(bm + (tid >> 1));
    uint32_t bits = (uint32_t)(word >> (32 * (tid & 1)));
    const int count = __popc(bits);
    int incl = count;
#pragma unroll
    for (int d = 1; d < kWarp; d <<= 1) {
        const int y = __shfl_up_sync(kFullMask, incl, d);
        if (lane >= d) incl += y;
    }
    if (lane == kWarp - 1) s.warp_tot[warp] = incl;
    __syncthreads(); /* also orders the zero fill before the scatter below */
    int slot = incl - count;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
        if (w < warp) slot += s.warp_tot[w];

    const uint32_t first = __ldg(reinterpret_cast<const uint32_t*>(p.tile_offsets) + t);
    const T* vals = reinterpret_cast<const T*>(p.tile_values) + first;
    const uint32_t base_bit = (uint32_t)tid * 32u;
    while (bits) {
        const uint32_t pos = base_bit + (uint32_t)(__ffs(bits) - 1);
        bits &= bits - 1;
        const uint32_t e0 = cell_offset(pos, 0), e1 = cell_offset(pos, 1), e2 = cell_offset(pos, 2);
        uint32_t e, ea, eb;
        if (p.mode == 0) {
            e = e0; ea = e1; eb = e2;
        } else if (p.mode == 1) {
            e = e1; ea = e0; eb = e2;
        } else {
            e = e2; ea = e0; eb = e1;
        }
        s.xs[e * kXsSlice + ea * kXsLd + eb] = cell_value(vals, slot, what);
        ++slot;
    }
    __syncthreads();
}

}  // namespace hls
