//! Sending with retries: an async helper over any HTTP client.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::budget::RetryBudget;
use super::state::{Next, RetryPolicy, RetryState};

/// A client-side companion for calling rate-limited APIs: retries with
/// backoff and `Retry-After`, a shared retry budget, and proactive pacing
/// (the wait its last response asked for before the next request).
///
/// It wraps any client: `send` makes one attempt and returns an
/// `http::Response` (reqwest: `.send().await.map(http::Response::from)`;
/// hyper: the response as is). The request's method decides what may be
/// retried: a non-idempotent one (POST, PATCH) is sent again only after a
/// 429 or a 503 with `Retry-After`, unless
/// [`RetryPolicy::retry_non_idempotent`] is set.
///
/// ```no_run
/// # async fn run() -> Result<(), reqwest::Error> {
/// use floodgate_http::client::Retrier;
/// let retrier = Retrier::default();
/// let http = reqwest::Client::new();
/// let res = retrier
///     .send(&http::Method::GET, || async {
///         http.get("http://127.0.0.1:8080/").send().await.map(http::Response::from)
///     })
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct Retrier {
    policy: RetryPolicy,
    budget: Arc<RetryBudget>,
    not_before: Mutex<Option<Instant>>,
}

impl Retrier {
    /// A retrier with `policy` and `budget`.
    pub fn new(policy: RetryPolicy, budget: Arc<RetryBudget>) -> Self {
        Retrier {
            policy,
            budget,
            not_before: Mutex::new(None),
        }
    }

    /// The shared retry budget.
    pub fn budget(&self) -> &Arc<RetryBudget> {
        &self.budget
    }

    /// The pacing wait still pending before the next request.
    pub fn pending_pace(&self) -> Duration {
        let at = self.not_before.lock().ok().and_then(|g| *g);
        at.map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        })
    }

    /// Sends one logical request with `method`: waits any pending pace,
    /// then attempts with `send` until a final answer, retrying per the
    /// policy. A transport error is retried too (an idempotent request
    /// only, by default); the last one is returned. When it gives up after
    /// an answer with `Retry-After` (attempts or budget spent, or a wait
    /// over `max_wait`), that wait still applies to the next `send`.
    pub async fn send<B, E, F, Fut>(
        &self,
        method: &http::Method,
        mut send: F,
    ) -> Result<http::Response<B>, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<http::Response<B>, E>>,
    {
        let pace = self.pending_pace();
        if !pace.is_zero() {
            tokio::time::sleep(pace).await;
        }
        let mut state = RetryState::new(self.policy, self.budget.clone()).for_method(method);
        loop {
            let result = send().await;
            let next = match &result {
                Ok(res) => state.on_response(res.status().as_u16(), res.headers()),
                Err(_) => state.on_error(),
            };
            match next {
                Next::Done { pace } | Next::GiveUp { pace, .. } => {
                    if let Ok(mut g) = self.not_before.lock() {
                        *g = (!pace.is_zero()).then(|| Instant::now() + pace);
                    }
                    return result;
                }
                Next::Retry { after } => tokio::time::sleep(after).await,
            }
        }
    }
}
