//! `Response::fallback`: who answered a request in the store's place. The
//! engine takes it from each batch's `Backend::decide_by`, keeps the
//! greatest over the enforced batches (failed closed, then failed open,
//! then local), ignores shadow-mode batches (they change no answer), and
//! resets it for every request; the in-memory store always decides.

use crate::common;

use std::future::Future;

use common::{d, policy, ready};
use floodgate::{Apply, Decision, StoreConfig, Timestamp};
use floodgate_policy::{
    Backend, BackendError, Code, Decided, Engine, Fallback, Item, MemoryBackend, OnFailure,
    Released, Response,
};

const RULES: &str = "domains:
  - domain: api
    descriptors:
      - key: login
        rate_limit: {requests: 5, per: 1m, on_failure: fail_closed}
      - key: search
        rate_limit: {requests: 10, per: 1m, on_failure: fail_open}
      - key: upload
        rate_limit: {requests: 10, per: 1m, on_failure: local}
      - key: dark
        rate_limit: {requests: 10, per: 1m, on_failure: fail_closed}
        shadow_mode: true
      - key: plain
        rate_limit: {requests: 10, per: 1m}
";

/// A store that is always down: each batch decided in memory, and
/// reported as answered by the greatest of its items' own policies (items
/// without one: decided by the store).
struct Down(MemoryBackend);

impl Backend for Down {
    fn decide<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send + 'a {
        self.0.decide(items, now, apply, out)
    }

    async fn decide_by<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> Result<Decided, BackendError> {
        let decision = self.0.decide(items, now, apply, out).await?;
        let fallback = items
            .iter()
            .filter_map(|i| match i.on_failure? {
                OnFailure::FailOpen => Some(Fallback::FailedOpen),
                OnFailure::FailClosed => Some(Fallback::FailedClosed),
                OnFailure::Local => Some(Fallback::Local),
            })
            .max();
        Ok(Decided { decision, fallback })
    }

    fn release<'a>(
        &'a self,
        item: Item<'a>,
        units: u64,
        now: Timestamp,
    ) -> impl Future<Output = Result<Released, BackendError>> + Send + 'a {
        self.0.release(item, units, now)
    }

    fn is_ready(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "down"
    }
}

fn memory() -> MemoryBackend {
    MemoryBackend::new(StoreConfig::default()).unwrap()
}

#[test]
fn the_greatest_fallback_of_the_enforced_batches_is_the_responses() {
    let engine = Engine::new(policy(RULES), Down(memory()));
    let mut r = Response::default();
    let mut by = |keys: &[&str]| {
        let request: Vec<_> = keys.iter().map(|k| d(&[(*k, "x")])).collect();
        ready(engine.evaluate("api", &request, 1, &mut r)).unwrap();
        r.fallback()
    };
    assert_eq!(by(&["search"]), Some(Fallback::FailedOpen));
    assert_eq!(by(&["search", "login"]), Some(Fallback::FailedClosed));
    assert_eq!(by(&["upload", "search"]), Some(Fallback::FailedOpen));
    assert_eq!(by(&["upload"]), Some(Fallback::Local));
    // Reset for each request.
    assert_eq!(by(&["plain"]), None);
    // A shadow-mode rule changes no answer: not reported.
    assert_eq!(by(&["dark"]), None);
    assert_eq!(by(&["dark", "search"]), Some(Fallback::FailedOpen));
}

#[test]
fn the_in_memory_store_always_decides() {
    let engine = Engine::new(policy(RULES), memory());
    let mut r = Response::default();
    for _ in 0..7 {
        let request = [d(&[("login", "x")]), d(&[("search", "x")])];
        ready(engine.evaluate("api", &request, 1, &mut r)).unwrap();
        assert_eq!(r.fallback(), None);
    }
    assert_eq!(r.overall, Code::OverLimit, "denied by the store itself");
}
