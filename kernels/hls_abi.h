/*
 * hls_abi.h - the one header shared by the sptmc kernels and the Rust host code.
 *
 * Fixed-width types only. Rust bindings are generated from this file with bindgen and
 * committed at src/engine/cuda/abi.rs; tests/integration/abi_drift.rs regenerates them and fails
 * on any difference. Device pointers travel as uint64_t (CUdeviceptr) so the struct has
 * the same layout on both sides.
 */
#ifndef SPTMC_HLS_ABI_H
#define SPTMC_HLS_ABI_H

#ifdef __CUDACC_RTC__
typedef unsigned char uint8_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

/* Tile edge in every mode (16^3 tiles); the geometry is hls_tile.cuh's. */
#define HLS_TILE 16
/* log2 of HLS_TILE. */
#define HLS_TILE_BITS 4
/* Order of the dense tiles the kernels are compiled for (src/hls/tile.rs TILE_ORDER). */
#define HLS_TILE_ORDER 3
/* Cells (bits) of one dense tile: HLS_TILE ^ HLS_TILE_ORDER. */
#define HLS_TILE_CELLS 4096
/* u64 words of one tile bitmap. */
#define HLS_BITMAP_WORDS 64
/* Largest tensor order the sparse kernel handles. */
#define HLS_MAX_ORDER 8
/* Threads per block of every kernel (4 warps). */
#define HLS_BLOCK_THREADS 128
/* Warps per block. */
#define HLS_BLOCK_WARPS 4
/* Largest rank of one mode for dense TTMc tiles (register bound of the fragments). */
#define HLS_TTMC_MAX_RANK 64
/* Largest factor rank the sparse TTMc kernel indexes (16-bit packed column indices). */
#define HLS_SPARSE_TTMC_MAX_RANK 65535

/* Largest CP rank the device-side CP-ALS update handles (W and a tile of A in shared
   memory, the Gram partials in registers). */
#define HLS_CP_MAX_RANK 64
/* Rows of A one block of the CP update holds at a time. */
#define HLS_CP_TILE_ROWS 16

/* Stored value types (HlsLaunchParams.value_type; src/hls/values.rs ValueType). */
#define HLS_VALUES_F16 0
#define HLS_VALUES_F32 1

/* Operation codes (HlsLaunchParams.op). */
#define HLS_OP_MTTKRP 0
#define HLS_OP_TTMC 1
#define HLS_OP_PHI 2

/* Everything one launch needs, passed by value as the only kernel argument. */
typedef struct HlsLaunchParams {
    /* Dense part (tensors of order HLS_TILE_ORDER only; n_tiles == 0 otherwise). */
    uint64_t tile_keys;    /* const uint64_t[n_tiles]: tile keys under tile_shift/mask */
    uint64_t tile_bitmaps; /* const uint64_t[n_tiles][HLS_BITMAP_WORDS] */
    uint64_t tile_offsets; /* const uint32_t[n_tiles + 1]: exclusive prefix of tile nnz */
    uint64_t tile_values;  /* const __half or float[dense nnz] (value_type), tile after
                              tile, bitmap order */
    /* Sparse part (any order up to HLS_MAX_ORDER). */
    uint64_t sp_keys;         /* const uint32_t[sp_nnz]: low 32 key bits */
    uint64_t sp_values;       /* const __half or float[sp_nnz] (value_type) */
    uint64_t sp_block_prefix; /* const uint64_t[sp_blocks]: key bits above 32 */
    uint64_t sp_block_offsets;/* const uint64_t[sp_blocks + 1] */
    /* Factors, one slot per mode (the target mode's slot is unused): fp32, row-major,
       as the caller holds them; the dense kernels round tile rows to fp16 themselves. */
    uint64_t factor[HLS_MAX_ORDER]; /* const float[dims[m]][ranks[m]] */
    /* Output: float[dims[mode]][out_cols], zeroed before the launch, atomically added. */
    uint64_t out;
    /* Tile key linearization (over tile extents ceil(I/16)), mode 0 most significant. */
    uint32_t tile_shift[HLS_TILE_ORDER];
    uint32_t tile_mask[HLS_TILE_ORDER];
    uint32_t tile_order; /* order of the dense tiles: HLS_TILE_ORDER (0: no dense part) */
    /* Sparse key linearization (full key = prefix << 32 | low); any mode order (MTTKRP
       forms stack the shortest mode most significant, TTMc forms mode 0). */
    uint32_t sp_shift[HLS_MAX_ORDER];
    uint64_t sp_mask[HLS_MAX_ORDER];
    /* Mode extents and ranks (columns of factor m). */
    uint32_t dims[HLS_MAX_ORDER];
    uint32_t ranks[HLS_MAX_ORDER];
    /* TTMc: column stride of mode m in the Kronecker order (0 for the target mode). */
    uint32_t col_stride[HLS_MAX_ORDER];
    uint64_t n_tiles;  /* dense tiles = the first n_tiles blocks of a fused grid */
    uint64_t sp_nnz;   /* sparse nonzeros */
    uint64_t sp_blocks;/* sparse key blocks */
    uint32_t sp_batch; /* sparse nonzeros per warp (a multiple of 32) */
    /* Sparse lane layout (chosen by the host from out_cols, see sparse.cu): a group of
       1 << sp_lanes_log2 lanes shares one nonzero; each lane owns sp_slots vectors of
       sp_vec (1 or 4) consecutive columns; a pass covers sp_cols_per_pass columns. */
    uint32_t sp_lanes_log2;
    uint32_t sp_vec;
    uint32_t sp_slots;
    uint32_t sp_cols_per_pass;
    uint32_t ttmc_last; /* TTMc: the fastest-varying mode of the output columns */
    uint32_t order;     /* tensor order */
    uint32_t mode;      /* target mode */
    uint32_t op;        /* HLS_OP_MTTKRP or HLS_OP_TTMC */
    uint32_t out_cols;  /* output columns */
    float value_scale;  /* stored value * value_scale = tensor value */
    uint32_t value_type; /* HLS_VALUES_F16 or HLS_VALUES_F32: the type of both parts' values */
    uint32_t value_pad;  /* zero; keeps phi_log 8-byte aligned */
    /* Phi (kernels/phi.cu): the floor eps of the model value, and a double that
       sum x ln max(mu, eps) is added to atomically (0: not wanted). The target mode's
       factor slot holds B. */
    float phi_eps;
    uint64_t phi_log;
} HlsLaunchParams;

/* The CP-ALS update of one mode (kernels/cp_update.cu), by value as the only argument. */
typedef struct HlsCpParams {
    uint64_t m;    /* const float[rows][rank]: the mode's MTTKRP result */
    uint64_t w;    /* const double[rank][rank] (update) or double[rank] (normalize: 1/norm) */
    uint64_t a;    /* float[rows][rank]: the factor, written (update) or scaled (normalize) */
    uint64_t acc;  /* double[rank*rank + 2*rank]: Gram, norms, inner products; zeroed */
    uint64_t flag; /* uint32_t: set to 1 when M holds a non-finite entry; zeroed */
    uint64_t rows;
    uint32_t rank;
    uint32_t two_norm;   /* 1: column 2-norms (sum of squares); 0: largest magnitudes */
    uint32_t with_inner; /* 1: also sum_i M[i, c] A[i, c] */
    uint32_t pad;
} HlsCpParams;

/* Most nonzeros one warp of the completion normal equations holds at a time (their
   Khatri-Rao rows in shared memory, kernels/completion.cu). */
#define HLS_COMPLETION_CHUNK 32
/* Dense tiles are cut into this many SGD work units (16 bitmap words each). */
#define HLS_COMPLETION_TILE_PARTS 4

/* The completion kernels (kernels/completion.cu), by value as the only argument. */
typedef struct HlsCompletionParams {
    /* The tensor as every op sees it (tile and sparse parts with their layouts, dims,
       order, value_scale); factor[m] = every mode's factor, float[dims[m]][rank];
       mode = the target mode; out = float[dims[mode]][rank * rank + rank] (normal
       equations, zeroed). */
    HlsLaunchParams t;
    uint64_t residual;  /* float[nnz]: one per nonzero, in the session's order */
    uint64_t acc;       /* double[dims[mode]][2] (column terms) or double[1] (loss); zeroed */
    uint64_t flag;      /* uint32_t: set to 1 when a kernel writes inf or NaN; zeroed */
    uint64_t counts;    /* uint32_t[sum dims]: nonzeros of every row, mode m from count_off[m] */
    uint64_t count_off[HLS_MAX_ORDER];
    uint64_t group_next; /* uint64_t[dims[mode]]: the next free slot of every row (grouping) */
    uint64_t group_idx;  /* uint32_t[nnz][order - 1]: the other modes' indices, row by row */
    uint64_t group_val;  /* float[nnz]: value - offset, row by row */
    uint64_t seg_start;  /* const uint64_t[n_segs + 1]: segment k = slots seg_start[k] .. [k + 1] */
    uint64_t seg_row;    /* const uint32_t[n_segs]: the row of segment k */
    uint64_t n_segs;
    uint64_t column;     /* const float[dims[mode]]: the new column (set_column) */
    uint64_t sgd_units;  /* SGD work units: sparse batches, then HLS_COMPLETION_TILE_PARTS per tile */
    uint32_t sgd_batch;  /* sparse nonzeros per SGD unit */
    uint32_t perm_mul;   /* SGD: the u-th unit visited is (perm_mul u + perm_add) mod sgd_units */
    uint32_t perm_add;
    uint32_t rank;
    uint32_t col;        /* the column of add_column, column_terms and set_column */
    uint32_t chunk;      /* normal equations: nonzeros per chunk, 1 .. HLS_COMPLETION_CHUNK */
    float offset;        /* the model's constant */
    float sign;          /* add_column: +1 or -1 */
    float learning_rate;
    float lambda;
} HlsCompletionParams;

#endif /* SPTMC_HLS_ABI_H */
