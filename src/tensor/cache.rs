//! The binary cache of text tensors: a `.sptb` copy of every `.tns` file read, so the
//! next read takes a memory map instead of a parse.
//!
//! Where: `$XDG_CACHE_HOME/sptmc/`, else `$HOME/.cache/sptmc/` ([`Cache::user`]); never
//! beside the user's data. One entry per source file, named by a hash of the source's
//! canonical path plus its file name.
//!
//! When an entry is used: its metadata ([`SourceRecord`]) must name the same canonical
//! path, size, modification time *and* content hash (XXH3-128 of the file's bytes as
//! stored, compressed or not) as the source has now, and its payload must match its own
//! checksum ([`super::binary`]). Equal times alone are not enough: files unpacked from
//! one archive or copied with `cp -p`, `rsync -a` or `touch -r` share them. Anything
//! else rebuilds the entry from the text.
//!
//! What is not cached: a source that is not a regular file (a FIFO, `/dev/stdin` from
//! a pipe, `<(…)`, a device), which can be read only once and is streamed straight into
//! the parser; and a source whose path is not valid UTF-8, which a source record (JSON)
//! cannot hold.
//!
//! Entries are written under a temporary name and renamed into place, so a reader never
//! sees a partial one; temporaries left by a killed writer are removed on the next
//! load ([`Cache::clean_temporaries`]).

use super::CooTensor;
use super::binary::{self, is_stale_temporary};
use super::tns::{self, ReadReport};
use crate::error::{Error, Result};
use std::io::Read;
use std::path::{Path, PathBuf};

/// What a cache entry records of the text it was made from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceRecord {
    /// The source's canonical path.
    pub source: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Its modification time, in nanoseconds since the Unix epoch (negative before).
    pub mtime_ns: i128,
    /// XXH3-128 of its bytes as stored, in hex.
    pub hash: String,
    /// Entries of the text merged into an earlier one with the same coordinates when it
    /// was parsed (`None` in an entry written before this was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicates_summed: Option<usize>,
    /// Values of the text below the smallest f64, read as 0 (`None` in an entry written
    /// before this was recorded, which is then made again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values_underflowed: Option<usize>,
    /// The 1-based line of the first of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_underflow_line: Option<usize>,
    /// Bytes after the last gzip member that were ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trailing_bytes: Option<u64>,
}

impl SourceRecord {
    /// Records `path` (canonical) as it is now: size and time from its metadata, and
    /// the hash of its bytes.
    pub fn of(path: &Path) -> Result<Self> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        let mtime = meta.modified().map_err(|e| Error::io(path, e))?;
        let mtime_ns = match mtime.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        };
        Ok(SourceRecord {
            source: path.to_path_buf(),
            size: meta.len(),
            mtime_ns,
            hash: format!("{:032x}", hash_file(path)?),
            duplicates_summed: None,
            values_underflowed: None,
            first_underflow_line: None,
            trailing_bytes: None,
        })
    }
}

/// XXH3-128 of a file's bytes, read in 1 MiB pieces.
pub fn hash_file(path: &Path) -> Result<u128> {
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Ok(h.digest128())
}

/// Where [`Cache::load`] found the tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadSource {
    /// Parsed from the text; `cache` says what became of its cache entry.
    Text {
        /// What the parse found.
        report: ReadReport,
        /// The cache entry's fate.
        cache: CacheNote,
    },
    /// Read from an up-to-date cache entry.
    Cache {
        /// The entry.
        path: PathBuf,
        /// The duplicates summed when the text was parsed, as the entry recorded them
        /// (`None` for an entry that did not).
        duplicates_summed: Option<usize>,
        /// The values below the smallest f64 the parse read as 0, and the line of the
        /// first.
        underflowed: (usize, Option<usize>),
        /// Bytes after the last gzip member that the parse ignored.
        trailing_bytes: u64,
    },
}

/// What happened to the cache entry of a text that was parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheNote {
    /// There was no entry; this one was written.
    Written(PathBuf),
    /// The entry could not be used (the reason) and was rewritten.
    Rebuilt {
        /// The entry.
        path: PathBuf,
        /// Why the old one was not used.
        why: String,
    },
    /// No entry could be written (the reason); the next read parses again.
    NotWritten(String),
}

/// A folder of cache entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// A cache kept in `dir` (created when the first entry is written).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Cache { dir: dir.into() }
    }

    /// The user's cache folder: `$XDG_CACHE_HOME/sptmc` when that variable holds an
    /// absolute path, else `$HOME/.cache/sptmc`; `None` when neither is set.
    pub fn user_dir() -> Option<PathBuf> {
        let xdg = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute());
        let base = xdg.or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".cache"))
        })?;
        Some(base.join("sptmc"))
    }

    /// The cache in [`Cache::user_dir`].
    pub fn user() -> Option<Self> {
        Self::user_dir().map(Self::new)
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry of the source whose canonical path is `canonical`.
    pub fn entry_path(&self, canonical: &Path) -> PathBuf {
        let key = xxhash_rust::xxh3::xxh3_64(canonical.as_os_str().as_encoded_bytes());
        let name: String = canonical
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .take(80)
            .collect();
        self.dir.join(format!("{key:016x}-{name}.sptb"))
    }

    /// Removes temporaries left in the folder by writers that no longer run; returns
    /// how many.
    pub fn clean_temporaries(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        entries
            .filter_map(|e| e.ok())
            .filter(|e| is_stale_temporary(&self.dir, &e.file_name().to_string_lossy()))
            .filter(|e| std::fs::remove_file(e.path()).is_ok())
            .count()
    }

    /// Loads the text tensor at `path` through the cache (see the module docs).
    pub fn load(&self, path: &Path) -> Result<(CooTensor, LoadSource)> {
        self.load_with_progress(path, &mut |_, _| {})
    }

    /// [`Cache::load`], reporting reading progress as [`tns::read_with_progress`] does
    /// (only when the text is parsed).
    pub fn load_with_progress(
        &self,
        path: &Path,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(CooTensor, LoadSource)> {
        let uncached = |why: &str, progress: &mut dyn FnMut(u64, u64)| {
            let (x, report) = tns::read_with_progress(path, progress)?;
            let cache = CacheNote::NotWritten(why.into());
            Ok((x, LoadSource::Text { report, cache }))
        };
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            return uncached("not a regular file: read once as it streams", progress);
        }
        self.clean_temporaries();
        clean_legacy_temporaries(path);
        let canonical = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
        if canonical.to_str().is_none() {
            return uncached("the file's path is not valid UTF-8", progress);
        }
        let record = SourceRecord::of(&canonical)?;
        let entry = self.entry_path(&canonical);
        let why = if entry.exists() {
            match self.read_entry(&entry, &record) {
                Ok((x, stored)) => {
                    let source = LoadSource::Cache {
                        path: entry,
                        duplicates_summed: stored.duplicates_summed,
                        underflowed: (
                            stored.values_underflowed.unwrap_or(0),
                            stored.first_underflow_line,
                        ),
                        trailing_bytes: stored.trailing_bytes.unwrap_or(0),
                    };
                    return Ok((x, source));
                }
                Err(why) => Some(why),
            }
        } else {
            None
        };
        let (x, report) = tns::read_with_progress(path, progress)?;
        // Written only if the text did not change while it was parsed.
        let cache = match SourceRecord::of(&canonical) {
            Ok(after) if after == record => {
                let record = SourceRecord {
                    duplicates_summed: Some(report.duplicates_summed),
                    values_underflowed: Some(report.values_underflowed),
                    first_underflow_line: report.first_underflow_line,
                    trailing_bytes: Some(report.trailing_bytes),
                    ..record
                };
                self.write_entry(&entry, &x, &record, why)
            }
            Ok(_) => CacheNote::NotWritten("the file changed while it was read".into()),
            Err(e) => CacheNote::NotWritten(e.to_string()),
        };
        Ok((x, LoadSource::Text { report, cache }))
    }

    /// The entry's tensor, and what it records of the parse, if it was made from the
    /// source as `record` describes it now; otherwise why not.
    fn read_entry(
        &self,
        entry: &Path,
        record: &SourceRecord,
    ) -> std::result::Result<(CooTensor, SourceRecord), String> {
        let meta = binary::read_meta(entry).map_err(|e| e.to_string())?;
        let stored: SourceRecord = serde_json::from_slice(&meta)
            .map_err(|e| format!("its source record is unreadable ({e})"))?;
        if stored.source != record.source {
            return Err(format!(
                "it was made from {}, another file",
                stored.source.display()
            ));
        }
        if stored.size != record.size {
            return Err("the source's size changed".into());
        }
        if stored.mtime_ns != record.mtime_ns {
            return Err("the source's modification time changed".into());
        }
        if stored.hash != record.hash {
            return Err("the source's content changed (same size and time)".into());
        }
        if stored.values_underflowed.is_none() {
            // Else a value the parse read as 0 would go unsaid on every later read.
            return Err("it was made before entries recorded values below the smallest f64".into());
        }
        let x = binary::read(entry).map_err(|e| e.to_string())?;
        Ok((x, stored))
    }

    fn write_entry(
        &self,
        entry: &Path,
        x: &CooTensor,
        record: &SourceRecord,
        why: Option<String>,
    ) -> CacheNote {
        let meta = match serde_json::to_vec(record) {
            Ok(m) => m,
            Err(e) => return CacheNote::NotWritten(format!("its source record: {e}")),
        };
        let written = std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io(&self.dir, e))
            .and_then(|()| binary::write_with_meta(entry, x, &meta));
        match (written, why) {
            (Err(e), _) => {
                // An entry that cannot be replaced must not be read again.
                let _ = std::fs::remove_file(entry);
                CacheNote::NotWritten(e.to_string())
            }
            (Ok(()), None) => CacheNote::Written(entry.to_path_buf()),
            (Ok(()), Some(why)) => CacheNote::Rebuilt {
                path: entry.to_path_buf(),
                why,
            },
        }
    }
}

/// Removes `NAME.sptb.tmpPID` files beside `source` whose writer no longer runs: the
/// leftovers of a killed cache write by sptmc versions that kept the cache beside the
/// data (Linux only, where a process id can be checked).
fn clean_legacy_temporaries(source: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let (Some(dir), Some(name)) = (source.parent(), source.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!("{}.sptb.tmp", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = file.strip_prefix(&prefix) else {
            continue;
        };
        let dead = pid
            .parse::<u32>()
            .is_ok_and(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists());
        if dead {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
