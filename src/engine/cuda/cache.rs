//! Which factor copies a backend keeps in device memory between calls.
//!
//! Factors are keyed by their [`Version`]: a call finds each factor it needs by the
//! version of the caller's matrix and uploads only those not found. In CP-ALS and
//! Tucker-HOOI only the factor updated by the previous step changes, so a step moves
//! one factor, not all of them. Buffers of evicted entries are reused for new uploads
//! of the same length. Generic over the buffer so the policy is tested without a GPU.

use crate::matrix::Version;

/// One cached factor.
struct Slot<B> {
    key: Version,
    len: usize,
    buf: B,
    last_used: u64,
}

/// A small least-recently-used set of device buffers keyed by matrix version.
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
    /// writes the data into a buffer of exactly `len` elements, `alloc` makes one.
    /// Never evicts a slot used since the last [`FactorCache::begin_call`], so a call
    /// may hold more factors than the capacity (the extra ones go at its end).
    pub fn ensure<E>(
        &mut self,
        key: Version,
        len: usize,
        alloc: impl FnOnce(usize) -> Result<B, E>,
        fill: impl FnOnce(&mut B) -> Result<(), E>,
    ) -> Result<Entry, E> {
        let now = self.clock;
        if let Some(i) = self.slots.iter().position(|s| s.key == key && s.len == len) {
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
        s.key = Version {
            id: 0,
            edits: u64::MAX,
        };
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
    use crate::matrix::Matrix;

    /// A fake device buffer: the data it holds and how often it was allocated.
    fn cache_run(
        cache: &mut FactorCache<Vec<f32>>,
        factors: &[&Matrix],
        allocs: &mut usize,
    ) -> usize {
        cache.begin_call();
        let mut uploaded = 0;
        let mut slots = Vec::new();
        for f in factors {
            let e = cache
                .ensure::<()>(
                    f.version(),
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
        // Every factor of the call is present with its current data.
        for (f, &s) in factors.iter().zip(&slots) {
            assert_eq!(cache.buffer(s).as_slice(), f.data());
        }
        uploaded
    }

    #[test]
    fn an_als_step_uploads_only_the_factor_the_last_step_changed() {
        let mut f: Vec<Matrix> = (0..3).map(|m| Matrix::random(5 + m, 4, m as u64)).collect();
        let mut cache = FactorCache::new(8);
        let mut allocs = 0;
        // First call for mode 0 uploads modes 1 and 2.
        assert_eq!(cache_run(&mut cache, &[&f[1], &f[2]], &mut allocs), 2);
        // Same factors again: nothing moves.
        assert_eq!(cache_run(&mut cache, &[&f[1], &f[2]], &mut allocs), 0);
        // Mode 0 was updated in place; the call for mode 1 needs modes 0 and 2.
        f[0].data_mut()[0] = 9.0;
        assert_eq!(cache_run(&mut cache, &[&f[0], &f[2]], &mut allocs), 1);
        f[1].data_mut()[3] = 7.0;
        assert_eq!(cache_run(&mut cache, &[&f[0], &f[1]], &mut allocs), 1);
        f[2].row_mut(1)[0] = 5.0;
        assert_eq!(cache_run(&mut cache, &[&f[1], &f[2]], &mut allocs), 1);
        // A clone is another matrix: uploaded once, then found.
        let g = f[1].clone();
        assert_eq!(cache_run(&mut cache, &[&g, &f[2]], &mut allocs), 1);
        assert_eq!(cache_run(&mut cache, &[&g, &f[2]], &mut allocs), 0);
    }

    #[test]
    fn a_full_cache_evicts_the_oldest_and_reuses_buffers_of_the_same_length() {
        let mut cache = FactorCache::new(2);
        let mut allocs = 0;
        let mut a = Matrix::random(3, 2, 1);
        let b = Matrix::random(3, 2, 2);
        assert_eq!(cache_run(&mut cache, &[&a, &b], &mut allocs), 2);
        assert_eq!(allocs, 2);
        // a changes: b's slot is used by this call, so a's old slot is reused in place.
        a.data_mut()[0] += 1.0;
        assert_eq!(cache_run(&mut cache, &[&b, &a], &mut allocs), 1);
        assert_eq!(
            allocs, 2,
            "the evicted buffer of the same length was reused"
        );
        assert_eq!(cache.len(), 2);
        // A call needing three factors keeps all three (none is evicted mid-call).
        let c = Matrix::random(4, 2, 3);
        assert_eq!(cache_run(&mut cache, &[&a, &b, &c], &mut allocs), 1);
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn eviction_keeps_the_slots_of_the_current_call_where_they_are() {
        let mut cache = FactorCache::new(2);
        let mut allocs = 0;
        let m: Vec<Matrix> = (0..4).map(|k| Matrix::random(2 + k, 3, k as u64)).collect();
        assert_eq!(cache_run(&mut cache, &[&m[0], &m[1]], &mut allocs), 2);
        // New lengths force fresh buffers while the cache is full; cache_run checks
        // every slot index of the call against its factor after the last `ensure`.
        assert_eq!(cache_run(&mut cache, &[&m[2], &m[3]], &mut allocs), 2);
        assert_eq!(
            cache_run(&mut cache, &[&m[1], &m[3], &m[0]], &mut allocs),
            2
        );
    }

    #[test]
    fn a_failed_upload_leaves_no_entry_that_matches() {
        let mut cache: FactorCache<Vec<f32>> = FactorCache::new(4);
        let a = Matrix::random(3, 2, 1);
        cache.begin_call();
        let r = cache.ensure(a.version(), 6, |n| Ok(vec![0.0; n]), |_| Err("copy failed"));
        assert_eq!(r, Err("copy failed"));
        cache.begin_call();
        let e = cache
            .ensure::<()>(
                a.version(),
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
