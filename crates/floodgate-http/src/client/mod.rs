//! Calling rate-limited APIs politely.
//!
//! * [`RetryState`] — plain state, no IO: after each response,
//!   [`on_response(status, &headers)`](RetryState::on_response) says
//!   [`Next`]: done (with a pace before the next request), retry after a
//!   wait, or give up (with the server's wait as the pace: giving up never
//!   means coming back early). Waits are exponential backoff with full
//!   jitter ([`Backoff`]), never shorter than `Retry-After` (delay-seconds
//!   or HTTP-date) or, without it, an exhausted quota's reset.
//!   Non-idempotent requests (POST, PATCH) are retried only after answers
//!   that say they were not processed (429, 503 with `Retry-After`),
//!   unless [`RetryPolicy::retry_non_idempotent`] is set.
//! * [`RetryBudget`] — retries are at most `ratio` of requests plus a small
//!   steady allowance, shared by a client's requests, so retries cannot
//!   amplify an outage.
//! * Proactive pacing: near exhaustion (`RateLimit: "p";r=2;t=30`, or
//!   `X-RateLimit-Remaining` + reset) the next request waits
//!   `reset / (remaining + 1)`, spreading what is left over the window.
//! * [`Retrier`] — an async helper wrapping any client (reqwest, hyper)
//!   with all of the above.
//! * [`Signals`] — the header reading: `RateLimit` read as an RFC 9651
//!   List (by the `sfv` crate), unknown parameters ignored, a malformed
//!   field ignored as the draft requires.

mod backoff;
mod budget;
mod send;
mod signals;
mod state;

pub use backoff::Backoff;
pub use budget::{BudgetConfig, RetryBudget};
/// The random generator of the jitter (seed it for reproducible waits:
/// `Rng::with_seed`).
pub use fastrand::Rng;
pub use send::Retrier;
pub use signals::{Signals, retry_after};
pub use state::{GiveUp, Next, RetryPolicy, RetryState, is_idempotent};
