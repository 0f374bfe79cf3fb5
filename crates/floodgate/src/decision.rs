//! The answer to "may this proceed?": a [`Decision`] value. A denial is a
//! value, never an error.

use std::time::Duration;

/// What happened to the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The request may proceed now.
    Allowed,
    /// The request was accepted and charged, but must wait this long before it
    /// proceeds (the leaky-bucket shaper: nginx `limit_req` without `nodelay`).
    Delayed(Duration),
    /// The request is over the limit. Nothing was consumed unless the limit
    /// runs in penalty mode.
    Denied,
    /// The request can never be admitted: its cost exceeds what the limit can
    /// hold even when idle. Retrying is pointless.
    Never,
}

/// The decision for one request against one limit (or the narrowest of
/// several limits).
///
/// `remaining` and `reset_after` describe the limit's state *after* the
/// decision: what a client should be told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Allowed, delayed, denied, or never admissible.
    pub outcome: Outcome,
    /// The quota: requests admissible at once from idle (burst capacity for
    /// bucket algorithms, the count per window for window algorithms).
    pub limit: u64,
    /// Requests of cost 1 that would be admitted right now, rounded down.
    pub remaining: u64,
    /// Time until the limit is back to its full quota (the window resets, the
    /// bucket is full again). Zero when it already is.
    pub reset_after: Duration,
    /// For [`Outcome::Denied`]: the exact wait after which the same request
    /// would be admitted (given no other traffic). At `retry_after - 1µs` it is
    /// still denied; at `retry_after` it is allowed. `None` when the request
    /// was admitted, can never be admitted, or the wait cannot be known (an
    /// in-flight limit frees up when a holder finishes, not at a time).
    pub retry_after: Option<Duration>,
}

impl Decision {
    /// True for [`Outcome::Allowed`] and [`Outcome::Delayed`]: the request was
    /// admitted (and charged, unless it was a dry check).
    #[inline]
    pub fn is_allowed(&self) -> bool {
        matches!(self.outcome, Outcome::Allowed | Outcome::Delayed(_))
    }

    /// True for [`Outcome::Denied`] and [`Outcome::Never`].
    #[inline]
    pub fn is_denied(&self) -> bool {
        !self.is_allowed()
    }

    /// The delay to apply before proceeding (zero unless delayed).
    #[inline]
    pub fn delay(&self) -> Duration {
        match self.outcome {
            Outcome::Delayed(d) => d,
            _ => Duration::ZERO,
        }
    }

    fn severity(&self) -> u8 {
        match self.outcome {
            Outcome::Allowed => 0,
            Outcome::Delayed(_) => 1,
            Outcome::Denied => 2,
            Outcome::Never => 3,
        }
    }

    /// Combines the decisions of several limits applied to one request into
    /// the one a client should be told:
    ///
    /// * the outcome is the worst one (never > denied > delayed > allowed);
    ///   delays combine by maximum, as nginx does for several `limit_req`;
    /// * `retry_after` is the longest wait among the denying limits (every
    ///   limit must admit the request, and each stays admitting once it does);
    /// * `limit`, `remaining` and `reset_after` come from the narrowest limit:
    ///   among the denying limits if any deny, otherwise among all, the one
    ///   with the least remaining (ties: the smaller limit).
    ///
    /// ```
    /// use floodgate::{Decision, Outcome};
    /// use std::time::Duration;
    /// let a = Decision { outcome: Outcome::Allowed, limit: 10, remaining: 7,
    ///     reset_after: Duration::from_secs(1), retry_after: None };
    /// let b = Decision { outcome: Outcome::Allowed, limit: 1000, remaining: 3,
    ///     reset_after: Duration::from_secs(3600), retry_after: None };
    /// let n = a.narrowest(b);
    /// assert_eq!((n.limit, n.remaining), (1000, 3));
    /// ```
    pub fn narrowest(self, other: Decision) -> Decision {
        let outcome = match (self.outcome, other.outcome) {
            (Outcome::Delayed(a), Outcome::Delayed(b)) => Outcome::Delayed(a.max(b)),
            _ if self.severity() >= other.severity() => self.outcome,
            _ => other.outcome,
        };
        let retry_after = match outcome {
            Outcome::Denied => {
                let r = |d: &Decision| match d.outcome {
                    Outcome::Denied => Some(d.retry_after),
                    _ => None,
                };
                match (r(&self), r(&other)) {
                    (Some(Some(a)), Some(Some(b))) => Some(a.max(b)),
                    (Some(a), None) | (None, Some(a)) => a,
                    _ => None,
                }
            }
            _ => None,
        };
        let denied = outcome == Outcome::Denied || outcome == Outcome::Never;
        let pick_self = match (
            denied && self.severity() >= 2,
            denied && other.severity() >= 2,
        ) {
            (true, false) => true,
            (false, true) => false,
            _ => (self.remaining, self.limit) <= (other.remaining, other.limit),
        };
        let base = if pick_self { self } else { other };
        Decision {
            outcome,
            retry_after,
            ..base
        }
    }
}
