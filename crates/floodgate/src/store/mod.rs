//! The in-memory store: keyed, concurrent, sharded, bounded.
//!
//! Each key's state lives in one of a power-of-two number of shards, each a
//! hash table behind its own lock (padded to a cache line). A decision locks
//! one shard, runs the algorithm's pure decision function on the key's state
//! and unlocks: exact under any contention. Several keys decided together
//! ([`Store::decide_many`]) lock their shards in ascending order, so batches
//! never deadlock and all-or-nothing holds across keys.
//!
//! Before taking the lock, a decision prefetches what it will touch: the
//! key's control bytes and home bucket (from where the shard last published
//! its table to be) and the lock's own line, the last two for writing. The
//! fetches, from memory or from the other core that last wrote them, then
//! overlap the clock read instead of following one another inside the
//! critical section.
//!
//! Memory is bounded, and a flood of new keys cannot buy a key its quota
//! back. A key whose state equals a fresh key's (a full bucket, an expired
//! window, a log with no entry, a drained shaper, no permit held) is
//! dropped by the next sweep, which runs when a shard has doubled since the
//! last one: dropping it changes no decision. Every state still held
//! restricts its key: its next decision would differ from a fresh key's.
//! At the configured capacity (keys holding concurrency permits count
//! against it like every other), a sweep first drops the fresh-equivalent
//! states; if none is left, the store's [`WhenFull`] rule decides the new
//! key:
//!
//! * [`WhenFull::Admit`] (the default): the request is decided as a fresh
//!   key's and no state is kept (counted in
//!   [`StoreStats::admitted_full`]). No restriction held is erased, at any
//!   cost: a restricted key keeps its state until it equals a fresh one.
//!   No new user is turned away. The price: while the store stays full,
//!   a key without state gets a fresh key's decision at each request. To
//!   keep it full, a client must keep `capacity` keys restricted at once
//!   (a request on each at least once per restore period: a fixed
//!   window's length, a bucket's emission interval, a permit held).
//! * [`WhenFull::Deny`]: the new key's request is denied, retry after a
//!   second (counted in [`StoreStats::denied_full`]). No restriction is
//!   erased, but keeping the store full (the same cost) turns every new
//!   key away.
//! * [`WhenFull::Evict`]: the least recently used eighth of the shard's
//!   states (keys holding permits excepted) is evicted (counted in
//!   [`StoreStats::evictions`]). Erasing a victim's restriction costs
//!   about `capacity` new keys, one request each, sent after the victim's
//!   last request.
//!
//! A key holding permits is never dropped (its release must find them), so
//! when only such keys are left even `Evict` admits the new key without
//! state. A full shard is swept again at most once a second (idle
//! instants are whole seconds), so a restriction that lapses makes room
//! for a new key within a second.

mod batch;
mod full;
mod lock;
mod prefetch;
mod shard;
mod slot;
mod spread;
mod visit;
mod zone;

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::algorithm::{Algorithm, Apply};
use crate::key::ToKey;
use crate::{ConfigError, Decision, Timestamp};
use full::without_room;
use prefetch::Prefetch;
use shard::{Entry, Shard, Swept, idle_secs, prefetch_entry};
use slot::{Slot, SlotGuard};
use spread::Spread;

pub use batch::Item;
pub use full::WhenFull;
pub use zone::{ShaperZone, ZoneGuard};

/// Sizing of a [`Store`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// The most keys kept (default 1 048 576); what happens to a new key
    /// beyond it is `when_full`.
    pub capacity: usize,
    /// Number of shards, a power of two (default 64).
    pub shards: usize,
    /// What a full store does with a new key (default
    /// [`WhenFull::Admit`]).
    pub when_full: WhenFull,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            capacity: 1 << 20,
            shards: 64,
            when_full: WhenFull::default(),
        }
    }
}

impl StoreConfig {
    /// The default sizing with another capacity.
    pub fn with_capacity(capacity: usize) -> Self {
        StoreConfig {
            capacity,
            ..Self::default()
        }
    }
}

/// Counters of a [`Store`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Keys currently held.
    pub keys: usize,
    /// Bytes their tables take ([`Store::bytes`]).
    pub bytes: usize,
    /// Keys dropped because their state had become equal to a fresh key's.
    pub reclaimed: u64,
    /// Keys evicted (least recently used first) because the store was full
    /// ([`WhenFull::Evict`]).
    pub evictions: u64,
    /// Requests of new keys decided without keeping state because the
    /// store was full ([`WhenFull::Admit`], and `Evict` with only keys
    /// holding permits left).
    pub admitted_full: u64,
    /// Requests of new keys denied because the store was full
    /// ([`WhenFull::Deny`]).
    pub denied_full: u64,
}

type Shards<K, S> = Box<[Slot<Shard<K, S>>]>;

/// The shards of a store sized by `config`: as configured, but no more than
/// half the capacity rounded down to a power of two (and at least one), so
/// that the smallest share of the capacity ([`spread`]: the largest is
/// twice the smallest) is at least one key and the shards' capacities add
/// up to the store's exactly.
fn shard_count(config: StoreConfig) -> usize {
    let half = (config.capacity / 2).clamp(1, 1 << 16);
    let most = 1 << half.ilog2();
    config
        .shards
        .clamp(1, 1 << 16)
        .next_power_of_two()
        .min(most)
}

/// A concurrent map from keys to algorithm states. See the module docs.
pub struct Store<K, S> {
    shards: Shards<K, S>,
    /// foldhash's quality variant: the shard is taken from the hash's
    /// middle bits, and with the fast variant some process-wide seeds send
    /// whole ranges of sequential keys (user ids) to a few shards.
    hasher: foldhash::quality::RandomState,
    spread: Spread,
    /// The shards' capacities added up.
    capacity: usize,
    when_full: WhenFull,
    prefetch: Prefetch,
    /// Reclaimed and evicted keys, and new keys admitted and denied when
    /// full, on a line of their own: sweeps write them, while every
    /// decision reads the fields above.
    counters: CachePadded<[AtomicU64; 4]>,
}

impl<K, S> Store<K, S>
where
    K: Hash + Eq,
{
    /// A store sized by `config`.
    pub fn new(config: StoreConfig) -> Result<Self, ConfigError> {
        if config.capacity == 0 {
            return Err(ConfigError::new("capacity", "must be at least 1"));
        }
        if !config.shards.is_power_of_two() || config.shards > 1 << 16 {
            return Err(ConfigError::new(
                "shards",
                format!("must be a power of two up to 65536 (got {})", config.shards),
            ));
        }
        let spread = Spread::new(shard_count(config));
        let shards: Shards<K, S> = spread
            .caps(config.capacity)
            .map(|cap| Slot::new(Shard::new(cap)))
            .collect();
        Ok(Store {
            capacity: shards
                .iter()
                .fold(0, |sum: usize, s| sum.saturating_add(s.lock().cap())),
            shards,
            hasher: foldhash::quality::RandomState::default(),
            spread,
            when_full: config.when_full,
            prefetch: Prefetch::detect(),
            counters: CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))),
        })
    }

    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Shard from bits the table does not use for buckets (low bits) or
    /// tags (top seven bits), in staggered shares (see [`Spread`]).
    #[inline]
    fn shard_of(&self, hash: u64) -> usize {
        self.spread.shard_of(hash)
    }

    fn record(&self, swept: Swept) {
        if swept.reclaimed != 0 {
            self.counters[0].fetch_add(swept.reclaimed, Ordering::Relaxed);
        }
        if swept.evicted != 0 {
            self.counters[1].fetch_add(swept.evicted, Ordering::Relaxed);
        }
    }

    /// The decision for a new key the full store had no room for (see
    /// [`WhenFull`]), counted.
    #[cold]
    fn without_room(&self, fresh: Decision) -> Decision {
        self.count_full(self.when_full);
        without_room(self.when_full, fresh)
    }

    /// Counts a new key's request decided by `rule` for want of room.
    #[cold]
    fn count_full(&self, rule: WhenFull) {
        let counter = if rule == WhenFull::Deny { 3 } else { 2 };
        self.counters[counter].fetch_add(1, Ordering::Relaxed);
    }

    /// Decides on a request of `cost` for `key` under `limit` at `now`.
    #[inline]
    pub fn decide<A, Q>(
        &self,
        limit: &A,
        key: &Q,
        now: Timestamp,
        cost: u64,
        apply: Apply,
    ) -> Decision
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        self.decide_when(limit, key, || now, cost, apply)
    }

    /// [`decide`](Self::decide) at the time `now()` returns, read after the
    /// key's entry has been prefetched (reading a clock takes long enough to
    /// hide much of the fetch).
    #[inline]
    pub(crate) fn decide_when<A, Q>(
        &self,
        limit: &A,
        key: &Q,
        now: impl FnOnce() -> Timestamp,
        cost: u64,
        apply: Apply,
    ) -> Decision
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        let hash = self.hash(key);
        let slot = &self.shards[self.shard_of(hash)];
        prefetch_entry::<K, S>(self.prefetch, slot.hint(), hash);
        slot.prefetch_lock(self.prefetch);
        let now = now();
        let mut shard = slot.lock();
        let now = Timestamp::from_nanos(shard.monotonic(now.as_nanos()));
        let tick = shard.next_tick();
        let base = shard.base();
        if let Some(e) = shard.table.find_mut(hash, |e| e.key.borrow() == key) {
            let (d, idle) = limit.decide_idle(&mut e.state, now, cost, apply);
            e.idle = idle_secs(idle, now, base, limit.pins());
            e.touched = tick;
            return d;
        }
        let mut state = limit.fresh();
        let (d, idle) = limit.decide_idle(&mut state, now, cost, apply);
        // Kept: not idle yet, or pinned (permits held, even at the end of time).
        if idle > now || idle == Timestamp::MAX {
            let (swept, kept) = self.insert(
                &mut shard,
                hash,
                || key.to_key(),
                state,
                (idle, limit.pins()),
                now,
            );
            drop(shard);
            self.record(swept);
            if !kept {
                return self.without_room(d);
            }
        }
        d
    }

    /// Inserts a new key's state if the shard has room (or can make it
    /// under the [`WhenFull`] rule); returns what the sweep removed and
    /// whether the state was kept.
    fn insert(
        &self,
        shard: &mut SlotGuard<'_, Shard<K, S>>,
        hash: u64,
        key: impl FnOnce() -> K,
        state: S,
        (idle, pins): (Timestamp, bool),
        now: Timestamp,
    ) -> (Swept, bool) {
        let touched = shard.tick();
        let (swept, room) = shard.before_insert(now, touched, self.when_full);
        if !room {
            return (swept, false);
        }
        let key = key();
        let buckets = shard.table.num_buckets();
        let first = shard.table.is_empty();
        let idle = idle_secs(idle, now, shard.base(), pins);
        shard.table.insert_unique(
            hash,
            Entry {
                state,
                key,
                idle,
                touched,
            },
            |e| self.hasher.hash_one(&e.key),
        );
        if first || shard.table.num_buckets() != buckets {
            let hint = shard.table_hint();
            shard.set_hint(hint);
        }
        (swept, true)
    }

    /// Runs `f` on the state of `key`, if the store holds it, and updates its
    /// idle time for `limit` (used to release concurrency permits).
    pub fn update<A, Q, R>(
        &self,
        limit: &A,
        key: &Q,
        now: Timestamp,
        f: impl FnOnce(&mut S) -> R,
    ) -> Option<R>
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let slot = &self.shards[self.shard_of(hash)];
        prefetch_entry::<K, S>(self.prefetch, slot.hint(), hash);
        let mut shard = slot.lock();
        let now = Timestamp::from_nanos(shard.monotonic(now.as_nanos()));
        let base = shard.base();
        let e = shard.table.find_mut(hash, |e| e.key.borrow() == key)?;
        let r = f(&mut e.state);
        e.idle = idle_secs(limit.idle_at(&e.state, now), now, base, limit.pins());
        Some(r)
    }

    /// Forgets `key`. Returns whether it was held.
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let mut shard = self.shards[self.shard_of(hash)].lock();
        match shard.table.find_entry(hash, |e| e.key.borrow() == key) {
            Ok(e) => {
                e.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// Drops every key whose state equals a fresh key's at `now`. Sweeps run
    /// by themselves as keys are inserted; this forces one everywhere.
    pub fn sweep(&self, now: Timestamp) {
        for shard in &self.shards {
            let reclaimed = shard.lock().reclaim(now);
            self.record(Swept {
                reclaimed,
                evicted: 0,
            });
        }
    }

    /// Keys currently held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().table.len()).sum()
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots allocated across all shards' tables (memory is proportional).
    pub fn allocated(&self) -> usize {
        self.shards.iter().map(|s| s.lock().table.capacity()).sum()
    }

    /// The bytes of one entry: the key, its state, its idle time and its
    /// LRU tick (4 bytes each), aligned.
    pub const ENTRY: usize = std::mem::size_of::<Entry<K, S>>();

    /// Bytes the shards' tables take: each bucket holds an entry of
    /// [`ENTRY`](Self::ENTRY) bytes and a control byte, each table a group
    /// of control bytes more. What a state allocates beside its entry (a
    /// sliding log's entries, sub-window counts) is not counted.
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().bytes()).sum()
    }

    /// Bytes the tables of a store sized by `config` take once `keys` keys
    /// (up to its capacity) have been inserted: what [`bytes`](Self::bytes)
    /// then reports, give or take the keys' uneven spread over the shards.
    pub fn bytes_holding(config: StoreConfig, keys: usize) -> usize {
        Spread::new(shard_count(config))
            .caps(keys.min(config.capacity))
            .map(|n| shard::table_bytes::<K, S>(shard::buckets_holding(n)))
            .sum()
    }

    /// What the store does with a new key when full.
    pub fn when_full(&self) -> WhenFull {
        self.when_full
    }

    /// The configured capacity (but at least one key per shard).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Counters.
    pub fn stats(&self) -> StoreStats {
        let (keys, bytes) = self.shards.iter().fold((0, 0), |(keys, bytes), s| {
            let shard = s.lock();
            (keys + shard.table.len(), bytes + shard.bytes())
        });
        StoreStats {
            keys,
            bytes,
            reclaimed: self.counters[0].load(Ordering::Relaxed),
            evictions: self.counters[1].load(Ordering::Relaxed),
            admitted_full: self.counters[2].load(Ordering::Relaxed),
            denied_full: self.counters[3].load(Ordering::Relaxed),
        }
    }
}
