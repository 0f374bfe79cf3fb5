//! The permits the in-memory store admitted that still hold units: what a
//! release may give back, and nothing else.
//!
//! Each entry is a permit, the 128-bit identity of a counter key and the
//! units that permit holds there; it exists exactly while those units are
//! held, so the table never holds more entries than the store holds units
//! of concurrency limits (each entry holds at least one), and a hostile
//! client acquiring permits grows it no further than the limits admit. A
//! release takes at most what its entry holds and removes the entry once it
//! holds nothing: a permit never issued, already given back, or issued for
//! another key finds no entry and changes nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::KeyId;
use crate::permit::Permit;

/// Shards (a power of two): releases and acquisitions of unrelated permits
/// rarely wait for one another.
const SHARDS: usize = 64;

type Table = HashMap<(Permit, KeyId), u64, foldhash::fast::RandomState>;

pub(crate) struct HeldPermits {
    shards: Box<[Mutex<Table>]>,
    len: AtomicUsize,
}

impl HeldPermits {
    pub(super) fn new() -> Self {
        HeldPermits {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            len: AtomicUsize::new(0),
        }
    }

    /// Entries (permit and key pairs holding units).
    pub(super) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    fn shard(&self, permit: Permit, key: KeyId) -> std::sync::MutexGuard<'_, Table> {
        // Permits are random, so their low bits spread the shards evenly.
        let i = (permit.get() as usize ^ key as usize) & (SHARDS - 1);
        // Nothing panics under this lock; a poisoned one is still
        // consistent.
        self.shards[i]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `permit` took `units` more of the counter `key`.
    pub(super) fn insert(&self, permit: Permit, key: KeyId, units: u64) {
        if units == 0 {
            return;
        }
        let mut t = self.shard(permit, key);
        let held = t.entry((permit, key)).or_insert_with(|| {
            self.len.fetch_add(1, Ordering::AcqRel);
            0
        });
        *held = held.saturating_add(units);
    }

    /// Takes up to `units` of what `permit` holds of `key` and returns
    /// them; `None` when it holds nothing there.
    pub(super) fn take(&self, permit: Permit, key: KeyId, units: u64) -> Option<u64> {
        let mut t = self.shard(permit, key);
        let held = t.get_mut(&(permit, key))?;
        let given = units.min(*held);
        *held -= given;
        if *held == 0 {
            t.remove(&(permit, key));
            self.len.fetch_sub(1, Ordering::AcqRel);
            // Give back the memory of a burst once it is over.
            if t.capacity() > 256 && t.len() * 8 < t.capacity() {
                let keep = t.len() * 2;
                t.shrink_to(keep);
            }
        }
        Some(given)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permit_gives_back_what_it_holds_of_its_key_once() {
        let h = HeldPermits::new();
        let (a, b) = (Permit::from(1u64), Permit::from(2u64));
        h.insert(a, 10, 2);
        h.insert(a, 11, 1);
        h.insert(b, 10, 1);
        assert_eq!(h.len(), 3);
        assert_eq!(h.take(Permit::from(3u64), 10, 1), None);
        assert_eq!(h.take(b, 11, 1), None, "another key");
        assert_eq!(h.take(a, 10, 1_000), Some(2), "at most what it holds");
        assert_eq!(h.take(a, 10, 1), None, "given back already");
        assert_eq!(h.take(a, 11, 1), Some(1));
        assert_eq!(h.take(b, 10, 1), Some(1));
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn units_add_up_and_a_partial_release_keeps_the_rest() {
        let h = HeldPermits::new();
        let p = Permit::from(7u64);
        h.insert(p, 1, 1);
        h.insert(p, 1, u64::MAX);
        h.insert(p, 1, 0);
        assert_eq!(h.len(), 1);
        assert_eq!(h.take(p, 1, 5), Some(5));
        assert_eq!(h.take(p, 1, u64::MAX), Some(u64::MAX - 5));
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn a_burst_of_permits_leaves_no_memory_behind() {
        let h = HeldPermits::new();
        let ps: Vec<Permit> = (0..100_000).map(|_| Permit::random()).collect();
        for p in &ps {
            h.insert(*p, 5, 1);
        }
        assert_eq!(h.len(), ps.len());
        for p in &ps {
            assert_eq!(h.take(*p, 5, 1), Some(1));
        }
        assert_eq!(h.len(), 0);
        let capacity: usize = h.shards.iter().map(|s| s.lock().unwrap().capacity()).sum();
        assert!(capacity <= SHARDS * 256, "{capacity}");
    }
}
