//! `.tns` text read in parts: where the data starts, and the data lines of any run of
//! whole lines, with the file's own line numbers in errors. The whole-file reader
//! parses through these, and so does a reader that holds only a share of the file
//! (one process of several reading a byte range each, or the pieces of a stream).

use super::{LineError, Shape, parse_chunk, split_chunks};
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::path::Path;

/// Where a text's data begins and what shape it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextStart {
    /// Byte offset of the first data line in the text given.
    pub offset: usize,
    /// Its 1-based line number.
    pub line: usize,
    /// Indices per data line.
    pub order: usize,
    /// The dimensions a header declared, if there was one.
    pub header: Option<Vec<usize>>,
}

/// Finds the header (if any) and the first data line of a text that starts at the
/// file's first byte; `None` when the text holds no data line. Errors name the line.
pub fn start_of(text: &[u8], origin: &Path) -> Result<Option<TextStart>> {
    let s = super::find_start(text).map_err(|(line, reason)| Error::Parse {
        file: origin.to_path_buf(),
        line,
        reason,
    })?;
    Ok(s.map(|s| TextStart {
        offset: s.offset,
        line: s.line,
        order: s.order,
        header: s.header,
    }))
}

/// The entries of some data lines, in file order, before duplicates are summed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Entries {
    /// Per mode, the 0-based indices.
    pub indices: Vec<Vec<u32>>,
    /// The values.
    pub values: Vec<f64>,
    /// Per mode, the largest 0-based index seen (0 when none).
    pub max: Vec<u32>,
    /// Lines parsed (data, comments and blank lines).
    pub lines: usize,
    /// Values written as nonzero but below the smallest f64, read as 0.
    pub underflows: usize,
    /// The 1-based file line of the first of them.
    pub first_underflow_line: Option<usize>,
}

impl Entries {
    /// No entries yet, for a tensor of `order` modes.
    pub fn new(order: usize) -> Self {
        Entries {
            indices: vec![Vec::new(); order],
            values: Vec::new(),
            max: vec![0; order],
            lines: 0,
            underflows: 0,
            first_underflow_line: None,
        }
    }

    /// Appends `other` (the lines that follow these).
    pub fn append(&mut self, other: Entries) {
        for (m, ix) in other.indices.into_iter().enumerate() {
            self.indices[m].extend_from_slice(&ix);
            self.max[m] = self.max[m].max(other.max[m]);
        }
        self.values.extend_from_slice(&other.values);
        self.lines += other.lines;
        self.underflows += other.underflows;
        self.first_underflow_line = self.first_underflow_line.or(other.first_underflow_line);
    }
}

/// Parses `data`, a run of whole lines (any comment or blank lines among them) whose
/// first is line `first_line` (1-based) of the file, as data lines of `start`'s shape;
/// in parallel, the first error in file order reported with its line.
pub fn parse_lines(
    data: &[u8],
    first_line: usize,
    start: &TextStart,
    origin: &Path,
) -> Result<Entries> {
    let shape = Shape {
        order: start.order,
        header: start.header.as_deref(),
        first_data_line: start.line,
    };
    let chunks = split_chunks(data, rayon::current_num_threads());
    let parsed: Vec<std::result::Result<_, LineError>> =
        chunks.par_iter().map(|c| parse_chunk(c, &shape)).collect();
    let mut lines_before = first_line - 1;
    let mut done = Vec::with_capacity(parsed.len());
    for p in parsed {
        match p {
            Ok(c) => {
                let first = c.first_underflow.map(|l| lines_before + l + 1);
                lines_before += c.lines;
                done.push((c, first));
            }
            Err(e) => {
                return Err(Error::Parse {
                    file: origin.to_path_buf(),
                    line: lines_before + e.line + 1,
                    reason: e.reason,
                });
            }
        }
    }
    // Reserved whole, each chunk dropped as soon as it is copied.
    let total: usize = done.iter().map(|(c, _)| c.values.len()).sum();
    let mut out = Entries {
        indices: (0..start.order)
            .map(|_| Vec::with_capacity(total))
            .collect(),
        values: Vec::with_capacity(total),
        max: vec![0; start.order],
        lines: 0,
        underflows: 0,
        first_underflow_line: None,
    };
    for (c, first) in done {
        out.append(Entries {
            indices: c.indices,
            values: c.values,
            max: c.max,
            lines: c.lines,
            underflows: c.underflows,
            first_underflow_line: first,
        });
    }
    Ok(out)
}
