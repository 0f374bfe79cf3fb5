//! [`RetryState`]: what to do after each response of one logical request.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, Method};

use fastrand::Rng;

use super::backoff::Backoff;
use super::budget::RetryBudget;
use super::signals::Signals;

/// Retry settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts at most, the first included.
    pub max_attempts: u32,
    /// Backoff between attempts (a floor under `Retry-After`'s never applies:
    /// the longer of the two is waited).
    pub backoff: Backoff,
    /// A `Retry-After` (or reset) longer than this gives up instead of
    /// waiting.
    pub max_wait: Duration,
    /// Also retry 502 and 504 (429 and 503 always are).
    pub retry_gateway_errors: bool,
    /// Also retry requests whose method is not idempotent (POST, PATCH,
    /// CONNECT, unknown methods) after a 502, a 504, a 503 without
    /// `Retry-After` or a transport error — answers after which the server
    /// may have processed the request. Off by default: such a request is
    /// retried only after a 429 or a 503 with `Retry-After` (rejected
    /// before it was processed).
    pub retry_non_idempotent: bool,
    /// Spread the remaining quota once it is at most this low: the next
    /// request waits `reset / (remaining + 1)`; at 0, the whole reset.
    pub spread_below: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            backoff: Backoff::default(),
            max_wait: Duration::from_secs(60),
            retry_gateway_errors: true,
            retry_non_idempotent: false,
            spread_below: 10,
        }
    }
}

/// Why retrying stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// `max_attempts` reached.
    Attempts,
    /// The retry budget is spent.
    Budget,
    /// The server asks for a wait longer than `max_wait`.
    TooLong(Duration),
    /// The request is not idempotent and the answer does not say that it
    /// was not processed (see [`RetryPolicy::retry_non_idempotent`]).
    NotIdempotent,
}

/// What to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The response is final. Before this client's next request, wait
    /// `pace` (proactive slowing near exhaustion; zero otherwise).
    Done {
        /// Wait before the next request.
        pace: Duration,
    },
    /// Retry after `after` (never earlier than `Retry-After`).
    Retry {
        /// The wait.
        after: Duration,
    },
    /// Stop: return the last response. Before this client's next request,
    /// wait `pace`: what the server asked for (`Retry-After`, or an
    /// exhausted quota's reset), so that giving up never means coming back
    /// early.
    GiveUp {
        /// Why.
        reason: GiveUp,
        /// Wait before the next request.
        pace: Duration,
    },
}

/// The retry state of one logical request, over its attempts.
///
/// ```
/// use floodgate_http::client::{Next, RetryBudget, RetryPolicy, RetryState};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let budget = Arc::new(RetryBudget::default());
/// let mut state = RetryState::new(RetryPolicy::default(), budget).for_method(&http::Method::GET);
/// let mut h = http::HeaderMap::new();
/// h.insert("retry-after", "3".parse().unwrap());
/// match state.on_response(429, &h) {
///     Next::Retry { after } => assert!(after >= Duration::from_secs(3)),
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug)]
pub struct RetryState {
    policy: RetryPolicy,
    budget: Arc<RetryBudget>,
    rng: Rng,
    attempt: u32,
    idempotent: bool,
}

/// Whether `method` is idempotent (RFC 9110 §9.2.2: GET, HEAD, OPTIONS,
/// TRACE, PUT, DELETE).
pub fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

impl RetryState {
    /// A new logical request under `policy`, drawing retries from `budget`
    /// (shared by the client's requests). Counts the request in the budget.
    ///
    /// Its method is unknown, so it is treated as not idempotent (see
    /// [`RetryPolicy::retry_non_idempotent`]) until
    /// [`for_method`](Self::for_method) says otherwise.
    pub fn new(policy: RetryPolicy, budget: Arc<RetryBudget>) -> Self {
        budget.deposit();
        RetryState {
            policy,
            budget,
            rng: Rng::default(),
            attempt: 0,
            idempotent: false,
        }
    }

    /// For a request with `method`: an idempotent one (GET, HEAD, OPTIONS,
    /// TRACE, PUT, DELETE) is retried after any retryable answer.
    pub fn for_method(mut self, method: &Method) -> Self {
        self.idempotent = is_idempotent(method);
        self
    }

    /// With a seeded random generator (reproducible jitter).
    pub fn with_rng(mut self, rng: Rng) -> Self {
        self.rng = rng;
        self
    }

    /// Attempts made so far (responses seen).
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// After a response with `status` and `headers`.
    pub fn on_response(&mut self, status: u16, headers: &HeaderMap) -> Next {
        let signals = Signals::from_headers(headers, SystemTime::now());
        self.on_signals(status, &signals)
    }

    /// After a response whose headers were already read into `signals`.
    pub fn on_signals(&mut self, status: u16, signals: &Signals) -> Next {
        self.attempt += 1;
        let retryable = status == 429
            || status == 503
            || (self.policy.retry_gateway_errors && (status == 502 || status == 504));
        if !retryable {
            return Next::Done {
                pace: self.pace(signals),
            };
        }
        // The server's word is a floor: Retry-After, else an exhausted
        // quota's reset.
        let floor = signals
            .retry_after
            .or(match signals.remaining {
                Some(0) => signals.reset,
                _ => None,
            })
            .unwrap_or(Duration::ZERO);
        // A 429, or a 503 with Retry-After, rejected the request before it
        // was processed: sending it again is safe whatever its method.
        let unprocessed = status == 429 || (status == 503 && signals.retry_after.is_some());
        self.retry(floor, unprocessed)
    }

    /// After a transport error (no response). The request may have
    /// reached the server: it is retried only when it may be repeated.
    pub fn on_error(&mut self) -> Next {
        self.attempt += 1;
        self.retry(Duration::ZERO, false)
    }

    /// A retry not before `floor`, unless the policy says to give up; an
    /// `unprocessed` request may be sent again whatever its method.
    fn retry(&mut self, floor: Duration, unprocessed: bool) -> Next {
        // Giving up, the server's wait still holds for the next request.
        let give_up = |reason| Next::GiveUp {
            reason,
            pace: floor,
        };
        if !unprocessed && !self.idempotent && !self.policy.retry_non_idempotent {
            return give_up(GiveUp::NotIdempotent);
        }
        if floor > self.policy.max_wait {
            return give_up(GiveUp::TooLong(floor));
        }
        if self.attempt >= self.policy.max_attempts {
            return give_up(GiveUp::Attempts);
        }
        if !self.budget.try_withdraw() {
            return give_up(GiveUp::Budget);
        }
        let jitter = self.policy.backoff.wait(self.attempt - 1, &mut self.rng);
        // Never before the server's time; jitter on top of it spreads the
        // clients told the same time.
        let after = if floor > Duration::ZERO {
            floor + jitter.min(self.policy.backoff.base)
        } else {
            jitter
        };
        Next::Retry { after }
    }

    /// The proactive wait before the next request.
    fn pace(&self, s: &Signals) -> Duration {
        match (s.remaining, s.reset) {
            (Some(r), Some(reset)) if r <= self.policy.spread_below => {
                (reset / (r.min(u64::from(u32::MAX) - 1) as u32 + 1)).min(self.policy.max_wait)
            }
            _ => Duration::ZERO,
        }
    }
}
