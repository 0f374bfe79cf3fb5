//! `sync` in a `rate_limit`, in Floodgate files and in envoyproxy/ratelimit
//! files alike: read (every form, unknown modes and misplaced periods
//! rejected with their position), compiled onto the rule, and carried by
//! the engine on every backend item of the rule (limit overrides carry
//! none: the store's default decides them).

use crate::common;

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use common::{d, policy, ready};
use floodgate::{Apply, Decision, StoreConfig, Timestamp};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::unit::Unit;
use floodgate_policy::{
    Backend, BackendError, Engine, Item, MemoryBackend, OwnedDescriptor, PolicySet, Response,
    SyncMode,
};

const RULES: &str = "domains:
  - domain: api
    descriptors:
      - key: login
        rate_limit: {requests: 5, per: 1m, sync: exact}
      - key: search
        rate_limit:
          sync: {mode: lease, duration: 2s}
          limits:
            - {requests: 10, per: 1s}
            - {requests: 100, per: 1m}
      - key: upload
        rate_limit: {algorithm: token_bucket, requests: 2, per: 1s, sync: {mode: sync, interval: 50ms}}
      - key: plain
        rate_limit: {requests: 1, per: 1s}
";

fn mode_of(set: &PolicySet, path: &str) -> Option<SyncMode> {
    set.rules()
        .iter()
        .find(|r| &*r.path == path)
        .map(|r| r.sync)
        .unwrap_or_else(|| panic!("no rule {path}"))
}

#[test]
fn each_rule_keeps_its_mode() {
    let set = policy(RULES);
    assert_eq!(mode_of(&set, "api.login"), Some(SyncMode::Exact));
    assert_eq!(
        mode_of(&set, "api.search"),
        Some(SyncMode::Lease {
            duration: Duration::from_secs(2)
        })
    );
    assert_eq!(
        mode_of(&set, "api.upload"),
        Some(SyncMode::Sync {
            interval: Duration::from_millis(50)
        })
    );
    assert_eq!(mode_of(&set, "api.plain"), None);
}

#[test]
fn the_mode_does_not_change_the_counters() {
    // Instances in different modes share one set of counters.
    let with = policy(RULES);
    let without = policy(&RULES.replace(", sync: exact", ""));
    let fp = |s: &PolicySet| s.rules()[0].fingerprint;
    assert_eq!(fp(&with), fp(&without));
}

#[test]
fn envoy_files_accept_the_key() {
    let yaml = "domain: api
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 10
      sync: lease
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 100, sync: {mode: sync, interval: 20ms}}
";
    let spec = load_str("envoy.yaml", yaml, &LoadOptions::default()).unwrap();
    let set = PolicySet::compile(&spec).unwrap();
    assert_eq!(
        mode_of(&set, "api.user"),
        SyncMode::parse("lease"),
        "envoy dialect"
    );
    assert_eq!(
        mode_of(&set, "api.ip"),
        Some(SyncMode::Sync {
            interval: Duration::from_millis(20)
        })
    );
}

#[test]
fn bad_values_are_rejected_with_their_position() {
    for (value, expect) in [
        (
            "eventually",
            "f.yaml:5:50: unknown sync mode `eventually` (expected one of: exact, lease, sync)",
        ),
        (
            "{mode: lease, interval: 1s}",
            "f.yaml:5:74: interval does not apply to sync mode lease",
        ),
        (
            "{mode: sync, interval: 0ms}",
            "f.yaml:5:73: interval: expected a duration above zero, found `0ms`",
        ),
    ] {
        let yaml = format!(
            "domains:\n  - domain: api\n    descriptors:\n      - key: u\n        rate_limit: {{requests: 1, per: 1s, sync: {value}}}\n"
        );
        let err = load_str("f.yaml", &yaml, &LoadOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(expect), "{value}: {err}");
    }
}

/// The in-memory store, remembering the mode of every item it decides.
struct Recording {
    memory: MemoryBackend,
    seen: Mutex<Vec<Option<SyncMode>>>,
}

impl Backend for Recording {
    fn decide<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send + 'a {
        self.seen
            .lock()
            .unwrap()
            .extend(items.iter().map(|i| i.sync));
        self.memory.decide(items, now, apply, out)
    }

    fn release<'a>(
        &'a self,
        item: Item<'a>,
        units: u64,
        now: Timestamp,
    ) -> impl Future<Output = Result<floodgate_policy::Released, BackendError>> + Send + 'a {
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
fn the_engine_puts_the_rules_mode_on_every_item() {
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
        d(&[("login", "bob")]).limit(3, Unit::Minute),
    ];
    ready(engine.evaluate("api", &request, 1, &mut response)).unwrap();
    let seen = engine.backend().seen.lock().unwrap().clone();
    let lease = Some(SyncMode::Lease {
        duration: Duration::from_secs(2),
    });
    assert_eq!(
        seen,
        [
            Some(SyncMode::Exact),
            lease,
            lease,
            Some(SyncMode::Sync {
                interval: Duration::from_millis(50)
            }),
            None,
            None,
        ]
    );
}
