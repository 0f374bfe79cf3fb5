//! The core store deciding in memory: each entry's replica decided by the
//! core algorithm ([`AnyLimit`]), within what the entry holds. The
//! wrappers here are [`Algorithm`]s over [`Entry`], so the core store does
//! the rest as it does for the in-memory backend: shards, one atomic batch
//! over several keys (all admitted and charged, or none), penalties,
//! eviction of idle keys.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate::algorithms::AnyLimit;
use floodgate::{Algorithm, Apply, Decision, Outcome, Timestamp};

use super::entry::{Entry, Names};
use super::queue::Queue;
use super::state::{load, window_of};

/// How an item is decided here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Share {
    /// Against a lease lasting at most `duration` ns.
    Lease { duration: u64 },
    /// On a view pushed every `interval` ns, at most `slice` units admitted
    /// between two pushes.
    Sync { interval: u64, slice: u64 },
}

/// The items of a batch that need Redis first (bit `i` for item `i`, the
/// last bit for every item from 63 on): a pass that finds one changes
/// nothing. And the items a batch's second pass could not decide because
/// Redis was never asked about them (its first pass stopped at a denial
/// before them): the batch is denied, and they are decided after, each on
/// its own.
#[derive(Default)]
pub(crate) struct Signal {
    short: AtomicU64,
    late: AtomicU64,
}

fn bit(index: usize) -> u64 {
    1 << index.min(63)
}

impl Signal {
    fn mark(&self, index: usize) {
        self.short.fetch_or(bit(index), Ordering::Relaxed);
    }

    fn mark_late(&self, index: usize) {
        self.late.fetch_or(bit(index), Ordering::Relaxed);
    }

    /// Whether any item needs Redis.
    pub(super) fn any(&self) -> bool {
        self.short.load(Ordering::Relaxed) != 0
    }

    /// Whether item `index` may need Redis.
    pub(super) fn marks(&self, index: usize) -> bool {
        self.short.load(Ordering::Relaxed) & bit(index) != 0
    }

    /// Whether any item was left undecided by the second pass.
    pub(super) fn any_late(&self) -> bool {
        self.late.load(Ordering::Relaxed) != 0
    }

    /// Whether item `index` may have been left undecided.
    pub(super) fn marks_late(&self, index: usize) -> bool {
        self.late.load(Ordering::Relaxed) & bit(index) != 0
    }
}

/// The answer of a pass that found an item short (the pass is redone once
/// Redis has answered).
const SHORT: Decision = Decision {
    outcome: Outcome::Denied,
    limit: 0,
    remaining: 0,
    reset_after: Duration::ZERO,
    retry_after: None,
};

/// One item of a batch decided here.
pub(crate) struct Decide<'a> {
    pub limit: &'a AnyLimit,
    pub share: Share,
    pub signal: &'a Signal,
    pub index: usize,
    /// The caller's apply: the store checks a batch with `Check` first,
    /// which must then also find the units to charge.
    pub apply: Apply,
    /// A lease is used only up to this long (ns) before its end.
    pub margin: u64,
    pub queue: &'a Queue,
    /// The batch has several items: the store checks them all first.
    pub multi: bool,
}

impl Decide<'_> {
    fn short(&self) -> Decision {
        self.signal.mark(self.index);
        SHORT
    }

    /// Queues the entry for the background task (its hits or what it owes
    /// go to Redis at `due`).
    fn enqueue(&self, e: &mut Entry, due: u64) {
        if !e.queued
            && let Some(names) = &e.names
        {
            e.queued = true;
            self.queue.push(due, names.clone());
        }
    }

    fn leased(&self, e: &mut Entry, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        let limit = self.limit;
        match apply {
            Apply::Check => {
                let d = limit.decide(&mut e.replica, now, cost, Apply::Check);
                if d.is_allowed() && cost > e.usable(now, self.margin) {
                    return self.short();
                }
                d
            }
            Apply::Commit | Apply::Force
                if limit
                    .decide(&mut e.replica, now, cost, Apply::Check)
                    .is_allowed() =>
            {
                if cost > e.usable(now, self.margin) {
                    return self.short();
                }
                let d = limit.decide(&mut e.replica, now, cost, apply);
                if d.is_allowed() {
                    let l = &mut e.lease;
                    l.units -= cost;
                    l.used = l.used.saturating_add(cost);
                    if limit.in_flight() {
                        l.in_use = l.in_use.saturating_add(cost);
                    }
                }
                d
            }
            _ => {
                // Denied: what the denial charged (a penalty) or started (a
                // block) is owed to Redis, per (sub-)window. A charge in a
                // third window goes to Redis first (the pass is redone once
                // the owed units are there), so that no unit is counted in
                // a later window than its own.
                if !e.lease.debts.fits(window_of(limit, now)) {
                    return self.short();
                }
                let before = load(&e.replica);
                let d = limit.decide(&mut e.replica, now, cost, apply);
                e.owe(before, cost, false);
                if !e.lease.debts.is_empty() || e.lease.floor || e.lease.block != 0 {
                    self.enqueue(e, now.as_nanos());
                }
                d
            }
        }
    }

    fn viewed(&self, e: &mut Entry, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        let (limit, slice, interval) = match self.share {
            Share::Sync { slice, interval } => (self.limit, slice, interval),
            Share::Lease { .. } => unreachable!("a synced item"),
        };
        // A hit goes to Redis tagged with its (sub-)window on this
        // instance's clock, and Redis drops the hits of a window it has not
        // reached. This clock runs ahead of Redis's by up to the way there
        // of its fastest round trip so far, and steps back when a faster one
        // tightens it: a hit admitted here in a window Redis has not reached
        // could be dropped there, uncounted by every instance (this one
        // too, once its view is replaced). So hits are admitted here only
        // in a window a reply of Redis was dated in: every later push of the
        // key reaches Redis later still.
        let ahead = window_of(limit, now) > window_of(limit, Timestamp::from_nanos(e.view.seen));
        let spent = ahead || (e.view.since > 0 && e.view.since.saturating_add(cost) > slice);
        let due = now.as_nanos().saturating_add(interval);
        match apply {
            Apply::Check => {
                let d = limit.decide(&mut e.replica, now, cost, Apply::Check);
                if d.is_allowed() && spent {
                    return self.short();
                }
                d
            }
            Apply::Commit | Apply::Force
                if limit
                    .decide(&mut e.replica, now, cost, Apply::Check)
                    .is_allowed() =>
            {
                if spent {
                    return self.short();
                }
                let d = limit.decide(&mut e.replica, now, cost, apply);
                if d.is_allowed() {
                    e.view.add(window_of(limit, now), cost);
                    self.enqueue(e, due);
                }
                d
            }
            _ => {
                let before = load(&e.replica);
                let d = limit.decide(&mut e.replica, now, cost, apply);
                e.owe(before, cost, true);
                if e.view.dirty() {
                    self.enqueue(e, due);
                }
                d
            }
        }
    }
}

impl Algorithm for Decide<'_> {
    type State = Entry;

    fn fresh(&self) -> Entry {
        Entry::new(self.limit, None)
    }

    fn decide(&self, e: &mut Entry, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        if self.signal.any() {
            // The pass is redone: change nothing.
            return SHORT;
        }
        if e.limit != *self.limit {
            e.retire(self.limit);
        }
        let synced = match self.share {
            Share::Lease { .. } => e.names.is_some(),
            Share::Sync { .. } => e.view.synced,
        };
        if !synced || e.stale {
            if self.multi && apply != Apply::Check {
                // The second pass of a denied batch.
                self.signal.mark_late(self.index);
                return SHORT;
            }
            // Never seen, or decided by Redis since: Redis first, even for
            // a dry run.
            return self.short();
        }
        if cost == 0 {
            // Peeks: the replica's answer.
            return self.limit.decide(&mut e.replica, now, cost, Apply::Check);
        }
        if self.apply == Apply::Check {
            // Dry runs: what a charge of the replica would answer, on a copy.
            return self
                .limit
                .decide(&mut e.replica.clone(), now, cost, Apply::Commit);
        }
        match self.share {
            Share::Lease { .. } => self.leased(e, now, cost, apply),
            Share::Sync { .. } => self.viewed(e, now, cost, apply),
        }
    }

    fn idle_at(&self, e: &Entry, now: Timestamp) -> Timestamp {
        e.idle_at(now)
    }

    fn in_flight(&self) -> bool {
        self.limit.in_flight()
    }

    fn pins(&self) -> bool {
        true
    }
}

/// The local store's idle rule, for edits of an entry that exists.
pub(crate) struct Keep;

impl Algorithm for Keep {
    type State = Entry;

    fn fresh(&self) -> Entry {
        Entry::new(
            &AnyLimit::from(floodgate::algorithms::Concurrency::new(1).expect("1")),
            None,
        )
    }

    fn decide(&self, _: &mut Entry, _: Timestamp, _: u64, _: Apply) -> Decision {
        SHORT
    }

    fn idle_at(&self, e: &Entry, now: Timestamp) -> Timestamp {
        e.idle_at(now)
    }

    fn pins(&self) -> bool {
        true
    }
}

/// Takes what an entry sends to Redis with its next call (creating the
/// entry, named, when there is none): `f` runs on it and says what to
/// send.
pub(crate) struct Take<'a, F> {
    pub limit: &'a AnyLimit,
    pub names: &'a Arc<Names>,
    pub f: std::sync::Mutex<Option<F>>,
}

impl<F: FnOnce(&mut Entry) + Send> Algorithm for Take<'_, F> {
    type State = Entry;

    fn fresh(&self) -> Entry {
        Entry::new(self.limit, Some(self.names.clone()))
    }

    fn decide(&self, e: &mut Entry, _: Timestamp, _: u64, _: Apply) -> Decision {
        if e.limit != *self.limit {
            e.retire(self.limit);
        }
        if e.names.is_none() {
            e.names = Some(self.names.clone());
        }
        if let Some(f) = self
            .f
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            f(e);
        }
        SHORT
    }

    fn idle_at(&self, e: &Entry, now: Timestamp) -> Timestamp {
        e.idle_at(now)
    }

    fn pins(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::algorithms::FixedWindow;

    const SEC: u64 = 1_000_000_000;

    /// A fixed window of 30 per second decided on a view pushed every
    /// 100 ms (a slice of 3), Redis's last answer dated `seen` (ns).
    fn viewed(seen: u64) -> (AnyLimit, Entry) {
        let limit = AnyLimit::from(FixedWindow::new(30, Duration::from_secs(1)).unwrap());
        let mut e = Entry::new(&limit, None);
        e.view.synced = true;
        e.view.seen = seen;
        (limit, e)
    }

    fn decide(limit: &AnyLimit, e: &mut Entry, at: u64) -> (Decision, bool) {
        let (signal, queue) = (Signal::default(), Queue::default());
        let d = Decide {
            limit,
            share: Share::Sync {
                interval: SEC / 10,
                slice: 3,
            },
            signal: &signal,
            index: 0,
            apply: Apply::Commit,
            margin: 0,
            queue: &queue,
            multi: false,
        };
        let out = Algorithm::decide(&d, e, Timestamp::from_nanos(at), 1, Apply::Commit);
        (out, signal.any())
    }

    #[test]
    fn hits_are_admitted_only_in_a_window_redis_was_seen_in() {
        // Redis answered 5 ms before the end of the window of second 10.
        let (limit, mut e) = viewed(11 * SEC - 5_000_000);
        let (d, short) = decide(&limit, &mut e, 11 * SEC - 1_000_000);
        assert!(d.is_allowed() && !short, "{d:?}");
        // This instance's clock passes into the next window (it may run
        // ahead of Redis's): Redis first, nothing admitted or recorded here.
        let (d, short) = decide(&limit, &mut e, 11 * SEC + 1_000_000);
        assert!(short && !d.is_allowed(), "{d:?}");
        assert_eq!(e.view.hits.total(), 1);
        // Once a reply is dated in that window, it is decided here.
        e.view.seen = 11 * SEC;
        let (d, short) = decide(&limit, &mut e, 11 * SEC + 2_000_000);
        assert!(d.is_allowed() && !short, "{d:?}");
        assert_eq!(e.view.hits.0[1], (11 * SEC, 1));
    }
}
