//! Statistics an HLS build reports (cf. the HLS paper's Table IV).

use super::values::QuantReport;

/// What a build produced and what it cost.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HlsStats {
    /// Nonzeros stored (after summing duplicates).
    pub nnz: usize,
    /// Input entries merged into others because their coordinates repeated.
    pub duplicates_summed: usize,
    /// Tile threshold used.
    pub threshold: u32,
    /// Non-empty 16³ tiles (0 when the tensor has no tiles: order ≠ 3).
    pub tiles: usize,
    /// Tiles with at least `threshold` nonzeros.
    pub dense_tiles: usize,
    /// Nonzeros in dense tiles.
    pub dense_nnz: usize,
    /// Nonzeros in the sparse part.
    pub sparse_nnz: usize,
    /// Blocks of the sparse part.
    pub sparse_blocks: usize,
    /// Bytes of the dense part.
    pub dense_bytes: usize,
    /// Bytes of the sparse part.
    pub sparse_bytes: usize,
    /// Bytes if every nonzero were in the sparse part.
    pub all_sparse_bytes: usize,
    /// Bytes if every non-empty tile were dense (0 without tiles).
    pub all_dense_bytes: usize,
    /// Bytes of COO with u32 indices and f32 values.
    pub coo_bytes: usize,
    /// fp16 quantization of the values.
    pub quant: QuantReport,
    /// Squared Frobenius norm of the values as stored (fp16 times the scale, summed in
    /// f64): the norm that matches what the kernels compute with, which a fit must use.
    pub norm_sq: f64,
}

impl HlsStats {
    /// Share of nonzeros in dense tiles.
    pub fn dense_share(&self) -> f64 {
        if self.nnz == 0 {
            0.0
        } else {
            self.dense_nnz as f64 / self.nnz as f64
        }
    }

    /// Bytes of the whole HLS tensor.
    pub fn hls_bytes(&self) -> usize {
        self.dense_bytes + self.sparse_bytes
    }

    /// HLS bytes over COO bytes.
    pub fn bytes_vs_coo(&self) -> f64 {
        self.hls_bytes() as f64 / self.coo_bytes.max(1) as f64
    }
}
