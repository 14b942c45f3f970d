//! A range of a `.sptb` file's entries, read without the rest: what one process of
//! several reads. The header is checked as [`super::read`] checks it; the checksum
//! covers the whole file, so only the process asked to ([`Range::checksum`]) streams
//! the file through the hash (one pass, constant memory).

use super::{FIXED_HEADER, Header, header, index_section, pad8, u64_at};
use crate::error::{Error, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Which entries to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// This reader's number, `0..of`.
    pub part: u64,
    /// Readers in all; reader `k` takes entries `nnz·k/of .. nnz·(k+1)/of`.
    pub of: u64,
    /// Whether this reader also checks the whole file's checksum.
    pub checksum: bool,
}

/// The entries of a range, as stored (repeats not summed).
#[derive(Debug, Clone, PartialEq)]
pub struct Entries {
    /// The tensor's extents.
    pub dims: Vec<usize>,
    /// Entries in the whole file.
    pub nnz: u64,
    /// Per mode, the range's 0-based indices.
    pub indices: Vec<Vec<u32>>,
    /// The range's values.
    pub values: Vec<f64>,
}

/// Reads the entries of `range` from the `.sptb` file at `path`, checking every index
/// against its extent and every value for finiteness (errors name the entry by its
/// place in the whole file).
pub fn read_range(path: &Path, range: Range) -> Result<Entries> {
    let bad = |reason: String| Error::BadBinary {
        path: path.to_path_buf(),
        reason,
    };
    let io = |e| Error::io(path, e);
    let mut file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut head = vec![0u8; FIXED_HEADER];
    file.read_exact(&mut head).map_err(|_| {
        bad(format!(
            "the file has {len} bytes, fewer than the {FIXED_HEADER}-byte header"
        ))
    })?;
    let Header {
        order,
        nnz,
        meta,
        checksum,
    } = header(&head, len).map_err(bad)?;
    if range.checksum {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        let actual = h.digest();
        if actual != checksum {
            return Err(bad(format!(
                "checksum mismatch (recorded {checksum:016x}, content {actual:016x}): the file is corrupt"
            )));
        }
    }
    let mut raw = vec![0u8; 8 * order];
    file.seek(SeekFrom::Start(FIXED_HEADER as u64))
        .map_err(io)?;
    file.read_exact(&mut raw).map_err(io)?;
    let mut dims = Vec::with_capacity(order);
    for m in 0..order {
        let d = u64_at(&raw, 8 * m);
        if d == 0 || d > 1 << 32 {
            return Err(bad(format!(
                "dimension of mode {m} is {d}, outside 1..=2^32"
            )));
        }
        dims.push(d as usize);
    }
    let n64 = nnz as u64;
    let (lo, hi) = (
        (n64 as u128 * range.part as u128 / range.of as u128) as u64,
        (n64 as u128 * (range.part + 1) as u128 / range.of as u128) as u64,
    );
    let count = (hi - lo) as usize;
    let start = (FIXED_HEADER + 8 * order + pad8(meta).unwrap_or(meta)) as u64;
    let section = index_section(nnz).unwrap_or(0) as u64;
    let mut indices = Vec::with_capacity(order);
    let mut bytes = vec![0u8; 8 * count];
    for (m, &d) in dims.iter().enumerate() {
        file.seek(SeekFrom::Start(start + m as u64 * section + 4 * lo))
            .map_err(io)?;
        file.read_exact(&mut bytes[..4 * count]).map_err(io)?;
        let ix: Vec<u32> = bytes[..4 * count]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if let Some(p) = ix.iter().position(|&i| i as usize >= d) {
            return Err(bad(format!(
                "entry {}: index {} of mode {m} is beyond the dimension {d}",
                lo + p as u64,
                ix[p]
            )));
        }
        indices.push(ix);
    }
    file.seek(SeekFrom::Start(start + order as u64 * section + 8 * lo))
        .map_err(io)?;
    file.read_exact(&mut bytes).map_err(io)?;
    let values: Vec<f64> = bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect();
    if let Some(p) = values.iter().position(|v| !v.is_finite()) {
        return Err(bad(format!(
            "entry {}: value {} is not finite",
            lo + p as u64,
            values[p]
        )));
    }
    Ok(Entries {
        dims,
        nnz: n64,
        indices,
        values,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::CooTensor;

    #[test]
    fn ranges_cover_the_file_once_and_corruption_is_named() {
        let x = CooTensor::from_entries(
            vec![4, 5, 6],
            (0..37u32).map(|k| ([k % 4, k % 5, k % 6], k as f64 + 0.5)),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.sptb");
        super::super::write(&p, &x).unwrap();
        for of in [1u64, 2, 3, 5, 40] {
            let mut values = Vec::new();
            let mut first = Vec::new();
            for part in 0..of {
                let e = read_range(
                    &p,
                    Range {
                        part,
                        of,
                        checksum: part == 0,
                    },
                )
                .unwrap();
                assert_eq!(e.dims, x.dims());
                assert_eq!(e.nnz, 37);
                values.extend(e.values);
                first.extend(e.indices[0].clone());
            }
            assert_eq!(values, x.values());
            assert_eq!(first, x.indices(0));
        }
        // A flipped byte in the values: the checksum names it where it is checked.
        let mut bytes = std::fs::read(&p).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0x40;
        std::fs::write(&p, &bytes).unwrap();
        let whole = super::super::read(&p).unwrap_err().to_string();
        let part = read_range(
            &p,
            Range {
                part: 1,
                of: 2,
                checksum: true,
            },
        )
        .unwrap_err()
        .to_string();
        assert_eq!(part, whole);
        assert!(whole.contains("checksum"), "{whole}");
    }
}
