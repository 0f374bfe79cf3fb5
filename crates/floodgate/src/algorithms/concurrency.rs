//! Concurrency (in-flight) limit: at most `max` units held at once. Units are
//! taken by an admitted request and given back when it completes; the
//! [`RateLimiter::acquire`](crate::RateLimiter::acquire) permit does that on
//! drop, so a holder that panics still releases.
//!
//! With a lease ([`Concurrency::leased`]), each unit taken is held until it
//! is given back or its lease ends, whichever comes first: units a holder
//! never gives back (Envoy driving the limit over RLS and dying
//! mid-request) return within one lease. Its state is then a
//! [`LeaseState`](super::LeaseState), and units are given back by their
//! holder only.

use std::fmt;
use std::time::Duration;

use crate::algorithm::{Algorithm, Apply};
use crate::error::{ConfigError, check_count, check_period};
use crate::{Decision, Outcome, Timestamp};

use super::shape::{Quota, Shape};

/// At most `max` in flight at once.
///
/// ```
/// use floodgate::{Algorithm, Apply, Timestamp};
/// use floodgate::algorithms::Concurrency;
///
/// let c = Concurrency::new(2).unwrap();
/// let mut held = c.fresh();
/// let now = Timestamp::ZERO;
/// assert!(c.decide(&mut held, now, 2, Apply::Commit).is_allowed());
/// assert!(c.decide(&mut held, now, 1, Apply::Commit).is_denied());
/// c.release(&mut held, 1);
/// assert!(c.decide(&mut held, now, 1, Apply::Commit).is_allowed());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Concurrency {
    max: u64,
    lease: Option<Duration>,
}

impl Concurrency {
    /// At most `max` units in flight.
    pub fn new(max: u64) -> Result<Self, ConfigError> {
        Ok(Concurrency {
            max: check_count("max", max)?,
            lease: None,
        })
    }

    /// At most `max` units in flight, each held for `lease` at most.
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{Apply, Timestamp};
    /// use floodgate::algorithms::{AnyLimit, AnyState, Concurrency, HeldBy};
    ///
    /// let limit = AnyLimit::from(Concurrency::leased(1, Duration::from_secs(30)).unwrap());
    /// let mut s = AnyState::Fresh;
    /// let (alice, bob) = (HeldBy::new(&limit, 1), HeldBy::new(&limit, 2));
    /// assert!(alice.decide(&mut s, Timestamp::ZERO, 1, Apply::Commit).is_allowed());
    /// // Bob cannot give back Alice's unit; her lease ends at 30 s.
    /// bob.decide(&mut s, Timestamp::ZERO, 1, Apply::Refund);
    /// assert!(bob.decide(&mut s, Timestamp::from_secs(29), 1, Apply::Commit).is_denied());
    /// assert!(bob.decide(&mut s, Timestamp::from_secs(30), 1, Apply::Commit).is_allowed());
    /// ```
    pub fn leased(max: u64, lease: Duration) -> Result<Self, ConfigError> {
        check_period("lease", lease)?;
        Ok(Concurrency {
            lease: Some(lease),
            ..Concurrency::new(max)?
        })
    }

    /// How long a unit is held at most, when the limit has a lease.
    pub fn lease(&self) -> Option<Duration> {
        self.lease
    }

    /// The maximum in flight.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Gives back `units` taken by an admitted request.
    pub fn release(&self, held: &mut u64, units: u64) {
        *held = held.saturating_sub(units);
    }
}

impl Shape for Concurrency {
    fn name(&self) -> &'static str {
        "concurrency"
    }

    fn quota(&self) -> Quota {
        Quota {
            limit: self.max,
            window: None,
        }
    }

    fn counting_window(&self) -> Option<Duration> {
        None
    }

    fn reset_window(&self) -> Option<Duration> {
        None
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.max)?;
        if let Some(lease) = self.lease {
            write!(f, " lease {}s", lease.as_secs_f64().ceil() as u64)?;
        }
        Ok(())
    }
}

impl Algorithm for Concurrency {
    /// Units in flight.
    type State = u64;

    fn fresh(&self) -> u64 {
        0
    }

    /// Penalty mode has no meaning for in-flight limits: a denied request
    /// holds nothing, so `Apply::Force` charges only admitted requests, and
    /// `Apply::Rejected` nothing.
    fn decide(&self, held: &mut u64, _now: Timestamp, cost: u64, apply: Apply) -> Decision {
        let outcome = if cost > self.max {
            Outcome::Never
        } else if held.saturating_add(cost) <= self.max {
            if apply.charge_if_allowed() {
                *held += cost;
            }
            Outcome::Allowed
        } else {
            Outcome::Denied
        };
        Decision {
            outcome,
            limit: self.max,
            remaining: self.max.saturating_sub(*held),
            reset_after: Duration::ZERO,
            retry_after: None,
        }
    }

    /// [`Timestamp::MAX`] while units are held: the key must be kept.
    fn idle_at(&self, held: &u64, now: Timestamp) -> Timestamp {
        if *held == 0 { now } else { Timestamp::MAX }
    }

    fn in_flight(&self) -> bool {
        true
    }

    fn pins(&self) -> bool {
        true
    }
}
