//! [`RetryState`]: what to do after each response of one logical request.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::HeaderMap;

use super::backoff::{Backoff, Rng};
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
    /// Stop: return the last response.
    GiveUp(GiveUp),
}

/// The retry state of one logical request, over its attempts.
///
/// ```
/// use floodgate_http::client::{Next, RetryBudget, RetryPolicy, RetryState};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let budget = Arc::new(RetryBudget::default());
/// let mut state = RetryState::new(RetryPolicy::default(), budget);
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
}

impl RetryState {
    /// A new logical request under `policy`, drawing retries from `budget`
    /// (shared by the client's requests). Counts the request in the budget.
    pub fn new(policy: RetryPolicy, budget: Arc<RetryBudget>) -> Self {
        budget.deposit();
        RetryState {
            policy,
            budget,
            rng: Rng::default(),
            attempt: 0,
        }
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
        let floor = signals.retry_after.or(match signals.remaining {
            Some(0) => signals.reset,
            _ => None,
        });
        self.retry(floor.unwrap_or(Duration::ZERO))
    }

    /// After a transport error (no response).
    pub fn on_error(&mut self) -> Next {
        self.attempt += 1;
        self.retry(Duration::ZERO)
    }

    fn retry(&mut self, floor: Duration) -> Next {
        if floor > self.policy.max_wait {
            return Next::GiveUp(GiveUp::TooLong(floor));
        }
        if self.attempt >= self.policy.max_attempts {
            return Next::GiveUp(GiveUp::Attempts);
        }
        if !self.budget.try_withdraw() {
            return Next::GiveUp(GiveUp::Budget);
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
                (reset / (r.min(u32::MAX as u64 - 1) as u32 + 1)).min(self.policy.max_wait)
            }
            _ => Duration::ZERO,
        }
    }
}
