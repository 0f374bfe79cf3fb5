//! The local over-limit cache (the idea of Envoy's rate limit service's
//! local cache): once Redis has denied a key with a known `retry_after`,
//! later requests for that key are denied here, without a round trip, until
//! that instant.
//!
//! It never denies what Redis would admit, short of Redis losing its data:
//!
//! * an entry is valid only for the same limit and a cost at least the
//!   denied one (a larger cost waits at least as long), but at most the
//!   limit's quota (the `limit` Redis reported): a larger cost can never
//!   fit, which Redis answers `Never` (not `Denied` with a retry), so it
//!   goes there. On a blocked key too: Redis decides what such a cost gets
//!   there (the answer is Redis's either way, at the price of a round trip
//!   for a request that cannot be admitted);
//! * it expires at `sent + retry_after`, where `sent` is when the request
//!   that was denied left this process: Redis decided after that, so the
//!   true instant is no earlier (other traffic only pushes it later);
//! * concurrency limits (freed by releases, not by time) are never cached.
//!
//! And it never changes what Redis decides later: a request answered here
//! is not charged in Redis, so an entry is only made where that charge
//! could change no later decision (see [`skipping_is_harmless`]), and a
//! batch is only answered here when each of its other keys would be left
//! as it is by a request denied by another limit (no penalty, no block).
//!
//! If Redis loses the key (a restart, a failover to a lagging replica), the
//! cache keeps denying until the retry instant it was told. Capacity is
//! bounded; when full, expired entries go first, then the soonest to expire.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::time::Duration;

use floodgate::algorithms::{AnyLimit, Penalty};
use floodgate::{Decision, Outcome};

/// Keys longer than this are not cached (hashing them costs more than it
/// saves).
const MAX_KEY: usize = 1024;
const SHARDS: usize = 16;

struct Entry {
    limit: AnyLimit,
    min_cost: u64,
    /// Cache-clock nanoseconds.
    until: u64,
    reset_until: u64,
    /// The limit's quota, as Redis reported it (`limit`): also the largest
    /// cost answered here, as a larger one can never fit.
    quota: u64,
    remaining: u64,
}

/// Whether a denial of `limit` may be remembered: whether, until the
/// denial's retry instant, denying a request for the key here instead of in
/// Redis (which then does not see it) changes no later decision. `charged`
/// says whether the denial came from a charging call (not a dry run).
///
/// * No penalty and no block: a denied request changes nothing in Redis.
/// * A block (after a charging call): the denial blocked the key until the
///   retry instant, and a blocked key is left as it is by every request.
/// * A fixed window with a penalty (after a charging call; any limit that
///   forgets its counts at a window's end, [`AnyLimit::reset_window`]): the
///   denial was counted, so the window's count is over the limit until the
///   window ends (the retry instant); more denials counted there would
///   change no decision (every cost is denied, nothing remains, the window reopens
///   at its end either way).
/// * Any other penalty-mode limit: never. Counting a denial moves a GCRA
///   bucket's or a shaper's state, adds to a sliding window's count or to
///   a sliding log, all of which outlive the retry instant.
pub(crate) fn skipping_is_harmless(limit: &AnyLimit, charged: bool) -> bool {
    if limit.is_concurrency() {
        return false;
    }
    if limit.penalty_mode() == Penalty::None && limit.block().is_zero() {
        return true;
    }
    charged && (!limit.block().is_zero() || limit.reset_window().is_some())
}

/// A bounded map from keys to the instant their denial ends.
type Shard = Mutex<HashMap<Box<[u8]>, Entry>>;

pub(crate) struct OverLimitCache {
    shards: Box<[Shard]>,
    per_shard: usize,
    hasher: RandomState,
}

impl OverLimitCache {
    pub(crate) fn new(capacity: usize) -> Self {
        OverLimitCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// The denial still in force for `key` under `limit` at cost `cost`, as
    /// seen at `now` (cache-clock nanoseconds).
    pub(crate) fn get(
        &self,
        key: &[u8],
        limit: &AnyLimit,
        cost: u64,
        now: u64,
    ) -> Option<Decision> {
        if key.len() > MAX_KEY || cost == 0 {
            return None;
        }
        let shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let e = shard.get(key)?;
        if e.until <= now || cost < e.min_cost || cost > e.quota || &e.limit != limit {
            return None;
        }
        Some(Decision {
            outcome: Outcome::Denied,
            limit: e.quota,
            remaining: e.remaining,
            reset_after: Duration::from_nanos(e.reset_until.saturating_sub(now)),
            retry_after: Some(Duration::from_nanos(e.until - now)),
        })
    }

    /// Remembers Redis's denial of `key` (cost `cost`) for a request sent at
    /// `sent`; `charged` says whether Redis was asked to charge it (not a dry
    /// run). Returns whether it was stored.
    pub(crate) fn insert(
        &self,
        key: &[u8],
        limit: &AnyLimit,
        cost: u64,
        sent: u64,
        d: &Decision,
        charged: bool,
    ) -> bool {
        let retry = match (d.outcome, d.retry_after) {
            (Outcome::Denied, Some(r)) if !r.is_zero() => r,
            _ => return false,
        };
        // A cost above the quota (a blocked key's denial of one) makes an
        // entry that answers nothing: it is not to replace one that does.
        if key.len() > MAX_KEY
            || cost == 0
            || cost > d.limit
            || !skipping_is_harmless(limit, charged)
        {
            return false;
        }
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let entry = Entry {
            limit: limit.clone(),
            min_cost: cost,
            until: sent.saturating_add(nanos(retry)),
            reset_until: sent.saturating_add(nanos(d.reset_after)),
            quota: d.limit,
            remaining: d.remaining,
        };
        let mut shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if shard.len() >= self.per_shard && !shard.contains_key(key) {
            shard.retain(|_, e| e.until > sent);
            if shard.len() >= self.per_shard {
                let soonest = shard
                    .iter()
                    .min_by_key(|(_, e)| e.until)
                    .map(|(k, _)| k.clone());
                if let Some(k) = soonest {
                    shard.remove(&k);
                }
            }
        }
        shard.insert(key.into(), entry);
        true
    }

    /// Forgets the denial of `key`: units were given back there (a
    /// refund), so a request may fit before the retry instant.
    pub(crate) fn forget(&self, key: &[u8]) {
        if key.len() > MAX_KEY {
            return;
        }
        self.shard(key)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }

    /// Entries held (expired ones included until they are swept).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .len()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::algorithms::{
        Concurrency, FixedWindow, Gcra, NginxRate, Shaper, ShaperDelay, SlidingLog, SlidingWindow,
        SubWindowCounter,
    };

    fn denial(retry_ms: u64) -> Decision {
        Decision {
            outcome: Outcome::Denied,
            limit: 5,
            remaining: 0,
            reset_after: Duration::from_millis(retry_ms),
            retry_after: Some(Duration::from_millis(retry_ms)),
        }
    }

    #[test]
    fn valid_until_retry_for_larger_costs_only() {
        let c = OverLimitCache::new(100);
        let l = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(1)).unwrap());
        assert!(c.insert(b"k", &l, 2, 1_000, &denial(10), true));
        let end = 1_000 + 10_000_000;
        assert!(c.get(b"k", &l, 2, end - 1).is_some());
        assert!(c.get(b"k", &l, 3, end - 1).is_some());
        assert!(c.get(b"k", &l, 1, 2_000).is_none());
        assert!(c.get(b"k", &l, 2, end).is_none());
        let other = AnyLimit::from(FixedWindow::new(6, Duration::from_secs(1)).unwrap());
        assert!(c.get(b"k", &other, 2, 2_000).is_none());
        let gcra = AnyLimit::from(Gcra::new(5, Duration::from_secs(1), 5).unwrap());
        assert!(!c.insert(b"p", &gcra.with_penalty(true), 1, 0, &denial(10), true));
    }

    #[test]
    fn costs_that_never_fit_are_left_to_redis() {
        let c = OverLimitCache::new(100);
        let l = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(1)).unwrap());
        assert!(c.insert(b"k", &l, 5, 0, &denial(10), true));
        // The quota (5) is the largest cost a denial stands for; 6 never
        // fits, which only Redis answers (`Never`).
        assert!(c.get(b"k", &l, 5, 1).is_some());
        assert!(c.get(b"k", &l, 6, 1).is_none());
        assert!(c.get(b"k", &l, u64::MAX, 1).is_none());
        // A blocked key too: Redis answers such a cost.
        let b = l.with_block(Duration::from_secs(1));
        assert!(c.insert(b"b", &b, 5, 0, &denial(10), true));
        assert!(c.get(b"b", &b, 5, 1).is_some());
        assert!(c.get(b"b", &b, 6, 1).is_none());
        // Nor is a denial of such a cost remembered (it would replace an
        // entry with one that answers nothing).
        assert!(!c.insert(b"b", &b, 6, 0, &denial(10), true));
        assert!(c.get(b"b", &b, 5, 1).is_some());
    }

    #[test]
    fn bounded() {
        let c = OverLimitCache::new(32);
        let l = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(1)).unwrap());
        for i in 0..10_000u32 {
            c.insert(
                &i.to_le_bytes(),
                &l,
                1,
                u64::from(i),
                &denial(1 + u64::from(i) % 7),
                true,
            );
        }
        assert!(c.len() <= 32);
    }

    #[test]
    fn penalties_and_blocks_are_cached_only_where_harmless() {
        let sec = Duration::from_secs(1);
        let kinds: [AnyLimit; 7] = [
            FixedWindow::new(5, sec).unwrap().into(),
            Gcra::new(5, sec, 5).unwrap().into(),
            SlidingWindow::new(5, sec).unwrap().into(),
            SubWindowCounter::new(5, sec, 4).unwrap().into(),
            SlidingLog::new(5, sec).unwrap().into(),
            Shaper::new(NginxRate::PerSecond(5), 2, ShaperDelay::NoDelay)
                .unwrap()
                .into(),
            Concurrency::new(5).unwrap().into(),
        ];
        for (n, l) in kinds.iter().enumerate() {
            let fixed = n == 0;
            let conc = l.is_concurrency();
            for charged in [false, true] {
                assert_eq!(skipping_is_harmless(l, charged), !conc);
                for p in [Penalty::OwnDenials, Penalty::AllDenials] {
                    let pen = l.clone().with_penalty_mode(p);
                    assert_eq!(skipping_is_harmless(&pen, charged), fixed && charged);
                    let blocked = pen.with_block(sec);
                    assert_eq!(skipping_is_harmless(&blocked, charged), charged && !conc);
                }
                let blocked = l.clone().with_block(sec);
                assert_eq!(skipping_is_harmless(&blocked, charged), charged && !conc);
            }
        }
    }
}
