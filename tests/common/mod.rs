//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The shared data folder beside the repository, if present; otherwise prints a visible
/// SKIPPED line naming `test` and returns `None`.
pub fn shared_data(test: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("SKIPPED {test}: ../shared/data not found (a user's clone has none)");
        None
    }
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
