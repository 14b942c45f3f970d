//! A compact binary form of [`CooTensor`] (`.sptb`) that loads far faster than text.
//! `sptmc convert FILE OUT.sptb` writes one; the binary cache ([`super::cache`]) keeps
//! one per text file it has read.
//!
//! Layout (version 2), all little-endian, every section starting at a multiple of 8
//! bytes (so a memory map of the file can be viewed in place on little-endian machines):
//!
//! | offset | size | content |
//! |---|---|---|
//! | 0 | 8 | magic bytes [`MAGIC`] |
//! | 8 | 4 | format version ([`VERSION`]) |
//! | 12 | 4 | order `N` (≥ 1) |
//! | 16 | 8 | `nnz` |
//! | 24 | 8 | `L`: bytes of metadata (at most [`MAX_META`]) |
//! | 32 | 8 | checksum: XXH3-64 of every byte from offset 40 to the end |
//! | 40 | 8·N | dimensions, u64 each (1 ..= 2^32) |
//! | 40 + 8·N | pad8(L) | metadata (free-form bytes; the cache records its source here), zero-padded |
//! | … | N · pad8(4·nnz) | per mode, `nnz` 0-based u32 indices, zero-padded to 8 bytes |
//! | … | 8·nnz | values, f64 |
//!
//! The file's length must match the header exactly. [`read`] checks the checksum, every
//! field, every index against its dimension and every value for finiteness; any
//! mismatch is an [`Error::BadBinary`] naming the file and the reason. Repeated
//! coordinates (which a file made by another tool may hold) are summed and counted, as
//! the text reader does.

pub mod part;

use super::CooTensor;
use crate::error::{Error, Result};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::Xxh3;

/// The first 8 bytes of every `.sptb` file.
pub const MAGIC: [u8; 8] = *b"\x89SPTB\r\n\x1a";
/// The format version this build writes and reads.
pub const VERSION: u32 = 2;
/// The most metadata bytes a file may carry.
pub const MAX_META: usize = 1 << 20;
/// Bytes before the dimensions.
const FIXED_HEADER: usize = 40;
/// Where the checksum sits.
const CHECKSUM_AT: usize = 32;
/// Elements converted per write call.
const WRITE_STEP: usize = 1 << 16;

/// What [`read_report`] found besides the tensor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BinaryReport {
    /// Entries merged into an earlier entry with the same coordinates.
    pub duplicates_summed: usize,
    /// The file's metadata bytes.
    pub meta: Vec<u8>,
}

/// `n` bytes padded to a multiple of 8.
fn pad8(n: usize) -> Option<usize> {
    n.checked_next_multiple_of(8)
}

/// `nnz` u32s padded to a multiple of 8 bytes.
fn index_section(nnz: usize) -> Option<usize> {
    pad8(nnz.checked_mul(4)?)
}

/// Total file size for a tensor of this order, nnz and metadata length (`None` on
/// overflow).
fn file_size(order: usize, nnz: usize, meta: usize) -> Option<usize> {
    let head = order
        .checked_mul(8)?
        .checked_add(FIXED_HEADER)?
        .checked_add(pad8(meta)?)?;
    let idx = index_section(nnz)?.checked_mul(order)?;
    head.checked_add(idx)?.checked_add(nnz.checked_mul(8)?)
}

/// Writes `x` in binary form to `path`, with no metadata.
pub fn write(path: &Path, x: &CooTensor) -> Result<()> {
    write_with_meta(path, x, &[])
}

/// Writes `x` in binary form to `path` with `meta` as its metadata. The file appears
/// whole or not at all: it is written under a temporary name beside `path` and renamed
/// into place (the temporary is removed on failure).
pub fn write_with_meta(path: &Path, x: &CooTensor, meta: &[u8]) -> Result<()> {
    if meta.len() > MAX_META {
        return Err(Error::InvalidOption(format!(
            "{} bytes of metadata; a .sptb file holds at most {MAX_META}",
            meta.len()
        )));
    }
    let tmp = temporary_name(path);
    let result = write_file(&tmp, x, meta)
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e)));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A name beside `path` for a file being written: `.sptmc-tmp-PID-N-NAME`, unique
/// within this process, ending in the final name (so its extension still says the
/// format) and carrying the writer's process id, so a later run can tell a leftover of
/// a killed writer ([`is_stale_temporary`]).
pub fn temporary_name(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{TMP_PREFIX}{}-{n}-{name}", std::process::id()))
}

/// How the names of [`temporary_name`] start.
pub const TMP_PREFIX: &str = ".sptmc-tmp-";

/// The id of the process that made the temporary `name` ([`temporary_name`]'s PID).
pub fn temporary_pid(name: &str) -> Option<u32> {
    name.strip_prefix(TMP_PREFIX)
        .and_then(|t| t.split('-').next())
        .and_then(|p| p.parse::<u32>().ok())
}

/// Whether the file named `name` in `dir` is a temporary of [`temporary_name`] whose
/// writer no longer runs (Linux: no `/proc/PID`; elsewhere: older than a day).
pub fn is_stale_temporary(dir: &Path, name: &str) -> bool {
    let Some(pid) = temporary_pid(name) else {
        return false;
    };
    if cfg!(target_os = "linux") && Path::new("/proc/self").exists() {
        return pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists();
    }
    std::fs::metadata(dir.join(name))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age.as_secs() > 24 * 3600)
}

fn write_file(path: &Path, x: &CooTensor, meta: &[u8]) -> Result<()> {
    let io = |e| Error::io(path, e);
    let mut file = File::create(path).map_err(io)?;
    let mut w = HashingWriter {
        inner: BufWriter::with_capacity(1 << 20, &mut file),
        hash: None,
    };
    write_to(&mut w, x, meta).map_err(io)?;
    let checksum = w.hash.take().map_or(0, |h| h.digest());
    w.inner.flush().map_err(io)?;
    drop(w);
    file.seek(SeekFrom::Start(CHECKSUM_AT as u64)).map_err(io)?;
    file.write_all(&checksum.to_le_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

/// Writes through to `inner`, hashing what it writes once `hash` is set.
struct HashingWriter<W> {
    inner: W,
    hash: Option<Xxh3>,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        if let Some(h) = &mut self.hash {
            h.update(&buf[..n]);
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn write_to<W: Write>(w: &mut HashingWriter<W>, x: &CooTensor, meta: &[u8]) -> std::io::Result<()> {
    let order = u32::try_from(x.order()).map_err(|_| std::io::Error::other("order > 2^32"))?;
    w.write_all(&MAGIC)?;
    w.write_all(&VERSION.to_le_bytes())?;
    w.write_all(&order.to_le_bytes())?;
    w.write_all(&(x.nnz() as u64).to_le_bytes())?;
    w.write_all(&(meta.len() as u64).to_le_bytes())?;
    // The checksum, filled in once the rest is written.
    w.write_all(&0u64.to_le_bytes())?;
    w.hash = Some(Xxh3::new());
    for &d in x.dims() {
        w.write_all(&(d as u64).to_le_bytes())?;
    }
    w.write_all(meta)?;
    w.write_all(&[0; 8][..pad8(meta.len()).unwrap_or(0) - meta.len()])?;
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

/// Reads a binary tensor, checking everything (repeated coordinates are summed).
pub fn read(path: &Path) -> Result<CooTensor> {
    Ok(read_report(path)?.0)
}

/// [`read`], also giving what was found besides the tensor.
pub fn read_report(path: &Path) -> Result<(CooTensor, BinaryReport)> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    // SAFETY: the map is only read, and only while this function runs; every value is
    // copied out. Files are replaced by renaming a finished file over the old one
    // (see `write_with_meta`), never rewritten in place, so a map of the old file stays
    // intact. (A file that another program truncates meanwhile can still fault.)
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
    read_bytes(&map, path)
}

/// [`read_report`] of a file held in memory; `origin` names it in errors.
pub fn read_bytes(bytes: &[u8], origin: &Path) -> Result<(CooTensor, BinaryReport)> {
    let bad = |reason| Error::BadBinary {
        path: origin.to_path_buf(),
        reason,
    };
    let (mut x, meta) = decode(bytes).map_err(bad)?;
    let duplicates_summed = x.sum_duplicates_finite(0).map_err(|e| match e {
        Error::NonFinite(why) => bad(why),
        e => e,
    })?;
    Ok((
        x,
        BinaryReport {
            duplicates_summed,
            meta,
        },
    ))
}

/// Reads only the metadata of a binary tensor (the header is checked, the payload and
/// its checksum are not): what the cache looks at before deciding to read a file.
pub fn read_meta(path: &Path) -> Result<Vec<u8>> {
    let bad = |reason: String| Error::BadBinary {
        path: path.to_path_buf(),
        reason,
    };
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut head = [0u8; FIXED_HEADER];
    file.read_exact(&mut head).map_err(|_| {
        bad(format!(
            "the file has {len} bytes, fewer than the {FIXED_HEADER}-byte header"
        ))
    })?;
    let h = header(&head, len).map_err(bad)?;
    let mut rest = vec![0u8; 8 * h.order + h.meta];
    file.read_exact(&mut rest).map_err(|e| Error::io(path, e))?;
    Ok(rest[8 * h.order..].to_vec())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The fixed header's fields, checked against the file's length.
struct Header {
    order: usize,
    nnz: usize,
    meta: usize,
    checksum: u64,
}

/// Checks the fixed header (`b` holds at least its 40 bytes) against a file of `len`
/// bytes.
fn header(b: &[u8], len: u64) -> std::result::Result<Header, String> {
    if b[..8] != MAGIC {
        return Err("the file does not start with the sptb magic bytes".into());
    }
    let version = u32_at(b, 8);
    if version == 1 {
        return Err(
            "format version 1, written by an older sptmc without a checksum; make it again \
             from its source with `sptmc convert SOURCE OUT.sptb`"
                .into(),
        );
    }
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
    let meta64 = u64_at(b, 24);
    let meta = usize::try_from(meta64)
        .ok()
        .filter(|&m| m <= MAX_META)
        .ok_or_else(|| format!("{meta64} bytes of metadata; at most {MAX_META} are allowed"))?;
    let expected = file_size(order, nnz, meta)
        .ok_or_else(|| format!("order {order} and nnz {nnz} overflow the address space"))?;
    if len != expected as u64 {
        return Err(format!(
            "the file has {len} bytes, but order {order}, nnz {nnz} and {meta} bytes of metadata need {expected} (truncated or padded)"
        ));
    }
    Ok(Header {
        order,
        nnz,
        meta,
        checksum: u64_at(b, CHECKSUM_AT),
    })
}

/// Decodes and validates a whole file held in memory: the tensor (repeats not yet
/// summed) and the metadata.
fn decode(b: &[u8]) -> std::result::Result<(CooTensor, Vec<u8>), String> {
    if b.len() < FIXED_HEADER {
        return Err(format!(
            "the file has {} bytes, fewer than the {FIXED_HEADER}-byte header",
            b.len()
        ));
    }
    let Header {
        order,
        nnz,
        meta,
        checksum,
    } = header(b, b.len() as u64)?;
    let actual = xxhash_rust::xxh3::xxh3_64(&b[FIXED_HEADER..]);
    if actual != checksum {
        return Err(format!(
            "checksum mismatch (recorded {checksum:016x}, content {actual:016x}): the file is corrupt"
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
    let mut at = FIXED_HEADER + 8 * order;
    let meta_bytes = b[at..at + meta].to_vec();
    let meta_end = at + pad8(meta).unwrap_or(meta);
    if b[at + meta..meta_end].iter().any(|&z| z != 0) {
        return Err("padding after the metadata is not zero".into());
    }
    at = meta_end;
    let section = index_section(nnz).unwrap_or(0);
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
    let x = CooTensor::new(dims, indices, values).map_err(|e| e.to_string())?;
    Ok((x, meta_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(x: &CooTensor, meta: &[u8]) -> Vec<u8> {
        let mut w = HashingWriter {
            inner: Vec::new(),
            hash: None,
        };
        write_to(&mut w, x, meta).unwrap();
        let sum = w.hash.unwrap().digest();
        let mut bytes = w.inner;
        bytes[CHECKSUM_AT..CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
        bytes
    }

    #[test]
    fn sections_are_eight_byte_aligned() {
        for nnz in [0, 1, 2, 3, 7] {
            for order in 1..5 {
                for meta in [0, 1, 8, 13] {
                    assert_eq!(file_size(order, nnz, meta).unwrap() % 8, 0);
                }
                assert_eq!(index_section(nnz).unwrap() % 8, 0);
            }
        }
        assert_eq!(file_size(3, 1, 0), Some(40 + 24 + 3 * 8 + 8));
        assert_eq!(file_size(3, 1, 5), Some(40 + 24 + 8 + 3 * 8 + 8));
        assert_eq!(file_size(2, usize::MAX / 2, 0), None);
    }

    #[test]
    fn encoded_tensor_decodes_with_its_metadata() {
        let x = CooTensor::from_entries(vec![3, 5], [([2u32, 4], 1.5), ([0, 1], -2.0)]).unwrap();
        for meta in [&b""[..], b"{\"source\": 1}"] {
            let bytes = encode(&x, meta);
            assert_eq!(bytes.len(), file_size(2, 2, meta.len()).unwrap());
            assert_eq!(decode(&bytes).unwrap(), (x.clone(), meta.to_vec()));
        }
    }

    #[test]
    fn temporaries_of_dead_writers_are_recognized() {
        let dir = Path::new("/nonexistent");
        let mine = temporary_name(&dir.join("a.sptb"));
        let mine = mine.file_name().unwrap().to_str().unwrap();
        assert!(
            mine.starts_with(".sptmc-tmp-") && mine.ends_with("-a.sptb"),
            "{mine}"
        );
        assert!(!is_stale_temporary(dir, mine));
        assert!(!is_stale_temporary(dir, "a.sptb"));
        if cfg!(target_os = "linux") {
            // Process ids stay below 2^22 on Linux.
            assert!(is_stale_temporary(dir, ".sptmc-tmp-4294967295-0-a.sptb"));
        }
    }
}
