//! `sptmc.read`: a tensor from a file, through the command line's binary cache, with
//! what the parse noticed (values read as 0, bytes after the gzip stream) as warnings.

use crate::Tensor;
use crate::errors::settle;
use pyo3::prelude::*;
use sptmc::tensor::cache::{Cache, LoadSource};
use sptmc::tensor::{CooTensor, binary, tns};
use std::panic::catch_unwind;
use std::path::PathBuf;

/// Reads a FROSTT `.tns` file (plain or gzipped) or an `.sptb` binary tensor, as
/// `sptmc` on the command line does: text through the binary cache unless
/// `cache=False`.
#[pyfunction]
#[pyo3(signature = (path, *, cache = true))]
pub fn read(py: Python<'_>, path: PathBuf, cache: bool) -> PyResult<Tensor> {
    let r = py.detach(|| catch_unwind(|| load(&path, cache)));
    let (x, duplicates, note, (underflowed, trailing)) = settle(py, r)?;
    let mut said = Vec::new();
    if let (n @ 1.., first) = underflowed {
        let line = first.map_or(String::new(), |l| format!(" (the first on line {l})"));
        said.push(format!("{n} values below the smallest f64 read as 0{line}"));
    }
    if trailing > 0 {
        said.push(format!(
            "{trailing} bytes after the last gzip member ignored"
        ));
    }
    for what in said {
        let msg = format!("sptmc: {}: {what}", path.display());
        // At the user's line, not at the package's wrapper that called this.
        py.import("sptmc._args")?
            .getattr("warn")?
            .call1((msg, py.get_type::<pyo3::exceptions::PyUserWarning>()))?;
    }
    Ok(Tensor::new(x, duplicates, note))
}

/// The tensor at `path` with its duplicate count, a line saying where it came from,
/// the values the parse read as 0 for being below the smallest f64 (with the first's
/// line), and the bytes ignored after the last gzip member.
#[allow(clippy::type_complexity)]
fn load(
    path: &std::path::Path,
    use_cache: bool,
) -> sptmc::Result<(CooTensor, usize, String, ((usize, Option<usize>), u64))> {
    if let Err(e) = std::fs::metadata(path) {
        let e = match e.kind() {
            std::io::ErrorKind::NotFound => {
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")
            }
            _ => e,
        };
        return Err(sptmc::Error::io(path, e));
    }
    if path.extension().is_some_and(|e| e == "sptb") {
        let (x, report) = binary::read_report(path)?;
        let note = format!("{}: binary, {} nonzeros", path.display(), x.nnz());
        return Ok((x, report.duplicates_summed, note, ((0, None), 0)));
    }
    let cache = if use_cache { Cache::user() } else { None };
    let (x, source) = match &cache {
        Some(c) => c.load(path)?,
        None => {
            let (x, report) = tns::read(path)?;
            let why = if use_cache {
                "no cache folder"
            } else {
                "cache=False"
            };
            let cache = sptmc::tensor::cache::CacheNote::NotWritten(why.into());
            (x, LoadSource::Text { report, cache })
        }
    };
    let (duplicates, how, underflowed, trailing) = match &source {
        LoadSource::Text { report, .. } => (
            report.duplicates_summed,
            "parsed",
            (report.values_underflowed, report.first_underflow_line),
            report.trailing_bytes,
        ),
        // An entry of an older sptmc did not record it.
        LoadSource::Cache {
            duplicates_summed,
            underflowed,
            trailing_bytes,
            ..
        } => (
            duplicates_summed.unwrap_or(0),
            "from the binary cache",
            *underflowed,
            *trailing_bytes,
        ),
    };
    let note = format!("{}: {how}, {} nonzeros", path.display(), x.nnz());
    Ok((x, duplicates, note, (underflowed, trailing)))
}
