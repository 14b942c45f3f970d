//! Writing `.tns` text: one entry a line, values in their shortest exact form.

use crate::error::{Error, Result};
use crate::tensor::CooTensor;
use rayon::prelude::*;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// Entries formatted per parallel batch when writing.
const WRITE_BATCH: usize = 1 << 16;

/// Writes `x` as `.tns` text to `path`, gzipped when the name ends in `.gz`: no header,
/// as SPLATT, pyttb's readers and most tools expect (a mode longer than its largest
/// index reads back shorter; [`write_declaring`] keeps it).
pub fn write(path: &Path, x: &CooTensor) -> Result<()> {
    write_file(path, x, false).map(|_| ())
}

/// [`write()`], but where a mode is longer than its largest index (a reader would take
/// the index for the length), the text starts with the header that declares the
/// lengths: the order alone on a line, then the lengths. Returns whether it did (most
/// tools other than sptmc do not read headers).
pub fn write_declaring(path: &Path, x: &CooTensor) -> Result<bool> {
    write_file(path, x, true)
}

fn write_file(path: &Path, x: &CooTensor, declare: bool) -> Result<bool> {
    let io = |e| Error::io(path, e);
    let header = declare && !lengths_shown(x);
    let file = File::create(path).map_err(io)?;
    let gz = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    let fill = |w: &mut dyn Write| -> Result<()> {
        if header {
            let dims: Vec<String> = x.dims().iter().map(|d| d.to_string()).collect();
            writeln!(w, "{}\n{}", x.order(), dims.join(" ")).map_err(io)?;
        }
        write_to(w, x).map_err(|e| rename_io(e, path))
    };
    if gz {
        let mut enc = flate2::write::GzEncoder::new(
            BufWriter::with_capacity(1 << 20, file),
            flate2::Compression::default(),
        );
        fill(&mut enc)?;
        let mut inner = enc.finish().map_err(io)?;
        inner.flush().map_err(io)?;
    } else {
        let mut w = BufWriter::with_capacity(1 << 20, file);
        fill(&mut w)?;
        w.flush().map_err(io)?;
    }
    Ok(header)
}

/// Whether every mode's length is its largest index plus one (what a reader infers).
fn lengths_shown(x: &CooTensor) -> bool {
    (0..x.order()).all(|m| {
        let max = x.indices(m).par_iter().max().map_or(0, |&i| i as usize + 1);
        max == x.dims()[m]
    })
}

/// Puts `path` on an I/O error raised without one.
fn rename_io(e: Error, path: &Path) -> Error {
    match e {
        Error::Io { source, .. } => Error::io(path, source),
        e => e,
    }
}

/// Writes `x` as `.tns` text (no header, 1-based indices, one entry per line) to `w`.
/// Values are written in their shortest form that reads back to the same `f64`.
pub fn write_to(mut w: impl Write, x: &CooTensor) -> Result<()> {
    let io = |e| Error::io("<writer>", e);
    let nnz = x.nnz();
    let mut start = 0;
    while start < nnz {
        // Format a few batches in parallel, then write them in order.
        let end = (start + WRITE_BATCH * 4 * rayon::current_num_threads()).min(nnz);
        let texts: Vec<Vec<u8>> = (start..end)
            .into_par_iter()
            .step_by(WRITE_BATCH)
            .map(|s| format_entries(x, s, (s + WRITE_BATCH).min(end)))
            .collect();
        for t in texts {
            w.write_all(&t).map_err(io)?;
        }
        start = end;
    }
    w.flush().map_err(io)
}

/// The text of entries `s..e`.
fn format_entries(x: &CooTensor, s: usize, e: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity((e - s) * (8 * x.order() + 12));
    let mut ints = itoa::Buffer::new();
    for k in s..e {
        for m in 0..x.order() {
            out.extend_from_slice(ints.format(x.indices(m)[k] as u64 + 1).as_bytes());
            out.push(b' ');
        }
        push_value(&mut out, x.values()[k]);
        out.push(b'\n');
    }
    out
}

/// Appends the shortest text that parses back to `v` exactly: plain digits for
/// ordinary magnitudes, exponent notation for very large or small ones.
fn push_value(out: &mut Vec<u8>, v: f64) {
    let a = v.abs();
    if a == 0.0 || (1e-5..1e16).contains(&a) {
        // Display gives the shortest round-trip digits, without a trailing ".0".
        let _ = write!(out, "{v}");
    } else {
        // Debug switches to exponent notation at these magnitudes.
        let _ = write!(out, "{v:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_print_shortest_and_read_back() {
        for v in [
            0.0,
            -0.0,
            1.0,
            3.0,
            0.1,
            1.0 / 3.0,
            1e-300,
            5e-324,
            1e300,
            -2.5e17,
            12345.678,
            f64::MAX,
            f64::MIN_POSITIVE,
        ] {
            let mut out = Vec::new();
            push_value(&mut out, v);
            let s = std::str::from_utf8(&out).unwrap();
            assert_eq!(s.parse::<f64>().unwrap().to_bits(), v.to_bits(), "{s}");
            assert!(s.len() <= 24, "{s} is not short");
        }
        let mut out = Vec::new();
        push_value(&mut out, 4.0);
        assert_eq!(out, b"4");
    }

    /// Declaring, a mode longer than its largest index gets the header, and reads back
    /// with its length; a tensor whose lengths are its indices' has none, and the
    /// plain writer never writes one.
    #[test]
    fn declared_lengths_survive_a_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let x = CooTensor::new(
            vec![5, 5, 5],
            vec![vec![0, 1], vec![0, 2], vec![0, 0]],
            vec![1.0, 2.0],
        )
        .unwrap();
        let p = dir.path().join("h.tns");
        assert!(write_declaring(&p, &x).unwrap());
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.starts_with("3\n5 5 5\n"), "{text}");
        let (back, report) = crate::tensor::tns::read(&p).unwrap();
        assert_eq!(back.dims(), &[5, 5, 5]);
        assert_eq!(report.header.as_deref(), Some(&[5, 5, 5][..]));
        assert_eq!(back.values(), x.values());

        let tight = CooTensor::new(
            vec![2, 3, 1],
            vec![vec![0, 1], vec![0, 2], vec![0, 0]],
            vec![1.0, 2.0],
        )
        .unwrap();
        assert!(!write_declaring(&p, &tight).unwrap());
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.starts_with("1 1 1 1\n"), "{text}");
        // The plain writer never declares: what other tools read.
        write(&p, &x).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.starts_with("1 1 1 1\n"), "{text}");
    }
}
