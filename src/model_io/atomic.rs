//! Results written whole or not at all.
//!
//! A file is written under a temporary name beside its final one, synced, and renamed
//! into place; a model folder is filled in a temporary sibling folder, synced, and then
//! swapped with the folder it replaces in one step. A full disk, a killed process or any
//! other failure on the way leaves the earlier result (or nothing) under the final name,
//! never a mix of old and new files or a truncated one: what is there is always a
//! complete result. Leftover temporaries of a killed writer are hidden
//! (`.sptmc-tmp-PID-N-NAME`) and removed by the next write of the same name beside
//! them, once their writer is known to be dead: no process has their PID any more, or
//! the process that has it started after the temporary was last written (the PID was
//! reused); a temporary whose writer may still run is left alone.

use crate::error::{Error, Result};
use crate::tensor::binary::{TMP_PREFIX, is_stale_temporary, temporary_name, temporary_pid};
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Writes `path` whole or not at all: `fill` writes into a temporary file beside it,
/// which is synced and renamed over `path` once complete. On any failure the temporary
/// is removed and `path` is left as it was. A symbolic link is followed (its target is
/// replaced); a `path` that exists and is not a regular file (a FIFO, `/dev/stdout`, a
/// terminal) cannot be replaced and is written to directly.
pub fn write_file_atomically(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<()> {
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if let Ok(meta) = fs::metadata(&target)
        && !meta.is_file()
    {
        if meta.is_dir() {
            return Err(Error::InvalidOption(format!(
                "{}: is a folder; give a file name",
                path.display()
            )));
        }
        let file = fs::OpenOptions::new()
            .write(true)
            .open(&target)
            .map_err(|e| Error::io(path, e))?;
        let mut w = BufWriter::new(file);
        return fill(&mut w)
            .and_then(|()| w.flush())
            .map_err(|e| Error::io(path, e));
    }
    remove_stale_temporaries(&target);
    let tmp = temporary_name(&target);
    let result = write_synced(&tmp, fill)
        .and_then(|()| fs::rename(&tmp, &target))
        .and_then(|()| sync_parent(&target))
        .map_err(|e| Error::io(path, e));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// What writes a file's contents.
pub type Fill<'a> = Box<dyn Fn(&mut dyn Write) -> io::Result<()> + 'a>;

/// One file of a model folder: its name and what writes its contents.
pub struct ModelFile<'a> {
    /// The file's name inside the folder (one of [`is_model_file_name`]'s).
    pub name: String,
    /// Writes the contents.
    pub fill: Fill<'a>,
}

/// Writes the model folder `dir` whole or not at all: `files` are written in order
/// into a temporary sibling folder, each synced, then that folder takes `dir`'s place
/// in one step (an existing `dir` is replaced whole, not merged, and must pass
/// [`check_replaceable`]). On failure `dir` is as it was and the temporary is removed.
pub fn write_model_dir(dir: &Path, files: &[ModelFile<'_>]) -> Result<()> {
    let staged = StagedDir::begin(dir)?;
    for f in files {
        staged.write(&f.name, |w| (f.fill)(w))?;
    }
    staged.commit()
}

/// A model folder being written, file by file, whole or not at all (what
/// [`write_model_dir`] does, for a writer that produces the files one after another
/// rather than all from one list): the files go into a temporary sibling folder, each
/// synced, which takes the folder's place on [`StagedDir::commit`]. Dropped without a
/// commit (a failure, a panic), the temporary folder is removed and the folder is as
/// it was.
#[derive(Debug)]
pub struct StagedDir {
    dir: PathBuf,
    tmp: PathBuf,
    committed: bool,
}

impl StagedDir {
    /// Starts writing the model folder `dir` (which must pass [`check_replaceable`]).
    pub fn begin(dir: &Path) -> Result<StagedDir> {
        let dir = final_dir(dir)?;
        check_replaceable(&dir)?;
        remove_stale_temporaries(&dir);
        let tmp = temporary_name(&dir);
        fs::create_dir(&tmp).map_err(|e| Error::io(&dir, e))?;
        Ok(StagedDir {
            dir,
            tmp,
            committed: false,
        })
    }

    /// Writes the file `name` of the folder with `fill`, and syncs it.
    pub fn write(
        &self,
        name: &str,
        fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> Result<()> {
        write_synced(&self.tmp.join(name), fill).map_err(|e| Error::io(&self.dir, e))
    }

    /// Puts the complete folder in place of the earlier one (if any).
    pub fn commit(mut self) -> Result<()> {
        File::open(&self.tmp)
            .and_then(|d| d.sync_all())
            .and_then(|()| replace_dir(&self.tmp, &self.dir))
            .map_err(|e| Error::io(&self.dir, e))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for StagedDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

/// Whether `name` is a file an sptmc model folder holds: `model.json`, `weights.txt`,
/// `core.txt`, `factor-<m>.txt` or (completion) `bias-<m>.txt`.
pub fn is_model_file_name(name: &str) -> bool {
    matches!(name, "model.json" | "weights.txt" | "core.txt")
        || ["factor-", "bias-"].iter().any(|p| {
            name.strip_prefix(p)
                .and_then(|n| n.strip_suffix(".txt"))
                .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// Checks that writing a model into `dir` may replace what is there: nothing, an empty
/// folder, or a folder holding model files alone (an earlier model, complete or not).
/// A file, or a folder holding anything else, is refused: replacing it whole would
/// delete files that are not sptmc's.
pub fn check_replaceable(dir: &Path) -> Result<()> {
    let Ok(meta) = fs::symlink_metadata(dir) else {
        return Ok(());
    };
    let refuse = |why: String| {
        Err(Error::InvalidOption(format!(
            "--out {}: {why}; give a new folder, an empty one or an earlier model's (it is replaced whole)",
            dir.display()
        )))
    };
    if !meta.is_dir() && !dir.is_dir() {
        return refuse("exists and is not a folder".into());
    }
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let ok = entry.file_type().is_ok_and(|t| t.is_file())
            && name.to_str().is_some_and(is_model_file_name);
        if !ok {
            return refuse(format!(
                "holds {:?}, which is not a file of an sptmc model",
                name
            ));
        }
    }
    Ok(())
}

/// The folder to replace: `dir` with its parent resolved (so that a symbolic link to a
/// folder has its target replaced, and `.` or `..` get a name to rename).
fn final_dir(dir: &Path) -> Result<PathBuf> {
    if let Ok(c) = fs::canonicalize(dir) {
        if c.parent().is_none() {
            return Err(Error::InvalidOption(format!(
                "--out {}: the root folder cannot be replaced",
                dir.display()
            )));
        }
        return Ok(c);
    }
    let name = dir
        .file_name()
        .ok_or_else(|| Error::InvalidOption(format!("--out {}: names no folder", dir.display())))?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    let parent = fs::canonicalize(parent).map_err(|e| Error::io(parent, e))?;
    Ok(parent.join(name))
}

/// Puts the complete folder `tmp` in `dir`'s place. An existing `dir` is swapped with
/// `tmp` in one step where the system can (Linux `renameat2` with `RENAME_EXCHANGE`),
/// so that `dir` names a complete model at every moment, then removed; elsewhere it is
/// moved aside first, and put back if the second rename fails.
fn replace_dir(tmp: &Path, dir: &Path) -> io::Result<()> {
    if fs::symlink_metadata(dir).is_err() {
        fs::rename(tmp, dir)?;
        return sync_parent(dir);
    }
    if exchange(tmp, dir).is_ok() {
        // `tmp` now holds the earlier model.
        let _ = fs::remove_dir_all(tmp);
        return sync_parent(dir);
    }
    let old = temporary_name(dir);
    fs::rename(dir, &old)?;
    if let Err(e) = fs::rename(tmp, dir) {
        let _ = fs::rename(&old, dir);
        return Err(e);
    }
    let _ = fs::remove_dir_all(&old);
    sync_parent(dir)
}

/// Swaps the entries `a` and `b` atomically.
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other);
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: both are valid NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Creates `path` (which must not exist), writes it with `fill` and syncs it.
fn write_synced(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 16, File::create_new(path)?);
    fill(&mut w)?;
    let file = w.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()
}

/// Syncs the folder holding `path`, so that a rename into it survives a crash.
fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => File::open(p)?.sync_all(),
        _ => Ok(()),
    }
}

/// Removes the temporaries that killed writers left beside `path` (for `path`'s name).
fn remove_stale_temporaries(path: &Path) {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    let suffix = format!("-{}", name.to_string_lossy());
    for e in entries.flatten() {
        let n = e.file_name();
        let Some(n) = n.to_str() else { continue };
        if n.starts_with(TMP_PREFIX) && n.ends_with(&suffix) && writer_is_dead(parent, n) {
            let p = parent.join(n);
            let _ = if p.is_dir() {
                fs::remove_dir_all(&p)
            } else {
                fs::remove_file(&p)
            };
        }
    }
}

/// Whether the writer of the temporary `name` in `dir` no longer runs: its process is
/// gone ([`is_stale_temporary`]), or its process id now belongs to a process that
/// started after the temporary was last written, so the id was reused.
fn writer_is_dead(dir: &Path, name: &str) -> bool {
    if is_stale_temporary(dir, name) {
        return true;
    }
    let Some(pid) = temporary_pid(name) else {
        return false;
    };
    let written = fs::symlink_metadata(dir.join(name)).and_then(|m| m.modified());
    match (written, process_start(pid)) {
        // The start time is known to about a second (the boot time's resolution).
        (Ok(w), Some(started)) => w + std::time::Duration::from_secs(2) < started,
        _ => false,
    }
}

/// When process `pid` started: `/proc/PID/stat`'s start time (clock ticks after boot)
/// after `/proc/stat`'s boot time; `None` where either cannot be read (not Linux).
fn process_start(pid: u32) -> Option<std::time::SystemTime> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2, the command, is in parentheses and may hold spaces and ')': the fields
    // after the last ')' are 3, 4, ...; the start time is field 22.
    let after = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 = after.split_whitespace().nth(22 - 3)?.parse().ok()?;
    let boot: u64 = fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf only reads a system constant.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&h| h > 0)?;
    let since_boot = std::time::Duration::from_millis(ticks.saturating_mul(1000) / hz);
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(boot) + since_boot)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fill that writes `n` bytes, then fails as a full disk would.
    fn failing_after(n: usize) -> impl Fn(&mut dyn Write) -> io::Result<()> {
        move |w| {
            w.write_all(&vec![b'1'; n])?;
            Err(io::Error::new(io::ErrorKind::StorageFull, "injected"))
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    fn file<'a>(name: &str, fill: impl Fn(&mut dyn Write) -> io::Result<()> + 'a) -> ModelFile<'a> {
        ModelFile {
            name: name.into(),
            fill: Box::new(fill),
        }
    }

    #[test]
    fn a_failed_file_write_leaves_the_earlier_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.txt");
        for n in [0, 10, 200_000] {
            fs::write(&p, "earlier").unwrap();
            let e = write_file_atomically(&p, failing_after(n)).unwrap_err();
            assert!(e.to_string().contains("injected"), "{e}");
            assert_eq!(fs::read_to_string(&p).unwrap(), "earlier");
            assert_eq!(names(dir.path()), ["r.txt"]);
        }
        write_file_atomically(&p, |w| w.write_all(b"new")).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(names(dir.path()), ["r.txt"]);
    }

    #[test]
    fn a_failed_model_write_leaves_the_earlier_folder_or_none() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("m");
        let ok = |w: &mut dyn Write| w.write_all(b"1 2\n");
        write_model_dir(&dir, &[file("factor-0.txt", ok), file("model.json", ok)]).unwrap();
        let earlier = names(&dir);
        // The failure at the first file, in the middle and at the last.
        for k in 0..3 {
            for n in [0, 5, 100_000] {
                let mut files: Vec<ModelFile<'_>> = (0..3)
                    .map(|m| file(&format!("factor-{m}.txt"), ok))
                    .collect();
                files.push(file("model.json", ok));
                files[k + usize::from(k == 2)] = file("weights.txt", failing_after(n));
                for target in [dir.clone(), root.path().join("fresh")] {
                    let e = write_model_dir(&target, &files).unwrap_err();
                    assert!(e.to_string().contains("injected"), "{e}");
                }
                assert_eq!(names(&dir), earlier);
                assert_eq!(names(root.path()), ["m"]);
            }
        }
        // Complete, it replaces the earlier folder whole.
        write_model_dir(&dir, &[file("core.txt", ok), file("model.json", ok)]).unwrap();
        assert_eq!(names(&dir), ["core.txt", "model.json"]);
    }

    #[test]
    fn leftovers_of_a_dead_writer_are_removed_by_the_next_write() {
        let root = tempfile::tempdir().unwrap();
        // No process has id 4294967295 (above Linux's pid_max).
        let dead = root.path().join(format!("{TMP_PREFIX}4294967295-0-m"));
        fs::create_dir(&dead).unwrap();
        fs::write(dead.join("factor-0.txt"), "1").unwrap();
        let dead_file = root.path().join(format!("{TMP_PREFIX}4294967295-3-r.txt"));
        fs::write(&dead_file, "1").unwrap();
        let ok = |w: &mut dyn Write| w.write_all(b"1\n");
        write_model_dir(&root.path().join("m"), &[file("model.json", ok)]).unwrap();
        write_file_atomically(&root.path().join("r.txt"), ok).unwrap();
        assert_eq!(names(root.path()), ["m", "r.txt"]);
    }

    /// The process of id 1 runs; a temporary with its id written before it started is
    /// a dead writer's whose id was reused (removed), one written since may be its own
    /// (kept), as is one of this process written now.
    #[test]
    fn leftovers_whose_process_id_was_reused_are_removed_and_live_ones_kept() {
        if process_start(1).is_none() {
            eprintln!("skipped: no /proc to read process start times from");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(86_400);
        let reused = root.path().join(format!("{TMP_PREFIX}1-0-m"));
        fs::create_dir(&reused).unwrap();
        fs::write(reused.join("factor-0.txt"), "1").unwrap();
        File::open(&reused).unwrap().set_modified(long_ago).unwrap();
        let reused_file = root.path().join(format!("{TMP_PREFIX}1-1-r.txt"));
        fs::write(&reused_file, "1").unwrap();
        File::options()
            .write(true)
            .open(&reused_file)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let live = root.path().join(format!("{TMP_PREFIX}1-2-m"));
        fs::create_dir(&live).unwrap();
        let own = root
            .path()
            .join(format!("{TMP_PREFIX}{}-3-m", std::process::id()));
        fs::create_dir(&own).unwrap();
        let ok = |w: &mut dyn Write| w.write_all(b"1\n");
        write_model_dir(&root.path().join("m"), &[file("model.json", ok)]).unwrap();
        write_file_atomically(&root.path().join("r.txt"), ok).unwrap();
        let left = names(root.path());
        assert!(
            !left
                .iter()
                .any(|n| n.starts_with(&format!("{TMP_PREFIX}1-0-"))),
            "{left:?}"
        );
        assert!(
            !left
                .iter()
                .any(|n| n.starts_with(&format!("{TMP_PREFIX}1-1-"))),
            "{left:?}"
        );
        assert!(live.exists() && own.exists(), "{left:?}");
        assert!(process_start(std::process::id()).unwrap() <= std::time::SystemTime::now());
    }

    #[test]
    fn only_model_folders_may_be_replaced() {
        let root = tempfile::tempdir().unwrap();
        let d = root.path();
        assert!(check_replaceable(&d.join("missing")).is_ok());
        fs::create_dir(d.join("empty")).unwrap();
        assert!(check_replaceable(&d.join("empty")).is_ok());
        fs::write(d.join("a-file"), "x").unwrap();
        assert!(check_replaceable(&d.join("a-file")).is_err());
        for (name, ok) in [
            ("factor-12.txt", true),
            ("core.txt", true),
            ("factor-.txt", false),
            ("factor-1.txt.bak", false),
            ("data.tns", false),
        ] {
            let sub = d.join(format!("m-{name}"));
            fs::create_dir(&sub).unwrap();
            fs::write(sub.join(name), "1").unwrap();
            assert_eq!(check_replaceable(&sub).is_ok(), ok, "{name}");
        }
    }
}
