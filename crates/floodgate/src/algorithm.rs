//! The shape every algorithm shares: a pure decision function over a small
//! per-key state. No IO, no clock, no allocation on the decision path; the
//! store around it only makes it atomic.

use crate::{Decision, Timestamp};

/// How a decision may change the state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Apply {
    /// Evaluate only; never change the state (a dry run or a peek).
    Check,
    /// Charge the cost if this limit admits the request (the normal case).
    Commit,
    /// Charge the cost whether or not the request is admitted (penalty mode:
    /// denied requests still count, as in Kong and HAProxy). A fixed window
    /// and a bucket count even a cost above their limit, going into debt
    /// (a cost known after the response); an
    /// [in-flight](Algorithm::in_flight) limit charges only what it admits.
    Force,
    /// The request was denied by another limit checked together with this
    /// one: charge nothing (a penalty-mode limit charges anyway, except an
    /// [in-flight](Algorithm::in_flight) one).
    Rejected,
    /// Give back `cost` units that earlier requests were charged (Envoy's
    /// negative hits): the count falls by `cost`, never below nothing, and
    /// the decision says what remains. A limit that cannot give units back
    /// this way only checks (an [in-flight](Algorithm::in_flight) limit
    /// gives its units back to the permit that took them, never here; one
    /// with a lease gives back its holder's own units: see
    /// [`HeldBy`](crate::algorithms::HeldBy)).
    Refund,
}

impl Apply {
    /// Whether an admitted request changes the state.
    #[inline]
    pub fn charge_if_allowed(self) -> bool {
        matches!(self, Apply::Commit | Apply::Force)
    }

    /// Whether a denied request changes the state.
    #[inline]
    pub fn charge_if_denied(self) -> bool {
        matches!(self, Apply::Force)
    }
}

/// A rate limiting algorithm with its parameters (a limit).
///
/// `decide` is the whole algorithm: given the key's state, the time and the
/// request's cost, it returns the [`Decision`] and updates the state as
/// `apply` says. A `cost` of 0 peeks without consuming. Stores call it under
/// a lock, which is all they add.
pub trait Algorithm: Send + Sync {
    /// Per-key state. A fresh state is what a never-seen key has.
    type State: Send;

    /// The state of a key that has never been seen.
    fn fresh(&self) -> Self::State;

    /// Decides on a request of `cost` units at `now`.
    fn decide(&self, state: &mut Self::State, now: Timestamp, cost: u64, apply: Apply) -> Decision;

    /// The earliest time at which `state` behaves exactly like [`fresh`], so a
    /// store may forget the key without changing any future decision.
    ///
    /// [`Timestamp::MAX`] from a limit that [`pins`](Algorithm::pins) means
    /// the state must be kept whatever the store's capacity (permits are
    /// held); from any other limit it is only an instant too far to tell,
    /// and the store may still evict the key.
    ///
    /// [`fresh`]: Algorithm::fresh
    fn idle_at(&self, state: &Self::State, now: Timestamp) -> Timestamp;

    /// True for a limit on units in flight, which an admitted request takes
    /// and gives back when it completes (a [`Concurrency`] limit), rather
    /// than on requests over time. Penalty mode does not apply to it: a
    /// rejected request holds nothing it would give back, so it is never
    /// charged. A set is in flight when all its members are.
    ///
    /// [`Concurrency`]: crate::algorithms::Concurrency
    #[inline]
    fn in_flight(&self) -> bool {
        false
    }

    /// True when [`idle_at`](Algorithm::idle_at) returning
    /// [`Timestamp::MAX`] means "keep this key" (units are held, which only
    /// their release gives back) rather than an instant that saturated. A
    /// [`Concurrency`] limit pins; a set pins when any member does.
    ///
    /// [`Concurrency`]: crate::algorithms::Concurrency
    #[inline]
    fn pins(&self) -> bool {
        false
    }

    /// A copy of `state` to decide on without changing the original, or
    /// `None` (the default) when states cannot be copied. With copies, a
    /// store decides items of one batch that share a key in order, and
    /// dry runs exactly as the real decision
    /// ([`Store::simulate_many`](crate::Store::simulate_many)); without,
    /// it adds up their costs and a dry run only peeks.
    #[inline]
    fn snapshot(&self, _state: &Self::State) -> Option<Self::State> {
        None
    }

    /// [`decide`](Algorithm::decide) followed by
    /// [`idle_at`](Algorithm::idle_at) on the resulting state, which stores
    /// call on every decision; algorithms override it when the two share
    /// work.
    #[inline]
    fn decide_idle(
        &self,
        state: &mut Self::State,
        now: Timestamp,
        cost: u64,
        apply: Apply,
    ) -> (Decision, Timestamp) {
        let d = self.decide(state, now, cost, apply);
        (d, self.idle_at(state, now))
    }
}

impl<A: Algorithm + ?Sized> Algorithm for &A {
    type State = A::State;
    fn fresh(&self) -> Self::State {
        (**self).fresh()
    }
    fn decide(&self, state: &mut Self::State, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        (**self).decide(state, now, cost, apply)
    }
    fn idle_at(&self, state: &Self::State, now: Timestamp) -> Timestamp {
        (**self).idle_at(state, now)
    }
    fn in_flight(&self) -> bool {
        (**self).in_flight()
    }
    fn pins(&self) -> bool {
        (**self).pins()
    }
    fn snapshot(&self, state: &Self::State) -> Option<Self::State> {
        (**self).snapshot(state)
    }
    fn decide_idle(
        &self,
        state: &mut Self::State,
        now: Timestamp,
        cost: u64,
        apply: Apply,
    ) -> (Decision, Timestamp) {
        (**self).decide_idle(state, now, cost, apply)
    }
}

/// Penalty mode for any limit: requests it sees denied still count against it
/// (including requests denied by another limit checked together with it).
/// An [in-flight](Algorithm::in_flight) limit is left as it is: it never
/// charges a request it did not admit.
///
/// ```
/// use floodgate::{Algorithm, Apply, Penalize, Timestamp};
/// use floodgate::algorithms::FixedWindow;
/// use std::time::Duration;
///
/// let limit = Penalize(FixedWindow::new(2, Duration::from_secs(60)).unwrap());
/// let mut state = limit.fresh();
/// let now = Timestamp::from_secs(0);
/// for _ in 0..2 { assert!(limit.decide(&mut state, now, 1, Apply::Commit).is_allowed()); }
/// // Denied, but counted: the window now holds 3.
/// assert!(limit.decide(&mut state, now, 1, Apply::Commit).is_denied());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Penalize<A>(pub A);

impl<A: Algorithm> Algorithm for Penalize<A> {
    type State = A::State;
    fn fresh(&self) -> Self::State {
        self.0.fresh()
    }
    fn decide(&self, state: &mut Self::State, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        let apply = match apply {
            Apply::Check => Apply::Check,
            Apply::Refund => Apply::Refund,
            Apply::Rejected if self.0.in_flight() => Apply::Rejected,
            Apply::Commit | Apply::Force | Apply::Rejected => Apply::Force,
        };
        self.0.decide(state, now, cost, apply)
    }
    fn idle_at(&self, state: &Self::State, now: Timestamp) -> Timestamp {
        self.0.idle_at(state, now)
    }
    fn in_flight(&self) -> bool {
        self.0.in_flight()
    }
    fn pins(&self) -> bool {
        self.0.pins()
    }
    fn snapshot(&self, state: &Self::State) -> Option<Self::State> {
        self.0.snapshot(state)
    }
}

/// The latest idle instant a set reports for a member that does not
/// [pin](Algorithm::pins): one nanosecond before [`Timestamp::MAX`], so that
/// a member's saturated instant does not read as another's held permits.
pub(crate) const LATEST_IDLE: Timestamp = Timestamp::from_nanos(u64::MAX - 1);

/// The idle instant `t` of a set's member `m`: clamped below
/// [`Timestamp::MAX`] unless `m` pins.
#[inline]
pub(crate) fn member_idle<A: Algorithm + ?Sized>(m: &A, t: Timestamp) -> Timestamp {
    if m.pins() { t } else { t.min(LATEST_IDLE) }
}
