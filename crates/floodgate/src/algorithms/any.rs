//! Any algorithm, chosen at run time (from a configuration file), with one
//! state type for all, so one store can hold keys of every kind of limit.

use crate::algorithm::{Algorithm, Apply};
use crate::{Decision, Timestamp};

use super::{
    Concurrency, FixedWindow, Gcra, GcraState, LogState, Shaper, ShaperState, SlidingLog,
    SlidingWindow, SlidingWindowState, SubWindowCounter, SubWindowState, WindowState,
};

/// One limit of any algorithm, optionally in penalty mode.
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
    penalty: bool,
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
    /// See [`SubWindowCounter`].
    SubWindows(SubWindowState),
    /// See [`SlidingLog`].
    SlidingLog(LogState),
    /// See [`Shaper`].
    Shaper(ShaperState),
    /// See [`Concurrency`].
    Concurrency(u64),
}

macro_rules! any_from {
    ($($t:ident),+) => {$(
        impl From<$t> for AnyLimit {
            fn from(a: $t) -> Self {
                AnyLimit { kind: Kind::$t(a), penalty: false }
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
            penalty: false,
        }
    }
}

impl AnyLimit {
    /// The same limit with penalty mode on or off (see
    /// [`Penalize`](crate::Penalize)). Off by default.
    pub fn with_penalty(mut self, penalty: bool) -> Self {
        self.penalty = penalty;
        self
    }

    /// Whether denied requests still count.
    pub fn penalty(&self) -> bool {
        self.penalty
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
}

impl Algorithm for AnyLimit {
    type State = AnyState;

    fn fresh(&self) -> AnyState {
        AnyState::Fresh
    }

    fn decide(&self, state: &mut AnyState, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        let apply = match (self.penalty, apply) {
            (true, Apply::Commit | Apply::Rejected) => Apply::Force,
            (_, a) => a,
        };
        macro_rules! run {
            ($($k:ident),+) => {
                match &self.kind {
                    $(Kind::$k(a) => {
                        if !matches!(state, AnyState::$k(_)) {
                            *state = AnyState::$k(a.fresh());
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

    fn idle_at(&self, state: &AnyState, now: Timestamp) -> Timestamp {
        match (&self.kind, state) {
            (Kind::Gcra(a), AnyState::Gcra(s)) => a.idle_at(s, now),
            (Kind::FixedWindow(a), AnyState::FixedWindow(s)) => a.idle_at(s, now),
            (Kind::SlidingWindow(a), AnyState::SlidingWindow(s)) => a.idle_at(s, now),
            (Kind::SubWindows(a), AnyState::SubWindows(s)) => a.idle_at(s, now),
            (Kind::SlidingLog(a), AnyState::SlidingLog(s)) => a.idle_at(s, now),
            (Kind::Shaper(a), AnyState::Shaper(s)) => a.idle_at(s, now),
            (Kind::Concurrency(a), AnyState::Concurrency(s)) => a.idle_at(s, now),
            _ => now,
        }
    }
}
