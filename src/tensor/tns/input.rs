//! Reading a `.tns` file into memory: plain or gzipped, streamed (a pipe or a FIFO is
//! read once), and checked as it comes in ([`TextCheck`]) so that what cannot be
//! tensor text (binary data, an endless stream of it) is refused at once, not after
//! filling memory.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// The two bytes every gzip member starts with.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// Bytes read between progress calls.
const READ_STEP: usize = 4 << 20;
/// The longest line a `.tns` text may have, 1 MiB. A data line of the largest order
/// ([`super::MAX_ORDER`]) with long numbers, or any sensible comment, is far shorter.
pub const MAX_LINE: usize = 1 << 20;

/// Checks that `text` can be tensor text (see `TextCheck`); the error names the line.
pub fn check_text(text: &[u8], origin: &Path) -> Result<()> {
    let mut check = TextCheck::new();
    check.feed(text).map_err(|e| e.at(origin))
}

/// What the text check found wrong, and on which 1-based line.
pub(super) struct TextError {
    line: usize,
    reason: String,
}

impl TextError {
    fn at(self, origin: &Path) -> Error {
        Error::Parse {
            file: origin.to_path_buf(),
            line: self.line,
            reason: self.reason,
        }
    }
}

/// Checks text piece by piece as it streams in: no NUL byte (binary data), no line
/// longer than [`MAX_LINE`], and no carriage return except just before a line feed
/// (CR-only line ends would make the whole file one line of many fields; a CR inside a
/// line is no separator either).
pub(super) struct TextCheck {
    /// The 1-based number of the line being read.
    line: usize,
    /// Its bytes so far.
    len: usize,
    /// Whether the last byte fed was a carriage return.
    cr: bool,
}

impl TextCheck {
    pub(super) fn new() -> Self {
        TextCheck {
            line: 1,
            len: 0,
            cr: false,
        }
    }

    /// Checks the next piece of the text.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> std::result::Result<(), TextError> {
        let fail = |line: usize, reason: String| Err(TextError { line, reason });
        // Binary data first: noise holds stray carriage returns too, but is binary.
        if let Some(p) = memchr::memchr(0, bytes) {
            let line = self.line + memchr::memchr_iter(b'\n', &bytes[..p]).count();
            return fail(
                line,
                "a NUL byte: this is binary data, not .tns text".into(),
            );
        }
        if self.cr && bytes.first().is_some_and(|&b| b != b'\n') {
            return fail(self.line, lone_cr());
        }
        let mut pos = 0;
        for p in memchr::memchr2_iter(b'\n', b'\r', bytes) {
            self.len += p - pos;
            pos = p + 1;
            if self.len > MAX_LINE {
                return fail(self.line, too_long());
            }
            match bytes[p] {
                b'\n' => {
                    self.line += 1;
                    self.len = 0;
                    self.cr = false;
                    continue;
                }
                _ => match bytes.get(p + 1) {
                    Some(b'\n') => {}
                    Some(_) => return fail(self.line, lone_cr()),
                    None => self.cr = true,
                },
            }
            self.len += 1;
            if self.len > MAX_LINE {
                return fail(self.line, too_long());
            }
        }
        self.len += bytes.len() - pos;
        if self.len > MAX_LINE {
            return fail(self.line, too_long());
        }
        Ok(())
    }
}

fn lone_cr() -> String {
    "a carriage return (\\r) that does not end the line: lines end in \\n or \\r\\n (with CR-only line ends, as in old Mac files, the whole file would read as one line); convert them with `tr '\\r' '\\n'`".into()
}

fn too_long() -> String {
    format!(
        "the line is longer than {} MiB: this is not .tns text (a data line of the largest order, {}, is far shorter)",
        MAX_LINE >> 20,
        super::MAX_ORDER
    )
}

/// Opens `path` and reads its first two bytes: the file (positioned after them), the
/// bytes, how many there were, and whether they are the gzip magic. A name ending in
/// `.gz` on a file that is not gzip is an error.
fn open_sniffed(path: &Path) -> Result<(File, [u8; 2], usize, bool)> {
    let io = |e| Error::io(path, e);
    let mut file = File::open(path).map_err(io)?;
    let mut magic = [0u8; 2];
    let got = read_up_to(&mut file, &mut magic).map_err(io)?;
    let is_gzip = got == 2 && magic == GZIP_MAGIC;
    let named_gz = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    if named_gz && !is_gzip {
        return Err(Error::Decompress {
            path: path.to_path_buf(),
            reason: "the name ends in .gz but the file does not start with the gzip magic bytes"
                .into(),
        });
    }
    Ok((file, magic, got, is_gzip))
}

/// Reads the whole file as text, decompressing gzip; also gives the bytes ignored after
/// the last gzip member.
pub(super) fn read_text(path: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<(Vec<u8>, u64)> {
    let io = |e| Error::io(path, e);
    let (mut file, magic, got, is_gzip) = open_sniffed(path)?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let head = &magic[..got];
    if is_gzip {
        // The magic bytes are taken: the member reader puts them back in front.
        // Compressed text usually expands 3–6×.
        let mut text = Vec::with_capacity((total as usize).saturating_mul(4));
        let ignored = read_gzip(path, file, total, progress, &mut |piece| {
            text.extend_from_slice(piece);
            Ok(())
        })?;
        Ok((text, ignored))
    } else {
        let mut text = Vec::with_capacity(total as usize);
        text.extend_from_slice(head);
        let mut check = TextCheck::new();
        // The sniffed bytes are checked with the first read, not on their own: two
        // bytes of binary data can be a carriage return and a letter, which the check
        // would take for a text file's line end before it could see a NUL byte.
        let mut checked = 0;
        loop {
            let n = read_step(&mut file, &mut text).map_err(io)?;
            check.feed(&text[checked..]).map_err(|e| e.at(path))?;
            checked = text.len();
            progress(text.len() as u64, total);
            if n == 0 {
                break;
            }
        }
        Ok((text, 0))
    }
}

/// Reads the file's text piece by piece (at most 4 MiB each, gzip decompressed), checked
/// as it comes in as `read_text` checks it, handing each piece to `sink` and never
/// holding more than one; gives the bytes ignored after the last gzip member. An error
/// of `sink` ends the reading and is returned.
pub fn stream_text(path: &Path, sink: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64> {
    let io = |e| Error::io(path, e);
    let (mut file, magic, got, is_gzip) = open_sniffed(path)?;
    if is_gzip {
        return read_gzip(path, file, 0, &mut |_, _| {}, sink);
    }
    let mut check = TextCheck::new();
    let mut piece = magic[..got].to_vec();
    loop {
        let n = read_step(&mut file, &mut piece).map_err(io)?;
        check.feed(&piece).map_err(|e| e.at(path))?;
        if !piece.is_empty() {
            sink(&piece)?;
        }
        piece.clear();
        if n == 0 {
            return Ok(0);
        }
    }
}

/// Decompresses gzip member after member, as `gzip -d` does, handing the text to
/// `sink` piece by piece: what follows the last member without the gzip magic (zero
/// padding, trailing garbage) is ignored and counted. Gives the count.
fn read_gzip(
    path: &Path,
    raw: impl Read,
    total: u64,
    progress: &mut dyn FnMut(u64, u64),
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<u64> {
    use std::io::BufRead;
    let io = |e| Error::io(path, e);
    let count = std::rc::Rc::new(std::cell::Cell::new(GZIP_MAGIC.len() as u64));
    let counted = CountingReader {
        inner: raw,
        count: count.clone(),
    };
    let mut rest: Box<dyn BufRead> = Box::new(std::io::BufReader::with_capacity(1 << 16, counted));
    let mut piece = Vec::with_capacity(READ_STEP);
    let mut magic = GZIP_MAGIC;
    let mut check = TextCheck::new();
    loop {
        // Each member starts with the two magic bytes already taken from `rest`.
        let mut gz = flate2::bufread::GzDecoder::new(std::io::Cursor::new(magic).chain(rest));
        loop {
            piece.clear();
            let n = read_step(&mut gz, &mut piece).map_err(|e| decompress_error(path, e))?;
            check.feed(&piece).map_err(|e| e.at(path))?;
            if n > 0 {
                sink(&piece)?;
            }
            progress(count.get(), total);
            if n == 0 {
                break;
            }
        }
        rest = gz.into_inner().into_inner().1;
        let got = read_up_to(&mut rest, &mut magic).map_err(io)?;
        if got == 2 && magic == GZIP_MAGIC {
            continue;
        }
        let ignored = got as u64 + std::io::copy(&mut rest, &mut std::io::sink()).map_err(io)?;
        return Ok(ignored);
    }
}

/// Corrupt compressed data is a [`Error::Decompress`]; anything else stays an I/O error.
fn decompress_error(path: &Path, e: std::io::Error) -> Error {
    use std::io::ErrorKind::{InvalidData, InvalidInput, UnexpectedEof};
    match e.kind() {
        InvalidData | InvalidInput | UnexpectedEof => Error::Decompress {
            path: path.to_path_buf(),
            reason: e.to_string(),
        },
        _ => Error::io(path, e),
    }
}

/// Fills as much of `buf` as the reader gives; returns the bytes read.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Appends up to [`READ_STEP`] bytes to `out`; returns how many (0 at the end).
fn read_step(r: &mut impl Read, out: &mut Vec<u8>) -> std::io::Result<usize> {
    let start = out.len();
    out.resize(start + READ_STEP, 0);
    let got = read_up_to(r, &mut out[start..]);
    let n = *got.as_ref().unwrap_or(&0);
    out.truncate(start + n);
    got
}

/// A reader that counts the bytes taken from the one it wraps.
struct CountingReader<R> {
    inner: R,
    count: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}
