//! Reading the tensor a command works on, with a progress bar for long reads.

use indicatif::{ProgressBar, ProgressStyle};
use sptmc::tensor::cache::{Cache, CacheNote, LoadSource};
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::tensor::{CooTensor, binary, tns};
use sptmc::{Error, Result};
use std::path::Path;

/// The tensor used when no file is given: seeded, power-law slices like rating data,
/// 2000 × 1500 × 400 with 500,000 nonzeros drawn. Same every run.
pub fn default_spec() -> GenSpec {
    GenSpec {
        dims: vec![2000, 1500, 400],
        nnz: 500_000,
        pattern: Pattern::PowerLaw { alpha: 1.0 },
        seed: 20261122,
    }
}

/// A loaded tensor and a line saying where it came from.
pub struct Loaded {
    pub tensor: CooTensor,
    pub name: String,
    pub note: String,
    /// Entries of the file merged into an earlier one with the same coordinates (`None`
    /// where unknown: a cache entry that did not record it).
    pub duplicates_summed: Option<usize>,
}

/// Loads `file` (`.sptb` directly; text through the binary cache unless `use_cache` is
/// false), or the built-in default tensor when `file` is `None`.
pub fn load(file: Option<&Path>, use_cache: bool) -> Result<Loaded> {
    let Some(path) = file else {
        let spec = default_spec();
        let tensor = generate(&spec)?;
        return Ok(Loaded {
            note: format!(
                "no file given: built-in generated tensor {:?}, power-law, seed {}, {} nonzeros",
                spec.dims,
                spec.seed,
                tensor.nnz()
            ),
            name: "built-in".into(),
            tensor,
            duplicates_summed: Some(0),
        });
    };
    // The system's own reason (a symlink loop, no permission, ...), except for the
    // plain case of a missing file.
    if let Err(e) = std::fs::metadata(path) {
        let e = match e.kind() {
            std::io::ErrorKind::NotFound => {
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")
            }
            _ => e,
        };
        return Err(Error::io(path, e));
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    if path.extension().is_some_and(|e| e == "sptb") {
        let (tensor, report) = binary::read_report(path)?;
        let mut note = format!("{}: binary, {} nonzeros", path.display(), tensor.nnz());
        if report.duplicates_summed > 0 {
            note += &format!(", {} duplicate entries summed", report.duplicates_summed);
        }
        return Ok(Loaded {
            note,
            name,
            tensor,
            duplicates_summed: Some(report.duplicates_summed),
        });
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("reading {msg} {bar:30} {bytes}/{total_bytes} ({eta})")
            .expect("valid template"),
    );
    bar.set_message(name.clone());
    let mut progress = |done, total| {
        if total > 0 {
            bar.set_length(total);
        }
        bar.set_position(done);
    };
    let cache = if use_cache { Cache::user() } else { None };
    let (tensor, source) = match &cache {
        Some(c) => c.load_with_progress(path, &mut progress)?,
        None => {
            let (x, report) = tns::read_with_progress(path, &mut progress)?;
            let why = if use_cache {
                "no cache folder: neither XDG_CACHE_HOME nor HOME is set"
            } else {
                "--no-cache"
            };
            let cache = CacheNote::NotWritten(why.into());
            (x, LoadSource::Text { report, cache })
        }
    };
    bar.finish_and_clear();
    let duplicates_summed = match &source {
        LoadSource::Text { report, .. } => Some(report.duplicates_summed),
        LoadSource::Cache {
            duplicates_summed, ..
        } => *duplicates_summed,
    };
    let note = match source {
        LoadSource::Text { report: r, cache } => {
            let mut s = format!(
                "{}: {} lines, {} nonzeros",
                path.display(),
                r.lines,
                tensor.nnz()
            );
            if r.duplicates_summed > 0 {
                s += &format!(", {} duplicate entries summed", r.duplicates_summed);
            }
            s += &trailing_note(r.trailing_bytes);
            s += &underflow_note(r.values_underflowed, r.first_underflow_line);
            match cache {
                CacheNote::Written(p) => s += &format!("; cached in {}", p.display()),
                CacheNote::Rebuilt { path, why } => {
                    s += &format!("; cache {} rebuilt ({why})", path.display())
                }
                CacheNote::NotWritten(why) => s += &format!("; not cached ({why})"),
            }
            s
        }
        LoadSource::Cache {
            path: c,
            duplicates_summed,
            underflowed,
            trailing_bytes,
        } => {
            let mut s = format!(
                "{}: from cache {}, {} nonzeros",
                path.display(),
                c.display(),
                tensor.nnz()
            );
            if let Some(d) = duplicates_summed.filter(|&d| d > 0) {
                s += &format!(" ({d} duplicate entries of the file summed)");
            }
            s += &trailing_note(trailing_bytes);
            s += &underflow_note(underflowed.0, underflowed.1);
            s
        }
    };
    Ok(Loaded {
        tensor,
        name,
        note,
        duplicates_summed,
    })
}

/// The load note's words for `n` values below the smallest f64 read as 0, the first on
/// line `first` (nothing for none).
fn underflow_note(n: usize, first: Option<usize>) -> String {
    match (n, first) {
        (0, _) => String::new(),
        (n, Some(l)) => {
            format!(", {n} values below the smallest f64 read as 0 (the first on line {l})")
        }
        (n, None) => format!(", {n} values below the smallest f64 read as 0"),
    }
}

/// The load note's words for `n` bytes ignored after the last gzip member.
fn trailing_note(n: u64) -> String {
    match n {
        0 => String::new(),
        n => format!(", {n} bytes after the last gzip member ignored"),
    }
}

/// Reports precision lost to fp16 storage, and values small enough for the f32
/// kernels to lose, if any, on stderr.
pub fn report_precision(stats: &sptmc::hls::HlsStats) {
    for w in stats.value_report().warnings() {
        eprintln!("sptmc: warning: {w}");
    }
}
