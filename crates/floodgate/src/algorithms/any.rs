//! Any algorithm, chosen at run time (from a configuration file), with one
//! state type for all, so one store can hold keys of every kind of limit.

use crate::algorithm::{Algorithm, Apply};
use crate::{Decision, Outcome, Timestamp};

use super::leases::{Holder, LeaseState};
use super::shape::{Quota, Shape};
use super::{
    Concurrency, FixedWindow, Gcra, GcraState, LogState, Shaper, ShaperState, SlidingLog,
    SlidingWindow, SlidingWindowState, SubWindowCounter, SubWindowState, WindowState,
};

/// `$body` with `$a` bound to the algorithm `$kind` holds, whichever it is:
/// the one exhaustive match every question about an algorithm goes through.
macro_rules! each_kind {
    ($kind:expr, $a:ident => $body:expr) => {
        match $kind {
            Kind::Gcra($a) => $body,
            Kind::FixedWindow($a) => $body,
            Kind::SlidingWindow($a) => $body,
            Kind::SubWindows($a) => $body,
            Kind::SlidingLog($a) => $body,
            Kind::Shaper($a) => $body,
            Kind::Concurrency($a) => $body,
        }
    };
}

/// One limit of any algorithm, with its penalty mode and an optional block
/// duration.
///
/// ```
/// use floodgate::{Algorithm, Apply, Timestamp};
/// use floodgate::algorithms::{AnyLimit, FixedWindow};
/// use std::time::Duration;
///
/// let limit = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(1)).unwrap());
/// let mut s = limit.fresh();
/// assert!(limit.decide(&mut s, Timestamp::ZERO, 1, Apply::Commit).is_allowed());
/// assert!(limit.decide(&mut s, Timestamp::ZERO, 1, Apply::Commit).is_denied());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AnyLimit {
    kind: Kind,
    penalty: Penalty,
    /// Nanoseconds a key stays blocked after a denial (0: never blocked).
    block: u64,
}

/// Who pays for a denied request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Penalty {
    /// Nobody: a denied request changes no state (the default).
    #[default]
    None,
    /// The limits that denied it count it (envoyproxy/ratelimit with
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    OwnDenials,
    /// This limit counts every denied request, whoever denied it (Kong,
    /// HAProxy; see [`Penalize`](crate::Penalize)).
    AllDenials,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Gcra(Gcra),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    SubWindows(SubWindowCounter),
    SlidingLog(SlidingLog),
    Shaper(Shaper),
    Concurrency(Concurrency),
}

/// The state of an [`AnyLimit`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AnyState {
    /// A key never seen (by any kind).
    #[default]
    Fresh,
    /// See [`Gcra`].
    Gcra(GcraState),
    /// See [`FixedWindow`].
    FixedWindow(WindowState),
    /// See [`SlidingWindow`].
    SlidingWindow(SlidingWindowState),
    /// See [`SubWindowCounter`]; boxed, as its counts are, so that the
    /// states of the other kinds need not be as large.
    SubWindows(Box<SubWindowState>),
    /// See [`SlidingLog`]; boxed, as its entries are, so that the states
    /// of the other kinds need not be as large.
    SlidingLog(Box<LogState>),
    /// See [`Shaper`].
    Shaper(ShaperState),
    /// See [`Concurrency`].
    Concurrency(u64),
    /// See [`Concurrency::leased`].
    Leases(Box<LeaseState>),
    /// Denied outright until this instant (ns), after a denial of a limit
    /// with a block duration.
    Blocked(u64),
}

macro_rules! any_from {
    ($($t:ident),+) => {$(
        impl From<$t> for AnyLimit {
            fn from(a: $t) -> Self {
                AnyLimit { kind: Kind::$t(a), penalty: Penalty::None, block: 0 }
            }
        }
    )+};
}
any_from!(
    Gcra,
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    Shaper,
    Concurrency
);

impl From<SubWindowCounter> for AnyLimit {
    fn from(a: SubWindowCounter) -> Self {
        AnyLimit {
            kind: Kind::SubWindows(a),
            penalty: Penalty::None,
            block: 0,
        }
    }
}

/// A borrowed view of an [`AnyLimit`]'s algorithm and parameters (for
/// backends that implement the algorithms elsewhere, e.g. in Redis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitKind<'a> {
    /// See [`Gcra`].
    Gcra(&'a Gcra),
    /// See [`FixedWindow`].
    FixedWindow(&'a FixedWindow),
    /// See [`SlidingWindow`].
    SlidingWindow(&'a SlidingWindow),
    /// See [`SubWindowCounter`].
    SubWindows(&'a SubWindowCounter),
    /// See [`SlidingLog`].
    SlidingLog(&'a SlidingLog),
    /// See [`Shaper`].
    Shaper(&'a Shaper),
    /// See [`Concurrency`].
    Concurrency(&'a Concurrency),
}

impl AnyLimit {
    /// The algorithm and its parameters.
    pub fn kind(&self) -> LimitKind<'_> {
        match &self.kind {
            Kind::Gcra(a) => LimitKind::Gcra(a),
            Kind::FixedWindow(a) => LimitKind::FixedWindow(a),
            Kind::SlidingWindow(a) => LimitKind::SlidingWindow(a),
            Kind::SubWindows(a) => LimitKind::SubWindows(a),
            Kind::SlidingLog(a) => LimitKind::SlidingLog(a),
            Kind::Shaper(a) => LimitKind::Shaper(a),
            Kind::Concurrency(a) => LimitKind::Concurrency(a),
        }
    }

    /// The same limit with penalty mode on ([`Penalty::AllDenials`], see
    /// [`Penalize`](crate::Penalize)) or off. Off by default; always off for
    /// a concurrency limit (see [`with_penalty_mode`](Self::with_penalty_mode)).
    pub fn with_penalty(self, penalty: bool) -> Self {
        self.with_penalty_mode(if penalty {
            Penalty::AllDenials
        } else {
            Penalty::None
        })
    }

    /// The same limit with the given penalty mode. A concurrency limit keeps
    /// [`Penalty::None`]: a request it did not admit holds no units, and a
    /// charge for it could never be given back.
    pub fn with_penalty_mode(mut self, penalty: Penalty) -> Self {
        if !self.is_concurrency() {
            self.penalty = penalty;
        }
        self
    }

    /// The same limit, blocking a key for `block` after each denial: every
    /// request in that time is denied (and charged nothing; a cost that can
    /// never fit is [`Outcome::Never`]), then the key starts afresh. Zero
    /// disables blocking (the default). A concurrency limit is never blocked
    /// (`block` is ignored): its count must outlive any block, as the
    /// permits it counts are given back whenever their requests complete.
    ///
    /// ```
    /// use floodgate::{Algorithm, Apply, Timestamp};
    /// use floodgate::algorithms::{AnyLimit, FixedWindow};
    /// use std::time::Duration;
    ///
    /// let limit = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
    ///     .with_block(Duration::from_secs(600));
    /// let mut s = limit.fresh();
    /// let t = Timestamp::from_secs(10);
    /// limit.decide(&mut s, t, 1, Apply::Commit);
    /// assert!(limit.decide(&mut s, t, 1, Apply::Commit).is_denied()); // blocked now
    /// let later = Timestamp::from_secs(15);
    /// let d = limit.decide(&mut s, later, 1, Apply::Commit);
    /// assert_eq!(d.retry_after, Some(Duration::from_secs(595)));
    /// ```
    pub fn with_block(mut self, block: std::time::Duration) -> Self {
        if !self.is_concurrency() {
            self.block = crate::time::duration_nanos(block);
        }
        self
    }

    /// Whether denied requests count against this limit in any way.
    pub fn penalty(&self) -> bool {
        self.penalty != Penalty::None
    }

    /// The penalty mode.
    pub fn penalty_mode(&self) -> Penalty {
        self.penalty
    }

    /// How long a key is blocked after a denial (zero: not at all).
    pub fn block(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.block)
    }

    /// True for a concurrency (in-flight) limit, whose units must be released.
    pub fn is_concurrency(&self) -> bool {
        matches!(self.kind, Kind::Concurrency(_))
    }

    /// Gives back `units` of a concurrency limit (no effect on other kinds).
    pub fn release(&self, state: &mut AnyState, units: u64) {
        if let (Kind::Concurrency(c), AnyState::Concurrency(held)) = (&self.kind, state) {
            c.release(held, units);
        }
    }

    /// True for a concurrency limit with a lease: its units are held by
    /// holders, each until its lease ends ([`Concurrency::leased`]).
    pub fn is_leased(&self) -> bool {
        matches!(&self.kind, Kind::Concurrency(c) if c.lease().is_some())
    }

    /// Gives back up to `units` that `holder` holds of a leased concurrency
    /// limit at `now`; returns how many (0 for other limits).
    pub fn give_back(
        &self,
        state: &mut AnyState,
        now: Timestamp,
        units: u64,
        holder: Holder<'_>,
    ) -> u64 {
        match (&self.kind, state) {
            (Kind::Concurrency(c), AnyState::Leases(st)) => c.give_back(st, now, units, holder),
            _ => 0,
        }
    }
}

/// What the limit looks like from outside its decisions (see [`Quota`]).
impl AnyLimit {
    /// The algorithm's name in a configuration: `fixed_window`,
    /// `sliding_window`, `sliding_log`, `token_bucket`, `shaper`,
    /// `concurrency`.
    #[inline]
    pub fn name(&self) -> &'static str {
        each_kind!(&self.kind, a => a.name())
    }

    /// The quota a client is told of.
    #[inline]
    pub fn quota(&self) -> Quota {
        each_kind!(&self.kind, a => a.quota())
    }

    /// The length of the epoch-aligned window (or sub-window) the limit's
    /// counts are kept by (a fixed window's, a sliding window's current
    /// one, a sub-window); `None` for an algorithm without windows.
    #[inline]
    pub fn counting_window(&self) -> Option<std::time::Duration> {
        each_kind!(&self.kind, a => a.counting_window())
    }

    /// The epoch-aligned window at whose end everything counted is
    /// forgotten at once (a fixed window's); `None` when what was counted
    /// expires or drains gradually.
    ///
    /// ```
    /// use floodgate::algorithms::{AnyLimit, FixedWindow, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let minute = Duration::from_secs(60);
    /// let fixed = AnyLimit::from(FixedWindow::new(5, minute).unwrap());
    /// assert_eq!(fixed.reset_window(), Some(minute));
    /// let sliding = AnyLimit::from(SlidingWindow::new(5, minute).unwrap());
    /// assert_eq!(sliding.reset_window(), None);
    /// ```
    #[inline]
    pub fn reset_window(&self) -> Option<std::time::Duration> {
        each_kind!(&self.kind, a => a.reset_window())
    }

    /// The limit in words, its algorithm's name first: `sliding_log
    /// 100/60s`, `token_bucket 10/1s burst 5`, `shaper 10 r/s burst 5`
    /// (windows in whole seconds, rounded up).
    ///
    /// ```
    /// use floodgate::algorithms::{AnyLimit, FixedWindow};
    /// use std::time::Duration;
    ///
    /// let limit = AnyLimit::from(FixedWindow::new(100, Duration::from_secs(60)).unwrap());
    /// assert_eq!(limit.describe().to_string(), "fixed_window 100/60s");
    /// ```
    pub fn describe(&self) -> impl std::fmt::Display + '_ {
        Described(self)
    }
}

/// An [`AnyLimit`] in words (see [`AnyLimit::describe`]).
struct Described<'a>(&'a AnyLimit);

impl std::fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        each_kind!(&self.0.kind, a => {
            write!(f, "{} ", a.name())?;
            a.describe(f)
        })
    }
}

impl AnyLimit {
    /// The decision for a request of `cost` on a key blocked until `until`:
    /// denied until then, or [`Outcome::Never`] for a cost that can never fit.
    fn blocked(&self, until: u64, now: Timestamp, cost: u64) -> Decision {
        let idle = self.run(&mut AnyState::Fresh, now, cost, Apply::Check);
        let wait = std::time::Duration::from_nanos(until.saturating_sub(now.as_nanos()));
        let never = idle.outcome == Outcome::Never;
        Decision {
            outcome: if never {
                Outcome::Never
            } else {
                Outcome::Denied
            },
            limit: idle.limit,
            remaining: 0,
            reset_after: wait,
            retry_after: (!never).then_some(wait),
        }
    }

    fn run(&self, state: &mut AnyState, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        self.run_held(state, now, cost, apply, Holder::default())
    }

    fn run_held(
        &self,
        state: &mut AnyState,
        now: Timestamp,
        cost: u64,
        apply: Apply,
        holder: Holder<'_>,
    ) -> Decision {
        if let Kind::Concurrency(c) = &self.kind
            && let Some(lease) = c.lease()
        {
            if !matches!(state, AnyState::Leases(_)) {
                *state = AnyState::Leases(Box::default());
            }
            let AnyState::Leases(st) = state else {
                unreachable!()
            };
            return c.decide_leased(lease, st, now, cost, apply, holder);
        }
        macro_rules! run {
            ($($k:ident),+) => {
                match &self.kind {
                    $(Kind::$k(a) => {
                        if !matches!(state, AnyState::$k(_)) {
                            // Boxed for the kinds held boxed.
                            *state = AnyState::$k(a.fresh().into());
                        }
                        let AnyState::$k(s) = state else { unreachable!() };
                        a.decide(s, now, cost, apply)
                    })+
                }
            };
        }
        run!(
            Gcra,
            FixedWindow,
            SlidingWindow,
            SubWindows,
            SlidingLog,
            Shaper,
            Concurrency
        )
    }
}

impl Algorithm for AnyLimit {
    type State = AnyState;

    fn fresh(&self) -> AnyState {
        AnyState::Fresh
    }

    fn decide(&self, state: &mut AnyState, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        self.decide_held(state, now, cost, apply, Holder::default())
    }

    fn idle_at(&self, state: &AnyState, now: Timestamp) -> Timestamp {
        if let (Kind::Concurrency(c), AnyState::Leases(st)) = (&self.kind, state) {
            return c.leased_idle_at(st, now);
        }
        self.idle_at_unleased(state, now)
    }

    fn in_flight(&self) -> bool {
        self.is_concurrency()
    }

    fn snapshot(&self, state: &AnyState) -> Option<AnyState> {
        Some(state.clone())
    }

    /// A concurrency limit pins (it is never blocked, so a blocked key's
    /// end of time is only an instant).
    fn pins(&self) -> bool {
        self.is_concurrency()
    }
}

impl AnyLimit {
    /// [`Algorithm::decide`] for `holder`, who takes the units of a leased
    /// concurrency limit or gives back its own ([`HeldBy`]).
    pub(crate) fn decide_held(
        &self,
        state: &mut AnyState,
        now: Timestamp,
        cost: u64,
        apply: Apply,
        holder: Holder<'_>,
    ) -> Decision {
        if let AnyState::Blocked(until) = *state {
            if now.as_nanos() < until {
                return self.blocked(until, now, cost);
            }
            *state = AnyState::Fresh;
        }
        let d = match (self.penalty, apply) {
            (Penalty::AllDenials, Apply::Commit | Apply::Rejected)
            | (Penalty::OwnDenials, Apply::Commit) => self.run(state, now, cost, Apply::Force),
            (Penalty::OwnDenials, Apply::Rejected) => {
                let own = self.run(state, now, cost, Apply::Check);
                if own.is_allowed() {
                    own
                } else {
                    self.run(state, now, cost, Apply::Force)
                }
            }
            (_, a) => self.run_held(state, now, cost, a, holder),
        };
        // Neither a check nor a refund starts a block: they charge nothing.
        if self.block > 0
            && d.outcome == Outcome::Denied
            && !matches!(apply, Apply::Check | Apply::Refund)
        {
            let until = now.as_nanos().saturating_add(self.block);
            *state = AnyState::Blocked(until);
            return self.blocked(until, now, cost);
        }
        d
    }

    fn idle_at_unleased(&self, state: &AnyState, now: Timestamp) -> Timestamp {
        macro_rules! idle_at {
            ($($k:ident),+) => {
                match (&self.kind, state) {
                    (_, AnyState::Blocked(until)) => Timestamp::from_nanos(*until).max(now),
                    $((Kind::$k(a), AnyState::$k(s)) => a.idle_at(s, now),)+
                    // Fresh, or another kind's state: nothing of this limit.
                    $((Kind::$k(_), _) => now,)+
                }
            };
        }
        idle_at!(
            Gcra,
            FixedWindow,
            SlidingWindow,
            SubWindows,
            SlidingLog,
            Shaper,
            Concurrency
        )
    }
}
