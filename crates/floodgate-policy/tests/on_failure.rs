//! `on_failure` in a Floodgate `rate_limit`: read (unknown values rejected
//! with their position, the key refused in envoyproxy/ratelimit files),
//! compiled onto the rule, and carried by the engine on every backend item
//! of the rule (limit overrides carry none).

use crate::common;

use std::future::Future;
use std::sync::Mutex;

use common::{d, policy, ready};
use floodgate::{Apply, Decision, StoreConfig, Timestamp};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::unit::Unit;
use floodgate_policy::{
    Backend, BackendError, Engine, Item, MemoryBackend, OnFailure, OwnedDescriptor, Released,
    Response,
};

const RULES: &str = "domains:
  - domain: api
    descriptors:
      - key: login
        rate_limit: {requests: 5, per: 1m, on_failure: fail_closed}
      - key: search
        rate_limit:
          on_failure: fail_open
          limits:
            - {requests: 10, per: 1s}
            - {requests: 100, per: 1m}
      - key: upload
        rate_limit: {algorithm: token_bucket, requests: 2, per: 1s, on_failure: local}
      - key: plain
        rate_limit: {requests: 1, per: 1s}
";

#[test]
fn each_rule_keeps_its_policy() {
    let set = policy(RULES);
    let of = |path: &str| {
        set.rules()
            .iter()
            .find(|r| &*r.path == path)
            .map(|r| r.on_failure)
            .unwrap_or_else(|| panic!("no rule {path}"))
    };
    assert_eq!(of("api.login"), Some(OnFailure::FailClosed));
    assert_eq!(of("api.search"), Some(OnFailure::FailOpen));
    assert_eq!(of("api.upload"), Some(OnFailure::Local));
    assert_eq!(of("api.plain"), None);
}

#[test]
fn unknown_values_are_rejected_with_their_position() {
    let yaml = "domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit:
          requests: 10
          per: 1s
          on_failure: fail_maybe
";
    let err = load_str("floodgate.yaml", yaml, &LoadOptions::default()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("floodgate.yaml:8:23: unknown on_failure 'fail_maybe'"),
        "{text}"
    );
    assert!(
        text.contains("fail_open, fail_closed, local"),
        "lists the values: {text}"
    );
    for bad in ["[fail_open]", "{a: b}", "FAIL_OPEN"] {
        let yaml = format!(
            "domains:\n  - domain: api\n    descriptors:\n      - key: u\n        rate_limit: {{requests: 1, per: 1s, on_failure: {bad}}}\n"
        );
        assert!(
            load_str("f.yaml", &yaml, &LoadOptions::default()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn envoy_files_do_not_know_the_key() {
    let yaml = "domain: api
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1
      on_failure: fail_open
";
    let err = load_str("envoy.yaml", yaml, &LoadOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("unknown key 'on_failure'"),
        "{err}"
    );
}

/// The in-memory store, remembering the policy of every item it is asked
/// to decide.
struct Recording {
    memory: MemoryBackend,
    seen: Mutex<Vec<(Vec<u8>, Option<OnFailure>)>>,
}

impl Backend for Recording {
    fn decide<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send + 'a {
        let mut seen = self.seen.lock().unwrap();
        seen.extend(items.iter().map(|i| (i.key.to_vec(), i.on_failure)));
        self.memory.decide(items, now, apply, out)
    }

    fn release<'a>(
        &'a self,
        item: Item<'a>,
        units: u64,
        now: Timestamp,
    ) -> impl Future<Output = Result<Released, BackendError>> + Send + 'a {
        self.memory.release(item, units, now)
    }

    fn is_ready(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "recording"
    }
}

#[test]
fn the_engine_puts_the_rules_policy_on_every_item() {
    let engine = Engine::new(
        policy(RULES),
        Recording {
            memory: MemoryBackend::new(StoreConfig::default()).unwrap(),
            seen: Mutex::new(Vec::new()),
        },
    );
    let mut response = Response::default();
    let request: [OwnedDescriptor; 5] = [
        d(&[("login", "alice")]),
        d(&[("search", "q")]),
        d(&[("upload", "u")]),
        d(&[("plain", "p")]),
        // A limit sent with the request belongs to no rule.
        d(&[("login", "bob")]).limit(3, Unit::Minute),
    ];
    ready(engine.evaluate("api", &request, 1, &mut response)).unwrap();
    let seen = engine.backend().seen.lock().unwrap().clone();
    let policies: Vec<Option<OnFailure>> = seen.iter().map(|(_, p)| *p).collect();
    // One item per limit, in descriptor order: search has two limits.
    assert_eq!(
        policies,
        [
            Some(OnFailure::FailClosed),
            Some(OnFailure::FailOpen),
            Some(OnFailure::FailOpen),
            Some(OnFailure::Local),
            None,
            None,
        ]
    );
}

/// Enforced, shadow-mode and quota-mode rules: every kind of batch.
const MIXED: &str = "domains:
  - domain: api
    descriptors:
      - key: login
        rate_limit: {requests: 3, per: 1s}
      - key: search
        rate_limit:
          limits:
            - {requests: 4, per: 1s}
            - {requests: 9, per: 1m}
      - key: dark
        shadow_mode: true
        rate_limit: {algorithm: sliding_window, requests: 2, per: 1s}
      - key: quota
        quota_mode: true
        rate_limit: {requests: 5, per: 1m}
";

/// The synchronous path (a backend that needs no IO) and the futures path
/// (any other backend) give the same answers, request after request.
#[test]
fn the_synchronous_and_the_asynchronous_paths_agree() {
    let clock = std::sync::Arc::new(floodgate::ManualClock::new(Timestamp::from_secs(
        1_700_000_000,
    )));
    let memory = || MemoryBackend::new(StoreConfig::default()).unwrap();
    let sync = Engine::with_clock(policy(MIXED), memory(), clock.clone());
    let futures = Engine::with_clock(
        policy(MIXED),
        Recording {
            memory: memory(),
            seen: Mutex::new(Vec::new()),
        },
        clock.clone(),
    );
    let mut unused = Response::default();
    let probe = [d(&[("login", "a")])];
    assert!(
        futures
            .evaluate_now("api", &probe, 1, Apply::Commit, &mut unused)
            .is_none()
    );
    let requests: Vec<Vec<OwnedDescriptor>> = vec![
        vec![d(&[("login", "a")]), d(&[("dark", "a")])],
        vec![
            d(&[("search", "q")]),
            d(&[("quota", "a")]),
            d(&[("quota", "b")]),
        ],
        vec![
            d(&[("login", "b")]),
            d(&[("search", "q")]),
            d(&[("dark", "b")]),
        ],
        vec![
            d(&[("quota", "a")]),
            d(&[("login", "a")]).limit(2, Unit::Second),
        ],
        vec![d(&[("unknown", "x")])],
    ];
    let (mut a, mut b) = (Response::default(), Response::default());
    let mut over = 0;
    for step in 0..400usize {
        let request = &requests[(step * 7 + step / 5) % requests.len()];
        let apply = if step % 11 == 0 {
            Apply::Check
        } else {
            Apply::Commit
        };
        let hits = (step % 3) as u32;
        sync.evaluate_now("api", request, hits, apply, &mut a)
            .expect("the in-memory store decides synchronously")
            .unwrap();
        ready(futures.evaluate_with("api", request, hits, apply, &mut b)).unwrap();
        assert_eq!(a.overall, b.overall, "step {step}");
        assert_eq!(a.statuses, b.statuses, "step {step}");
        assert_eq!(a.shadowed, b.shadowed, "step {step}");
        over += usize::from(a.overall == floodgate_policy::Code::OverLimit);
        clock.advance(std::time::Duration::from_millis(97));
    }
    // Both answers were exercised.
    assert!((40..360).contains(&over), "{over} of 400 over the limit");
}
