//! What an instance keeps for one counter it decides in memory: the key's
//! state as it knows it (the replica, a core algorithm state), and what it
//! holds of the key: a lease (`lease`) or its hits not pushed yet (`sync`).

use std::sync::Arc;

use floodgate::algorithms::{AnyLimit, AnyState};
use floodgate::{Algorithm, Timestamp};

use super::state::{self, load};

/// A counter's names: the engine's key (the local store's), the Redis key
/// and its hash slot.
#[derive(Debug)]
pub(crate) struct Names {
    pub key: Box<[u8]>,
    pub redis: Box<[u8]>,
    pub slot: u16,
}

/// A lease held on the key.
#[derive(Debug, Default)]
pub(crate) struct Lease {
    /// Units granted and not used yet (for an in-flight limit: permits
    /// not given out).
    pub units: u64,
    /// The end of the lease (ns on the decision clock): usable before.
    pub end: u64,
    /// The start (ns) of the window or sub-window it was granted in.
    pub at: u64,
    /// The size of the latest grant, when it came (ns), and the units used
    /// since (to size the next one).
    pub granted: u64,
    pub granted_at: u64,
    pub used: u64,
    /// Units owed to Redis: denials a penalty charged here.
    pub debts: Tally,
    /// The TAT here is ahead of what Redis was last told (penalties).
    pub floor: bool,
    /// A block started here (ns), not told to Redis yet (0: none).
    pub block: u64,
    /// Permits given out and not taken back (in-flight limits).
    pub in_use: u64,
    /// A call to Redis for this key is on its way.
    pub pending: bool,
    /// A lease was granted that Redis has not been told the end of (its
    /// units given back, a token bucket's raise taken back).
    pub open: bool,
}

/// Units per (sub-)window start (ns), waiting to be added to Redis's
/// counts: two windows are kept, oldest first (a GCRA's units in the
/// first); units of a third make the older two one, counted in the later
/// (later counts longer: a window never holds fewer units than happened in
/// it). A view's hits may be merged so; a lease's owed units never are
/// (see [`fits`](Self::fits): a third window's charge waits for Redis).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tally(pub [(u64, u64); 2]);

impl Tally {
    /// The slot units of the (sub-)window at `at` go to without making two
    /// windows one: `None` when they would be.
    fn slot(&self, at: u64) -> Option<usize> {
        let [a, b] = &self.0;
        if a.1 == 0 && b.1 == 0 || a.0 == at {
            Some(0)
        } else if b.1 == 0 {
            (at > a.0).then_some(1)
        } else {
            (b.0 == at).then_some(1)
        }
    }

    pub(super) fn add(&mut self, at: u64, units: u64) {
        if units == 0 {
            return;
        }
        if let Some(i) = self.slot(at) {
            let s = &mut self.0[i];
            *s = (at, s.1.saturating_add(units));
            return;
        }
        // A third window, or an earlier one: counted in the later.
        let [a, b] = &mut self.0;
        if b.1 == 0 {
            a.1 = a.1.saturating_add(units);
        } else if at > b.0 {
            *a = (b.0, a.1.saturating_add(b.1));
            *b = (at, units);
        } else {
            b.1 = b.1.saturating_add(units);
        }
    }

    /// Whether units of the (sub-)window at `at` would be kept apart
    /// (not made one with an older window's).
    pub(super) fn fits(&self, at: u64) -> bool {
        self.slot(at).is_some()
    }

    /// The units, taken.
    pub(super) fn take(&mut self) -> [(u64, u64); 2] {
        std::mem::take(&mut self.0)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0[0].1 == 0 && self.0[1].1 == 0
    }

    pub(super) fn total(&self) -> u64 {
        self.0[0].1.saturating_add(self.0[1].1)
    }
}

/// Hits admitted here and not pushed to Redis yet.
#[derive(Debug, Default)]
pub(crate) struct View {
    /// The entry holds a state pulled from Redis.
    pub synced: bool,
    pub hits: Tally,
    /// Units admitted here that Redis has not acknowledged yet (pushed
    /// and not answered, or not pushed): at most a slice.
    pub since: u64,
    /// A block started here (ns), not pushed yet (0: none).
    pub block: u64,
    /// A push for this key is on its way.
    pub pending: bool,
    /// Redis's time (ns) at its last answer for the key: hits are admitted
    /// here only in a (sub-)window Redis had reached then (see
    /// `Decide::viewed`).
    pub seen: u64,
}

impl View {
    /// Records `units` admitted in the (sub-)window starting at `at`.
    pub(super) fn add(&mut self, at: u64, units: u64) {
        self.since = self.since.saturating_add(units);
        self.hits.add(at, units);
    }

    /// Whether anything is waiting to be pushed.
    pub(super) fn dirty(&self) -> bool {
        !self.hits.is_empty() || self.block != 0
    }
}

/// One counter decided here.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The limit the entry was built for.
    pub limit: AnyLimit,
    /// The key's state as this instance knows it: Redis's at the last
    /// contact, with what was decided here since.
    pub replica: AnyState,
    /// Its names, once Redis has been asked about it (`None`: a fresh
    /// entry of a decision, never stored).
    pub names: Option<Arc<Names>>,
    pub lease: Lease,
    pub view: View,
    /// In the queue of keys with work for the background task.
    pub queued: bool,
    /// Redis decided the key since the replica was installed (a batch
    /// decided there as a whole): ask Redis before deciding here again.
    pub stale: bool,
}

impl Entry {
    pub(super) fn new(limit: &AnyLimit, names: Option<Arc<Names>>) -> Self {
        Entry {
            limit: limit.clone(),
            replica: AnyState::Fresh,
            names,
            lease: Lease::default(),
            view: View::default(),
            queued: false,
            stale: false,
        }
    }

    /// Whether the entry holds something it must not forget: units of a
    /// lease, permits given out, hits or penalties Redis has not seen, a
    /// call on its way.
    pub(super) fn holds(&self) -> bool {
        let l = &self.lease;
        l.units != 0
            || l.open
            || l.in_use != 0
            || !l.debts.is_empty()
            || l.floor
            || l.block != 0
            || l.pending
            || self.view.pending
            || self.view.dirty()
    }

    /// When the entry may be forgotten: never while it holds something,
    /// otherwise when the replica is idle.
    pub(super) fn idle_at(&self, now: Timestamp) -> Timestamp {
        if self.holds() {
            Timestamp::MAX
        } else {
            self.limit
                .idle_at(&self.replica, now)
                .min(Timestamp::from_nanos(u64::MAX - 1))
        }
    }

    /// The units of the lease usable at `now` (ns): before its end (less
    /// `margin`) and, for a window limit, in the (sub-)window it was
    /// granted in.
    pub(super) fn usable(&self, now: Timestamp, margin: u64) -> u64 {
        let l = &self.lease;
        if l.units == 0 || now.as_nanos().saturating_add(margin) >= l.end {
            return 0;
        }
        if state::window_width(&self.limit) != 0 && state::window_of(&self.limit, now) != l.at {
            return 0;
        }
        l.units
    }

    /// The limit changed under the same key (a reload): the replica starts
    /// afresh; what was held is given back at the next contact.
    pub(super) fn retire(&mut self, limit: &AnyLimit) {
        self.limit = limit.clone();
        self.replica = AnyState::Fresh;
        self.view.synced = false;
        if !self.lease.pending {
            self.lease.end = 0;
        }
    }

    /// Records what a denial of `cost` decided here changed in the
    /// replica (`before`: its [`load`] before): a penalty's charge (owed to
    /// Redis, or pushed with the hits), a block started.
    pub(super) fn owe(&mut self, before: (u64, u128), cost: u64, sync: bool) {
        if let AnyState::Blocked(until) = self.replica {
            if sync {
                self.view.block = until;
            } else {
                self.lease.block = until;
            }
            return;
        }
        let after = load(&self.replica);
        if after == before {
            return;
        }
        if sync {
            self.view.add(after.0, cost);
            return;
        }
        if let AnyState::Gcra(_) = self.replica {
            self.lease.floor = true;
            return;
        }
        self.lease.debts.add(after.0, cost);
    }
}

#[cfg(test)]
mod tests {
    use super::Tally;

    #[test]
    fn two_windows_apart_then_a_third_counted_in_the_later() {
        let mut t = Tally::default();
        assert!(t.fits(10));
        t.add(10, 2);
        t.add(10, 1);
        assert!(t.fits(20) && !t.fits(5));
        t.add(20, 4);
        assert_eq!(t.0, [(10, 3), (20, 4)]);
        assert!(t.fits(20) && t.fits(10) && !t.fits(30) && !t.fits(15));
        // A third window: the older two become one, in the later.
        t.add(30, 1);
        assert_eq!(t.0, [(20, 7), (30, 1)]);
        // An earlier window than the last: counted in the last.
        t.add(25, 2);
        assert_eq!(t.0, [(20, 7), (30, 3)]);
        assert_eq!(t.take(), [(20, 7), (30, 3)]);
        assert!(t.is_empty() && t.fits(5));
        // With one window held, an earlier one is counted in it.
        t.add(50, 1);
        t.add(40, 2);
        assert_eq!(t.0, [(50, 3), (0, 0)]);
        assert_eq!(t.total(), 3);
    }
}
