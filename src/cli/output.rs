//! Output paths, checked before any work starts: a run of many iterations must not end
//! by finding that its result cannot be written.

use sptmc::{Error, Result};
use std::path::Path;

/// Checks that a model can be written as the folder `dir`: it is new, empty or an
/// earlier model (replaced whole when the new one is complete; see
/// [`sptmc::model_io::check_replaceable`]), and the folder that holds it (created when
/// missing) takes new entries. `dir` itself is created only by the write.
pub fn check_dir(dir: &Path) -> Result<()> {
    sptmc::model_io::check_replaceable(dir)?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    probe(parent)
}

/// Refuses an output file `out` (given as the option `name`) that is the input file
/// `input`: the result would replace the data it was computed from.
pub fn check_not_input(out: &Path, name: &str, input: Option<&Path>) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let (Some(input), Ok(o)) = (input, std::fs::metadata(out)) else {
        return Ok(());
    };
    match std::fs::metadata(input) {
        Ok(i) if o.is_file() && o.dev() == i.dev() && o.ino() == i.ino() => {
            Err(Error::InvalidOption(format!(
                "{name} {}: is the input file; give another name",
                out.display()
            )))
        }
        _ => Ok(()),
    }
}

/// Checks that `file` (given as the option `name`) can be written: its folder exists
/// and takes new files, and `file` is not a folder (an existing file is replaced).
pub fn check_file(file: &Path, name: &str) -> Result<()> {
    if file.is_dir() {
        return Err(Error::InvalidOption(format!(
            "{name} {}: is a folder; give a file name",
            file.display()
        )));
    }
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(Error::InvalidOption(format!(
            "{name} {}: the folder {} does not exist",
            file.display(),
            parent.display()
        )));
    }
    probe(parent)?;
    if file.exists() {
        // Opened for writing without truncating: the permission check alone.
        std::fs::OpenOptions::new()
            .append(true)
            .open(file)
            .map_err(|e| Error::io(file, e))?;
    }
    Ok(())
}

/// Creates and removes a file in `dir`, to find out whether it takes new files.
fn probe(dir: &Path) -> Result<()> {
    let p = dir.join(format!(".sptmc-probe-{}", std::process::id()));
    std::fs::File::create(&p).map_err(|e| {
        Error::io(
            dir,
            std::io::Error::new(e.kind(), format!("cannot write into this folder: {e}")),
        )
    })?;
    let _ = std::fs::remove_file(&p);
    Ok(())
}
