//! Reading the tensor a command works on, with a progress bar for long reads.

use indicatif::{ProgressBar, ProgressStyle};
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::tensor::{CooTensor, binary};
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
}

/// Loads `file` (`.sptb` directly; text through the binary cache next to it), or the
/// built-in default tensor when `file` is `None`.
pub fn load(file: Option<&Path>) -> Result<Loaded> {
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
        });
    };
    if !path.exists() {
        return Err(Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        ));
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    if path.extension().is_some_and(|e| e == "sptb") {
        let tensor = binary::read(path)?;
        return Ok(Loaded {
            note: format!("{}: binary, {} nonzeros", path.display(), tensor.nnz()),
            name,
            tensor,
        });
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("reading {msg} {bar:30} {bytes}/{total_bytes} ({eta})")
            .expect("valid template"),
    );
    bar.set_message(name.clone());
    let (tensor, source) = binary::load_with_progress(path, &mut |done, total| {
        if total > 0 {
            bar.set_length(total);
        }
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    let note = match source {
        binary::LoadSource::Text(r) => {
            let mut s = format!(
                "{}: {} lines, {} nonzeros",
                path.display(),
                r.lines,
                tensor.nnz()
            );
            if r.duplicates_summed > 0 {
                s += &format!(", {} duplicate entries summed", r.duplicates_summed);
            }
            s
        }
        binary::LoadSource::Cache(c) => {
            format!(
                "{}: from cache {}, {} nonzeros",
                path.display(),
                c.display(),
                tensor.nnz()
            )
        }
    };
    Ok(Loaded { tensor, name, note })
}

/// Reports precision lost to fp16 storage, and values small enough for the f32
/// kernels to lose, if any, on stderr.
pub fn report_precision(stats: &sptmc::hls::HlsStats) {
    let q = &stats.quant;
    if q.lost_precision() {
        eprintln!(
            "sptmc: warning: fp16 storage: {} values subnormal (reduced precision), {} rounded to zero (lost); worst relative error {:.2e}",
            q.subnormal, q.flushed_to_zero, q.max_rel_err
        );
    }
    if q.kernel_underflow() {
        eprintln!(
            "sptmc: warning: {} values below {:.1e} ({} of them below {:.1e}): the f32 kernels flush results under {:.1e} to zero, so their products with factor entries partly or wholly vanish; multiply the tensor by a power of two to keep them",
            q.kernel_tiny,
            sptmc::hls::values::KERNEL_TINY,
            q.kernel_flushed,
            f32::MIN_POSITIVE,
            f32::MIN_POSITIVE
        );
    }
}
