//! Where tuning profiles come from, for every front end.

use crate::engine::profile::Profiles;
use std::path::PathBuf;

/// The folders searched for tuning profiles, in the order they are read (later ones
/// win): `./tuning`, `$XDG_CONFIG_HOME/sptmc/tuning` (else `~/.config/sptmc/tuning`)
/// and `$SPTMC_TUNING_DIR`, those that are set. This is the one place that reads these
/// variables.
pub fn folders() -> Vec<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .map(|c| c.join("sptmc").join("tuning"));
    let env = std::env::var_os("SPTMC_TUNING_DIR").map(PathBuf::from);
    [Some(PathBuf::from("tuning")), config, env]
        .into_iter()
        .flatten()
        .collect()
}

/// The compiled-in tuning profiles, then those of every folder of [`folders`] that
/// exists, later ones winning. Returns the profiles and, for each file that could not
/// be read or parsed (and was skipped), why: the front end tells the user.
pub fn profiles() -> (Profiles, Vec<String>) {
    let mut profiles = Profiles::builtin();
    let mut skipped = Vec::new();
    for dir in folders().into_iter().filter(|d| d.is_dir()) {
        skipped.extend(profiles.add_dir(&dir).iter().map(|e| e.to_string()));
    }
    (profiles, skipped)
}
