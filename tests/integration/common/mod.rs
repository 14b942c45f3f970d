//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod mpi;

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Says why a test is skipped, on the process's stderr (which the harness does not
/// capture); a failure instead when the variable `require` is 1, as CI sets it, so that
/// a missing requirement cannot pass silently. Always `None`, for the caller to return.
pub fn skip<T>(require: &str, why: &str) -> Option<T> {
    assert!(
        std::env::var(require).as_deref() != Ok("1"),
        "{require}=1 but {why}"
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
    None
}

/// The folder of shared real data sets (`sptmc::tools::cases::shared_data_dir`:
/// `$SPTMC_DATA_DIR`, else `../shared/data` beside the crate) when it holds tensor
/// files; else `None` after a [`skip`] (a failure under `SPTMC_REQUIRE_DATA=1`).
pub fn shared_data() -> Option<PathBuf> {
    let dir = sptmc::tools::cases::shared_data_dir();
    match dir.filter(|d| !shared_files(d).is_empty()) {
        Some(d) => Some(d),
        None => skip(
            "SPTMC_REQUIRE_DATA",
            "no .tns files in ../shared/data or $SPTMC_DATA_DIR",
        ),
    }
}

/// The shared data set `name`, as [`shared_data`].
pub fn shared_file(name: &str) -> Option<PathBuf> {
    let path = shared_data()?.join(name);
    if path.is_file() {
        return Some(path);
    }
    skip(
        "SPTMC_REQUIRE_DATA",
        &format!("{} is absent", path.display()),
    )
}

/// The shared tensor files in `dir`, sorted by name.
pub fn shared_files(dir: &Path) -> Vec<PathBuf> {
    sptmc::tools::cases::shared_files(dir).expect("the shared data folder is readable")
}

/// A Python that imports pyttb (`sptmc::tools::bench::peers::find_python`) and the
/// shared data set `name`, for a cross-check with pyttb; else `None` after a [`skip`]
/// (a failure under `SPTMC_REQUIRE_PYTTB=1`, which asks for the cross-checks to run, or,
/// for the data, `SPTMC_REQUIRE_DATA=1`).
pub fn pyttb_and_data(name: &str) -> Option<(PathBuf, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = match sptmc::tools::bench::peers::find_python(root) {
        Ok(p) => p,
        Err(why) => {
            return skip(
                "SPTMC_REQUIRE_PYTTB",
                &format!("no Python with pyttb ({why})"),
            );
        }
    };
    match shared_file(name) {
        Some(file) => Some((python, file)),
        None => skip(
            "SPTMC_REQUIRE_PYTTB",
            &format!("the shared data set {name} is missing"),
        ),
    }
}

/// A small generated 3rd-order tensor (40 × 30 × 20, power-law, 3000 nonzeros drawn)
/// written as `dir/small.tns`.
pub fn small_tns(dir: &Path) -> PathBuf {
    let x = sptmc::tensor::generate::generate(&sptmc::tensor::generate::GenSpec {
        dims: vec![40, 30, 20],
        nnz: 3000,
        pattern: sptmc::tensor::generate::Pattern::PowerLaw { alpha: 1.0 },
        seed: 5,
    })
    .unwrap();
    let p = dir.join("small.tns");
    sptmc::tensor::tns::write(&p, &x).unwrap();
    p
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

/// A rayon pool of `threads` workers, for results compared across thread counts.
pub fn pool_of(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a rayon pool")
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

/// The CUDA engine for a test's CUDA twin: `None` (after a [`skip`]) when no device is
/// usable, a failure instead when `SPTMC_REQUIRE_GPU=1`.
pub fn cuda_engine() -> Option<sptmc::engine::Engine> {
    match sptmc::engine::Engine::cuda() {
        Ok(e) => Some(e),
        Err(err) => skip("SPTMC_REQUIRE_GPU", &format!("no CUDA device ({err})")),
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
