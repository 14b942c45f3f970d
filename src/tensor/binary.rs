//! A compact binary form of [`CooTensor`] (`.sptb`) that loads far faster than text,
//! and a cache of it kept next to `.tns` files ([`load`]).
//!
//! Layout, all little-endian, every section starting at a multiple of 8 bytes (so a
//! memory map of the file can be viewed in place on little-endian machines):
//!
//! | offset | size | content |
//! |---|---|---|
//! | 0 | 8 | magic bytes [`MAGIC`] |
//! | 8 | 4 | format version ([`VERSION`]) |
//! | 12 | 4 | order `N` (≥ 1) |
//! | 16 | 8 | `nnz` |
//! | 24 | 8·N | dimensions, u64 each (1 ..= 2^32) |
//! | 24 + 8·N | N · pad8(4·nnz) | per mode, `nnz` 0-based u32 indices, zero-padded to 8 bytes |
//! | … | 8·nnz | values, f64 |
//!
//! The file's length must match the header exactly. [`read`] checks every field, every
//! index against its dimension and every value for finiteness; any mismatch is an
//! [`Error::BadBinary`] naming the file and the reason.

use super::CooTensor;
use super::tns::{self, ReadReport};
use crate::error::{Error, Result};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// The first 8 bytes of every `.sptb` file.
pub const MAGIC: [u8; 8] = *b"\x89SPTB\r\n\x1a";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;
/// Extension appended to a text file's name to name its cache.
pub const CACHE_EXTENSION: &str = "sptb";
/// Bytes before the dimensions.
const FIXED_HEADER: usize = 24;
/// Elements converted per write call.
const WRITE_STEP: usize = 1 << 16;

/// Where [`load`] found the tensor.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum LoadSource {
    /// Parsed from the text file (a cache was then written when possible).
    Text(ReadReport),
    /// Read from this up-to-date binary cache.
    Cache(PathBuf),
}

/// `nnz` u32s padded to a multiple of 8 bytes.
fn index_section(nnz: usize) -> Option<usize> {
    nnz.checked_mul(4)?.checked_next_multiple_of(8)
}

/// Total file size for a tensor of this order and nnz (`None` on overflow).
fn file_size(order: usize, nnz: usize) -> Option<usize> {
    let head = order.checked_mul(8)?.checked_add(FIXED_HEADER)?;
    let idx = index_section(nnz)?.checked_mul(order)?;
    head.checked_add(idx)?.checked_add(nnz.checked_mul(8)?)
}

/// Writes `x` in binary form to `path`.
pub fn write(path: &Path, x: &CooTensor) -> Result<()> {
    let io = |e| Error::io(path, e);
    let file = File::create(path).map_err(io)?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    write_to(&mut w, x).map_err(io)?;
    w.flush().map_err(io)
}

fn write_to(w: &mut impl Write, x: &CooTensor) -> std::io::Result<()> {
    let order = u32::try_from(x.order()).map_err(|_| std::io::Error::other("order > 2^32"))?;
    w.write_all(&MAGIC)?;
    w.write_all(&VERSION.to_le_bytes())?;
    w.write_all(&order.to_le_bytes())?;
    w.write_all(&(x.nnz() as u64).to_le_bytes())?;
    for &d in x.dims() {
        w.write_all(&(d as u64).to_le_bytes())?;
    }
    let mut buf = Vec::with_capacity(WRITE_STEP * 8);
    for m in 0..x.order() {
        for part in x.indices(m).chunks(WRITE_STEP) {
            buf.clear();
            for &i in part {
                buf.extend_from_slice(&i.to_le_bytes());
            }
            w.write_all(&buf)?;
        }
        if x.nnz() % 2 == 1 {
            w.write_all(&[0; 4])?;
        }
    }
    for part in x.values().chunks(WRITE_STEP) {
        buf.clear();
        for &v in part {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        w.write_all(&buf)?;
    }
    Ok(())
}

/// Reads a binary tensor written by [`write`], checking everything.
pub fn read(path: &Path) -> Result<CooTensor> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    // SAFETY: the map is only read, and only while this function runs; every value is
    // copied out. Caches are replaced by renaming a finished file over the old one
    // (see `load`), never rewritten in place, so a map of the old file stays intact.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
    decode(&map).map_err(|reason| Error::BadBinary {
        path: path.to_path_buf(),
        reason,
    })
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Decodes and validates a whole file held in memory.
fn decode(b: &[u8]) -> std::result::Result<CooTensor, String> {
    if b.len() < FIXED_HEADER {
        return Err(format!(
            "the file has {} bytes, fewer than the {FIXED_HEADER}-byte header",
            b.len()
        ));
    }
    if b[..8] != MAGIC {
        return Err("the file does not start with the sptb magic bytes".into());
    }
    let version = u32_at(b, 8);
    if version != VERSION {
        return Err(format!(
            "format version {version}; this build reads version {VERSION}"
        ));
    }
    let order = u32_at(b, 12) as usize;
    if order == 0 {
        return Err("the header declares order 0".into());
    }
    let nnz64 = u64_at(b, 16);
    let nnz = usize::try_from(nnz64).map_err(|_| format!("nnz {nnz64} is too large"))?;
    let expected = file_size(order, nnz)
        .ok_or_else(|| format!("order {order} and nnz {nnz} overflow the address space"))?;
    if b.len() != expected {
        return Err(format!(
            "the file has {} bytes, but order {order} and nnz {nnz} need {expected} (truncated or padded)",
            b.len()
        ));
    }
    let mut dims = Vec::with_capacity(order);
    for m in 0..order {
        let d = u64_at(b, FIXED_HEADER + 8 * m);
        if d == 0 || d > 1 << 32 {
            return Err(format!("dimension of mode {m} is {d}, outside 1..=2^32"));
        }
        dims.push(d as usize);
    }
    let section = index_section(nnz).unwrap_or(0);
    let mut at = FIXED_HEADER + 8 * order;
    let mut indices = Vec::with_capacity(order);
    for (m, &d) in dims.iter().enumerate() {
        let raw = &b[at..at + 4 * nnz];
        let ix: Vec<u32> = raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if let Some(p) = ix.iter().position(|&i| i as usize >= d) {
            return Err(format!(
                "entry {p}: index {} of mode {m} is beyond the dimension {d}",
                ix[p]
            ));
        }
        if b[at + 4 * nnz..at + section].iter().any(|&z| z != 0) {
            return Err(format!("padding after the indices of mode {m} is not zero"));
        }
        indices.push(ix);
        at += section;
    }
    let values: Vec<f64> = b[at..]
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect();
    if let Some(p) = values.iter().position(|v| !v.is_finite()) {
        return Err(format!("entry {p}: value {} is not finite", values[p]));
    }
    CooTensor::new(dims, indices, values).map_err(|e| e.to_string())
}

/// The cache file of a text tensor: its name with `.sptb` appended
/// (`x.tns.gz` → `x.tns.gz.sptb`).
pub fn cache_path(tns_path: &Path) -> PathBuf {
    let mut name = tns_path.as_os_str().to_owned();
    name.push(".");
    name.push(CACHE_EXTENSION);
    PathBuf::from(name)
}

/// Loads a `.tns` file through its binary cache.
///
/// When [`cache_path`] exists, carries the text's modification time (it is stamped
/// with it when written) and reads back valid, the cache is used. Otherwise the text is parsed ([`tns::read`]) and a cache written next to
/// it; a cache that cannot be written (read-only folder, full disk) is skipped without
/// an error.
pub fn load(tns_path: &Path) -> Result<(CooTensor, LoadSource)> {
    load_with_progress(tns_path, &mut |_, _| {})
}

/// [`load`], reporting reading progress as [`tns::read_with_progress`] does (only when
/// the text is parsed).
pub fn load_with_progress(
    tns_path: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(CooTensor, LoadSource)> {
    let source_time = std::fs::metadata(tns_path)
        .and_then(|m| m.modified())
        .map_err(|e| Error::io(tns_path, e))?;
    let cache = cache_path(tns_path);
    // The cache carries its source's modification time as its own (set when written):
    // equal times mean it was made from this version of the text. Comparing "newer
    // than" instead would call a cache written within the same timestamp tick stale,
    // and never trust one for a text dated in the future.
    let fresh = std::fs::metadata(&cache)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t == source_time);
    if fresh {
        // A cache that does not read back is rebuilt below.
        if let Ok(x) = read(&cache) {
            return Ok((x, LoadSource::Cache(cache)));
        }
    }
    let (x, report) = tns::read_with_progress(tns_path, progress)?;
    write_cache(&cache, &x, source_time);
    Ok((x, LoadSource::Text(report)))
}

/// Writes the cache under a temporary name and renames it into place, so no reader
/// ever sees a partial file; gives up quietly on any failure.
fn write_cache(cache: &Path, x: &CooTensor, source_time: std::time::SystemTime) {
    let mut tmp = cache.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let stamped = |p: &Path| {
        write(p, x).is_ok()
            && std::fs::File::options()
                .write(true)
                .open(p)
                .and_then(|f| f.set_modified(source_time))
                .is_ok()
    };
    if !stamped(&tmp) || std::fs::rename(&tmp, cache).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_eight_byte_aligned() {
        for nnz in [0, 1, 2, 3, 7] {
            for order in 1..5 {
                let size = file_size(order, nnz).unwrap();
                assert_eq!(size % 8, 0);
                assert_eq!(index_section(nnz).unwrap() % 8, 0);
            }
        }
        assert_eq!(file_size(3, 1), Some(24 + 24 + 3 * 8 + 8));
        assert_eq!(file_size(2, usize::MAX / 2), None);
    }

    #[test]
    fn encoded_tensor_decodes() {
        let x = CooTensor::from_entries(vec![3, 5], [([2u32, 4], 1.5), ([0, 1], -2.0)]).unwrap();
        let mut bytes = Vec::new();
        write_to(&mut bytes, &x).unwrap();
        assert_eq!(bytes.len(), file_size(2, 2).unwrap());
        assert_eq!(decode(&bytes).unwrap(), x);
    }
}
