//! Output streams behave as in other command-line tools: a reader that closes stdout
//! early ends the program quietly (by SIGPIPE), stdout that cannot be written is one
//! error line and exit status 1, and stderr that cannot be written never aborts the
//! program (it carries on, or fails with its usual exit status).

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `args` run by `sh` with the redirections `redirect` (e.g. `>/dev/full`).
fn shell(dir: &Path, args: &[&str], redirect: &str) -> Output {
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let mut c = common::sptmc_command(dir);
    let line = format!("exec {:?} {} {redirect}", c.get_program(), quoted.join(" "));
    let envs: Vec<_> = c
        .get_envs()
        .map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned())))
        .collect();
    c = Command::new("sh");
    c.args(["-c", &line]);
    for (k, v) in envs {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    common::output_within(c, 120)
}

fn no_panic(o: &Output) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "{err}"
    );
    assert_ne!(o.status.signal(), Some(libc::SIGABRT), "aborted: {err}");
    assert_ne!(o.status.code(), Some(101), "panicked: {err}");
    assert_ne!(o.status.code(), Some(134), "aborted: {err}");
}

/// Commands with something on stdout, given a tensor file and a model folder.
fn printing<'a>(file: &'a str, model: &'a str) -> Vec<Vec<&'a str>> {
    vec![
        vec!["info", file],
        vec!["cp", file, "--rank", "2", "--iters", "2", "--json"],
        vec!["mttkrp", file, "--rank", "3"],
        vec!["tucker", file, "--ranks", "2,2,2", "--iters", "2"],
        vec!["predict", model, file],
        vec!["--version"],
    ]
}

fn setup(dir: &Path) -> (String, String) {
    let f = common::small_tns(dir);
    let model = dir.join("model");
    let mut c = common::sptmc_command(dir);
    c.args([
        "complete",
        f.to_str().unwrap(),
        "--rank",
        "2",
        "--epochs",
        "2",
    ])
    .args(["--out", model.to_str().unwrap()]);
    let o = common::output_within(c, 120);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (
        f.to_str().unwrap().to_string(),
        model.to_str().unwrap().to_string(),
    )
}

#[test]
fn stdout_that_cannot_be_written_is_one_error_line() {
    let tmp = tempfile::tempdir().unwrap();
    let (f, m) = setup(tmp.path());
    for args in printing(&f, &m) {
        let o = shell(tmp.path(), &args, ">/dev/full");
        no_panic(&o);
        common::assert_one_error_line(&o, &["No space left"]);
    }
}

/// The reader closes the pipe before anything is written, or after the first line.
#[test]
fn a_closed_pipe_ends_the_program_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let (f, m) = setup(tmp.path());
    for args in printing(&f, &m) {
        for read_lines in [0, 1] {
            let mut c = common::sptmc_command(tmp.path());
            c.args(&args).stdout(Stdio::piped()).stderr(Stdio::piped());
            let mut child = c.spawn().unwrap();
            let out = child.stdout.take().unwrap();
            let mut r = BufReader::new(out);
            for _ in 0..read_lines {
                let mut line = String::new();
                let _ = r.read_line(&mut line);
            }
            drop(r);
            let o = child.wait_with_output().unwrap();
            no_panic(&o);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!err.contains("error"), "{args:?}: {err}");
            // Killed by SIGPIPE as C tools are, or done before the reader left.
            let quiet = o.status.signal() == Some(libc::SIGPIPE)
                || o.status.code() == Some(141)
                || o.status.success();
            assert!(quiet, "{args:?}: {:?} {err}", o.status);
        }
    }
    // Many lines (one per prediction) into a pipe closed after the first: SIGPIPE.
    // The training file's lines fifty times over (predict reads its lines as they are):
    // far more output than a pipe holds (64 KiB), so the command cannot finish before
    // the reader leaves.
    let all = tmp.path().join("many-coords.tns");
    std::fs::write(&all, std::fs::read_to_string(&f).unwrap().repeat(50)).unwrap();
    let mut c = common::sptmc_command(tmp.path());
    c.args(["predict", &m, all.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut r = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    drop(r);
    let o = child.wait_with_output().unwrap();
    no_panic(&o);
    assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{:?}", o.status);
}

/// stderr full or closed: a command that succeeds still succeeds with its output on
/// stdout; one that fails still fails with status 1; neither aborts. Both streams
/// full: status 1.
#[test]
fn stderr_that_cannot_be_written_never_aborts() {
    let tmp = tempfile::tempdir().unwrap();
    let (f, m) = setup(tmp.path());
    for redirect in ["2>/dev/full", "2>&-"] {
        for args in printing(&f, &m) {
            let o = shell(tmp.path(), &args, redirect);
            no_panic(&o);
            assert!(o.status.success(), "{args:?} {redirect}: {:?}", o.status);
            assert!(!o.stdout.is_empty(), "{args:?} {redirect}");
        }
        for args in [
            vec!["info", "/nonexistent.tns"],
            vec!["cp", &f, "--rank", "0"],
            vec!["cp", &f, "--rank", "x"],
        ] {
            let o = shell(tmp.path(), &args, redirect);
            no_panic(&o);
            assert_eq!(o.status.code(), Some(1), "{args:?} {redirect}");
        }
    }
    for args in printing(&f, &m) {
        let o = shell(tmp.path(), &args, ">/dev/full 2>/dev/full");
        no_panic(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
    }
}
