//! Where counters live. The engine decides through a [`Backend`]: the
//! embedded in-memory store ([`MemoryBackend`]) or a shared one (Redis).

mod decided;
mod held;
mod key_id;
mod leased;

use std::future::Future;
use std::time::Duration;

use floodgate::algorithms::{AnyLimit, Packed, PackedState};
use floodgate::{Apply, Decision, Store, StoreConfig, Timestamp};
use smallvec::SmallVec;
use thiserror::Error;

use crate::failure::OnFailure;
use crate::permit::Permit;
use crate::sync_mode::{Held, SyncMode};
use crate::zones::Zones;
use held::HeldPermits;
use key_id::KeyIds;

pub use decided::{Decided, Fallback};
pub use key_id::KeyId;

/// One counter of a request: a key, its limit and the request's cost.
#[derive(Clone, Copy, Debug)]
pub struct Item<'a> {
    /// The keys of one rule share a group: a backend keeps a group together
    /// (one Redis hash slot), so a rule's limits are always decided
    /// atomically. The group is a prefix of `key`.
    pub group: &'a [u8],
    /// The counter's full key (binary; never empty).
    pub key: &'a [u8],
    /// The limit.
    pub limit: &'a AnyLimit,
    /// The request's cost under this limit (0 checks without charging).
    pub cost: u64,
    /// The rule's failure policy, if it sets one: what a shared backend
    /// does with this item when it cannot decide (`None`: the backend's
    /// own policy). The in-memory backend always decides and ignores it.
    pub on_failure: Option<OnFailure>,
    /// The rule's synchronisation mode, if it sets one: how a shared
    /// backend shares this counter between instances (`None`: the
    /// backend's own default). The in-memory backend ignores it.
    pub sync: Option<SyncMode>,
    /// Identifies the acquisition for a concurrency limit: the request's
    /// permit, the same value at [`Backend::release`] as at
    /// [`Backend::decide`]. A backend records the units each permit took
    /// of each key and gives back at most those, once (see
    /// [`Released`]). For a concurrency limit with a lease, the holder of
    /// its units instead (the low 64 bits: the hash of the descriptor's
    /// holder entry, or [`Permit::NONE`] for none), whose units live in the
    /// counter's state. [`Permit::NONE`] for other limits.
    pub permit: Permit,
    /// The nginx zone the counter belongs to, when its limit is a shaper
    /// whose node expiry can change a decision (see
    /// [`RuleLimit::zone`](crate::compile::RuleLimit::zone)); `None`
    /// otherwise. The in-memory backend keeps such counters in one
    /// [`ShaperZone`](floodgate::store::ShaperZone) per zone, deleting
    /// their nodes exactly when nginx would; Redis keeps each counter on
    /// its own (a key keeps its state until it has drained).
    pub zone: Option<u64>,
}

/// What a [`Backend::release`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The units given back now: at most what the permit held of the key.
    Given(u64),
    /// The store cannot take them now; the backend holds this permit (it
    /// admitted it) and gives these units back as soon as it can.
    Queued(u64),
    /// The permit holds nothing of this key: it was never issued, was
    /// issued for another key, was given back already, or its lease ended.
    /// Nothing changed.
    NotHeld,
}

impl Released {
    /// The units given back or queued (0 when not held).
    pub fn units(self) -> u64 {
        match self {
            Released::Given(u) | Released::Queued(u) => u,
            Released::NotHeld => 0,
        }
    }
}

/// A backend that could not decide.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BackendError {
    /// The backend cannot be reached (connection refused, reset, no node).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The backend did not answer in time.
    #[error("backend timed out after {0:?}")]
    Timeout(Duration),
    /// The backend answered something unexpected.
    #[error("unexpected backend reply: {0}")]
    Protocol(String),
}

/// A store of counters that decides atomically.
pub trait Backend: Send + Sync + 'static {
    /// Decides on one request against all `items` atomically: every limit
    /// admits it and every one is charged, or none is (penalty-mode limits
    /// excepted), exactly as [`Store::decide_many`] (items with equal keys
    /// decided in order). Writes each item's decision to `out` (same order
    /// and length) and returns the narrowest.
    ///
    /// [`Apply::Check`] is a dry run: each decision is exactly what
    /// [`Apply::Commit`] would answer (as [`Store::simulate_many`]), and
    /// nothing changes.
    ///
    /// `now` is the caller's clock; a backend may use its own (Redis uses the
    /// server's clock so that all instances agree).
    fn decide<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send + 'a;

    /// [`decide`](Self::decide), saying also who decided: the store, or a
    /// failure policy standing in for it ([`Decided::fallback`]). What the
    /// engine calls, so that a request answered by a failure policy is
    /// counted so. By default the store always decides (the in-memory
    /// store); a backend with a failure policy says when it acted.
    #[allow(clippy::manual_async_fn)] // the future must be `Send`
    fn decide_by<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decided, BackendError>> + Send + 'a {
        async move {
            self.decide(items, now, apply, out)
                .await
                .map(Decided::by_store)
        }
    }

    /// Gives back up to `units` of a concurrency limit that `item.permit`
    /// took of `item.key` when it was admitted: at most what that permit
    /// still holds of that key, so a release of a permit never issued,
    /// issued for another key or given back already changes nothing
    /// ([`Released::NotHeld`]). An error when the store could neither take
    /// the release nor keep it for later.
    fn release<'a>(
        &'a self,
        item: Item<'a>,
        units: u64,
        now: Timestamp,
    ) -> impl Future<Output = Result<Released, BackendError>> + Send + 'a;

    /// The backend as one that decides without IO, if it is one (the
    /// in-memory store): the engine then decides synchronously, without
    /// building the futures of [`decide`](Self::decide). `None` by default.
    fn as_sync(&self) -> Option<&dyn SyncBackend> {
        None
    }

    /// The synchronisation mode `item`'s counter is decided in, and what
    /// this instance holds of it (leased units, hits not pushed yet), for a
    /// shared backend; `None` for a backend without modes (the in-memory
    /// store, where every decision is this process's).
    fn held(&self, item: &Item<'_>) -> Option<Held> {
        let _ = item;
        None
    }

    /// Called with each new policy once it is in place, so that a backend
    /// can drop what only rules no longer configured used (the in-memory
    /// backend's nginx zones). Nothing by default.
    fn keep_zones(&self, policy: &crate::compile::PolicySet) {
        let _ = policy;
    }

    /// Whether the backend can decide right now (for readiness checks).
    fn is_ready(&self) -> bool;

    /// A short name for logs and metrics (`"memory"`, `"redis"`).
    fn name(&self) -> &'static str;
}

/// A backend that decides without IO (see [`Backend::as_sync`]).
pub trait SyncBackend: Send + Sync {
    /// What [`Backend::decide`] would resolve to, decided now; it cannot
    /// fail.
    fn decide_now(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Decision;
}

/// The embedded store: counters in this process's memory, each held
/// under its key's [`KeyId`], a 64-bit keyed hash (see [`KeyId`] for what
/// that changes: two keys share a counter with a chance of about n²/2⁶⁵
/// among `n` keys held).
///
/// The concurrency units each permit took of each key are remembered
/// while they are held (one entry per permit and key, so never more
/// entries than units held), and a release gives back at most those:
/// permits cannot be forged, released twice, or released for another key.
pub struct MemoryBackend {
    store: Store<KeyId, PackedState>,
    ids: KeyIds,
    zones: Zones,
    permits: HeldPermits,
}

impl MemoryBackend {
    /// A store sized by `config`.
    pub fn new(config: StoreConfig) -> Result<Self, floodgate::ConfigError> {
        Ok(MemoryBackend {
            store: Store::new(config)?,
            ids: KeyIds::random(),
            zones: Zones::new(config.capacity),
            permits: HeldPermits::new(),
        })
    }

    /// The underlying store (sizes and counters), keyed by each counter
    /// key's [`KeyId`], each state packed in 16 bytes ([`PackedState`]):
    /// 32-byte entries.
    pub fn store(&self) -> &Store<KeyId, PackedState> {
        &self.store
    }

    /// Bytes the store's tables take once `keys` counters are held in a
    /// store sized by `config` (see [`Store::bytes_holding`]).
    pub fn bytes_holding(config: StoreConfig, keys: usize) -> usize {
        Store::<KeyId, PackedState>::bytes_holding(config, keys)
    }

    /// Counters held in nginx zones (shaper limits whose node expiry can
    /// change a decision), which the [`store`](Self::store) does not hold.
    pub fn zone_keys(&self) -> usize {
        self.zones.len()
    }

    /// The synchronous [`release`](Backend::release).
    pub fn release_now(&self, item: Item<'_>, units: u64, now: Timestamp) -> Released {
        if item.limit.is_leased() {
            return self.release_leased(item, units, now);
        }
        let id = self.ids.of(item.key);
        let Some(given) = self.permits.take(item.permit, id, units) else {
            return Released::NotHeld;
        };
        self.store.update(&Packed(item.limit), &id, now, |s| {
            s.update(|s| item.limit.release(s, given));
        });
        Released::Given(given)
    }

    /// Permit and key pairs holding concurrency units now.
    pub fn held_permits(&self) -> usize {
        self.permits.len()
    }

    /// Remembers the units the concurrency items of a decided batch took
    /// (all of them when it was admitted and charged, none otherwise).
    #[inline]
    fn record(&self, items: &[Item<'_>], ids: &[KeyId], d: Decision, apply: Apply) {
        if !(apply.charge_if_allowed() && d.is_allowed()) {
            return;
        }
        for (i, id) in items.iter().zip(ids) {
            // Leased units are kept with their holders in the state itself.
            if i.cost > 0 && i.limit.is_concurrency() && !i.limit.is_leased() {
                self.permits.insert(i.permit, *id, i.cost);
            }
        }
    }
}

impl SyncBackend for MemoryBackend {
    fn decide_now(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Decision {
        if items.iter().any(|i| i.limit.is_leased()) {
            return self.decide_leased(items, now, apply, out);
        }
        self.decide_unleased(items, now, apply, out)
    }
}

impl MemoryBackend {
    /// [`SyncBackend::decide_now`] of a request without leased limits.
    fn decide_unleased(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Decision {
        const INLINE: usize = 16;
        if Zones::any(items) {
            let ids: SmallVec<[KeyId; INLINE]> = items.iter().map(|i| self.ids.of(i.key)).collect();
            let d = self.zones.decide(&self.store, items, &ids, now, apply, out);
            self.record(items, &ids, d, apply);
            return d;
        }
        if apply == Apply::Check {
            return self.simulate(items, now, out);
        }
        if let [item] = items {
            // One counter: no batch to lay out.
            let id = self.ids.of(item.key);
            let d = self
                .store
                .decide(&Packed(item.limit), &id, now, item.cost, apply);
            out[0] = d;
            self.record(items, &[id], d, apply);
            return d;
        }
        self.decide_batch(items, now, apply, out)
    }

    /// [`decide_unleased`](Self::decide_unleased) of several counters, none
    /// in a zone: one batch of the store.
    fn decide_batch(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Decision {
        const INLINE: usize = 16;
        if items.len() <= INLINE {
            let mut ids = [0; INLINE];
            for (id, i) in ids.iter_mut().zip(items) {
                *id = self.ids.of(i.key);
            }
            let limits: [Packed<&AnyLimit>; INLINE] =
                std::array::from_fn(|n| Packed(items[n.min(items.len() - 1)].limit));
            let batch: [floodgate::store::Item<'_, KeyId, Packed<&AnyLimit>>; INLINE] =
                std::array::from_fn(|n| floodgate::store::Item {
                    key: &ids[n],
                    limit: &limits[n],
                    cost: items[n.min(items.len() - 1)].cost,
                });
            let d = self
                .store
                .decide_many(&batch[..items.len()], now, apply, out);
            self.record(items, &ids[..items.len()], d, apply);
            d
        } else {
            let ids: Vec<KeyId> = items.iter().map(|i| self.ids.of(i.key)).collect();
            let limits: Vec<Packed<&AnyLimit>> = items.iter().map(|i| Packed(i.limit)).collect();
            let batch: Vec<_> = items
                .iter()
                .zip(&ids)
                .zip(&limits)
                .map(|((i, id), limit)| floodgate::store::Item {
                    key: id,
                    limit,
                    cost: i.cost,
                })
                .collect();
            let d = self.store.decide_many(&batch, now, apply, out);
            self.record(items, &ids, d, apply);
            d
        }
    }
}

impl MemoryBackend {
    /// A dry run: what a commit would decide, changing nothing.
    fn simulate(&self, items: &[Item<'_>], now: Timestamp, out: &mut [Decision]) -> Decision {
        let ids: SmallVec<[KeyId; 16]> = items.iter().map(|i| self.ids.of(i.key)).collect();
        let limits: SmallVec<[Packed<&AnyLimit>; 16]> =
            items.iter().map(|i| Packed(i.limit)).collect();
        let batch: SmallVec<[floodgate::store::Item<'_, KeyId, Packed<&AnyLimit>>; 16]> = items
            .iter()
            .zip(&ids)
            .zip(&limits)
            .map(|((i, id), limit)| floodgate::store::Item {
                key: id,
                limit,
                cost: i.cost,
            })
            .collect();
        self.store.simulate_many(&batch, now, out)
    }
}

impl Backend for MemoryBackend {
    fn decide<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send + 'a {
        std::future::ready(Ok(self.decide_now(items, now, apply, out)))
    }

    fn release<'a>(
        &'a self,
        item: Item<'a>,
        units: u64,
        now: Timestamp,
    ) -> impl Future<Output = Result<Released, BackendError>> + Send + 'a {
        std::future::ready(Ok(self.release_now(item, units, now)))
    }

    fn as_sync(&self) -> Option<&dyn SyncBackend> {
        Some(self)
    }

    fn keep_zones(&self, policy: &crate::compile::PolicySet) {
        self.zones.keep(policy);
    }

    fn is_ready(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}
