//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The folder of shared real data sets: `$SPTMC_DATA_DIR` when set, else
/// `../shared/data` beside the crate. `None` (after printing a visible SKIPPED line)
/// when it does not exist.
pub fn shared_data() -> Option<PathBuf> {
    let dir = match std::env::var_os("SPTMC_DATA_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data"),
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: ../shared/data not found ({})",
            dir.display()
        );
        None
    }
}

/// The shared `.tns.gz` files, sorted by name.
pub fn shared_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the shared data folder is readable")
        .map(|e| e.expect("a readable folder entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".tns.gz"))
        .collect();
    files.sort();
    files
}

/// A fresh seed per run (printed, so a failure can be replayed with SPTMC_SEED=...).
pub fn fresh_seed(test: &str) -> u64 {
    let seed = std::env::var("SPTMC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{test}: seed {seed} (replay with SPTMC_SEED={seed})");
    seed
}

/// Runs `f` on its own thread and returns its result; fails the test when it has not
/// finished after `secs` seconds (a hang, not a slow run: the limit is generous).
pub fn within<T: Send + 'static>(
    what: &str,
    secs: u64,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(_) => panic!("{what} did not finish within {secs} s: it hangs"),
    }
}

/// The `sptmc` binary with the repository's tuning profiles and a binary cache under
/// `cache` (never the user's own).
pub fn sptmc_command(cache: &Path) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_sptmc"));
    c.env(
        "SPTMC_TUNING_DIR",
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tuning"),
    )
    .env("XDG_CACHE_HOME", cache)
    .stdin(std::process::Stdio::null());
    c
}

/// Runs `cmd` to the end, killing it and failing the test after `secs` seconds.
pub fn output_within(mut cmd: std::process::Command, secs: u64) -> std::process::Output {
    use std::process::Stdio;
    let what = format!("{cmd:?}");
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(secs)) {
        Ok(out) => out.expect("the binary's output is readable"),
        Err(_) => {
            // The child is ours: end it by its id.
            let _ = std::process::Command::new("kill")
                .args(["-9", &id.to_string()])
                .status();
            panic!("{what} did not finish within {secs} s: it hangs");
        }
    }
}

/// Asserts that a failed run printed exactly one line on stderr, an error naming
/// every one of `words`, and no panic.
pub fn assert_one_error_line(out: &std::process::Output, words: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "succeeded: {err}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "exit status {:?}: {err}",
        out.status
    );
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("sptmc: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{err}");
    for w in words {
        assert!(errors[0].contains(w), "{w:?} not in {err}");
    }
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "{err}"
    );
}

/// The CUDA engine for a test's CUDA twin: `None` (after a visible SKIPPED line) when
/// no device is usable, a failure instead when `SPTMC_REQUIRE_GPU=1`.
pub fn cuda_engine() -> Option<sptmc::engine::Engine> {
    match sptmc::engine::Engine::cuda() {
        Ok(e) => Some(e),
        Err(err) => {
            assert!(
                std::env::var("SPTMC_REQUIRE_GPU").as_deref() != Ok("1"),
                "SPTMC_REQUIRE_GPU=1 but the CUDA backend is unusable: {err}"
            );
            let _ = writeln!(std::io::stderr(), "SKIPPED: no CUDA device ({err})");
            None
        }
    }
}

/// Defines a test body once and runs it on both backends: `mod $name` with tests
/// `cpu` (the CPU engine) and `cuda` (the CUDA engine, skipped visibly without a
/// device, see [`cuda_engine`]). The body sees the engine as `$engine: &Engine`.
#[allow(unused_macros)] // not every test file has twins
macro_rules! twin {
    ($(#[$meta:meta])* $name:ident, |$engine:ident| $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn body($engine: &sptmc::engine::Engine) $body
            #[test]
            fn cpu() {
                body(&sptmc::engine::Engine::cpu());
            }
            #[test]
            fn cuda() {
                let Some(e) = crate::common::cuda_engine() else {
                    return;
                };
                body(&e);
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use twin;
