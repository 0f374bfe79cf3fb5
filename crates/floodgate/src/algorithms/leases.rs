//! The state of a [`Concurrency`] limit with a lease: each lot of units
//! taken, with its holder and the end of its lease. Units whose lease has
//! ended are given back by the next decision on the key, so a holder that
//! never gives its units back (a client that crashed mid-request) holds
//! them for one lease at most.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::algorithm::Apply;
use crate::{Decision, Outcome, Timestamp};

use super::Concurrency;

/// The holder of units taken without naming one: every such unit is
/// anyone's to give back.
pub const ANONYMOUS: u64 = 0;

/// Who takes or gives back a leased limit's units, and where the units
/// whose lease ended unreturned are counted (if anywhere) when a decision
/// drops them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Holder<'a> {
    /// The holder ([`ANONYMOUS`]: one who names none).
    pub id: u64,
    /// Counts the units dropped because their lease ended.
    pub expired: Option<&'a AtomicU64>,
}

impl Holder<'_> {
    /// Holder `id`, counting nothing.
    pub fn new(id: u64) -> Self {
        Holder { id, expired: None }
    }

    fn count_expired(&self, units: u64) {
        if let Some(c) = self.expired.filter(|_| units > 0) {
            c.fetch_add(units, Ordering::Relaxed);
        }
    }
}

/// Units taken together: by one holder, until one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lot {
    holder: u64,
    /// The end of the lease (ns).
    until: u64,
    units: u64,
}

/// The lots a leased [`Concurrency`] limit holds, in the order their leases
/// end. Every lot holds at least one unit and the live ones hold at most
/// the limit's `max` together, so there are never more lots than `max`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseState {
    // Empty (no allocation) while nothing is held.
    lots: Vec<Lot>,
}

impl LeaseState {
    /// Units held at `now` (those whose lease has not ended).
    pub fn held(&self, now: Timestamp) -> u64 {
        self.lots()
            .iter()
            .filter(|l| l.until > now.as_nanos())
            .map(|l| l.units)
            .sum()
    }

    /// Units `holder` holds at `now`.
    pub fn held_by(&self, holder: u64, now: Timestamp) -> u64 {
        self.lots()
            .iter()
            .filter(|l| l.holder == holder && l.until > now.as_nanos())
            .map(|l| l.units)
            .sum()
    }

    fn lots(&self) -> &[Lot] {
        &self.lots
    }

    /// Drops the lots whose lease ended by `now`; returns their units.
    fn expire(&mut self, now: Timestamp) -> u64 {
        let ended = self.lots.partition_point(|l| l.until <= now.as_nanos());
        let units = self.lots.drain(..ended).map(|l| l.units).sum();
        self.tidy();
        units
    }

    /// Adds `units` held by `holder` until `until`, keeping the order.
    fn take(&mut self, holder: u64, until: u64, units: u64) {
        let lots = &mut self.lots;
        let at = lots.partition_point(|l| l.until <= until);
        if let Some(l) = at.checked_sub(1).map(|i| &mut lots[i])
            && l.holder == holder
            && l.until == until
        {
            l.units += units;
            return;
        }
        lots.insert(
            at,
            Lot {
                holder,
                until,
                units,
            },
        );
    }

    /// Gives back up to `units` that `holder` holds, those whose lease ends
    /// first first; returns how many.
    fn give_back(&mut self, holder: u64, units: u64) -> u64 {
        let mut left = units;
        for l in self.lots.iter_mut().filter(|l| l.holder == holder) {
            let n = l.units.min(left);
            l.units -= n;
            left -= n;
            if left == 0 {
                break;
            }
        }
        self.lots.retain(|l| l.units > 0);
        self.tidy();
        units - left
    }

    /// The instant the last lease ends, or `None` when nothing is held.
    fn last_end(&self) -> Option<Timestamp> {
        self.lots().last().map(|l| Timestamp::from_nanos(l.until))
    }

    /// Frees the allocation once nothing is held, so an idle key costs
    /// no more than a fresh one.
    fn tidy(&mut self) {
        if self.lots.is_empty() {
            self.lots = Vec::new();
        }
    }
}

impl Concurrency {
    /// Decides on `cost` units for `holder` under a lease of `lease`:
    /// admitted while the units held (leases not ended) and `cost` fit in
    /// `max`, each admitted unit held until `now + lease`. [`Apply::Refund`]
    /// gives back up to `cost` of `holder`'s own units, those whose lease
    /// ends first first (never another holder's: see [`ANONYMOUS`]).
    pub(crate) fn decide_leased(
        &self,
        lease: Duration,
        st: &mut LeaseState,
        now: Timestamp,
        cost: u64,
        apply: Apply,
        holder: Holder<'_>,
    ) -> Decision {
        if apply != Apply::Check {
            holder.count_expired(st.expire(now));
        }
        let held = st.held(now);
        let outcome = if apply == Apply::Refund {
            st.give_back(holder.id, cost);
            Outcome::Allowed
        } else if cost > self.max() {
            Outcome::Never
        } else if held.saturating_add(cost) <= self.max() {
            if apply.charge_if_allowed() && cost > 0 {
                st.take(holder.id, now.saturating_add(lease).as_nanos(), cost);
            }
            Outcome::Allowed
        } else {
            Outcome::Denied
        };
        Decision {
            outcome,
            limit: self.max(),
            remaining: self.max().saturating_sub(st.held(now)),
            reset_after: Duration::ZERO,
            retry_after: None,
        }
    }

    /// Gives back up to `units` that `holder` holds at `now` (the ends of
    /// leases dropped first); returns how many.
    pub fn give_back(
        &self,
        st: &mut LeaseState,
        now: Timestamp,
        units: u64,
        holder: Holder<'_>,
    ) -> u64 {
        holder.count_expired(st.expire(now));
        st.give_back(holder.id, units)
    }

    /// When `st` holds nothing any more: the end of its last lease.
    pub(crate) fn leased_idle_at(&self, st: &LeaseState, now: Timestamp) -> Timestamp {
        st.last_end().map_or(now, |end| end.max(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(30);

    fn limit(max: u64) -> Concurrency {
        Concurrency::leased(max, LEASE).unwrap()
    }

    fn take(c: &Concurrency, st: &mut LeaseState, at: u64, cost: u64, holder: u64) -> Outcome {
        c.decide_leased(
            LEASE,
            st,
            Timestamp::from_secs(at),
            cost,
            Apply::Commit,
            Holder::new(holder),
        )
        .outcome
    }

    fn refund(c: &Concurrency, st: &mut LeaseState, at: u64, units: u64, holder: u64) -> u64 {
        let before = st.held(Timestamp::from_secs(at));
        c.decide_leased(
            LEASE,
            st,
            Timestamp::from_secs(at),
            units,
            Apply::Refund,
            Holder::new(holder),
        );
        before - st.held(Timestamp::from_secs(at))
    }

    #[test]
    fn expired_units_are_counted_when_a_decision_drops_them() {
        let c = limit(3);
        let mut st = LeaseState::default();
        take(&c, &mut st, 0, 2, 7);
        take(&c, &mut st, 10, 1, 8);
        let expired = AtomicU64::new(0);
        let holder = Holder {
            id: 9,
            expired: Some(&expired),
        };
        let t = Timestamp::from_secs(35);
        c.decide_leased(LEASE, &mut st, t, 0, Apply::Check, holder);
        assert_eq!(expired.load(Ordering::Relaxed), 0, "a check drops nothing");
        c.decide_leased(LEASE, &mut st, t, 1, Apply::Commit, holder);
        assert_eq!(expired.load(Ordering::Relaxed), 2);
        c.give_back(&mut st, Timestamp::from_secs(45), 1, holder);
        assert_eq!(expired.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn units_never_given_back_return_when_their_lease_ends() {
        let c = limit(2);
        let mut st = LeaseState::default();
        assert_eq!(take(&c, &mut st, 0, 1, 7), Outcome::Allowed);
        assert_eq!(take(&c, &mut st, 10, 1, 8), Outcome::Allowed);
        assert_eq!(take(&c, &mut st, 29, 1, 9), Outcome::Denied);
        // The first lease ends at 30 s: one unit back, not two.
        assert_eq!(take(&c, &mut st, 30, 1, 9), Outcome::Allowed);
        assert_eq!(take(&c, &mut st, 39, 1, 9), Outcome::Denied);
        assert_eq!(take(&c, &mut st, 40, 1, 9), Outcome::Allowed);
        assert_eq!(st.lots().len(), 2);
    }

    #[test]
    fn a_holder_gives_back_only_its_own_units_once() {
        let c = limit(3);
        let mut st = LeaseState::default();
        take(&c, &mut st, 0, 2, 7);
        take(&c, &mut st, 1, 1, 8);
        assert_eq!(refund(&c, &mut st, 2, 5, 9), 0, "a stranger frees nothing");
        assert_eq!(
            refund(&c, &mut st, 2, 5, ANONYMOUS),
            0,
            "nor does no holder"
        );
        assert_eq!(refund(&c, &mut st, 2, 5, 7), 2, "at most what it holds");
        assert_eq!(refund(&c, &mut st, 2, 1, 7), 0, "once");
        assert_eq!(st.held_by(8, Timestamp::from_secs(2)), 1);
    }

    #[test]
    fn after_its_lease_a_holder_frees_nothing_another_took_since() {
        let c = limit(1);
        let mut st = LeaseState::default();
        take(&c, &mut st, 0, 1, 7);
        assert_eq!(take(&c, &mut st, 30, 1, 8), Outcome::Allowed);
        assert_eq!(refund(&c, &mut st, 31, 1, 7), 0);
        assert_eq!(take(&c, &mut st, 31, 1, 9), Outcome::Denied);
    }

    #[test]
    fn anonymous_units_go_back_earliest_lease_first_floored() {
        let c = limit(3);
        let mut st = LeaseState::default();
        take(&c, &mut st, 0, 1, ANONYMOUS);
        take(&c, &mut st, 10, 1, ANONYMOUS);
        assert_eq!(refund(&c, &mut st, 11, 1, ANONYMOUS), 1);
        // The lot left is the later one: it still counts at 35 s.
        assert_eq!(st.held(Timestamp::from_secs(35)), 1);
        assert_eq!(refund(&c, &mut st, 12, 4, ANONYMOUS), 1, "floored at none");
        assert_eq!(st, LeaseState::default());
    }

    #[test]
    fn never_more_lots_than_max_and_a_check_changes_nothing() {
        let c = limit(4);
        let mut st = LeaseState::default();
        for h in 0..10 {
            take(&c, &mut st, h, 1, h + 1);
        }
        assert_eq!(st.lots().len(), 4);
        let before = st.clone();
        let t = Timestamp::from_secs(40);
        let d = c.decide_leased(LEASE, &mut st, t, 1, Apply::Check, Holder::new(1));
        assert!(d.is_allowed());
        assert_eq!(st, before);
        assert_eq!(take(&c, &mut st, 0, 5, 1), Outcome::Never);
    }
}
