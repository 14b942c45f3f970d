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
