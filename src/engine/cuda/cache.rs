//! Which factor copies a backend keeps in device memory between calls.
//!
//! Factors are keyed by the caller's [`FactorKey`] ([`crate::engine::FactorVersions`]):
//! a call finds each factor it needs by its key and uploads only those not found. In
//! CP-ALS and Tucker-HOOI only the factor updated by the previous step changes, so a
//! step moves one factor, not all of them. A factor without a key (the caller keeps no
//! versions) is uploaded on every call. Buffers of evicted entries are reused for new
//! uploads of the same length. Generic over the buffer so the policy is tested without
//! a GPU.

use crate::engine::FactorKey;

/// One cached factor.
struct Slot<B> {
    /// `None` for a factor without a key, or one whose upload failed: never found.
    key: Option<FactorKey>,
    len: usize,
    buf: B,
    last_used: u64,
}

/// A small least-recently-used set of device buffers keyed by the caller's factor keys.
pub struct FactorCache<B> {
    slots: Vec<Slot<B>>,
    capacity: usize,
    clock: u64,
}

/// Where [`FactorCache::ensure`] found or put a factor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Index of the slot (valid until the next `ensure` that evicts).
    pub slot: usize,
    /// Whether the factor had to be uploaded.
    pub uploaded: bool,
}

impl<B> FactorCache<B> {
    /// A cache of at most `capacity` factors (at least 1).
    pub fn new(capacity: usize) -> Self {
        FactorCache {
            slots: Vec::new(),
            capacity: capacity.max(1),
            clock: 0,
        }
    }

    /// Number of factors held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no factor is held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The buffer of slot `slot`.
    pub fn buffer(&self, slot: usize) -> &B {
        &self.slots[slot].buf
    }

    /// Starts a call: slots touched from here on are the call's and are not evicted by
    /// its later `ensure`s.
    pub fn begin_call(&mut self) {
        self.clock += 1;
    }

    /// Finds the factor `key` of `len` elements, or makes room and uploads it: `fill`
    /// writes the data into a buffer of exactly `len` elements, `alloc` makes one. A
    /// factor without a key is always uploaded.
    /// Never evicts a slot used since the last [`FactorCache::begin_call`], so a call
    /// may hold more factors than the capacity (the extra ones go at its end).
    pub fn ensure<E>(
        &mut self,
        key: Option<FactorKey>,
        len: usize,
        alloc: impl FnOnce(usize) -> Result<B, E>,
        fill: impl FnOnce(&mut B) -> Result<(), E>,
    ) -> Result<Entry, E> {
        let now = self.clock;
        let found =
            key.and_then(|k| (self.slots.iter()).position(|s| s.key == Some(k) && s.len == len));
        if let Some(i) = found {
            self.slots[i].last_used = now;
            return Ok(Entry {
                slot: i,
                uploaded: false,
            });
        }
        // Oldest slot not used in this call; one of the right length first.
        let evictable = |s: &Slot<B>| s.last_used < now;
        let same_len = (0..self.slots.len())
            .filter(|&i| evictable(&self.slots[i]) && self.slots[i].len == len)
            .min_by_key(|&i| self.slots[i].last_used);
        let slot = match same_len {
            Some(i) => i,
            None => {
                let buf = alloc(len)?;
                let fresh = Slot {
                    key,
                    len,
                    buf,
                    last_used: now,
                };
                // At capacity, the oldest evictable slot is replaced in place: indices
                // handed out earlier in this call must stay valid.
                let victim = (self.slots.len() >= self.capacity)
                    .then(|| {
                        (0..self.slots.len())
                            .filter(|&i| evictable(&self.slots[i]))
                            .min_by_key(|&i| self.slots[i].last_used)
                    })
                    .flatten();
                match victim {
                    Some(i) => {
                        self.slots[i] = fresh;
                        i
                    }
                    None => {
                        self.slots.push(fresh);
                        self.slots.len() - 1
                    }
                }
            }
        };
        // Mark the slot unusable until the fill succeeded, so a failed upload is not
        // mistaken for the factor later.
        let s = &mut self.slots[slot];
        s.key = None;
        s.last_used = now;
        fill(&mut s.buf)?;
        s.key = key;
        Ok(Entry {
            slot,
            uploaded: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, FactorVersions};
    use crate::matrix::Matrix;

    /// A factor as a call passes it: the matrix and its key where the caller keeps one.
    type Arg<'a> = (&'a Matrix, Option<FactorKey>);

    /// One call through a cache of fake device buffers (vectors): uploads, then checks
    /// that every factor of the call is present with its current data.
    fn cache_run(
        cache: &mut FactorCache<Vec<f32>>,
        factors: &[Arg<'_>],
        allocs: &mut usize,
    ) -> usize {
        cache.begin_call();
        let mut uploaded = 0;
        let mut slots = Vec::new();
        for &(f, key) in factors {
            let e = cache
                .ensure::<()>(
                    key,
                    f.data().len(),
                    |n| {
                        *allocs += 1;
                        Ok(vec![0.0; n])
                    },
                    |b| {
                        b.copy_from_slice(f.data());
                        Ok(())
                    },
                )
                .unwrap();
            uploaded += usize::from(e.uploaded);
            slots.push(e.slot);
        }
        for (&(f, _), &s) in factors.iter().zip(&slots) {
            assert_eq!(cache.buffer(s).as_slice(), f.data());
        }
        uploaded
    }

    /// The keys of `v` for `modes`.
    fn keyed<'a>(f: &'a [Matrix], v: &FactorVersions, modes: &[usize]) -> Vec<Arg<'a>> {
        modes.iter().map(|&m| (&f[m], Some(v.key(m)))).collect()
    }

    #[test]
    fn an_als_step_uploads_only_the_factor_the_last_step_changed() {
        let engine = Engine::cpu();
        let mut f: Vec<Matrix> = (0..3).map(|m| Matrix::random(5 + m, 4, m as u64)).collect();
        let mut v = engine.factor_versions(3);
        let mut cache = FactorCache::new(8);
        let mut allocs = 0;
        // First call for mode 0 uploads modes 1 and 2.
        assert_eq!(
            cache_run(&mut cache, &keyed(&f, &v, &[1, 2]), &mut allocs),
            2
        );
        // Same factors again: nothing moves.
        assert_eq!(
            cache_run(&mut cache, &keyed(&f, &v, &[1, 2]), &mut allocs),
            0
        );
        // Mode 0 was updated in place and said so; the call for mode 1 needs 0 and 2.
        f[0].data_mut()[0] = 9.0;
        v.changed(0);
        assert_eq!(
            cache_run(&mut cache, &keyed(&f, &v, &[0, 2]), &mut allocs),
            1
        );
        f[1].data_mut()[3] = 7.0;
        v.changed(1);
        assert_eq!(
            cache_run(&mut cache, &keyed(&f, &v, &[0, 1]), &mut allocs),
            1
        );
        f[2] = Matrix::random(7, 4, 9);
        v.changed(2);
        assert_eq!(
            cache_run(&mut cache, &keyed(&f, &v, &[1, 2]), &mut allocs),
            1
        );
        // Another set (another caller, or a clone) holds other factors of the same
        // shapes: its keys never match the first set's copies, so they are uploaded,
        // then found.
        let g: Vec<Matrix> = (0..3)
            .map(|m| Matrix::random(5 + m, 4, 10 + m as u64))
            .collect();
        let w = v.clone();
        assert_eq!(
            cache_run(&mut cache, &keyed(&g, &w, &[1, 2]), &mut allocs),
            2
        );
        assert_eq!(
            cache_run(&mut cache, &keyed(&g, &w, &[1, 2]), &mut allocs),
            0
        );
        // A factor without a key moves on every call.
        assert_eq!(cache_run(&mut cache, &[(&f[0], None)], &mut allocs), 1);
        assert_eq!(cache_run(&mut cache, &[(&f[0], None)], &mut allocs), 1);
    }

    #[test]
    fn a_full_cache_evicts_the_oldest_and_reuses_buffers_of_the_same_length() {
        let engine = Engine::cpu();
        let mut v = engine.factor_versions(3);
        let mut cache = FactorCache::new(2);
        let mut allocs = 0;
        let mut m = vec![
            Matrix::random(3, 2, 1),
            Matrix::random(3, 2, 2),
            Matrix::random(4, 2, 3),
        ];
        assert_eq!(
            cache_run(&mut cache, &keyed(&m, &v, &[0, 1]), &mut allocs),
            2
        );
        assert_eq!(allocs, 2);
        // Mode 0 changes: mode 1's slot is used by this call, so 0's old slot is reused
        // in place.
        m[0].data_mut()[0] += 1.0;
        v.changed(0);
        assert_eq!(
            cache_run(&mut cache, &keyed(&m, &v, &[1, 0]), &mut allocs),
            1
        );
        assert_eq!(
            allocs, 2,
            "the evicted buffer of the same length was reused"
        );
        assert_eq!(cache.len(), 2);
        // A call needing three factors keeps all three (none is evicted mid-call).
        assert_eq!(
            cache_run(&mut cache, &keyed(&m, &v, &[0, 1, 2]), &mut allocs),
            1
        );
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn eviction_keeps_the_slots_of_the_current_call_where_they_are() {
        let engine = Engine::cpu();
        let v = engine.factor_versions(4);
        let mut cache = FactorCache::new(2);
        let mut allocs = 0;
        let m: Vec<Matrix> = (0..4).map(|k| Matrix::random(2 + k, 3, k as u64)).collect();
        assert_eq!(
            cache_run(&mut cache, &keyed(&m, &v, &[0, 1]), &mut allocs),
            2
        );
        // New lengths force fresh buffers while the cache is full; cache_run checks
        // every slot index of the call against its factor after the last `ensure`.
        assert_eq!(
            cache_run(&mut cache, &keyed(&m, &v, &[2, 3]), &mut allocs),
            2
        );
        assert_eq!(
            cache_run(&mut cache, &keyed(&m, &v, &[1, 3, 0]), &mut allocs),
            2
        );
    }

    #[test]
    fn a_failed_upload_leaves_no_entry_that_matches() {
        let engine = Engine::cpu();
        let v = engine.factor_versions(1);
        let mut cache: FactorCache<Vec<f32>> = FactorCache::new(4);
        let a = Matrix::random(3, 2, 1);
        cache.begin_call();
        let r = cache.ensure(
            Some(v.key(0)),
            6,
            |n| Ok(vec![0.0; n]),
            |_| Err("copy failed"),
        );
        assert_eq!(r, Err("copy failed"));
        cache.begin_call();
        let e = cache
            .ensure::<()>(
                Some(v.key(0)),
                6,
                |n| Ok(vec![0.0; n]),
                |b| {
                    b.copy_from_slice(a.data());
                    Ok(())
                },
            )
            .unwrap();
        assert!(e.uploaded, "the failed upload must not count as present");
        assert!(!cache.is_empty());
    }
}
