//! Device copies of an HLS tensor and of factor matrices.

use super::device::cuda_err;
use crate::error::{Error, Result};
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
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

/// The HLS parts in device memory (fp16 values as their bit patterns).
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
        + s.values().len() * 2
        + s.block_prefix().len() * 8
        + s.block_offsets().len() * 8;
    if let Some(d) = hls.dense() {
        b += d.keys().len() * 8 + d.bitmaps().len() * 512 + d.offsets().len() * 4 + d.nnz() * 2;
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
    let bits = |v: &[half::f16]| v.iter().map(|h| h.to_bits()).collect::<Vec<u16>>();
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

/// A factor matrix as the kernels take it: fp16 with per-column power-of-two scales
/// (for tensor cores) and fp32 (for the sparse part).
pub struct HostFactor {
    /// fp16 bits of `F[i, c] / scale[c]`, row-major.
    pub half: Vec<u16>,
    /// Column scales: powers of two with `max_i |F[i, c]| / scale[c] ≤ 1`.
    pub scale: Vec<f32>,
}

/// The power of two `2^e` with `max_abs / 2^e ≤ 1` and `e` as small as possible.
pub fn column_scale(max_abs: f32) -> f32 {
    if max_abs == 0.0 {
        return 1.0;
    }
    let mut e = max_abs.log2().ceil() as i32;
    while e < 127 && max_abs / 2f32.powi(e) > 1.0 {
        e += 1;
    }
    while e > -126 && max_abs / 2f32.powi(e - 1) <= 1.0 {
        e -= 1;
    }
    2f32.powi(e.clamp(-126, 127))
}

/// Scales and rounds `f` for tensor cores; NaN or Inf is an error.
pub fn half_factor(f: &Matrix, mode: usize) -> Result<HostFactor> {
    let (rows, cols) = f.shape();
    let mut max = vec![0f32; cols];
    for i in 0..rows {
        for (c, &v) in f.row(i).iter().enumerate() {
            if !v.is_finite() {
                return Err(Error::NonFinite(format!(
                    "factor of mode {mode} has {v} at ({i}, {c})"
                )));
            }
            max[c] = max[c].max(v.abs());
        }
    }
    let scale: Vec<f32> = max.iter().map(|&m| column_scale(m)).collect();
    let half = f
        .data()
        .iter()
        .enumerate()
        .map(|(k, &v)| half::f16::from_f32(v / scale[k % cols]).to_bits())
        .collect();
    Ok(HostFactor { half, scale })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_scales_bring_the_maximum_into_half_an_octave_below_one() {
        for &m in &[1e-30f32, 3e-5, 0.3, 1.0, 1.5, 7.0, 65504.0, 1e20, 1e38] {
            let s = column_scale(m);
            assert!(m / s <= 1.0 && m / s > 0.5, "{m} / {s}");
        }
        assert_eq!(column_scale(0.0), 1.0);
    }

    #[test]
    fn half_factors_keep_any_magnitude() {
        let f = Matrix::new(2, 2, vec![1e8, -3e-9, 2.5e8, 1e-9]).unwrap();
        let h = half_factor(&f, 1).unwrap();
        for (k, &v) in f.data().iter().enumerate() {
            let back = half::f16::from_bits(h.half[k]).to_f32() * h.scale[k % 2];
            assert!((back - v).abs() <= v.abs() * 1e-3, "{v} -> {back}");
        }
        let bad = Matrix::new(1, 1, vec![f32::NAN]).unwrap();
        assert!(matches!(half_factor(&bad, 0), Err(Error::NonFinite(_))));
    }
}
