//! The calls to Redis: what each entry sends (one call per key at a
//! time; other requests for the key wait for it), the calls grouped by
//! kind and hash slot and sent at once through the breaker, and their
//! answers installed in the entries.

use std::sync::Arc;

use floodgate::algorithms::{AnyLimit, LimitKind};
use floodgate::{Algorithm, Apply, Timestamp};
use floodgate_policy::{BackendError, Item};
use futures_util::future::join_all;

use super::calls::{self, Answer, Ask, LeaseAsk, Shared, SyncAsk};
use super::entry::{Entry, Names};
use super::local::{Keep, Share, Take};
use super::take::{Caller, Taken, give_back, take_from};
use super::{Failed, Gate, Sharing, state};
use crate::RedisBackend;
use crate::breaker::Pass;
use crate::stats::SharingStats;

impl Sharing {
    /// What `item`'s entry sends with the next call (creating it), if no
    /// call for it is on its way.
    pub(super) fn take(
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
                *out.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some(take_from(e, share, need, now, Caller::Request));
            })),
        };
        self.store.decide(&take, item.key, now, 0, Apply::Check);
        out.into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .unwrap_or(Taken::Nothing)
    }

    /// Waits for the call on its way for `key` (at most a Redis timeout).
    pub(super) async fn wait(&self, redis: &RedisBackend, key: &[u8], share: Share) {
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
    pub(super) async fn call(
        &self,
        redis: &RedisBackend,
        gate: &Gate,
        keys: &[(&[u8], &AnyLimit, Ask)],
        now: Timestamp,
    ) -> Result<(), Failed> {
        let now_arg = redis.now_arg(self.clock.call_time(now));
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
            let queue_at = match ask {
                Ask::Lease(sent) => lease_answered(e, sent, a, now_us, t, stats),
                Ask::Sync(sent) => sync_answered(e, sent, now_us, t),
            };
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
}

/// A lease call's answer in its entry: the units granted, what was given
/// back, paid or raised; returns when the entry is due (the lease's end,
/// when one is open).
fn lease_answered(
    e: &mut Entry,
    sent: LeaseAsk,
    a: &Answer,
    now_us: u64,
    t: Timestamp,
    stats: &SharingStats,
) -> Option<u64> {
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
    if sent.floor != (0, 0) {
        l.floor = false;
    }
    if l.block.div_ceil(1000) <= sent.block_us {
        l.block = 0;
    }
    l.pending = false;
    // Ended at its end if nothing renews it first.
    l.open.then_some(l.end)
}

/// A sync call's answer in its entry (whose replica holds Redis's state
/// now): the hits admitted while the call was on its way are counted
/// again; returns when the entry is due (now, when it has more to push).
fn sync_answered(e: &mut Entry, sent: SyncAsk, now_us: u64, t: Timestamp) -> Option<u64> {
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
    e.view.seen = now_us.saturating_mul(1000);
    e.view.synced = true;
    e.view.pending = false;
    e.view.dirty().then_some(t.as_nanos())
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
            delta / (period / gcd(period, u128::from(count))).max(1)
        }
        LimitKind::FixedWindow(_)
        | LimitKind::SlidingWindow(_)
        | LimitKind::SubWindows(_)
        | LimitKind::SlidingLog(_)
        | LimitKind::Shaper(_)
        | LimitKind::Concurrency(_) => delta,
    };
    u64::try_from(delta).unwrap_or(u64::MAX)
}
