//! The local over-limit cache (the idea of Envoy's rate limit service's
//! local cache): once Redis has denied a key with a known `retry_after`,
//! later requests for that key are denied here, without a round trip, until
//! that instant.
//!
//! It never denies what Redis would admit, short of Redis losing its data:
//!
//! * an entry is valid only for the same limit and a cost at least the
//!   denied one (a larger cost waits at least as long);
//! * it expires at `sent + retry_after`, where `sent` is when the request
//!   that was denied left this process: Redis decided after that, so the
//!   true instant is no earlier (other traffic only pushes it later);
//! * concurrency limits (freed by releases, not by time) and penalty-mode
//!   limits (whose denials must still be counted in Redis) are never cached,
//!   and a request with a penalty-mode limit always goes to Redis.
//!
//! If Redis loses the key (a restart, a failover to a lagging replica), the
//! cache keeps denying until the retry instant it was told. Capacity is
//! bounded; when full, expired entries go first, then the soonest to expire.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::time::Duration;

use floodgate::algorithms::AnyLimit;
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
    quota: u64,
    remaining: u64,
}

/// A bounded map from keys to the instant their denial ends.
type Shard = Mutex<HashMap<Box<[u8]>, Entry>>;

pub(crate) struct OverLimitCache {
    shards: Box<[Shard]>,
    per_shard: usize,
    hasher: RandomState,
}

impl OverLimitCache {
    pub fn new(capacity: usize) -> Self {
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
    pub fn get(&self, key: &[u8], limit: &AnyLimit, cost: u64, now: u64) -> Option<Decision> {
        if key.len() > MAX_KEY || cost == 0 {
            return None;
        }
        let shard = self.shard(key).lock().unwrap_or_else(|p| p.into_inner());
        let e = shard.get(key)?;
        if e.until <= now || cost < e.min_cost || &e.limit != limit {
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
    /// `sent`. Returns whether it was stored.
    pub fn insert(&self, key: &[u8], limit: &AnyLimit, cost: u64, sent: u64, d: &Decision) -> bool {
        let retry = match (d.outcome, d.retry_after) {
            (Outcome::Denied, Some(r)) if !r.is_zero() => r,
            _ => return false,
        };
        if key.len() > MAX_KEY || cost == 0 || limit.penalty() || limit.is_concurrency() {
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
        let mut shard = self.shard(key).lock().unwrap_or_else(|p| p.into_inner());
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

    /// Entries held (expired ones included until they are swept).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::algorithms::FixedWindow;

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
        assert!(c.insert(b"k", &l, 2, 1_000, &denial(10)));
        let end = 1_000 + 10_000_000;
        assert!(c.get(b"k", &l, 2, end - 1).is_some());
        assert!(c.get(b"k", &l, 3, end - 1).is_some());
        assert!(c.get(b"k", &l, 1, 2_000).is_none());
        assert!(c.get(b"k", &l, 2, end).is_none());
        let other = AnyLimit::from(FixedWindow::new(6, Duration::from_secs(1)).unwrap());
        assert!(c.get(b"k", &other, 2, 2_000).is_none());
        assert!(!c.insert(b"p", &l.clone().with_penalty(true), 1, 0, &denial(10)));
    }

    #[test]
    fn bounded() {
        let c = OverLimitCache::new(32);
        let l = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(1)).unwrap());
        for i in 0..10_000u32 {
            c.insert(&i.to_le_bytes(), &l, 1, i as u64, &denial(1 + i as u64 % 7));
        }
        assert!(c.len() <= 32);
    }
}
