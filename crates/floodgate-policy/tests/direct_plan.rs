//! The direct path against the general one: a descriptor decided by a
//! [`DirectPlan`] gets exactly the response the general evaluation gives,
//! on the same counters (both paths may serve one key in turn), for every
//! algorithm and rule shape a plan accepts; shapes whose values decide the
//! rule get no plan.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use floodgate::{Apply, ManualClock, StoreConfig, Timestamp};
use floodgate_policy::{Engine, MemoryBackend, OwnedDescriptor, Response};
use proptest::prelude::*;

use common::{START, policy};

type TestEngine = Engine<MemoryBackend, Arc<ManualClock>>;

/// (yaml, the entry keys of the planned descriptor)
const PLANNED: &[(&str, &[&str])] = &[
    (
        "      - key: user\n        rate_limit: {requests_per_unit: 5, unit: second}\n",
        &["user"],
    ),
    (
        "      - key: user\n        cost: 3\n        rate_limit: {algorithm: token_bucket, requests: 10, per: 1s, burst: 20}\n",
        &["user"],
    ),
    (
        "      - key: user\n        rate_limit: {algorithm: shaper, rate: 10r/s, burst: 5}\n",
        &["user"],
    ),
    (
        "      - key: user\n        rate_limit: {algorithm: shaper, rate: 30r/m, burst: 4, delay: 2}\n",
        &["user"],
    ),
    (
        "      - key: user\n        rate_limit: {algorithm: shaper, rate: 10r/s, burst: 3, nodelay: true}\n",
        &["user"],
    ),
    (
        "      - key: user\n        rate_limit: {algorithm: sliding_window, requests: 6, per: 2s}\n",
        &["user"],
    ),
    (
        "      - key: user\n        rate_limit: {algorithm: sliding_log, requests: 4, per: 1500ms}\n",
        &["user"],
    ),
    (
        "      - key: user\n        rate_limit: {algorithm: gcra, requests: 3, per: 1s, burst: 2}\n",
        &["user"],
    ),
    (
        "      - key: user\n        rate_limit:\n          name: per-user\n          limits:\n            - {algorithm: token_bucket, requests: 4, per: 1s}\n            - {requests: 9, per: 1m}\n            - {algorithm: sliding_window, requests: 6, per: 5s}\n",
        &["user"],
    ),
    (
        "      - key: user\n        shadow_mode: true\n        rate_limit: {requests: 2, per: 1s}\n",
        &["user"],
    ),
    (
        "      - key: user\n        quota_mode: true\n        rate_limit: {requests: 3, per: 1s}\n",
        &["user"],
    ),
    (
        "      - key: tenant\n        descriptors:\n          - key: user\n            rate_limit: {requests: 3, per: 1s}\n",
        &["tenant", "user"],
    ),
    (
        "      - key: user\n        rate_limit: {requests: 3, per: 1s, name: mine, replaces: [{name: other}]}\n      - key: other\n        rate_limit: {requests: 1, per: 1s, name: other}\n",
        &["user"],
    ),
];

/// Shapes the values decide (or that hold units): no plan.
const UNPLANNED: &[(&str, &[&str])] = &[
    (
        "      - key: user\n        rate_limit: {requests: 5, per: 1s}\n      - key: user\n        value: admin\n        rate_limit: {requests: 50, per: 1s}\n",
        &["user"],
    ),
    (
        "      - key: user\n        rate_limit: {requests: 5, per: 1s}\n      - key: user\n        value: bot*\n        rate_limit: {requests: 1, per: 1s}\n",
        &["user"],
    ),
    (
        "      - key: user\n        rate_limit: {algorithm: concurrency, max: 2}\n",
        &["user"],
    ),
    (
        "      - key: user\n        rate_limit: {unlimited: true}\n",
        &["user"],
    ),
    (
        "      - key: tenant\n        rate_limit: {requests: 5, per: 1s}\n",
        &["tenant", "user"],
    ),
];

fn yaml(rules: &str, global_shadow: bool) -> String {
    let settings = if global_shadow {
        "settings:\n  shadow_mode: true\n"
    } else {
        ""
    };
    format!("{settings}domains:\n  - domain: api\n    descriptors:\n{rules}")
}

fn engine(yaml: &str) -> (TestEngine, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(START)));
    let backend = MemoryBackend::new(StoreConfig::default()).unwrap();
    (
        Engine::with_clock(policy(yaml), backend, clock.clone()),
        clock,
    )
}

#[derive(Clone, Debug)]
struct Step {
    advance_ms: u64,
    value: u8,
    hits: u32,
    own_hits: Option<u64>,
    check: bool,
    direct: bool,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![Just(0u64), 0..400u64, 0..3000u64],
        0..3u8,
        0..4u32,
        prop::option::weighted(0.2, 0..5u64),
        prop::bool::weighted(0.15),
        any::<bool>(),
    )
        .prop_map(|(advance_ms, value, hits, own_hits, check, direct)| Step {
            advance_ms,
            value,
            hits,
            own_hits,
            check,
            direct,
        })
}

fn descriptor(keys: &[&str], value: u8, own_hits: Option<u64>) -> OwnedDescriptor {
    let mut d = OwnedDescriptor::new(keys.iter().map(|k| (*k, format!("v{value}"))));
    d.hits_addend = own_hits;
    d
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn direct_answers_exactly_as_the_general_path(
        which in 0..PLANNED.len(),
        global_shadow in prop::bool::weighted(0.2),
        steps in prop::collection::vec(step(), 1..60),
    ) {
        let (rules, keys) = PLANNED[which];
        let text = yaml(rules, global_shadow);
        let (general, g_clock) = engine(&text);
        let (mixed, m_clock) = engine(&text);
        let plan = mixed.direct_plan("api", keys).expect("a planned shape");
        let mut expected = Response::default();
        let mut got = Response::default();
        for s in &steps {
            g_clock.advance(Duration::from_millis(s.advance_ms));
            m_clock.advance(Duration::from_millis(s.advance_ms));
            let apply = if s.check { Apply::Check } else { Apply::Commit };
            let d = descriptor(keys, s.value, s.own_hits);
            general
                .evaluate_now("api", std::slice::from_ref(&d), s.hits, apply, &mut expected)
                .unwrap()
                .unwrap();
            if s.direct {
                mixed
                    .evaluate_direct(&plan, &d, s.hits, apply, &mut got)
                    .expect("the plan applies");
            } else {
                mixed
                    .evaluate_now("api", std::slice::from_ref(&d), s.hits, apply, &mut got)
                    .unwrap()
                    .unwrap();
            }
            prop_assert_eq!(got.overall, expected.overall, "{:?}", s);
            prop_assert_eq!(got.shadowed, expected.shadowed);
            prop_assert_eq!(&got.statuses, &expected.statuses, "{:?}", s);
        }
    }
}

#[test]
fn shapes_whose_values_decide_get_no_plan() {
    for (rules, keys) in UNPLANNED {
        let (e, _) = engine(&yaml(rules, false));
        assert!(e.direct_plan("api", keys).is_none(), "{rules}");
    }
    let (e, _) = engine(&yaml(PLANNED[0].0, false));
    assert!(
        e.direct_plan("other", &["user"]).is_none(),
        "unknown domain"
    );
    assert!(e.direct_plan("api", &["nobody"]).is_none(), "no rule");
    let lists = "domains:\n  - domain: api\n    deny:\n      - {key: user, values: [mallory]}\n    descriptors:\n      - key: user\n        rate_limit: {requests: 5, per: 1s}\n";
    let (e, _) = engine(lists);
    assert!(e.direct_plan("api", &["user"]).is_none(), "a deny list");
}

#[test]
fn a_stale_or_mismatched_plan_is_refused_not_misapplied() {
    let (e, _) = engine(&yaml(PLANNED[0].0, false));
    let plan = e.direct_plan("api", &["user"]).unwrap();
    let mut r = Response::default();
    let other_key = OwnedDescriptor::new([("tenant", "t")]);
    assert!(
        e.evaluate_direct(&plan, &other_key, 1, Apply::Commit, &mut r)
            .is_none()
    );
    let override_ =
        OwnedDescriptor::new([("user", "u")]).limit(1, floodgate_policy::unit::Unit::Second);
    assert!(
        e.evaluate_direct(&plan, &override_, 1, Apply::Commit, &mut r)
            .is_none()
    );
    let long = OwnedDescriptor::new([("user", "x".repeat(17 * 1024))]);
    assert!(
        e.evaluate_direct(&plan, &long, 1, Apply::Commit, &mut r)
            .is_none(),
        "the general path refuses it with its error"
    );
    // A reload: the plan is for the old policy.
    e.replace_policy(policy(&yaml(PLANNED[1].0, false)));
    let user = OwnedDescriptor::new([("user", "u")]);
    assert!(
        e.evaluate_direct(&plan, &user, 1, Apply::Commit, &mut r)
            .is_none()
    );
    let fresh = e.direct_plan("api", &["user"]).unwrap();
    assert_eq!(fresh.generation(), e.generation());
    assert!(
        e.evaluate_direct(&fresh, &user, 1, Apply::Commit, &mut r)
            .is_some()
    );
}
