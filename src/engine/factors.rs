//! The caller's account of which factors changed between calls.
//!
//! A backend that keeps copies of the factors in device memory between calls (CUDA)
//! should upload only the factors that changed. Nothing in a [`crate::matrix::Matrix`]
//! records that; the caller knows it: a model's step updates one factor and leaves the
//! others as they were. [`FactorVersions`] is that knowledge, made by the engine
//! ([`super::Engine::factor_versions`]) and kept by the caller, who calls
//! [`FactorVersions::changed`] whenever it writes a factor and passes it with every call
//! ([`super::Call::versions`]). A call without it uploads every factor it reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which version of each factor a caller holds (see the module docs).
///
/// The key of a factor ([`FactorVersions::key`]) is the set's number, given by the
/// engine that made it, the mode and the count of [`FactorVersions::changed`] calls for
/// that mode: two calls with the same key read the same data, as long as the caller
/// keeps the contract. A clone is a new set with a number of its own (its factors may
/// then change apart from the original's).
#[derive(Debug)]
pub struct FactorVersions {
    /// The counter of the engine that made it, which numbers its sets.
    sets: Arc<AtomicU64>,
    set: u64,
    changes: Vec<u64>,
}

/// What identifies one factor's contents among an engine's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FactorKey {
    /// The number of the set, unique within the engine.
    pub set: u64,
    /// The mode.
    pub mode: usize,
    /// Changes of that mode's factor since the set was made.
    pub changes: u64,
}

impl FactorVersions {
    /// A fresh set of `modes` factors numbered by `sets`.
    pub(super) fn new(sets: &Arc<AtomicU64>, modes: usize) -> Self {
        FactorVersions {
            sets: Arc::clone(sets),
            set: sets.fetch_add(1, Ordering::Relaxed),
            changes: vec![0; modes],
        }
    }

    /// Records that the caller wrote (or replaced) the factor of `mode`: the next call
    /// uploads it again.
    ///
    /// # Panics
    /// For a mode past the set's.
    pub fn changed(&mut self, mode: usize) {
        self.changes[mode] += 1;
    }

    /// Records that every factor changed.
    pub fn all_changed(&mut self) {
        self.changes.iter_mut().for_each(|c| *c += 1);
    }

    /// Factors in the set.
    pub fn modes(&self) -> usize {
        self.changes.len()
    }

    /// The key of the factor of `mode` as it is now.
    pub fn key(&self, mode: usize) -> FactorKey {
        FactorKey {
            set: self.set,
            mode,
            changes: self.changes[mode],
        }
    }

    /// Whether the set was made by the engine whose counter is `sets`.
    pub(super) fn made_by(&self, sets: &Arc<AtomicU64>) -> bool {
        Arc::ptr_eq(&self.sets, sets)
    }
}

impl Clone for FactorVersions {
    fn clone(&self) -> Self {
        FactorVersions {
            changes: self.changes.clone(),
            ..FactorVersions::new(&self.sets, 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_change_with_their_mode_only_and_clones_are_other_sets() {
        let sets = Arc::new(AtomicU64::new(1));
        let mut v = FactorVersions::new(&sets, 3);
        let before: Vec<FactorKey> = (0..3).map(|m| v.key(m)).collect();
        v.changed(1);
        assert_eq!(v.key(0), before[0]);
        assert_ne!(v.key(1), before[1]);
        assert_eq!(v.key(2), before[2]);
        v.all_changed();
        assert!((0..3).all(|m| v.key(m) != before[m]));
        let w = v.clone();
        assert_eq!(w.modes(), 3);
        assert!(
            (0..3).all(|m| w.key(m) != v.key(m)),
            "a clone is another set"
        );
        assert!(w.made_by(&sets) && !w.made_by(&Arc::new(AtomicU64::new(1))));
        assert_ne!(FactorVersions::new(&sets, 3).key(0), v.key(0));
    }
}
