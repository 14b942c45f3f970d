//! Output paths, checked before any work starts: a run of many iterations must not end
//! by finding that its result cannot be written.

use sptmc::{Error, Result};
use std::path::Path;

/// Checks that `dir` is a folder the model files can be written into: created when
/// missing, refused when it is a file or cannot be written.
pub fn check_dir(dir: &Path) -> Result<()> {
    if std::fs::symlink_metadata(dir).is_ok() && !dir.is_dir() {
        return Err(Error::InvalidOption(format!(
            "--out {}: exists and is not a folder",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    probe(dir)
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
