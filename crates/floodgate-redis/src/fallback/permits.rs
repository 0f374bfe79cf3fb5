//! The concurrency permits this instance gave out under a lease (the
//! `lease` sync mode) and that have not been given back yet, so that their
//! releases come back here (and only theirs: a permit taken in Redis is
//! never given back locally).
//!
//! A permit is remembered under its id and a keyed hash of its counter key
//! (one request holds one permit per concurrency limit it matched), with
//! the units it holds. The set is bounded: holders that never release would
//! otherwise grow it forever. It is split into shards, each keeping two
//! generations; when a shard is full its older generation is forgotten (the
//! oldest permits, the likeliest to be leaked). A forgotten permit's release
//! goes to Redis, which does not hold it, so its units stay taken in the
//! local store, as a release lost in any other way would leave them.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use floodgate_policy::Permit;

/// At most this many shards; fewer for small bounds, so that each shard
/// keeps a useful number of permits.
const MAX_SHARDS: usize = 16;
/// The smallest number of permits a shard is made for when there are
/// several.
const MIN_PER_SHARD: usize = 64;

/// A bounded set of permits taken locally, with the units each holds.
pub(crate) struct LocalPermits {
    shards: Box<[Mutex<Shard>]>,
    /// Permits a generation of one shard holds before it becomes the older
    /// one.
    half: usize,
    /// Permits remembered, over all shards.
    len: AtomicUsize,
    hasher: RandomState,
}

#[derive(Default)]
struct Shard {
    current: HashMap<(Permit, u64), u64>,
    previous: HashMap<(Permit, u64), u64>,
}

impl LocalPermits {
    /// A set remembering at most `bound` permits (at least 2).
    pub fn new(bound: usize) -> Self {
        let bound = bound.max(2);
        let shards = (bound / MIN_PER_SHARD).clamp(1, MAX_SHARDS);
        LocalPermits {
            shards: (0..shards).map(|_| Mutex::default()).collect(),
            half: (bound / shards / 2).max(1),
            len: AtomicUsize::new(0),
            hasher: RandomState::new(),
        }
    }

    /// The most permits remembered at once.
    #[cfg(test)]
    pub fn bound(&self) -> usize {
        self.shards.len() * 2 * self.half
    }

    /// Permits remembered now.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    fn id(&self, permit: Permit, key: &[u8]) -> (Permit, u64) {
        (permit, self.hasher.hash_one(key))
    }

    fn shard(&self, id: (Permit, u64)) -> &Mutex<Shard> {
        let mixed = id.0.get() as u64 ^ id.1;
        &self.shards[(mixed % self.shards.len() as u64) as usize]
    }

    /// Remembers that `permit` took `units` more of the counter `key`.
    pub fn insert(&self, permit: Permit, key: &[u8], units: u64) {
        let id = self.id(permit, key);
        let mut shard = self.shard(id).lock().unwrap_or_else(|p| p.into_inner());
        let shard = &mut *shard;
        if let Some(held) = shard.current.get_mut(&id) {
            *held = held.saturating_add(units);
            return;
        }
        let held = match shard.previous.remove(&id) {
            Some(held) => {
                self.len.fetch_sub(1, Ordering::AcqRel);
                held.saturating_add(units)
            }
            None => units,
        };
        if shard.current.len() >= self.half {
            let forgotten =
                std::mem::replace(&mut shard.previous, std::mem::take(&mut shard.current));
            self.len.fetch_sub(forgotten.len(), Ordering::AcqRel);
        }
        shard.current.insert(id, held);
        self.len.fetch_add(1, Ordering::AcqRel);
    }

    /// If `permit` is remembered for `key`: takes up to `units` from it
    /// (forgetting it once it holds nothing) and returns the units to give
    /// back locally. `None`: the permit was not taken locally (or has been
    /// forgotten).
    pub fn take(&self, permit: Permit, key: &[u8], units: u64) -> Option<u64> {
        if self.len() == 0 {
            return None;
        }
        let id = self.id(permit, key);
        let mut shard = self.shard(id).lock().unwrap_or_else(|p| p.into_inner());
        let shard = &mut *shard;
        let generation = if shard.current.contains_key(&id) {
            &mut shard.current
        } else {
            &mut shard.previous
        };
        let held = generation.get_mut(&id)?;
        let given = units.min(*held);
        *held -= given;
        if *held == 0 {
            generation.remove(&id);
            self.len.fetch_sub(1, Ordering::AcqRel);
        }
        Some(given)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_each_permit_of_each_key_until_given_back() {
        let p = LocalPermits::new(1_000);
        assert_eq!(p.take(Permit::from(1u64), b"k", 1), None);
        p.insert(Permit::from(1u64), b"k", 2);
        p.insert(Permit::from(1u64), b"other", 1);
        p.insert(Permit::from(2u64), b"k", 1);
        assert_eq!(p.len(), 3);
        assert_eq!(p.take(Permit::from(3u64), b"k", 1), None);
        assert_eq!(p.take(Permit::from(1u64), b"k", 1), Some(1));
        assert_eq!(p.len(), 3);
        // At most what the permit holds, then it is gone.
        assert_eq!(p.take(Permit::from(1u64), b"k", 5), Some(1));
        assert_eq!(p.take(Permit::from(1u64), b"k", 1), None);
        assert_eq!(p.take(Permit::from(1u64), b"other", 1), Some(1));
        assert_eq!(p.take(Permit::from(2u64), b"k", 1), Some(1));
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn a_permit_taken_again_adds_its_units() {
        let p = LocalPermits::new(100);
        p.insert(Permit::from(7u64), b"k", 1);
        p.insert(Permit::from(7u64), b"k", u64::MAX);
        assert_eq!(p.len(), 1);
        assert_eq!(p.take(Permit::from(7u64), b"k", u64::MAX), Some(u64::MAX));
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn stays_bounded_and_forgets_the_oldest() {
        for bound in [0, 1, 2, 3, 64, 100, 1_000, 5_000] {
            let p = LocalPermits::new(bound);
            assert!(p.bound() <= bound.max(2), "{bound}: {}", p.bound());
            for id in 1..=20_000u64 {
                p.insert(Permit::from(id), b"k", 1);
                assert!(p.len() <= p.bound(), "{bound}");
            }
            assert!(p.len() >= p.bound() / 2, "{bound}: {}", p.len());
            // The newest is remembered, the oldest forgotten.
            assert_eq!(p.take(Permit::from(20_000u64), b"k", 1), Some(1), "{bound}");
            assert_eq!(p.take(Permit::from(1u64), b"k", 1), None, "{bound}");
            let remembered = (1..20_000u64)
                .filter_map(|id| p.take(Permit::from(id), b"k", 1))
                .count();
            assert_eq!(p.len(), 0, "{bound}");
            assert!(remembered < p.bound(), "{bound}");
        }
    }

    #[test]
    fn a_permit_moved_from_the_older_generation_is_counted_once() {
        let p = LocalPermits::new(2);
        p.insert(Permit::from(1u64), b"k", 1);
        p.insert(Permit::from(2u64), b"k", 1);
        // 1 is in the older generation; taking more moves it forward.
        p.insert(Permit::from(1u64), b"k", 1);
        assert_eq!(p.len(), 2);
        assert_eq!(p.take(Permit::from(1u64), b"k", 5), Some(2));
        assert_eq!(p.take(Permit::from(2u64), b"k", 1), Some(1));
        assert_eq!(p.len(), 0);
    }
}
