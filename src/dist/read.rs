//! Reading a `.tns` file across ranks, no rank holding the whole of it.
//!
//! - **Plain text** is cut into byte ranges, one per rank (at least [`MIN_RANGE`]
//!   bytes each, so a small file is read by fewer ranks); a rank reads the lines that
//!   start in its range. Line numbers in errors are the file's: each rank counts its
//!   lines and learns how many come before it.
//! - **`.sptb`** is read by ranges of entries (rank 0 also streams the whole file
//!   through its checksum).
//! - **Gzip** cannot be split: rank 0 decompresses it as a stream and hands out the
//!   text in rounds of whole lines, one piece per rank, never holding more than a
//!   round ([`ROUND_PIECE`] bytes per rank).
//!
//! Every rank parses what it got with the text reader's own parser (the same one-line
//! errors); the ranks then agree on the outcome, so that one failure ends every rank
//! and only the rank that failed first (in file order) reports it. What each rank read
//! is then moved to the ranks that hold it by one all-to-all ([`super::exchange`]).

use super::comm::{Channel, DistResult, Failure, Reduce};
use crate::error::{Error, Result};
use crate::tensor::tns::part::{Entries, TextStart, parse_lines, start_of};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The smallest byte range a rank reads of a plain text file.
pub const MIN_RANGE: u64 = 4 << 20;
/// The text per rank that rank 0 hands out per round of a gzip stream.
pub const ROUND_PIECE: usize = 16 << 20;

/// What a rank read: its share of the entries (global 0-based indices, in file order)
/// and what every rank agrees on.
#[derive(Debug)]
pub struct Share {
    /// This rank's entries.
    pub entries: Entries,
    /// The tensor's extents (the header's, or the largest index of every mode).
    pub dims: Vec<usize>,
    /// Data lines in the whole file.
    pub total_entries: u64,
    /// Lines in the whole file.
    pub total_lines: u64,
}

fn empty(path: &Path, lines: u64) -> Error {
    Error::Parse {
        file: path.to_path_buf(),
        line: lines.max(1) as usize,
        reason: "the file holds no data lines (empty tensor)".into(),
    }
}

/// Reads this rank's share of the tensor file at `path`: `.tns` (plain or gzipped) or
/// `.sptb` (a range of its entries per rank; rank 0 also checks the checksum).
pub fn read_share(ch: &Channel, path: &Path) -> DistResult<Share> {
    if path.extension().is_some_and(|e| e == "sptb") {
        ch.agree(open(path).map(drop))?;
        let range = crate::tensor::binary::part::Range {
            part: ch.rank() as u64,
            of: ch.size() as u64,
            checksum: ch.rank() == 0,
        };
        let e = ch.agree(crate::tensor::binary::part::read_range(path, range))?;
        let max = e
            .indices
            .iter()
            .map(|ix| ix.iter().copied().max().unwrap_or(0))
            .collect();
        return Ok(Share {
            entries: Entries {
                indices: e.indices,
                values: e.values,
                max,
                lines: 0,
                underflows: 0,
                first_underflow_line: None,
            },
            dims: e.dims,
            total_entries: e.nnz,
            total_lines: 0,
        });
    }
    let gzip = ch.agree(is_gzip(path))?;
    let (entries, start, lines) = if gzip {
        read_streamed(ch, path)?
    } else {
        read_ranges(ch, path)?
    };
    let order = start.order;
    let mut max: Vec<u64> = entries.max.iter().map(|&m| u64::from(m)).collect();
    ch.reduce_u64(&mut max, Reduce::Max);
    let total_entries = {
        let mut t = [entries.values.len() as u64];
        ch.reduce_u64(&mut t, Reduce::Sum);
        t[0]
    };
    if total_entries == 0 {
        let r = if ch.rank() == 0 {
            Err(empty(path, lines))
        } else {
            Ok(())
        };
        ch.agree(r)?;
    }
    let dims = match &start.header {
        Some(h) => h.clone(),
        None => max.iter().map(|&m| m as usize + 1).collect(),
    };
    debug_assert_eq!(dims.len(), order);
    Ok(Share {
        entries,
        dims,
        total_entries,
        total_lines: lines,
    })
}

/// The file, or the error a single process gives for it (a missing file is "no such
/// file", not the system's longer wording).
fn open(path: &Path) -> Result<std::fs::File> {
    std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        ),
        _ => Error::io(path, e),
    })
}

/// Whether the file is gzip (by its magic bytes); a name ending in `.gz` without
/// them is the text reader's error.
fn is_gzip(path: &Path) -> Result<bool> {
    let io = |e| Error::io(path, e);
    let mut f = open(path)?;
    let mut magic = [0u8; 2];
    let got = f.read(&mut magic).map_err(io)?;
    let gz = got == 2 && magic == [0x1f, 0x8b];
    let named_gz = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    if named_gz && !gz {
        return Err(Error::Decompress {
            path: path.to_path_buf(),
            reason: "the name ends in .gz but the file does not start with the gzip magic bytes"
                .into(),
        });
    }
    Ok(gz)
}

/// The start every rank needs to parse, sent by rank 0 as numbers:
/// `[order, line, header?, dims…]`.
fn encode_start(s: &TextStart) -> Vec<u64> {
    let mut v = vec![s.order as u64, s.line as u64, u64::from(s.header.is_some())];
    if let Some(h) = &s.header {
        v.extend(h.iter().map(|&d| d as u64));
    }
    v
}

fn decode_start(v: &[u64]) -> TextStart {
    let order = v[0] as usize;
    TextStart {
        offset: 0,
        line: v[1] as usize,
        order,
        header: (v[2] == 1).then(|| v[3..3 + order].iter().map(|&d| d as usize).collect()),
    }
}

/// Rank 0's `value`, on every rank.
fn from_rank0(ch: &Channel, value: &[u64]) -> Vec<u64> {
    let mine: &[u64] = if ch.rank() == 0 { value } else { &[] };
    ch.all_gather(mine).0
}

/// The lines of `file` that start in `lo..hi` (a line starts at 0 or after a `\n`).
fn read_range(file: &mut std::fs::File, lo: u64, hi: u64, size: u64) -> std::io::Result<Vec<u8>> {
    // The first line starting at or after `lo`: after the first `\n` at `lo − 1` or later.
    let from = if lo == 0 {
        0
    } else {
        match find_newline(file, lo - 1, size)? {
            Some(p) => p + 1,
            None => size,
        }
    };
    let to = if hi >= size {
        size
    } else {
        match find_newline(file, hi - 1, size)? {
            Some(p) => p + 1,
            None => size,
        }
    };
    let mut buf = vec![0u8; to.saturating_sub(from) as usize];
    file.seek(SeekFrom::Start(from))?;
    file.read_exact(&mut buf)?;
    Ok(buf)
}

/// The position of the first `\n` at `at` or later.
fn find_newline(file: &mut std::fs::File, at: u64, size: u64) -> std::io::Result<Option<u64>> {
    let mut pos = at;
    let mut buf = vec![0u8; 1 << 16];
    file.seek(SeekFrom::Start(at))?;
    while pos < size {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if let Some(p) = memchr::memchr(b'\n', &buf[..n]) {
            return Ok(Some(pos + p as u64));
        }
        pos += n as u64;
    }
    Ok(None)
}

/// Lines in `text` (line ends, plus a last line without one).
fn count_lines(text: &[u8]) -> u64 {
    (memchr::memchr_iter(b'\n', text).count()
        + usize::from(text.last().is_some_and(|&b| b != b'\n'))) as u64
}

/// A parse error at a line of a part, moved to the file's numbering.
fn shift_line(e: Error, by: usize) -> Error {
    match e {
        Error::Parse { file, line, reason } => Error::Parse {
            file,
            line: line + by,
            reason,
        },
        e => e,
    }
}

/// Plain text: every rank reads and parses its byte range.
fn read_ranges(ch: &Channel, path: &Path) -> DistResult<(Entries, TextStart, u64)> {
    let (p, me) = (ch.size() as u64, ch.rank() as u64);
    let text = ch.agree((|| -> Result<Vec<u8>> {
        let io = |e| Error::io(path, e);
        let mut f = std::fs::File::open(path).map_err(io)?;
        let size = f.metadata().map_err(io)?.len();
        let readers = (size / MIN_RANGE).clamp(1, p);
        if me >= readers {
            return Ok(Vec::new());
        }
        let (lo, hi) = (size * me / readers, size * (me + 1) / readers);
        read_range(&mut f, lo, hi, size).map_err(io)
    })())?;
    let lines = count_lines(&text);
    let all = ch.gather_u64(lines);
    let before: u64 = all[..me as usize].iter().sum();
    let total_lines: u64 = all.iter().sum();
    ch.agree(
        crate::tensor::tns::check_text(&text, path).map_err(|e| shift_line(e, before as usize)),
    )?;
    let start = ch.agree(if me == 0 {
        match start_of(&text, path) {
            Ok(Some(s)) => Ok(Some(s)),
            // Only a file whose first range holds no data line at all (more than
            // MIN_RANGE of comments when several ranks read) lands here.
            Ok(None) if total_lines == lines => Err(empty(path, total_lines)),
            Ok(None) => Err(Error::Unsupported(format!(
                "{}: no data line in the first {} MiB, which one rank reads alone: put the header and data before long comments",
                path.display(),
                MIN_RANGE >> 20
            ))),
            Err(e) => Err(e),
        }
    } else {
        Ok(None)
    })?;
    let mut s = decode_start(&from_rank0(
        ch,
        &start.as_ref().map(encode_start).unwrap_or_default(),
    ));
    let (data, first) = match &start {
        Some(st) => (&text[st.offset..], st.line),
        None => (&text[..], before as usize + 1),
    };
    s.offset = 0;
    let entries = ch.agree(parse_lines(data, first, &s, path))?;
    Ok((entries, s, total_lines))
}

/// Gzip: rank 0 streams the text and hands out rounds of whole lines.
fn read_streamed(ch: &Channel, path: &Path) -> DistResult<(Entries, TextStart, u64)> {
    if ch.rank() == 0 {
        stream_root(ch, path)
    } else {
        stream_leaf(ch, path)
    }
}

/// Round codes rank 0 sends before each round.
const MORE: u64 = 0;
const DONE: u64 = 1;
const FAILED: u64 = 2;

/// One round on every rank: the control numbers `[code, lines so far, first line of
/// each piece (P), start…]` from rank 0, then the pieces; parses this rank's piece and
/// agrees on the outcome.
fn round(
    ch: &Channel,
    path: &Path,
    control: &[u64],
    pieces: &[u8],
    counts: &[u64],
    entries: &mut Option<Entries>,
) -> DistResult<(u64, u64, Option<TextStart>)> {
    let ctl = from_rank0(ch, control);
    let (code, lines) = (ctl[0], ctl[1]);
    if code != MORE {
        return Ok((code, lines, None));
    }
    let p = ch.size();
    let first = ctl[2 + ch.rank()] as usize;
    let start = decode_start(&ctl[2 + p..]);
    let send_counts = if ch.rank() == 0 {
        counts.to_vec()
    } else {
        vec![0; p]
    };
    let (piece, _) = ch.all_to_all(pieces, &send_counts);
    let parsed = ch.agree(parse_lines(&piece, first, &start, path))?;
    match entries {
        Some(e) => e.append(parsed),
        None => *entries = Some(parsed),
    }
    Ok((code, lines, Some(start)))
}

fn stream_leaf(ch: &Channel, path: &Path) -> DistResult<(Entries, TextStart, u64)> {
    let mut entries = None;
    loop {
        let (code, lines, _) = round(ch, path, &[], &[], &[], &mut entries)?;
        match code {
            MORE => {}
            DONE => {
                let start = decode_start(&from_rank0(ch, &[]));
                let order = start.order;
                return Ok((entries.unwrap_or_else(|| Entries::new(order)), start, lines));
            }
            _ => return Err(Failure::Elsewhere),
        }
    }
}

/// Rank 0's side: the text as it streams in, cut into rounds.
struct Root<'a> {
    ch: &'a Channel,
    path: &'a Path,
    /// Text not handed out yet (whole lines and the start of the next).
    pending: Vec<u8>,
    /// Lines handed out so far.
    lines: u64,
    start: Option<TextStart>,
    entries: Option<Entries>,
    /// A failure met in a round (it stops the stream); every rank knows of it.
    failed: Option<Failure>,
}

impl Root<'_> {
    /// Rank 0's own failure, told to the others (they wait for a round).
    fn tell(&self, e: Error) -> Failure {
        let _ = from_rank0(self.ch, &[FAILED, 0]);
        Failure::Here(e)
    }

    /// Hands out the whole lines of `pending` (all of it when `last`) as one round.
    /// Every failure it returns is known to every rank.
    fn flush(&mut self, last: bool) -> DistResult<()> {
        let cut = if last {
            self.pending.len()
        } else {
            memchr::memrchr(b'\n', &self.pending).map_or(0, |p| p + 1)
        };
        let mut from = 0;
        if self.start.is_none() {
            match start_of(&self.pending[..cut], self.path) {
                Ok(Some(s)) => {
                    from = s.offset;
                    self.lines += s.line as u64 - 1;
                    self.start = Some(s);
                }
                // No data line yet: keep the text for the next round.
                Ok(None) if !last => return Ok(()),
                Ok(None) => {
                    let lines = self.lines + count_lines(&self.pending);
                    return Err(self.tell(empty(self.path, lines)));
                }
                Err(e) => return Err(self.tell(e)),
            }
        }
        let p = self.ch.size();
        let block = &self.pending[from..cut];
        // P pieces of whole lines, about equal.
        let mut bounds = vec![0usize];
        for k in 1..p {
            let want = (block.len() * k / p).max(*bounds.last().expect("nonempty"));
            let end = if want == 0 || want >= block.len() {
                want.min(block.len())
            } else {
                memchr::memchr(b'\n', &block[want - 1..]).map_or(block.len(), |e| want + e)
            };
            bounds.push(end);
        }
        bounds.push(block.len());
        let mut control = vec![MORE, 0];
        let mut line = self.lines + 1;
        for k in 0..p {
            control.push(line);
            line += count_lines(&block[bounds[k]..bounds[k + 1]]);
        }
        let start = self.start.as_ref().expect("set above");
        control.extend(encode_start(start));
        let counts: Vec<u64> = bounds.windows(2).map(|w| (w[1] - w[0]) as u64).collect();
        self.lines = line - 1;
        let block = block.to_vec();
        self.pending.drain(..cut);
        round(
            self.ch,
            self.path,
            &control,
            &block,
            &counts,
            &mut self.entries,
        )?;
        Ok(())
    }
}

fn stream_root(ch: &Channel, path: &Path) -> DistResult<(Entries, TextStart, u64)> {
    let mut root = Root {
        ch,
        path,
        pending: Vec::new(),
        lines: 0,
        start: None,
        entries: None,
        failed: None,
    };
    let limit = ROUND_PIECE * ch.size();
    let streamed = crate::tensor::tns::stream_text(path, &mut |piece| {
        root.pending.extend_from_slice(piece);
        if root.pending.len() >= limit
            && let Err(f) = root.flush(false)
        {
            root.failed = Some(f);
            // Ends the stream; the failure is taken from `failed`.
            return Err(Error::InvalidOption(String::new()));
        }
        Ok(())
    });
    match (streamed, root.failed.take()) {
        (_, Some(f)) => Err(f),
        // The stream itself failed (decompression, the text check): the others wait
        // for the next round.
        (Err(e), None) => Err(root.tell(e)),
        (Ok(_), None) => {
            root.flush(true)?;
            let _ = from_rank0(ch, &[DONE, root.lines]);
            let start = root.start.expect("a successful last round found the start");
            let _ = from_rank0(ch, &encode_start(&start));
            let order = start.order;
            let entries = root.entries.unwrap_or_else(|| Entries::new(order));
            Ok((entries, start, root.lines))
        }
    }
}
