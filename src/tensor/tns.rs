//! FROSTT `.tns` text: one nonzero per line, 1-based indices then the value, fields
//! separated by spaces or tabs.
//!
//! Reading accepts:
//! - plain or gzipped files (gzip when the file starts with the gzip magic bytes; a name
//!   ending in `.gz` whose content lacks them is an error), several gzip members too,
//!   and bytes after the last member ignored (and counted) as `gzip -d` does;
//! - `#` comment lines and blank lines anywhere, a `#` comment after the value of a
//!   data line (or after a header line), CRLF line ends;
//! - an optional header some tools write: a line holding the order `N` alone, then a
//!   line of `N` dimensions. The declared dimensions are then enforced; without a
//!   header every mode's length is its largest index.
//!
//! The order is fixed by the first data line (or the header); every data line must
//! then have `order + 1` fields. Repeated coordinates are summed and counted in the
//! [`ReadReport`]. Every malformed input is an [`Error::Parse`] naming the file, the
//! 1-based line and what is wrong; nothing panics on any input.
//!
//! What cannot be tensor text is refused with the line where it shows, as the file
//! streams in (`input`): a NUL byte (binary data, `/dev/urandom`), a line longer than
//! [`MAX_LINE`], a carriage return that does not end a line (CR-only line ends would
//! read as one line of many fields); and an order beyond [`MAX_ORDER`].
//!
//! The text is parsed as bytes (no per-line allocation), in chunks split at line ends
//! and parsed in parallel; line numbers in errors stay exact. Writing is in `output`.

mod input;
mod output;
pub mod part;

pub use input::{MAX_LINE, check_text, stream_text};
pub use output::{write, write_declaring, write_to};

use super::CooTensor;
use crate::error::{Error, Result};
use std::path::Path;

/// The largest 1-based index a mode can hold (0-based indices are `u32`).
const MAX_INDEX: u64 = 1 << 32;
/// The largest order a text tensor may have: far beyond any real tensor's (which stay
/// under a few dozen modes), far below what one line of millions of fields would claim.
pub const MAX_ORDER: usize = 1024;
/// Smallest chunk handed to one parallel parser.
const MIN_CHUNK: usize = 256 << 10;

/// What reading a `.tns` file found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReadReport {
    /// Lines in the text, counting comments, blank lines and the header.
    pub lines: usize,
    /// Data lines read (entries before duplicates were summed).
    pub entries: usize,
    /// Entries merged into an earlier entry with the same coordinates (their values
    /// were added); the tensor holds `entries − duplicates_summed` nonzeros.
    pub duplicates_summed: usize,
    /// The dimensions the header declared, if the file had a header.
    pub header: Option<Vec<usize>>,
    /// Bytes of text parsed (after decompression).
    pub bytes: u64,
    /// Bytes after the last gzip member that were not another member (zero padding or
    /// trailing garbage, which `gzip -d` ignores too).
    pub trailing_bytes: u64,
    /// Values written as nonzero but below the smallest f64 (e.g. `1e-400`), read as 0.
    pub values_underflowed: usize,
    /// The 1-based line of the first of them.
    pub first_underflow_line: Option<usize>,
}

/// Reads a `.tns` file (plain or gzipped).
pub fn read(path: &Path) -> Result<(CooTensor, ReadReport)> {
    read_with_progress(path, &mut |_, _| {})
}

/// Reads a `.tns` file (plain or gzipped), calling `progress(done, total)` as the file
/// is read: bytes of the file consumed so far (compressed bytes for gzip) and the
/// file's size (0 if unknown).
pub fn read_with_progress(
    path: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(CooTensor, ReadReport)> {
    let (text, trailing_bytes) = input::read_text(path, progress)?;
    // `read_text` has checked the text as it came in.
    let (x, report) = parse_checked(&text, path)?;
    Ok((
        x,
        ReadReport {
            trailing_bytes,
            ..report
        },
    ))
}

/// Parses `.tns` text held in memory; `origin` names the file in errors.
pub fn parse(text: &[u8], origin: &Path) -> Result<(CooTensor, ReadReport)> {
    check_text(text, origin)?;
    parse_checked(text, origin)
}

/// [`parse`] of a text [`check_text`] has passed.
fn parse_checked(text: &[u8], origin: &Path) -> Result<(CooTensor, ReadReport)> {
    let err = |line: usize, reason: String| Error::Parse {
        file: origin.to_path_buf(),
        line,
        reason,
    };
    let total_lines = count_lines(text);
    let start = find_start(text).map_err(|(l, r)| err(l, r))?;
    let Some(start) = start else {
        return Err(err(
            total_lines.max(1),
            "the file holds no data lines (empty tensor)".into(),
        ));
    };
    let data = &text[start.offset..];
    let start = part::TextStart {
        offset: start.offset,
        line: start.line,
        order: start.order,
        header: start.header,
    };
    let parsed = part::parse_lines(data, start.line, &start, origin)?;
    let entries = parsed.values.len();
    if entries == 0 {
        return Err(err(
            total_lines.max(1),
            "the file holds no data lines (empty tensor)".into(),
        ));
    }
    let part::Entries {
        indices,
        values,
        max,
        underflows,
        first_underflow_line,
        ..
    } = parsed;
    let dims: Vec<usize> = match &start.header {
        Some(h) => h.clone(),
        None => max.iter().map(|&m| m as usize + 1).collect(),
    };
    let mut x = CooTensor::new(dims, indices, values)?;
    let duplicates_summed = x.sum_duplicates_finite(1).map_err(|e| match e {
        Error::NonFinite(why) => Error::NonFinite(format!("{}: {why}", origin.display())),
        e => e,
    })?;
    let report = ReadReport {
        lines: total_lines,
        entries,
        duplicates_summed,
        header: start.header,
        bytes: text.len() as u64,
        trailing_bytes: 0,
        values_underflowed: underflows,
        first_underflow_line,
    };
    Ok((x, report))
}

/// Lines in `text`: line ends, plus a last line without one.
fn count_lines(text: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', text).count() + usize::from(text.last().is_some_and(|&b| b != b'\n'))
}

/// Where the data begins and what shape it has.
struct Start {
    /// Byte offset of the first data line.
    offset: usize,
    /// Its 1-based line number.
    line: usize,
    /// Indices per data line.
    order: usize,
    /// Declared dimensions, with a header.
    header: Option<Vec<usize>>,
}

/// What every data line must agree with.
struct Shape<'a> {
    order: usize,
    header: Option<&'a [usize]>,
    first_data_line: usize,
}

/// A failure at a 0-based line of a chunk.
struct LineError {
    line: usize,
    reason: String,
}

/// The lines of `text` from byte `from`: `(1-based number, offset, content)`, the
/// content without its line end.
fn lines_from(text: &[u8], from: usize) -> impl Iterator<Item = (usize, usize, &[u8])> {
    let mut pos = from;
    let mut number = 0;
    std::iter::from_fn(move || {
        if pos >= text.len() {
            return None;
        }
        let end = memchr::memchr(b'\n', &text[pos..]).map_or(text.len(), |e| pos + e);
        let item = (pos, &text[pos..end]);
        pos = end + 1;
        number += 1;
        Some((number, item.0, item.1))
    })
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\x0b' | b'\x0c')
}

/// The whitespace-separated fields of a line.
fn fields(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| is_space(b)).filter(|f| !f.is_empty())
}

/// The line up to its first `#`: what follows is a comment (a `#` cannot be part of an
/// index or a number).
fn strip_comment(line: &[u8]) -> &[u8] {
    memchr::memchr(b'#', line).map_or(line, |p| &line[..p])
}

/// Whether a line holds nothing to parse (blank or a `#` comment).
fn is_skipped(line: &[u8]) -> bool {
    match line.iter().find(|&&b| !is_space(b)) {
        None => true,
        Some(&b) => b == b'#',
    }
}

/// A field as it appears in a message: quoted, escaped, cut at 40 bytes.
fn show(field: &[u8]) -> String {
    let cut = &field[..field.len().min(40)];
    let more = if field.len() > 40 { "…" } else { "" };
    format!("{:?}{more}", String::from_utf8_lossy(cut))
}

/// A 1-based index field: digits only, `1..=2^32` (what is wrong otherwise).
fn parse_index(field: &[u8], what: &str) -> std::result::Result<u64, String> {
    if field.is_empty() || !field.iter().all(u8::is_ascii_digit) {
        return Err(format!("{what} is not a positive integer: {}", show(field)));
    }
    let mut v: u64 = 0;
    for &d in field {
        v = v * 10 + (d - b'0') as u64;
        if v > MAX_INDEX {
            return Err(format!(
                "{what} {} exceeds 2^32, the largest supported",
                show(field)
            ));
        }
    }
    Ok(v)
}

/// Finds the header (if any) and the first data line. `Ok(None)`: no data line.
fn find_start(text: &[u8]) -> std::result::Result<Option<Start>, (usize, String)> {
    // A UTF-8 byte order mark (some editors on Windows write one) opens line 1.
    let bom = if text.starts_with(b"\xEF\xBB\xBF") {
        3
    } else {
        0
    };
    let mut content = lines_from(text, bom).filter(|(_, _, l)| !is_skipped(l));
    let Some((n1, off1, l1)) = content.next() else {
        return Ok(None);
    };
    let f1: Vec<&[u8]> = fields(strip_comment(l1)).collect();
    if f1.len() > MAX_ORDER + 1 {
        return Err((
            n1,
            format!(
                "{} fields: an order of {} is far beyond any real tensor's (at most {MAX_ORDER})",
                f1.len(),
                f1.len() - 1
            ),
        ));
    }
    if f1.len() >= 2 {
        return Ok(Some(Start {
            offset: off1,
            line: n1,
            order: f1.len() - 1,
            header: None,
        }));
    }
    // One field: the order line of a header, or nothing usable.
    if !f1[0].iter().all(u8::is_ascii_digit) {
        return Err((
            n1,
            format!(
                "expected at least 2 fields (indices then a value) or a header line with the order, found the single field {}",
                show(f1[0])
            ),
        ));
    }
    let order = parse_index(f1[0], "the order in the header")
        .map_err(|r| (n1, r))
        .and_then(|o| {
            if o == 0 {
                Err((n1, "the header declares order 0".to_string()))
            } else if o > MAX_ORDER as u64 {
                Err((
                    n1,
                    format!(
                        "the header declares order {o}, far beyond any real tensor's (at most {MAX_ORDER})"
                    ),
                ))
            } else {
                Ok(o)
            }
        })? as usize;
    let Some((n2, off2, l2)) = content.next() else {
        return Err((
            count_lines(text),
            format!(
                "the header declares order {order} but the file ends before the line of {order} dimensions"
            ),
        ));
    };
    let f2: Vec<&[u8]> = fields(strip_comment(l2)).collect();
    if f2.len() != order {
        return Err((
            n2,
            format!(
                "the header declares order {order} but the dimensions line has {} fields",
                f2.len()
            ),
        ));
    }
    let mut dims = Vec::with_capacity(order);
    for (m, f) in f2.iter().enumerate() {
        let d = parse_index(f, &format!("header dimension of mode {m}")).map_err(|r| (n2, r))?;
        if d == 0 {
            return Err((n2, format!("header dimension of mode {m} is 0")));
        }
        dims.push(d as usize);
    }
    let offset = (off2 + l2.len() + 1).min(text.len());
    Ok(Some(Start {
        offset,
        line: n2 + 1,
        order,
        header: Some(dims),
    }))
}

/// Splits `data` into about `4 × threads` pieces, each ending just after a line end
/// (the last at the end of the data).
fn split_chunks(data: &[u8], threads: usize) -> Vec<&[u8]> {
    let target = (data.len() / (4 * threads.max(1))).max(MIN_CHUNK);
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let want = pos + target;
        let end = if want >= data.len() {
            data.len()
        } else {
            memchr::memchr(b'\n', &data[want..]).map_or(data.len(), |e| want + e + 1)
        };
        out.push(&data[pos..end]);
        pos = end;
    }
    out
}

/// Entries parsed from one chunk.
struct Chunk {
    indices: Vec<Vec<u32>>,
    values: Vec<f64>,
    /// Largest 0-based index per mode.
    max: Vec<u32>,
    /// Lines in the chunk.
    lines: usize,
    /// Values whose text is not zero but below the smallest f64, read as 0.
    underflows: usize,
    /// The 0-based line of the first of them.
    first_underflow: Option<usize>,
}

/// Parses the data lines of one chunk. The fast path handles well-formed lines; any
/// surprise sends the line to [`diagnose`], which names what is wrong.
fn parse_chunk(buf: &[u8], shape: &Shape) -> std::result::Result<Chunk, LineError> {
    let order = shape.order;
    let guess = buf.len() / (4 * order + 4);
    let mut indices: Vec<Vec<u32>> = (0..order).map(|_| Vec::with_capacity(guess)).collect();
    let mut values = Vec::with_capacity(guess);
    let mut max = vec![0u32; order];
    let limits: Vec<u64> = match shape.header {
        Some(h) => h.iter().map(|&d| d as u64).collect(),
        None => vec![MAX_INDEX; order],
    };
    let (mut underflows, mut first_underflow) = (0, None);
    let n = buf.len();
    let mut pos = 0;
    let mut line = 0;
    while pos < n {
        let line_start = pos;
        let line_end = memchr::memchr(b'\n', &buf[pos..]).map_or(n, |e| pos + e);
        let ok = 'line: {
            while pos < line_end && is_space(buf[pos]) {
                pos += 1;
            }
            if pos == line_end || buf[pos] == b'#' {
                break 'line true;
            }
            for (m, limit) in limits.iter().enumerate() {
                let s = pos;
                let mut v: u64 = 0;
                while pos < line_end && buf[pos].is_ascii_digit() && v <= MAX_INDEX {
                    v = v * 10 + (buf[pos] - b'0') as u64;
                    pos += 1;
                }
                if pos == s || pos == line_end || !is_space(buf[pos]) || v == 0 || v > *limit {
                    break 'line false;
                }
                let i = (v - 1) as u32;
                indices[m].push(i);
                max[m] = max[m].max(i);
                while pos < line_end && is_space(buf[pos]) {
                    pos += 1;
                }
            }
            let s = pos;
            while pos < line_end && !is_space(buf[pos]) && buf[pos] != b'#' {
                pos += 1;
            }
            let text = &buf[s..pos];
            let value = std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse::<f64>().ok());
            while pos < line_end && is_space(buf[pos]) {
                pos += 1;
            }
            // A `#` after the value starts a comment.
            match value {
                Some(v) if v.is_finite() && (pos == line_end || buf[pos] == b'#') => {
                    // Compared by bits: a worker may run this where subnormals
                    // read as zero (a kernel's flush mode, held while it waits).
                    if v.abs().to_bits() == 0 && underflows_to_zero(text) {
                        underflows += 1;
                        first_underflow.get_or_insert(line);
                    }
                    values.push(v);
                    true
                }
                _ => false,
            }
        };
        if !ok {
            return Err(LineError {
                line,
                reason: diagnose(&buf[line_start..line_end], shape, &limits),
            });
        }
        pos = line_end + 1;
        line += 1;
    }
    Ok(Chunk {
        indices,
        values,
        max,
        lines: line,
        underflows,
        first_underflow,
    })
}

/// Whether a number's text that parsed as 0 has a nonzero digit before its exponent:
/// a value below the smallest f64 (such as `1e-400`), not a written zero.
fn underflows_to_zero(text: &[u8]) -> bool {
    (text.iter())
        .take_while(|&&b| !matches!(b, b'e' | b'E'))
        .any(|b| (b'1'..=b'9').contains(b))
}

/// Says precisely what is wrong with a data line the fast path rejected.
fn diagnose(line: &[u8], shape: &Shape, limits: &[u64]) -> String {
    let order = shape.order;
    let data = strip_comment(line);
    let f: Vec<&[u8]> = fields(data).collect();
    if f.len() != order + 1 {
        let why = match shape.header {
            Some(_) => "the header declares".to_string(),
            None => format!("as on the first data line, line {}", shape.first_data_line),
        };
        let comment = if data.len() < line.len() {
            " before the `#` that starts a comment"
        } else {
            ""
        };
        return format!(
            "wrong number of fields: expected {} ({order} indices and a value; order {order}, {why}), found {}{comment}",
            order + 1,
            f.len()
        );
    }
    for m in 0..order {
        let what = format!("index of mode {m}");
        match parse_index(f[m], &what) {
            Err(r) => return r,
            Ok(0) => return format!("index of mode {m} is 0, but indices are 1-based"),
            Ok(v) if v > limits[m] => {
                return format!(
                    "index {v} of mode {m} is beyond the declared dimension {}",
                    limits[m]
                );
            }
            Ok(_) => {}
        }
    }
    let v = f[order];
    match std::str::from_utf8(v)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
    {
        None => format!("value is not a number: {}", show(v)),
        Some(x) if x.is_nan() => format!("value is NaN: {}", show(v)),
        Some(x) if x.is_infinite() => format!("value is infinite: {}", show(v)),
        // The fast path accepts every line this accepts; kept as a safe answer.
        Some(_) => "malformed line".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value written as nonzero but below the smallest f64 reads as 0 and is
    /// counted with its line; written zeros (`0`, `0.0e-400`, `-0`) are not.
    #[test]
    fn values_below_the_smallest_f64_are_counted() {
        let text = b"1 1 1.0\n2 2 1e-400\n3 3 0.0e-400\n# c\n4 4 -2.5E-999\n5 5 -0\n";
        let (x, r) = parse(text, Path::new("t.tns")).unwrap();
        assert_eq!(x.nnz(), 5);
        assert_eq!((r.values_underflowed, r.first_underflow_line), (2, Some(2)));
        let (_, r) = parse(b"1 1 1.0\n2 2 0\n", Path::new("t.tns")).unwrap();
        assert_eq!((r.values_underflowed, r.first_underflow_line), (0, None));
        // Across chunks, the first in file order with the file's line number.
        let mut big = Vec::new();
        for k in 0..300_000 {
            let v = if k == 250_000 || k == 299_999 {
                "3e-310"
            } else {
                "1"
            };
            big.extend_from_slice(format!("{} 1 {v}\n", k + 1).as_bytes());
        }
        // 3e-310 is a subnormal f64, not 0: not counted.
        let (_, r) = parse(&big, Path::new("t.tns")).unwrap();
        assert_eq!(r.values_underflowed, 0);
        let big = String::from_utf8(big).unwrap().replace("3e-310", "3e-330");
        let (_, r) = parse(big.as_bytes(), Path::new("t.tns")).unwrap();
        assert_eq!(
            (r.values_underflowed, r.first_underflow_line),
            (2, Some(250_001))
        );
    }

    /// A UTF-8 byte order mark before the first line is skipped, with or without a
    /// header; anywhere else it is an error naming the line.
    #[test]
    fn a_byte_order_mark_opens_the_file() {
        let (x, _) = parse(b"\xEF\xBB\xBF1 2 3.0\n2 1 4.0\n", Path::new("t.tns")).unwrap();
        assert_eq!((x.dims(), x.nnz()), (&[2usize, 2][..], 2));
        let (x, r) = parse(b"\xEF\xBB\xBF2\n3 4\n1 2 3.0\n", Path::new("t.tns")).unwrap();
        assert_eq!((x.dims(), r.header), (&[3usize, 4][..], Some(vec![3, 4])));
        let e = parse(b"1 2 3.0\n\xEF\xBB\xBF2 1 4.0\n", Path::new("t.tns")).unwrap_err();
        assert!(matches!(e, Error::Parse { line: 2, .. }), "{e}");
    }

    #[test]
    fn chunks_cover_the_data_and_end_at_line_ends() {
        let mut data = Vec::new();
        for k in 0..200_000 {
            data.extend_from_slice(format!("{} 2 3 4.5\n", k + 1).as_bytes());
        }
        data.extend_from_slice(b"7 7 7 1");
        let chunks = split_chunks(&data, 4);
        assert!(chunks.len() > 1);
        assert_eq!(chunks.iter().map(|c| c.len()).sum::<usize>(), data.len());
        for c in &chunks[..chunks.len() - 1] {
            assert_eq!(c.last(), Some(&b'\n'));
        }
    }
}
