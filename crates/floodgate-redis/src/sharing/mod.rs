//! Synchronisation modes: counters decided in this process's memory, shared
//! with the fleet through Redis (see `docs/redis.md`, "Synchronisation
//! modes").
//!
//! * `lease`: an item is admitted here only within a lease, units Redis
//!   granted this instance atomically out of the key's remaining quota
//!   (`lua/lease.lua`), so the fleet never admits more than the limit.
//! * `sync`: an item is decided on a view of the key, Redis's state at the
//!   last push plus this instance's hits since; the hits are pushed and
//!   the state pulled every interval, and after a slice of units at most.
//!
//! Either way the decision itself is the core's: each key's state here (its
//! replica) is a core algorithm state, decided by the core algorithm in the
//! core store (see [`local`]), which also makes a batch of keys atomic.
//! Redis is asked only when a lease runs out or a view needs refreshing;
//! requests for a key whose call is on its way wait for that call (one
//! call per key at a time).

mod bound;
mod calls;
mod clock;
mod entry;
mod local;
mod queue;
mod state;
mod task;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use floodgate::algorithms::{AnyLimit, LimitKind};
use floodgate::{Algorithm, Apply, Decision, Store, StoreConfig, Timestamp};
use floodgate_policy::{BackendError, Held, Item, SyncMode};
use futures_util::future::join_all;
use smallvec::SmallVec;
use tokio::sync::Notify;

use crate::breaker::{Breaker, Pass};
use crate::error::UnsupportedMode;
use crate::fallback::permits::LocalPermits;
use crate::script::{LEASE, SYNC, Script};
use crate::stats::{ResilienceStats, SharingStats};
use crate::{RedisBackend, UnsupportedLimit};

pub use bound::{OverAdmission, over_admission};
pub(crate) use local::Share;

use calls::{Answer, Ask, LeaseAsk, Shared, SyncAsk};
use entry::{Entry, Names};
use local::{Decide, Keep, Signal, Take};
use queue::Queue;

/// Decision passes a request may make before it is decided by Redis
/// instead (other requests took the units each grant brought).
const ROUNDS: usize = 4;

/// Waiters are woken per group of keys.
const WAKE_GROUPS: usize = 64;

/// The breaker and counters every call to Redis goes through.
pub(crate) struct Gate {
    pub breaker: Arc<Breaker>,
    pub stats: Arc<ResilienceStats>,
}

/// What an entry had for the next call.
enum Taken {
    /// A call for it is on its way: wait for it.
    Wait,
    /// Send this.
    Go(Ask),
    /// Nothing to send.
    Nothing,
}

/// The keys decided here, and what they hold.
pub(crate) struct Sharing {
    store: Store<Box<[u8]>, Entry>,
    default: SyncMode,
    /// This instance's id as a lease holder (hex digits).
    holder: String,
    clock: clock::Clock,
    queue: Queue,
    wake: Box<[Notify]>,
    permits: LocalPermits,
    stats: Arc<SharingStats>,
    lease: Script,
    sync: Script,
    /// Set while the background task runs.
    task: Arc<AtomicBool>,
}

/// Why a request was not decided here.
#[derive(Debug)]
pub(crate) enum Failed {
    /// Redis could not be asked (the failure policy decides).
    Backend,
    /// Every grant was taken by other requests first: decide in Redis.
    Starved,
    /// A limit Redis cannot decide exactly (a configuration error).
    Unsupported(UnsupportedLimit),
}

/// How `limit` is decided under `mode`: `None` in Redis (`exact`, or a
/// limit the mode does not apply to).
pub(crate) fn share(mode: SyncMode, limit: &AnyLimit) -> Option<Share> {
    match mode {
        SyncMode::Exact => None,
        SyncMode::Lease { duration } => supports(limit, mode).ok().map(|_| Share::Lease {
            duration: nanos(duration),
        }),
        SyncMode::Sync { interval } => supports(limit, mode).ok().map(|_| Share::Sync {
            interval: nanos(interval),
            slice: bound::slice(limit, interval),
        }),
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Whether `mode` applies to `limit`: leases to windows, token buckets and
/// in-flight limits; sync to windows and token buckets; `exact` to all.
/// Sliding logs and shapers are decided in Redis only: their state is the
/// order of every request, which no lease or count summarises.
pub fn supports(limit: &AnyLimit, mode: SyncMode) -> Result<(), UnsupportedMode> {
    let kind = limit.kind();
    if matches!(mode, SyncMode::Lease { .. }) && !limit.block().is_zero() {
        return Err(UnsupportedMode::new(
            "sync mode lease does not apply to a limit with block_for (a block starts the key \
             afresh, which the leases held elsewhere were granted from); use exact or sync"
                .to_owned(),
        ));
    }
    let ok = match mode {
        SyncMode::Exact => true,
        SyncMode::Lease { .. } => !matches!(kind, LimitKind::SlidingLog(_) | LimitKind::Shaper(_)),
        SyncMode::Sync { .. } => !matches!(
            kind,
            LimitKind::SlidingLog(_) | LimitKind::Shaper(_) | LimitKind::Concurrency(_)
        ),
    };
    if ok {
        return Ok(());
    }
    let what = match kind {
        LimitKind::SlidingLog(_) => "a sliding log (every request's time is its state)",
        LimitKind::Shaper(_) => "a shaper (its delays depend on the order of every request)",
        _ => "an in-flight limit (use lease: permits are leased)",
    };
    Err(UnsupportedMode::new(format!(
        "sync mode {} does not apply to {what}; use exact",
        mode.name()
    )))
}

impl Sharing {
    pub fn new(
        capacity: usize,
        default: SyncMode,
        client_time: bool,
    ) -> Result<Self, floodgate::ConfigError> {
        Ok(Sharing {
            store: Store::new(StoreConfig::with_capacity(capacity.max(1)))?,
            default,
            holder: format!("{:x}", holder_id()),
            clock: clock::Clock::new(client_time),
            queue: Queue::default(),
            wake: (0..WAKE_GROUPS).map(|_| Notify::new()).collect(),
            permits: LocalPermits::new(1_000_000),
            stats: Arc::default(),
            lease: Script::new(LEASE),
            sync: Script::new(SYNC),
            task: Arc::new(AtomicBool::new(false)),
        })
    }

    pub fn stats(&self) -> &Arc<SharingStats> {
        &self.stats
    }

    /// The store-wide default mode.
    pub fn default_mode(&self) -> SyncMode {
        self.default
    }

    /// How `item` is decided: `None` in Redis.
    #[inline]
    pub fn share_of(&self, item: &Item<'_>) -> Option<Share> {
        let mode = item.sync.unwrap_or(self.default);
        if mode == SyncMode::Exact {
            return None;
        }
        share(mode, item.limit)
    }

    /// Whether any of `items` is decided here.
    #[inline]
    pub fn any_local(&self, items: &[Item<'_>]) -> bool {
        items.iter().any(|i| self.share_of(i).is_some())
    }

    /// The mode deciding `item` (for reports).
    pub fn mode_of(&self, item: &Item<'_>) -> SyncMode {
        let mode = item.sync.unwrap_or(self.default);
        match self.share_of(item) {
            Some(_) => mode,
            None => SyncMode::Exact,
        }
    }

    fn wake_of(&self, key: &[u8]) -> &Notify {
        // FNV-1a: any spread will do.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in key.iter().rev().take(32) {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        &self.wake[(h % WAKE_GROUPS as u64) as usize]
    }

    /// Decides `items` here (each with its share), asking Redis for leases
    /// or views as needed. `Failed::Backend` when Redis was needed and
    /// could not answer; `Failed::Starved` when the request should be
    /// decided by Redis instead.
    #[allow(clippy::too_many_arguments)]
    pub async fn decide(
        self: &Arc<Self>,
        redis: &Arc<RedisBackend>,
        gate: &Gate,
        items: &[Item<'_>],
        shares: &[Share],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Result<Decision, Failed> {
        self.ensure_task(redis, gate);
        for _ in 0..ROUNDS {
            let signal = Signal::default();
            let at = self.clock.now(now);
            if let Some(t) = at {
                let d = self.pass(items, shares, t, apply, out, &signal);
                if signal.any_late() && !signal.any() {
                    return self
                        .decide_late(redis, gate, items, shares, now, apply, out, &signal)
                        .await;
                }
                if !signal.any() {
                    self.stats.local_decisions.inc();
                    if apply.charge_if_allowed() && d.is_allowed() {
                        for i in items {
                            if i.permit != 0 && i.cost > 0 && i.limit.is_concurrency() {
                                self.permits.insert(i.permit, i.key, i.cost);
                            }
                        }
                    }
                    return Ok(d);
                }
            }
            let t = at.unwrap_or(Timestamp::ZERO);
            let mut asks: SmallVec<[(usize, Ask); 4]> = SmallVec::new();
            let mut wait = None;
            for (i, item) in items.iter().enumerate() {
                if at.is_some() && !signal.marks(i) {
                    continue;
                }
                if asks.iter().any(|(j, _)| items[*j].key == item.key) {
                    continue;
                }
                // Items with the same key share one counter: their costs add
                // up (as the store merges them).
                let need = if apply == Apply::Check {
                    0
                } else {
                    items
                        .iter()
                        .filter(|j| j.key == item.key)
                        .fold(0u64, |n, j| n.saturating_add(j.cost))
                };
                match self.take(redis, item, shares[i], need, t) {
                    Taken::Go(ask) => asks.push((i, ask)),
                    Taken::Wait => wait = Some(i),
                    Taken::Nothing => {}
                }
            }
            if !asks.is_empty() {
                let keys: SmallVec<[(&[u8], &AnyLimit, Ask); 4]> = asks
                    .iter()
                    .map(|&(i, ask)| (items[i].key, items[i].limit, ask))
                    .collect();
                self.call(redis, gate, &keys, now).await?;
            } else if let Some(i) = wait {
                self.wait(redis, items[i].key, shares[i]).await;
            }
        }
        self.stats.starved.inc();
        Err(Failed::Starved)
    }

    /// A denied batch's items its second pass left undecided (Redis had
    /// never been asked about them): each asked, then decided on its own
    /// as the batch's second pass would have (a penalty charges them).
    #[allow(clippy::too_many_arguments)]
    async fn decide_late(
        &self,
        redis: &RedisBackend,
        gate: &Gate,
        items: &[Item<'_>],
        shares: &[Share],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
        signal: &Signal,
    ) -> Result<Decision, Failed> {
        for (i, item) in items.iter().enumerate() {
            if !signal.marks_late(i) {
                continue;
            }
            let mut decided = None;
            for _ in 0..ROUNDS {
                let t = self.clock.now(now).unwrap_or(Timestamp::ZERO);
                match self.take(redis, item, shares[i], 0, t) {
                    Taken::Go(ask) => {
                        self.call(redis, gate, &[(item.key, item.limit, ask)], now)
                            .await?;
                    }
                    Taken::Wait => self.wait(redis, item.key, shares[i]).await,
                    Taken::Nothing => {}
                }
                let t = self.clock.now(now).unwrap_or(Timestamp::ZERO);
                let one = Signal::default();
                let mode = match apply {
                    Apply::Force if !item.limit.in_flight() => Apply::Force,
                    _ => Apply::Rejected,
                };
                let local = Decide {
                    limit: item.limit,
                    share: shares[i],
                    signal: &one,
                    index: 0,
                    apply: mode,
                    margin: self.margin(shares[i]),
                    queue: &self.queue,
                    multi: false,
                };
                let cost = items
                    .iter()
                    .filter(|j| j.key == item.key)
                    .fold(0u64, |n, j| n.saturating_add(j.cost));
                let d = self.store.decide(&local, item.key, t, cost, mode);
                if !one.any() {
                    decided = Some(d);
                    break;
                }
            }
            let d = decided.ok_or(Failed::Starved)?;
            // Items with the same key share its decision.
            for (j, other) in items.iter().enumerate().skip(i) {
                if other.key == item.key {
                    out[j] = d;
                }
            }
        }
        let mut combined = out[0];
        for d in &out[1..items.len()] {
            combined = combined.narrowest(*d);
        }
        self.stats.local_decisions.inc();
        Ok(combined)
    }

    /// One decision pass in the core store.
    fn pass(
        &self,
        items: &[Item<'_>],
        shares: &[Share],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
        signal: &Signal,
    ) -> Decision {
        let locals: SmallVec<[Decide<'_>; 16]> = items
            .iter()
            .zip(shares)
            .enumerate()
            .map(|(index, (item, &share))| Decide {
                limit: item.limit,
                share,
                signal,
                index,
                apply,
                margin: self.margin(share),
                queue: &self.queue,
                multi: items.len() > 1,
            })
            .collect();
        let batch: SmallVec<[floodgate::store::Item<'_, [u8], Decide<'_>>; 16]> = items
            .iter()
            .zip(&locals)
            .map(|(item, limit)| floodgate::store::Item {
                key: item.key,
                limit,
                cost: item.cost,
            })
            .collect();
        self.store.decide_many(&batch, now, apply, out)
    }

    /// How much earlier than its end a lease stops being used (see
    /// [`clock::Clock::margin`]).
    fn margin(&self, share: Share) -> u64 {
        match share {
            Share::Lease { duration } => self.clock.margin(duration),
            Share::Sync { .. } => 0,
        }
    }

    /// What `item`'s entry sends with the next call (creating it), if no
    /// call for it is on its way.
    fn take(
        &self,
        redis: &RedisBackend,
        item: &Item<'_>,
        share: Share,
        need: u64,
        now: Timestamp,
    ) -> Taken {
        let edit = |e: &mut Entry| take_from(e, share, need, now, Caller::Request);
        if let Some(t) = self.store.update(&Keep, item.key, now, edit) {
            return t;
        }
        let key = redis.layout().key(item.group, item.key);
        let names = Arc::new(Names {
            key: item.key.into(),
            redis: key.name.into(),
            slot: key.slot,
        });
        let out = std::sync::Mutex::new(None);
        let take = Take {
            limit: item.limit,
            names: &names,
            f: std::sync::Mutex::new(Some(|e: &mut Entry| {
                *out.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(take_from(e, share, need, now, Caller::Request));
            })),
        };
        self.store.decide(&take, item.key, now, 0, Apply::Check);
        out.into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .unwrap_or(Taken::Nothing)
    }

    /// Waits for the call on its way for `key` (at most a Redis timeout).
    async fn wait(&self, redis: &RedisBackend, key: &[u8], share: Share) {
        let notified = self.wake_of(key).notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let t = self.clock.now(Timestamp::ZERO).unwrap_or(Timestamp::ZERO);
        let pending = self
            .store
            .update(&Keep, key, t, |e| match share {
                Share::Lease { .. } => e.lease.pending,
                Share::Sync { .. } => e.view.pending,
            })
            .unwrap_or(false);
        if pending {
            let _ = tokio::time::timeout(redis.timeout(), notified).await;
        }
    }

    /// Sends the asks (lease and sync calls, one per hash slot, at once)
    /// and installs the answers; on failure, gives back what was taken.
    async fn call(
        &self,
        redis: &RedisBackend,
        gate: &Gate,
        keys: &[(&[u8], &AnyLimit, Ask)],
        now: Timestamp,
    ) -> Result<(), Failed> {
        let now_arg = redis.now_arg(now);
        let shared = Shared {
            now: &now_arg,
            slack: redis.slack(),
            permit_lease: redis.permit_lease_ms(),
            holder: &self.holder,
        };
        // Names of every key (its slot and Redis name), from the entries.
        let t = self.clock.now(now).unwrap_or(Timestamp::ZERO);
        let mut named: Vec<(Arc<Names>, &AnyLimit, Ask)> = Vec::with_capacity(keys.len());
        for &(key, limit, ask) in keys {
            if let Some(Some(names)) = self.store.update(&Keep, key, t, |e| e.names.clone()) {
                named.push((names, limit, ask));
            }
        }
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (i, (names, _, ask)) in named.iter().enumerate() {
            let lease = matches!(ask, Ask::Lease(_));
            let slot = if redis.is_cluster() { names.slot } else { 0 };
            match groups.iter_mut().find(|g| {
                let (n, _, a) = &named[g[0]];
                matches!(a, Ask::Lease(_)) == lease
                    && (!redis.is_cluster() || n.slot == slot)
                    && g.len() < 256
            }) {
                Some(g) => g.push(i),
                None => groups.push(vec![i]),
            }
        }
        let results = join_all(
            groups
                .iter()
                .map(|g| self.call_group(redis, gate, &shared, &named, g, now)),
        )
        .await;
        let mut first_error = None;
        for r in results {
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn call_group(
        &self,
        redis: &RedisBackend,
        gate: &Gate,
        shared: &Shared<'_>,
        named: &[(Arc<Names>, &AnyLimit, Ask)],
        group: &[usize],
        now: Timestamp,
    ) -> Result<(), Failed> {
        let lease = matches!(named[group[0]].2, Ask::Lease(_));
        let script = if lease { &self.lease } else { &self.sync };
        let keys: Vec<(&[u8], &AnyLimit, Ask)> = group
            .iter()
            .map(|&i| (&*named[i].0.redis, named[i].1, named[i].2))
            .collect();
        let result = match calls::command(script, shared, &keys) {
            Ok(cmd) => {
                let sent = self.clock.local();
                self.gated(gate, redis.run_script(script, &cmd))
                    .await
                    .and_then(|v| calls::parse(v, keys.len(), lease))
                    .map(|answers| (answers, sent))
                    .map_err(|_| Failed::Backend)
            }
            Err(e) => Err(Failed::Unsupported(e)),
        };
        if lease {
            self.stats.lease_calls.inc();
        } else {
            self.stats.syncs.inc();
            self.stats.keys_synced.add(keys.len() as u64);
        }
        let t = self.clock.now(now).unwrap_or(Timestamp::ZERO);
        match result {
            Ok((answers, sent)) => {
                self.clock.observe(sent, self.clock.local(), answers.now_us);
                if answers.resets > 0 {
                    redis.stats().state_resets.add(answers.resets);
                }
                let t = self.clock.now(now).unwrap_or(t);
                for (&i, answer) in group.iter().zip(&answers.keys) {
                    let (names, _, ask) = &named[i];

                    self.install(names, *ask, answer, answers.now_us, t);
                }
                Ok(())
            }
            Err(e) => {
                for &i in group {
                    let (names, _, ask) = &named[i];
                    self.store
                        .update(&Keep, &*names.key, t, |e| give_back(e, *ask));
                    self.wake_of(&names.key).notify_waiters();
                }
                Err(e)
            }
        }
    }

    /// Runs `call` through the breaker.
    async fn gated<T>(
        &self,
        gate: &Gate,
        call: impl std::future::Future<Output = Result<T, BackendError>>,
    ) -> Result<T, BackendError> {
        let Some(pass) = gate.breaker.pass(&gate.stats) else {
            gate.stats.short_circuited.inc();
            return Err(BackendError::Unavailable("circuit breaker open".into()));
        };
        let result = call.await;
        let ok = result.is_ok();
        match pass {
            Pass::Probe(p) => p.finish(ok),
            Pass::Call if ok => gate.breaker.success(),
            Pass::Call => gate.breaker.failure(&gate.stats),
        }
        if !ok {
            gate.stats.backend_errors.inc();
        }
        result
    }

    /// Installs a key's answer in its entry, wakes its waiters, and queues
    /// the entry for the end of its lease.
    fn install(&self, names: &Arc<Names>, ask: Ask, a: &Answer, now_us: u64, t: Timestamp) {
        let stats = &self.stats;
        let queue_at = self.store.update(&Keep, &*names.key, t, |e| {
            let before = state::load(&e.replica);
            let (held, kept) = match ask {
                // A lease that goes on is counted in Redis's state: the
                // replica here, which counts what it admitted, stays.
                Ask::Lease(sent) => (e.lease.in_use, !sent.ends && e.lease.units > 0),
                Ask::Sync(_) => (0, false),
            };
            if !kept || e.limit.is_concurrency() {
                state::install(&mut e.replica, &e.limit, &a.fields, a.blocked_us, held);
                e.stale = false;
            }
            let mut queue_at = None;
            match ask {
                Ask::Lease(sent) => {
                    let l = &mut e.lease;
                    stats.lease_units.add(a.granted);
                    if a.granted > 0 {
                        stats.lease_grants.inc();
                    }
                    if sent.ret > 0 {
                        stats.lease_returns.inc();
                        stats.returned_units.add(sent.ret);
                    }
                    l.units = l.units.saturating_add(a.granted);
                    if sent.ends {
                        l.open = false;
                    }
                    if a.granted > 0 {
                        l.open = true;
                        l.end = a.end_us.saturating_mul(1000);
                        l.at = state::window_of(&e.limit, Timestamp::from_micros(now_us));
                        l.granted = a.granted;
                        l.granted_at = t.as_nanos();
                        l.used = 0;
                    }
                    if l.open {
                        // Ended at its end if nothing renews it first.
                        queue_at = Some(l.end);
                    }
                    if sent.floor != (0, 0) {
                        l.floor = false;
                    }
                    if l.block.div_ceil(1000) <= sent.block_us {
                        l.block = 0;
                    }
                    l.pending = false;
                }
                Ask::Sync(sent) => {
                    // The hits admitted while the call was on its way.
                    for (_, units) in e.view.hits.0 {
                        if units > 0 {
                            e.limit.decide(&mut e.replica, t, units, Apply::Force);
                        }
                    }
                    if e.view.block.div_ceil(1000) <= sent.block_us {
                        e.view.block = 0;
                    }
                    // Redis has every hit but those admitted since the push
                    // left: those are what this instance admitted blind.
                    e.view.since = e.view.hits.total();
                    e.view.synced = true;
                    e.view.pending = false;
                    if e.view.dirty() {
                        queue_at = Some(t.as_nanos());
                    }
                }
            }
            let after = state::load(&e.replica);
            if after.0 == before.0 && after.1 > before.1 {
                stats
                    .drift_units
                    .add(units_of(&e.limit, after.1 - before.1));
            }
            stats.drift_samples.inc();
            match queue_at {
                Some(due) if !e.queued => {
                    e.queued = true;
                    Some(due)
                }
                _ => None,
            }
        });
        if let Some(Some(due)) = queue_at {
            self.queue.push(due, names.clone());
        }
        self.wake_of(&names.key).notify_waiters();
    }

    /// Gives back `units` of `item` that this instance admitted under a
    /// lease (a permit it gave out); returns the units left to give back
    /// elsewhere (all of them when it admitted none).
    pub fn release(&self, item: &Item<'_>, units: u64, now: Timestamp) -> u64 {
        if self.share_of(item).is_none() && item.permit == 0 {
            return units;
        }
        let (units, left) = if item.permit != 0 {
            match self.permits.take(item.permit, item.key, units) {
                // A permit given out here gives back here only.
                Some(given) => (given, 0),
                None => return units,
            }
        } else {
            (units, units)
        };
        let t = self.clock.now(now).unwrap_or(Timestamp::ZERO);
        let done = self.store.update(&Keep, item.key, t, |e| {
            let u = units.min(e.lease.in_use);
            e.limit.release(&mut e.replica, u);
            e.lease.in_use -= u;
            e.lease.units = e.lease.units.saturating_add(u);
            let queue = (!e.queued && u > 0).then(|| e.names.clone()).flatten();
            if queue.is_some() {
                e.queued = true;
            }
            (u, queue.map(|n| (e.lease.end, n)))
        });
        let Some((given, queue)) = done else {
            return left;
        };
        if let Some((due, names)) = queue {
            self.queue.push(due, names);
        }
        left.saturating_sub(given)
    }

    /// Before Redis decides `items` as a whole (a batch mixing modes, or
    /// starved here): what this instance holds of them goes to Redis first
    /// (leases given back, hits pushed, penalties told), so that Redis
    /// decides on the same counts as this instance would.
    pub async fn settle(
        &self,
        redis: &RedisBackend,
        gate: &Gate,
        items: &[Item<'_>],
        now: Timestamp,
    ) {
        let t = self.clock.now(now).unwrap_or(Timestamp::ZERO);
        let mut asks: SmallVec<[(&[u8], &AnyLimit, Ask); 4]> = SmallVec::new();
        for item in items {
            let Some(share) = self.share_of(item) else {
                continue;
            };
            if asks.iter().any(|(k, _, _)| *k == item.key) {
                continue;
            }
            let taken = self.store.update(&Keep, item.key, t, |e| {
                take_from(e, share, 0, t, Caller::All)
            });
            if let Some(Taken::Go(ask)) = taken {
                asks.push((item.key, item.limit, ask));
            }
        }
        if !asks.is_empty() {
            let _ = self.call(redis, gate, &asks, now).await;
        }
    }

    /// Redis decided `items` (a batch decided there as a whole): the ones
    /// decided here otherwise ask Redis again before their next decision
    /// here.
    pub fn decided_in_redis(&self, items: &[Item<'_>], now: Timestamp) {
        let t = self.clock.now(now).unwrap_or(Timestamp::ZERO);
        // (Also when no entry has been created: nothing to mark then.)
        for item in items {
            if self.share_of(item).is_some() {
                self.store.update(&Keep, item.key, t, |e| e.stale = true);
            }
        }
    }

    /// The mode deciding `item` and what this instance holds of it.
    pub fn held(&self, item: &Item<'_>, now: Timestamp) -> Held {
        let Some(share) = self.share_of(item) else {
            return Held {
                mode: SyncMode::Exact,
                leased: 0,
                unsynced: 0,
            };
        };
        let mode = self.mode_of(item);
        let t = self.clock.now(now).unwrap_or(now);
        let margin = self.margin(share);
        let (leased, unsynced) = self
            .store
            .update(&Keep, item.key, t, |e| {
                let unsynced = e.view.hits.total();
                (e.usable(t, margin), unsynced)
            })
            .unwrap_or((0, 0));
        Held {
            mode,
            leased,
            unsynced,
        }
    }

    /// Spawns the background task unless it runs. Not with client-supplied
    /// time: the caller's clock is then only known at its calls, and the
    /// background work runs when it calls `flush`.
    fn ensure_task(self: &Arc<Self>, redis: &Arc<RedisBackend>, gate: &Gate) {
        if redis.client_time()
            || self.task.load(Ordering::Relaxed)
            || self.task.swap(true, Ordering::AcqRel)
        {
            return;
        }
        task::spawn(
            Arc::downgrade(self),
            self.task.clone(),
            redis.clone(),
            Gate {
                breaker: gate.breaker.clone(),
                stats: gate.stats.clone(),
            },
        );
    }

    /// The background work due at `now` (the caller's time; every queued
    /// key when `all`): pushes hits, gives back leases that ended, tells
    /// Redis what is owed. With Redis's clock, `now` only matters before
    /// Redis has answered once.
    pub async fn run_due(&self, redis: &RedisBackend, gate: &Gate, now: Timestamp, all: bool) {
        let Some(t) = self.clock.now(now) else {
            return;
        };
        let due = self.queue.due(if all { u64::MAX } else { t.as_nanos() });
        if due.is_empty() {
            return;
        }
        let margin = self.clock.margin(0);
        let caller = if all {
            Caller::All
        } else {
            Caller::Due { margin }
        };
        let mut asks: Vec<(Arc<Names>, AnyLimit, Ask)> = Vec::new();
        for names in due {
            let got = self.store.update(&Keep, &*names.key, t, |e| {
                e.queued = false;
                let share = if e.view.synced || e.view.pending {
                    Share::Sync {
                        interval: 0,
                        slice: u64::MAX,
                    }
                } else {
                    Share::Lease { duration: 0 }
                };
                let taken = take_from(e, share, 0, t, caller);
                // A lease still in use comes back at its end.
                let again = match taken {
                    Taken::Wait => Some(t.as_nanos().saturating_add(1_000_000)),
                    Taken::Nothing if e.lease.open => Some(e.lease.end),
                    _ => None,
                };
                if again.is_some() {
                    e.queued = true;
                }
                (e.limit.clone(), taken, again)
            });
            if let Some((limit, taken, again)) = got {
                if let Some(due) = again {
                    self.queue
                        .push(due.max(t.as_nanos() + 1_000_000), names.clone());
                }
                if let Taken::Go(ask) = taken {
                    asks.push((names, limit, ask));
                }
            }
        }
        if asks.is_empty() {
            return;
        }
        let keys: Vec<(&[u8], &AnyLimit, Ask)> =
            asks.iter().map(|(n, l, a)| (&*n.key, l, *a)).collect();
        let _ = self.call(redis, gate, &keys, now).await;
    }

    /// The keys waiting for the background task.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A [`state::load`] difference in units: counts as they are, a GCRA's
/// ticks in emission intervals.
fn units_of(limit: &AnyLimit, delta: u128) -> u64 {
    let delta = match limit.kind() {
        LimitKind::Gcra(g) => {
            let (count, period) = g.rate();
            let period = period.as_nanos();
            delta / (period / gcd(period, count as u128)).max(1)
        }
        _ => delta,
    };
    u64::try_from(delta).unwrap_or(u64::MAX)
}

/// A random id for this instance's leases.
fn holder_id() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    let seed = RandomState::new();
    seed.hash_one((std::process::id(), std::time::SystemTime::now())) | 1
}

/// How many units to ask for: what the last lease's pace would use over a
/// lease (twice the last grant when it ran out), at least `need`.
fn want(e: &Entry, need: u64, now: u64, duration: u64) -> u64 {
    let l = &e.lease;
    if need == 0 {
        return 0;
    }
    if l.granted == 0 {
        return need;
    }
    let elapsed = now.saturating_sub(l.granted_at).max(1_000_000);
    let pace = (l.used as u128 * duration as u128 / elapsed as u128) as u64;
    let mut w = pace.saturating_add(pace / 4);
    if l.used >= l.granted {
        w = w.max(l.granted.saturating_mul(2));
    }
    w.max(need)
}

/// Who makes a call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// A request: a lease's unused units go back with it (it is renewed).
    Request,
    /// The background task: what is due (a lease still usable, less
    /// `margin`, is kept).
    Due { margin: u64 },
    /// Shutdown: everything.
    All,
}

/// What an entry sends with its next call under `share`, taken from it
/// (`Wait` while a call for it is on its way, `Nothing` when the
/// background task has nothing to send).
fn take_from(e: &mut Entry, share: Share, need: u64, now: Timestamp, caller: Caller) -> Taken {
    match share {
        Share::Lease { duration } => {
            if e.lease.pending {
                return Taken::Wait;
            }
            let keep = match caller {
                Caller::Due { margin } => e.usable(now, margin) > 0,
                _ => false,
            };
            let l = &e.lease;
            let ret = if keep { 0 } else { l.units };
            let ends = !keep && (l.open || l.units > 0);
            if caller != Caller::Request
                && ret == 0
                && !ends
                && l.debts.is_empty()
                && !l.floor
                && l.block == 0
            {
                return Taken::Nothing;
            }
            // A TAT is raised to what is known here whenever a lease ends
            // (admissions here came later than the grant charged them, and
            // a penalty's charge must outlast the units given back) or a
            // request asks.
            let floor = if l.floor || ends || caller == Caller::Request {
                state::gcra_floor(&e.replica, &e.limit)
            } else {
                (0, 0)
            };
            let ask = LeaseAsk {
                need,
                want: want(e, need, now.as_nanos(), duration),
                dur_us: duration / 1000,
                ret,
                ends,
                at_us: l.at / 1000,
                debts: l.debts.0.map(|(at, n)| (at / 1000, n)),
                floor,
                in_use: l.in_use,
                block_us: l.block.div_ceil(1000),
            };
            let l = &mut e.lease;
            l.units -= ret;
            l.debts.take();
            l.pending = true;
            Taken::Go(Ask::Lease(ask))
        }
        Share::Sync { .. } => {
            if e.view.pending {
                return Taken::Wait;
            }
            if caller != Caller::Request && !e.view.dirty() {
                return Taken::Nothing;
            }
            let hits = e.view.hits.take();
            let ask = SyncAsk {
                hits: hits.map(|(at, n)| (at / 1000, n)),
                block_us: e.view.block.div_ceil(1000),
            };
            // `since` goes on counting the pushed hits until Redis has
            // them (see `install`).
            e.view.pending = true;
            Taken::Go(Ask::Sync(ask))
        }
    }
}

/// A call failed: what it took goes back to the entry (a lease's unused
/// units excepted: Redis may have taken them back; they are lost, never
/// used twice).
fn give_back(e: &mut Entry, ask: Ask) {
    match ask {
        Ask::Lease(sent) => {
            // Owed still: sent again with the next call.
            for (at, n) in sent.debts {
                e.lease.debts.add(at.saturating_mul(1000), n);
            }
            e.lease.pending = false;
        }
        Ask::Sync(sent) => {
            // Still counted in `since` (never acknowledged).
            for (at, n) in sent.hits {
                e.view.hits.add(at.saturating_mul(1000), n);
            }
            if e.view.block == 0 && sent.block_us > 0 {
                e.view.block = sent.block_us.saturating_mul(1000);
            }
            e.view.pending = false;
        }
    }
}
