//! ALS's normal equations on the CUDA backend: the kernel builds every row of a mode on
//! the device (`kernels/completion.cu`, one warp per segment of a row's nonzeros); the
//! rows a caller asks for are copied back from that build, a window of rows at a time.

use super::{CudaCompletion, alloc, entries, finite};
#[cfg(doc)]
use crate::engine::CompletionSession;
use crate::engine::RunStats;
use crate::engine::completion::check_mode;
use crate::engine::cuda::abi::{HLS_BLOCK_WARPS, HLS_COMPLETION_CHUNK};
use crate::engine::cuda::device::cuda_err;
use crate::engine::cuda::launch::ptr;
use crate::error::{Error, Result};
use crate::matrix::Matrix;

/// The most bytes of normal equations copied back at once, to be picked out row by row
/// (a caller's rows are a list, the device's build the whole mode).
const STAGING_BYTES: usize = 16 << 20;

/// Dynamic shared memory the normal equations may use per block (no opt-in needed).
const NORMAL_EQ_SMEM: usize = 48 * 1024;

impl CudaCompletion<'_> {
    /// Builds the normal equations of every row of `mode` into `out` on the device
    /// (`I × (R² + R)`); the kernels' seconds.
    pub(super) fn build_normal_equations(&mut self, mode: usize) -> Result<f64> {
        let (r, rows) = (self.rank, self.dims[mode]);
        let width = r * r + r;
        // Per warp a chunk of Khatri-Rao rows and their values: `chunk × (R + 1)` floats.
        let per_nonzero = HLS_BLOCK_WARPS as usize * (r + 1) * 4;
        let chunk = (NORMAL_EQ_SMEM / per_nonzero).min(HLS_COMPLETION_CHUNK as usize);
        if chunk == 0 {
            return Err(Error::Unsupported(format!(
                "the CUDA normal equations take ranks ≤ {}, got {r}",
                NORMAL_EQ_SMEM / (HLS_BLOCK_WARPS as usize * 4) - 1
            )));
        }
        let mut seconds = self.ensure_groups(mode)?;
        let n_out = rows * width;
        if self.out.as_ref().is_none_or(|b| b.len() < n_out.max(1)) {
            self.out = None;
            self.out = Some(alloc::<f32>(self.backend, n_out, "the normal equations")?);
        }
        let stream = &self.backend.stream;
        let dev_out = self.out.as_mut().expect("allocated above");
        stream
            .memset_zeros(&mut dev_out.slice_mut(0..n_out.max(1)))
            .map_err(|e| cuda_err("clearing the normal equations", e))?;
        let g = self.groups[mode].as_ref().expect("grouped above");
        let mut p = self.params(mode);
        p.t.out = ptr(self.out.as_ref().expect("allocated above"), stream);
        p.group_idx = ptr(&g.idx, stream);
        p.group_val = ptr(&g.val, stream);
        p.seg_start = ptr(&g.seg_start, stream);
        p.seg_row = ptr(&g.seg_row, stream);
        p.n_segs = g.n_segs as u64;
        p.chunk = chunk as u32;
        let blocks = g
            .n_segs
            .div_ceil(HLS_BLOCK_WARPS as usize)
            .clamp(1, self.backend.sm_count * 16) as u32;
        let smem = (chunk * per_nonzero) as u32;
        seconds += self.launch(entries::NORMAL_EQ, &p, blocks, smem)?;
        Ok(seconds)
    }

    /// [`CompletionSession::normal_equations`]: the rows `rows` of `mode`, gathered
    /// from the whole mode's build (made once per factors).
    pub(super) fn rows_normal_equations(
        &mut self,
        mode: usize,
        rows: &[u32],
        out: &mut Matrix,
    ) -> Result<RunStats> {
        check_mode(mode, self.dims.len())?;
        crate::engine::completion::check_rows(mode, rows, self.dims[mode])?;
        let width = self.rank * self.rank + self.rank;
        if out.shape() != (rows.len(), width) {
            crate::matrix::check_alloc("the normal equations", rows.len(), width, 4)?;
            *out = Matrix::zeros(rows.len(), width);
        }
        // The whole mode is built on the device once per factors; each list of rows is
        // gathered from it.
        let seconds = if self.out_of == Some(mode) {
            0.0
        } else {
            self.out_of = None;
            let s = self.build_normal_equations(mode)?;
            self.out_of = Some(mode);
            s
        };
        let dev_out = self.out.as_ref().expect("built above");
        let stream = &self.backend.stream;
        // Runs of rows copied a window at a time into host staging, then picked out.
        let window_rows = (STAGING_BYTES / (width * 4)).max(1);
        let mut staging = Vec::new();
        let mut k = 0;
        while k < rows.len() {
            let first = rows[k] as usize;
            let end = rows[k..].partition_point(|&i| (i as usize) < first + window_rows) + k;
            let last = rows[end - 1] as usize;
            staging.resize((last + 1 - first) * width, 0f32);
            stream
                .memcpy_dtoh(
                    &dev_out.slice(first * width..(last + 1) * width),
                    &mut staging[..],
                )
                .map_err(|e| cuda_err("copying a completion result back", e))?;
            stream
                .synchronize()
                .map_err(|e| cuda_err("waiting for a completion result", e))?;
            for (dst, &i) in out.data_mut()[k * width..end * width]
                .chunks_exact_mut(width)
                .zip(&rows[k..end])
            {
                let at = (i as usize - first) * width;
                dst.copy_from_slice(&staging[at..at + width]);
            }
            k = end;
        }
        finite(out.data(), || format!("normal equations of mode {mode}"))?;
        Ok(self.stats(seconds, 0, (rows.len() * width * 4) as u64))
    }
}
