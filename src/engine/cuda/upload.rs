//! Device copies of an HLS tensor.

use super::device::cuda_err;
use crate::error::{Error, Result};
use crate::hls::{HlsTensor, Values};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use std::sync::Arc;

/// Copies `data` to the device; an empty slice becomes one zero element so every
/// pointer handed to a kernel is valid (the counts keep kernels from reading it).
pub fn upload<T: DeviceRepr + Default + Copy>(
    stream: &Arc<CudaStream>,
    data: &[T],
    what: &str,
) -> Result<CudaSlice<T>> {
    let r = if data.is_empty() {
        stream.clone_htod(&[T::default()])
    } else {
        stream.clone_htod(data)
    };
    r.map_err(|e| cuda_err(&format!("uploading {what}"), e))
}

/// The HLS parts in device memory (values as the bit patterns of their stored type, in
/// 16-bit words: one per fp16 value, two, low word first, per f32 value).
pub struct DeviceHls {
    pub tile_keys: CudaSlice<u64>,
    pub tile_bitmaps: CudaSlice<u64>,
    pub tile_offsets: CudaSlice<u32>,
    pub tile_values: CudaSlice<u16>,
    pub sp_keys: CudaSlice<u32>,
    pub sp_values: CudaSlice<u16>,
    pub sp_block_prefix: CudaSlice<u64>,
    pub sp_block_offsets: CudaSlice<u64>,
    pub bytes: usize,
}

/// Bytes [`upload_hls`] will allocate for `hls`.
pub fn hls_device_bytes(hls: &HlsTensor) -> usize {
    let s = hls.sparse();
    let mut b = s.keys().len() * 4
        + s.values().bytes()
        + s.block_prefix().len() * 8
        + s.block_offsets().len() * 8;
    if let Some(d) = hls.dense() {
        b += d.keys().len() * 8
            + d.bitmaps().len() * 512
            + d.offsets().len() * 4
            + d.values().bytes();
    }
    b
}

/// Uploads both parts of `hls`, after checking that they fit in free device memory.
pub fn upload_hls(stream: &Arc<CudaStream>, hls: &HlsTensor) -> Result<DeviceHls> {
    let bytes = hls_device_bytes(hls);
    let (free, _total) = stream
        .context()
        .mem_get_info()
        .map_err(|e| cuda_err("querying free device memory", e))?;
    if bytes > free {
        return Err(Error::DeviceMemory {
            what: "the HLS tensor".into(),
            needed: bytes as u64,
            available: free as u64,
        });
    }
    let s = hls.sparse();
    let bits = |v: &Values| -> Vec<u16> {
        match v {
            Values::F16(h) => h.iter().map(|h| h.to_bits()).collect(),
            Values::F32(f) => f
                .iter()
                .flat_map(|x| {
                    let b = x.to_bits();
                    [b as u16, (b >> 16) as u16]
                })
                .collect(),
        }
    };
    let (keys, bitmaps, offsets, values): (Vec<u64>, Vec<u64>, Vec<u32>, Vec<u16>) =
        match hls.dense() {
            Some(d) => (
                d.keys().to_vec(),
                d.bitmaps().iter().flatten().copied().collect(),
                d.offsets().to_vec(),
                bits(d.values()),
            ),
            None => (Vec::new(), Vec::new(), vec![0], Vec::new()),
        };
    Ok(DeviceHls {
        tile_keys: upload(stream, &keys, "tile keys")?,
        tile_bitmaps: upload(stream, &bitmaps, "tile bitmaps")?,
        tile_offsets: upload(stream, &offsets, "tile offsets")?,
        tile_values: upload(stream, &values, "tile values")?,
        sp_keys: upload(stream, s.keys(), "sparse keys")?,
        sp_values: upload(stream, &bits(s.values()), "sparse values")?,
        sp_block_prefix: upload(stream, s.block_prefix(), "sparse block prefixes")?,
        sp_block_offsets: upload(stream, s.block_offsets(), "sparse block offsets")?,
        bytes,
    })
}
