//! The nonzeros grouped by row, built lazily once per session: every row's nonzero
//! count (one pass over the tensor, for SGD's regularization and the grouping) and, per
//! mode, the nonzeros grouped by row for the normal equations (one more pass, on the
//! device; the host only sums the counts and cuts long rows into segments).

use super::{CudaCompletion, SEGMENT, alloc, entries};
use crate::engine::cuda::device::cuda_err;
use crate::engine::cuda::launch::ptr;
use crate::error::Result;
use cudarc::driver::CudaSlice;

/// Every row's nonzero count, on the device and on the host.
pub(super) struct Counts {
    pub(super) dev: CudaSlice<u32>,
    pub(super) host: Vec<u32>,
    /// Where mode `m`'s counts start.
    pub(super) offsets: Vec<usize>,
}

/// One mode's nonzeros grouped by row, in device memory.
pub(super) struct Groups {
    /// Per nonzero, the other modes' indices (`order − 1` each).
    pub(super) idx: CudaSlice<u32>,
    /// Per nonzero, its value minus the offset.
    pub(super) val: CudaSlice<f32>,
    /// Segment `k` holds slots `seg_start[k] .. seg_start[k + 1]`.
    pub(super) seg_start: CudaSlice<u64>,
    /// The row of every segment.
    pub(super) seg_row: CudaSlice<u32>,
    pub(super) n_segs: usize,
}

impl CudaCompletion<'_> {
    /// Every row's nonzero count, counted on the first call.
    pub(super) fn ensure_counts(&mut self) -> Result<f64> {
        if self.counts.is_some() {
            return Ok(0.0);
        }
        let mut offsets = Vec::with_capacity(self.dims.len());
        let mut total = 0usize;
        for &d in &self.dims {
            offsets.push(total);
            total += d;
        }
        let dev = alloc::<u32>(self.backend, total, "the row counts")?;
        let mut p = self.params(0);
        p.counts = ptr(&dev, &self.backend.stream);
        for (m, &o) in offsets.iter().enumerate() {
            p.count_off[m] = o as u64;
        }
        let seconds = self.launch(entries::COUNT, &p, self.walk_blocks(), 0)?;
        let mut host = vec![0u32; total];
        let stream = &self.backend.stream;
        if total > 0 {
            stream
                .memcpy_dtoh(&dev.slice(0..total), host.as_mut_slice())
                .map_err(|e| cuda_err("copying the row counts back", e))?;
        }
        stream
            .synchronize()
            .map_err(|e| cuda_err("waiting for the row counts", e))?;
        self.counts = Some(Counts { dev, host, offsets });
        Ok(seconds)
    }

    /// Mode `mode`'s nonzeros grouped by row, grouped on the first call.
    pub(super) fn ensure_groups(&mut self, mode: usize) -> Result<f64> {
        if self.groups[mode].is_some() {
            return Ok(0.0);
        }
        let mut seconds = self.ensure_counts()?;
        let rows = self.dims[mode];
        let counts = self.counts.as_ref().expect("counted above");
        let own = &counts.host[counts.offsets[mode]..counts.offsets[mode] + rows];
        let (first, seg_start, seg_row) = row_segments(own, SEGMENT);
        let n_segs = seg_row.len();
        let d = self.dims.len() - 1;
        let stream = &self.backend.stream;
        let idx = alloc::<u32>(self.backend, self.nnz * d, "the row-grouped indices")?;
        let val = alloc::<f32>(self.backend, self.nnz, "the row-grouped values")?;
        let mut next = alloc::<u64>(self.backend, rows, "the grouping cursors")?;
        let mut starts = alloc::<u64>(self.backend, seg_start.len(), "the row segments")?;
        let mut srows = alloc::<u32>(self.backend, n_segs, "the segment rows")?;
        let upload = |what: &str, r: std::result::Result<(), cudarc::driver::DriverError>| {
            r.map_err(|e| cuda_err(&format!("uploading {what}"), e))
        };
        if rows > 0 {
            upload(
                "the grouping cursors",
                stream.memcpy_htod(&first, &mut next),
            )?;
        }
        upload(
            "the row segments",
            stream.memcpy_htod(&seg_start, &mut starts),
        )?;
        if n_segs > 0 {
            upload("the segment rows", stream.memcpy_htod(&seg_row, &mut srows))?;
        }
        let mut p = self.params(mode);
        p.group_next = ptr(&next, stream);
        p.group_idx = ptr(&idx, stream);
        p.group_val = ptr(&val, stream);
        seconds += self.launch(entries::GROUP, &p, self.walk_blocks(), 0)?;
        self.pending_up += ((first.len() + seg_start.len()) * 8 + seg_row.len() * 4) as u64;
        drop(next);
        self.groups[mode] = Some(Groups {
            idx,
            val,
            seg_start: starts,
            seg_row: srows,
            n_segs,
        });
        Ok(seconds)
    }
}

/// The grouping of rows with `counts` nonzeros each: every row's first slot, and the
/// rows cut into segments of at most `segment` slots, as the segments' first slots (and
/// the end) and their rows. Rows without nonzeros have no segment.
fn row_segments(counts: &[u32], segment: u64) -> (Vec<u64>, Vec<u64>, Vec<u32>) {
    let mut first = Vec::with_capacity(counts.len());
    let mut seg_start = Vec::new();
    let mut seg_row = Vec::new();
    let mut at = 0u64;
    for (i, &c) in counts.iter().enumerate() {
        first.push(at);
        let c = u64::from(c);
        let mut s = 0;
        while s < c {
            seg_start.push(at + s);
            seg_row.push(i as u32);
            s += segment;
        }
        at += c;
    }
    seg_start.push(at);
    (first, seg_start, seg_row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_tile_every_row_in_pieces_of_at_most_the_segment() {
        let counts = [3u32, 0, 10, 1, 0, 7];
        let (first, starts, rows) = row_segments(&counts, 4);
        assert_eq!(first, [0, 3, 3, 13, 14, 14]);
        assert_eq!(rows, [0, 2, 2, 2, 3, 5, 5]);
        assert_eq!(starts, [0, 3, 7, 11, 13, 14, 18, 21]);
        let (_, starts, rows) = row_segments(&[0, 0], 4);
        assert_eq!((starts, rows), (vec![0], vec![]));
    }
}
