//! Several limits on one key, checked atomically: all admit the request or
//! nothing is consumed (10/s *and* 1000/h *and* 10000/day for one user).
//!
//! Tuples `(A, B)`, `(A, B, C)`, `(A, B, C, D)` of algorithms are algorithms
//! themselves (a static set, state kept inline); [`Limits`] is a set chosen
//! at run time. The decision is the [narrowest](crate::Decision::narrowest)
//! of the members', except that a denied request's `retry_after` also waits
//! for the penalty-mode members its charge made deny it.

use crate::algorithm::{Algorithm, Apply, member_idle};
use crate::{Decision, Outcome, Timestamp};

/// Runs the two-phase check for `n` members: every member is first checked
/// without charging (stopping at the first refusal, as nginx does); then each
/// is charged if all admitted, otherwise told the request was rejected (only
/// penalty-mode members charge; a forced charge spares the members that are
/// [`in_flight`](Algorithm::in_flight)).
///
/// A denied request's `retry_after` is then the longest wait among the
/// members that deny it now, charges included: a penalty-mode member that
/// admitted the request may deny it once charged for it.
#[inline]
pub(crate) fn decide_all(
    n: usize,
    apply: Apply,
    in_flight: impl Fn(usize) -> bool,
    mut member: impl FnMut(usize, Apply) -> Decision,
) -> Decision {
    let (apply, forced) = match apply {
        Apply::Commit | Apply::Force => {
            let all = (0..n).all(|i| member(i, Apply::Check).is_allowed());
            match (all, apply) {
                (true, _) => (apply, false),
                (false, Apply::Force) => (Apply::Force, true),
                (false, _) => (Apply::Rejected, false),
            }
        }
        other => (other, false),
    };
    let of = |i| {
        if forced && in_flight(i) {
            Apply::Rejected
        } else {
            apply
        }
    };
    let mut out = member(0, of(0));
    for i in 1..n {
        out = out.narrowest(member(i, of(i)));
    }
    if out.outcome == Outcome::Denied && (forced || apply == Apply::Rejected) {
        out.retry_after = (0..n)
            .map(|i| member(i, Apply::Check))
            .filter(|d| d.outcome == Outcome::Denied)
            .map(|d| d.retry_after)
            .reduce(|a, b| a.zip(b).map(|(a, b)| a.max(b)))
            .unwrap_or(out.retry_after);
    }
    out
}

macro_rules! tuple_set {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Algorithm),+> Algorithm for ($($t,)+) {
            type State = ($($t::State,)+);

            fn fresh(&self) -> Self::State {
                ($(self.$i.fresh(),)+)
            }

            fn decide(&self, s: &mut Self::State, now: Timestamp, cost: u64, apply: Apply) -> Decision {
                let n = [$($i),+].len();
                let in_flight = [$(self.$i.in_flight()),+];
                decide_all(n, apply, |i| in_flight[i], |i, apply| match i {
                    $($i => self.$i.decide(&mut s.$i, now, cost, apply),)+
                    _ => unreachable!(),
                })
            }

            fn idle_at(&self, s: &Self::State, now: Timestamp) -> Timestamp {
                let mut at = Timestamp::ZERO;
                $(at = at.max(member_idle(&self.$i, self.$i.idle_at(&s.$i, now)));)+
                at
            }

            fn in_flight(&self) -> bool {
                $(self.$i.in_flight())&&+
            }

            fn pins(&self) -> bool {
                $(self.$i.pins())||+
            }
        }
    };
}

tuple_set!(A 0, B 1);
tuple_set!(A 0, B 1, C 2);
tuple_set!(A 0, B 1, C 2, D 3);

/// A set of limits chosen at run time, all applied to one key atomically.
///
/// ```
/// use floodgate::{Algorithm, Apply, Timestamp};
/// use floodgate::algorithms::{FixedWindow, Limits};
/// use std::time::Duration;
///
/// let limits = Limits::new(vec![
///     FixedWindow::new(10, Duration::from_secs(1)).unwrap(),
///     FixedWindow::new(15, Duration::from_secs(3600)).unwrap(),
/// ]).unwrap();
/// let mut s = limits.fresh();
/// let t = Timestamp::from_secs(7200);
/// assert!(limits.decide(&mut s, t, 10, Apply::Commit).is_allowed());
/// // 10 more would fit the hour but not the second: nothing is consumed.
/// assert!(limits.decide(&mut s, t, 10, Apply::Commit).is_denied());
/// let later = Timestamp::from_secs(7201);
/// assert_eq!(limits.decide(&mut s, later, 5, Apply::Commit).remaining, 0);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limits<A> {
    members: Box<[A]>,
}

impl<A: Algorithm> Limits<A> {
    /// A set of at least one limit.
    pub fn new(members: Vec<A>) -> Result<Self, crate::ConfigError> {
        if members.is_empty() {
            return Err(crate::ConfigError::new(
                "limits",
                "a set needs at least one limit",
            ));
        }
        Ok(Limits {
            members: members.into_boxed_slice(),
        })
    }

    /// The members, in order.
    pub fn members(&self) -> &[A] {
        &self.members
    }
}

impl<A: Algorithm> Algorithm for Limits<A> {
    type State = Box<[A::State]>;

    fn fresh(&self) -> Self::State {
        self.members
            .iter()
            .map(super::super::algorithm::Algorithm::fresh)
            .collect()
    }

    fn decide(&self, s: &mut Self::State, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        if s.len() != self.members.len() {
            *s = self.fresh();
        }
        decide_all(
            self.members.len(),
            apply,
            |i| self.members[i].in_flight(),
            |i, apply| self.members[i].decide(&mut s[i], now, cost, apply),
        )
    }

    fn idle_at(&self, s: &Self::State, now: Timestamp) -> Timestamp {
        self.members
            .iter()
            .zip(s.iter())
            .map(|(m, s)| member_idle(m, m.idle_at(s, now)))
            .max()
            .unwrap_or(now)
    }

    fn in_flight(&self) -> bool {
        self.members.iter().all(A::in_flight)
    }

    fn pins(&self) -> bool {
        self.members.iter().any(A::pins)
    }
}
