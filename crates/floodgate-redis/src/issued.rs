//! The permits this instance issued that have not been given back yet (also
//! the ones it gave out under a lease, see `sharing`,
//! kept with no lease: until given back or forgotten for room). Those Redis
//! admitted are the releases that may wait for Redis when it cannot take
//! them (see [`deferred`](crate::deferred)), and the only ones. A release
//! of a permit this instance did not issue, or gave back already, cannot be
//! checked while Redis is away, so it is refused rather than queued: the
//! queue then never holds more than the permits outstanding here, whatever
//! a client sends.
//!
//! A permit is remembered under its id and a keyed hash of its counter key
//! (one request holds one permit per concurrency limit it matched), with
//! the units it holds. Redis forgets a permit when its lease ends, so this
//! set does too: it is split into shards, each keeping two generations,
//! and a shard's current generation becomes the older one once it has
//! been current for a lease, forgetting the older one (whose permits' leases
//! have all ended by then). It is also bounded in size, as a client may
//! acquire permits on ever-new keys: when a shard's generation is full it
//! becomes the older one early, forgetting the oldest permits. A forgotten
//! permit's release still goes to Redis when Redis answers; only during an
//! outage is it not queued (its units are freed when its lease ends).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use floodgate::Timestamp;
use floodgate_policy::Permit;

/// At most this many shards; fewer for small bounds, so that each shard
/// keeps a useful number of permits.
const MAX_SHARDS: usize = 16;
/// The smallest number of permits a shard is made for when there are
/// several.
const MIN_PER_SHARD: usize = 64;

type Generation = HashMap<(Permit, u64), u64>;

/// A bounded set of permits, with the units each holds.
pub(crate) struct IssuedPermits {
    shards: Box<[Mutex<Shard>]>,
    /// Permits a generation of one shard holds before it becomes the older
    /// one.
    half: usize,
    /// How long a generation stays current (ns; 0: as long as it has room).
    lease_ns: u64,
    /// Permits remembered, over all shards.
    len: AtomicUsize,
    hasher: RandomState,
}

/// Two generations: `previous` holds permits taken before `since`,
/// `current` those taken since, within a lease of it (a permit taken later
/// finds the generations rotated first).
#[derive(Default)]
struct Shard {
    current: Generation,
    previous: Generation,
    /// When `current` became current (ns, the callers' clock).
    since: u64,
}

impl Shard {
    /// Makes `current` the older generation; returns how many permits were
    /// forgotten.
    fn rotate(&mut self, now: u64) -> usize {
        let forgotten = std::mem::replace(&mut self.previous, std::mem::take(&mut self.current));
        self.since = now;
        forgotten.len()
    }
}

impl IssuedPermits {
    /// A set remembering at most `bound` permits (at least 2), each for at
    /// least `lease` (`None`: until forgotten for room).
    pub(crate) fn new(bound: usize, lease: Option<Duration>) -> Self {
        let bound = bound.max(2);
        let shards = (bound / MIN_PER_SHARD).clamp(1, MAX_SHARDS);
        IssuedPermits {
            shards: (0..shards).map(|_| Mutex::default()).collect(),
            half: (bound / shards / 2).max(1),
            lease_ns: lease.map_or(0, |l| u64::try_from(l.as_nanos()).unwrap_or(u64::MAX)),
            len: AtomicUsize::new(0),
            hasher: RandomState::new(),
        }
    }

    /// The most permits remembered at once.
    pub(crate) fn bound(&self) -> usize {
        self.shards.len() * 2 * self.half
    }

    /// Permits remembered now.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    fn id(&self, permit: Permit, key: &[u8]) -> (Permit, u64) {
        (permit, self.hasher.hash_one(key))
    }

    /// The shard of `id`, its generations rotated if the current one has
    /// been current for a lease.
    fn shard(&self, id: (Permit, u64), now: Timestamp) -> std::sync::MutexGuard<'_, Shard> {
        let mixed = id.0.get() as u64 ^ id.1;
        let shard = &self.shards[(mixed % self.shards.len() as u64) as usize];
        // Nothing panics under this lock; a poisoned one is still
        // consistent.
        let mut s = shard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = now.as_nanos();
        let age = now.saturating_sub(s.since);
        if self.lease_ns != 0 && age >= self.lease_ns {
            // Every lease of the older generation has ended; so has every
            // lease of the current one if it was current for two.
            let mut forgotten = s.rotate(now);
            if age / 2 >= self.lease_ns {
                forgotten += s.rotate(now);
            }
            self.len.fetch_sub(forgotten, Ordering::AcqRel);
        }
        s
    }

    /// Remembers that `permit` took `units` more of the counter `key` at
    /// `now`.
    pub(crate) fn insert(&self, permit: Permit, key: &[u8], units: u64, now: Timestamp) {
        let id = self.id(permit, key);
        let mut shard = self.shard(id, now);
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
            let forgotten = shard.rotate(now.as_nanos());
            self.len.fetch_sub(forgotten, Ordering::AcqRel);
        }
        shard.current.insert(id, held);
        self.len.fetch_add(1, Ordering::AcqRel);
    }

    /// If `permit` is remembered for `key`: takes up to `units` from it
    /// (forgetting it once it holds nothing) and returns them. `None`: this
    /// instance did not issue it, gave it back already, or forgot it.
    pub(crate) fn take(
        &self,
        permit: Permit,
        key: &[u8],
        units: u64,
        now: Timestamp,
    ) -> Option<u64> {
        if self.len() == 0 {
            return None;
        }
        let id = self.id(permit, key);
        let mut shard = self.shard(id, now);
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

    fn p(n: u64) -> Permit {
        Permit::from(n)
    }

    const T: Timestamp = Timestamp::ZERO;

    #[test]
    fn remembers_each_permit_of_each_key_until_given_back() {
        let s = IssuedPermits::new(1_000, None);
        assert_eq!(s.take(p(1), b"k", 1, T), None);
        s.insert(p(1), b"k", 2, T);
        s.insert(p(1), b"other", 1, T);
        s.insert(p(2), b"k", 1, T);
        assert_eq!(s.len(), 3);
        assert_eq!(s.take(p(3), b"k", 1, T), None);
        assert_eq!(s.take(p(1), b"k", 1, T), Some(1));
        assert_eq!(s.len(), 3);
        // At most what the permit holds, then it is gone.
        assert_eq!(s.take(p(1), b"k", 5, T), Some(1));
        assert_eq!(s.take(p(1), b"k", 1, T), None);
        assert_eq!(s.take(p(1), b"other", 1, T), Some(1));
        assert_eq!(s.take(p(2), b"k", 1, T), Some(1));
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn a_permit_taken_again_adds_its_units() {
        let s = IssuedPermits::new(100, None);
        s.insert(p(7), b"k", 1, T);
        s.insert(p(7), b"k", u64::MAX, T);
        assert_eq!(s.len(), 1);
        assert_eq!(s.take(p(7), b"k", u64::MAX, T), Some(u64::MAX));
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn stays_bounded_and_forgets_the_oldest() {
        for bound in [0, 1, 2, 3, 64, 100, 1_000, 5_000] {
            let s = IssuedPermits::new(bound, None);
            assert!(s.bound() <= bound.max(2), "{bound}: {}", s.bound());
            for id in 1..=20_000u64 {
                s.insert(p(id), b"k", 1, T);
                assert!(s.len() <= s.bound(), "{bound}");
            }
            assert!(s.len() >= s.bound() / 2, "{bound}: {}", s.len());
            // The newest is remembered, the oldest forgotten.
            assert_eq!(s.take(p(20_000), b"k", 1, T), Some(1), "{bound}");
            assert_eq!(s.take(p(1), b"k", 1, T), None, "{bound}");
            let remembered = (1..20_000u64)
                .filter_map(|id| s.take(p(id), b"k", 1, T))
                .count();
            assert_eq!(s.len(), 0, "{bound}");
            assert!(remembered < s.bound(), "{bound}");
        }
    }

    #[test]
    fn a_permit_moved_from_the_older_generation_is_counted_once() {
        let s = IssuedPermits::new(2, None);
        s.insert(p(1), b"k", 1, T);
        s.insert(p(2), b"k", 1, T);
        // 1 is in the older generation; taking more moves it forward.
        s.insert(p(1), b"k", 1, T);
        assert_eq!(s.len(), 2);
        assert_eq!(s.take(p(1), b"k", 5, T), Some(2));
        assert_eq!(s.take(p(2), b"k", 1, T), Some(1));
        assert_eq!(s.len(), 0);
    }

    /// Remembered for at least a lease, forgotten after two.
    #[test]
    fn permits_are_forgotten_once_their_lease_has_ended() {
        let lease = Duration::from_secs(600);
        let at = |secs: u64| Timestamp::from_secs(secs);
        // One shard (every permit in it).
        let s = IssuedPermits::new(100, Some(lease));
        assert_eq!(s.shards.len(), 1);
        s.insert(p(1), b"k", 1, at(0));
        s.insert(p(2), b"k", 1, at(599));
        s.insert(p(3), b"k", 1, at(599));
        // A lease on: the generation of 1, 2 and 3 is the older one.
        s.insert(p(4), b"k", 1, at(600));
        assert_eq!(s.take(p(1), b"k", 1, at(600)), Some(1));
        assert_eq!(s.len(), 3);
        // Two leases on, 2 and 3 (whose leases ended at 1199) are gone; 4
        // (its lease ends at 1200) is not.
        assert_eq!(s.take(p(2), b"k", 1, at(1_200)), None);
        assert_eq!(s.take(p(4), b"k", 1, at(1_200)), Some(1));
        assert_eq!(s.len(), 0);
        // Untouched for two leases: both generations are forgotten.
        s.insert(p(5), b"k", 1, at(1_300));
        s.insert(p(6), b"k", 1, at(1_899));
        assert_eq!(s.len(), 2);
        assert_eq!(s.take(p(6), b"k", 1, at(3_099)), None);
        assert_eq!(s.len(), 0);
        // A clock going back never rotates.
        s.insert(p(7), b"k", 1, at(5_000));
        assert_eq!(s.take(p(7), b"k", 1, at(10)), Some(1));
    }
}
