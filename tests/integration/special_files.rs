//! Inputs that are not plain regular files: a FIFO, `/dev/stdin` from a pipe, a
//! process substitution `<(…)`, a symbolic link to a FIFO, a file whose name is not
//! valid UTF-8, a character device. Each is read once, streamed, and not cached (the
//! run says so); with or without the cache the result is the same as from a regular
//! file, and nothing hangs or panics.

use crate::common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const TEXT: &str = "# a small tensor\n1 1 1 1.5\n2 3 1 2\n3 2 4 -1\n1 2 3 0.25\n";

fn info(dir: &Path, file: &OsStr, no_cache: bool) -> Command {
    let mut c = common::sptmc_command(dir);
    c.arg("info").arg(file);
    if no_cache {
        c.arg("--no-cache");
    }
    c
}

fn check(o: &Output, what: &str, cached: bool) {
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{what}: {err}");
    assert!(out.contains("nnz         4"), "{what}: {out}");
    assert!(out.contains("[3, 3, 4]"), "{what}: {out}");
    if !cached {
        assert!(err.contains("not cached"), "{what}: {err}");
    }
}

/// A FIFO fed by a writer thread, read by `sptmc` within 60 s (it hung: the cache
/// hashed the FIFO, then opened it again to parse).
#[test]
fn a_fifo_and_a_link_to_one_are_read_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fifo = dir.join("x.tns");
    let link = dir.join("link.tns");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    for (name, no_cache) in [(&fifo, false), (&fifo, true), (&link, false)] {
        let _ = std::fs::remove_file(&fifo);
        let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let path = fifo.clone();
        let writer = std::thread::spawn(move || std::fs::write(path, TEXT).unwrap());
        let o = common::output_within(info(dir, name.as_os_str(), no_cache), 60);
        writer.join().unwrap();
        check(&o, &format!("{name:?} no_cache={no_cache}"), false);
    }
    // Nothing was cached.
    let cached = std::fs::read_dir(dir.join("sptmc")).map_or(0, |d| d.count());
    assert_eq!(cached, 0);
}

/// `/dev/stdin` from a pipe, and `<(…)` from bash (it failed with "No such file or
/// directory" through the cache).
#[test]
fn pipes_by_their_dev_names_are_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for no_cache in [false, true] {
        let mut c = info(dir, OsStr::new("/dev/stdin"), no_cache);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut stdin, TEXT.as_bytes()).unwrap();
        drop(stdin);
        check(&child.wait_with_output().unwrap(), "/dev/stdin", false);
    }
    let src = dir.join("src.tns");
    std::fs::write(&src, TEXT).unwrap();
    let sptmc = env!("CARGO_BIN_EXE_sptmc");
    for (form, no_cache) in [("<(cat {src})", ""), ("<(cat {src})", " --no-cache")] {
        let arg = form.replace("{src}", &format!("'{}'", src.display()));
        let line = format!("exec '{sptmc}' info {arg}{no_cache}");
        let mut c = Command::new("bash");
        c.args(["-c", &line]).env("XDG_CACHE_HOME", dir);
        let o = common::output_within(c, 60);
        check(&o, &line, false);
    }
}

/// A file whose name is not valid UTF-8 (it panicked in the cache: the source record
/// could not serialize), gzipped or not.
#[test]
fn a_name_that_is_not_utf8_is_read_without_the_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for (name, gz) in [
        (&b"bad\xffname.tns"[..], false),
        (&b"\xfe\xfd.tns.gz"[..], true),
    ] {
        let p = dir.join(OsStr::from_bytes(name));
        if gz {
            use std::io::Write;
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(TEXT.as_bytes()).unwrap();
            std::fs::write(&p, e.finish().unwrap()).unwrap();
        } else {
            std::fs::write(&p, TEXT).unwrap();
        }
        for no_cache in [false, true] {
            let o = common::output_within(info(dir, p.as_os_str(), no_cache), 60);
            check(&o, &format!("{p:?}"), false);
        }
        // A folder whose name is not UTF-8 holding a plain name.
        let sub = dir.join(OsStr::from_bytes(b"d\xff"));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("x.tns"), TEXT).unwrap();
        let o = common::output_within(info(dir, sub.join("x.tns").as_os_str(), false), 60);
        check(&o, "folder not UTF-8", false);
    }
}

/// Character devices: `/dev/null` is empty (one error line), `/dev/zero` is binary
/// (one error line, at once, not after reading forever).
#[test]
fn devices_are_refused_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    for (dev, words) in [
        ("/dev/null", &["no data lines"][..]),
        ("/dev/zero", &["NUL", "binary"][..]),
    ] {
        for no_cache in [false, true] {
            let o = common::output_within(info(tmp.path(), OsStr::new(dev), no_cache), 60);
            common::assert_one_error_line(&o, words);
        }
    }
}
