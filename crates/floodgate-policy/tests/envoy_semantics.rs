//! envoyproxy/ratelimit's matching and aggregation semantics, case by case,
//! on envoyproxy/ratelimit-format files.

use crate::common;

use std::time::Duration;

use common::{Harness, START, d};
use floodgate_policy::engine::Reason;
use floodgate_policy::unit::Unit;
use floodgate_policy::{Code, OwnedDescriptor};

const SEC: Duration = Duration::from_secs(1);

#[test]
fn exact_match_counts_per_window_and_resets_at_the_boundary() {
    let mut h = Harness::new(
        "domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: database
    value: default
    rate_limit: {unit: second, requests_per_unit: 1}
",
    );
    let users = [d(&[("database", "users")])];
    assert_eq!(h.admitted(5, "mongo_cps", &users), 3);
    let s = &h.response.statuses[0];
    assert_eq!(s.code, Code::OverLimit);
    assert_eq!(s.limit_remaining, 0);
    assert_eq!(s.duration_until_reset, SEC);
    let cl = s.current_limit.as_ref().unwrap();
    assert_eq!(
        (cl.reported.requests_per_unit, cl.reported.unit),
        (3, Unit::Second)
    );
    // The other value has its own rule and counter.
    assert_eq!(
        h.admitted(2, "mongo_cps", &[d(&[("database", "default")])]),
        1
    );
    // A value with no rule is not limited.
    assert_eq!(
        h.admitted(10, "mongo_cps", &[d(&[("database", "other")])]),
        10
    );
    assert_eq!(h.response.statuses[0].reason, Reason::NoMatch);
    assert!(h.response.statuses[0].current_limit.is_none());
    // Windows are aligned to the epoch: 250 ms later is still the same second.
    h.advance(Duration::from_millis(250));
    assert_eq!(h.send("mongo_cps", &users), Code::OverLimit);
    assert_eq!(
        h.response.statuses[0].duration_until_reset,
        Duration::from_millis(750)
    );
    h.advance(Duration::from_millis(750));
    assert_eq!(h.admitted(5, "mongo_cps", &users), 3);
}

#[test]
fn remaining_counts_down() {
    let mut h = Harness::new(
        "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
",
    );
    for want in [4, 3, 2, 1, 0] {
        assert_eq!(h.send("d", &[d(&[("k", "v")])]), Code::Ok);
        assert_eq!(h.response.statuses[0].limit_remaining, want);
    }
    assert_eq!(h.send("d", &[d(&[("k", "v")])]), Code::OverLimit);
    assert_eq!(
        h.response.statuses[0].duration_until_reset,
        Duration::from_secs(60)
    );
}

#[test]
fn key_only_rules_count_each_value_separately_and_exact_values_win() {
    let mut h = Harness::new(
        "domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 2
  # Blocked address.
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
",
    );
    for ip in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
        assert_eq!(
            h.admitted(4, "edge_proxy_per_ip", &[d(&[("remote_address", ip)])]),
            2
        );
    }
    assert_eq!(
        h.admitted(
            3,
            "edge_proxy_per_ip",
            &[d(&[("remote_address", "50.0.0.5")])]
        ),
        0
    );
    assert_eq!(h.response.statuses[0].reason, Reason::Blocked);
}

#[test]
fn nested_descriptors_and_several_descriptors_per_request() {
    let mut h = Harness::new(
        "domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
",
    );
    let marketing = |n: &str| {
        [
            d(&[("message_type", "marketing"), ("to_number", n)]),
            d(&[("to_number", n)]),
        ]
    };
    assert_eq!(h.admitted(7, "messaging", &marketing("2061111111")), 5);
    let st = &h.response.statuses;
    assert_eq!((st[0].code, st[1].code), (Code::OverLimit, Code::Ok));
    // Denied requests consumed nothing from the per-number limit: 5 used.
    assert_eq!(st[1].limit_remaining, 95);
    assert_eq!(st[1].duration_until_reset, Duration::from_secs(86_400));
    // Each number has its own marketing counter.
    assert_eq!(h.admitted(6, "messaging", &marketing("2062222222")), 5);
}

#[test]
fn depth_must_match_exactly() {
    let mut h = Harness::new(
        "domain: example4
descriptors:
  - key: key
    value: value
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: nested
    value: value
    descriptors:
      - key: subkey
        rate_limit: {unit: second, requests_per_unit: 1}
",
    );
    // Two entries never match the one-level rule.
    let two = [d(&[("key", "value"), ("subkey", "subvalue")])];
    assert_eq!(h.admitted(3, "example4", &two), 3);
    assert_eq!(h.response.statuses[0].reason, Reason::NoMatch);
    // One entry never matches the two-level rule.
    assert_eq!(h.admitted(3, "example4", &[d(&[("nested", "value")])]), 3);
    // The full path does.
    let full = [d(&[("nested", "value"), ("subkey", "x")])];
    assert_eq!(h.admitted(3, "example4", &full), 1);
}

#[test]
fn unlimited_rules_match_but_never_count() {
    let mut h = Harness::new(
        "domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit: {unit: minute, requests_per_unit: 1}
",
    );
    assert_eq!(h.admitted(50, "internal", &[d(&[("ldap", "x")])]), 50);
    let s = &h.response.statuses[0];
    assert_eq!(
        (s.code, s.limit_remaining, s.reason),
        (Code::Ok, u32::MAX, Reason::Unlimited)
    );
    assert!(s.current_limit.is_none());
    assert_eq!(h.admitted(2, "internal", &[d(&[("azure", "x")])]), 1);
}

#[test]
fn shadow_mode_counts_and_reports_but_never_enforces() {
    let mut h = Harness::new(
        "domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: {requests_per_unit: 2, unit: second}
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit: {requests_per_unit: 2, unit: second}
",
    );
    let a = [d(&[("service", "auth"), ("user", "user-a")])];
    assert_eq!(h.admitted(5, "example6", &a), 5);
    // The verdict is still computed: the shadow status says what it would be.
    let s = &h.response.statuses[0];
    assert!(s.shadow);
    assert_eq!(s.code, Code::Ok);
    assert!(s.decision.unwrap().is_denied());
    let b = [d(&[("service", "auth"), ("user", "user-b")])];
    assert_eq!(h.admitted(5, "example6", &b), 2);
    // A shadow rule's denial never blocks another descriptor of the request.
    assert_eq!(
        h.send(
            "example6",
            &[a[0].clone(), d(&[("service", "s"), ("user", "user-b")])]
        ),
        Code::Ok
    );
}

#[test]
fn replaces_drops_the_replaced_rule_and_leaves_its_counter_alone() {
    let mut h = Harness::new(
        "domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
",
    );
    let first = d(&[("key_1", "value_1"), ("user", "bkthomps")]);
    let second = d(&[("key_2", "value_2"), ("user", "bkthomps")]);
    // Both together: only the replacing 10/s applies.
    assert_eq!(
        h.admitted(12, "example7", &[first.clone(), second.clone()]),
        10
    );
    assert_eq!(h.response.statuses[0].reason, Reason::Replaced);
    assert_eq!(h.response.statuses[0].code, Code::Ok);
    // The replaced rule's own 5/s counter was not touched.
    assert_eq!(h.admitted(7, "example7", &[first]), 5);
}

#[test]
fn wildcards_in_any_position_first_declared_wins() {
    let mut h = Harness::new(
        "domain: example9
descriptors:
  - key: path
    value: /api/*/items
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: '*.css'
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /api/v1/exact
    rate_limit: {unit: minute, requests_per_unit: 4}
",
    );
    let hits = |h: &mut Harness, p: &str| h.admitted(10, "example9", &[d(&[("path", p)])]);
    assert_eq!(hits(&mut h, "/api/v1/items"), 1);
    assert_eq!(hits(&mut h, "/api/v1/orders"), 2);
    // Each matching value has its own counter without share_threshold.
    assert_eq!(hits(&mut h, "/api/v2/orders"), 2);
    assert_eq!(hits(&mut h, "/static/site.css"), 3);
    // Exact beats wildcards.
    assert_eq!(hits(&mut h, "/api/v1/exact"), 4);
    assert_eq!(hits(&mut h, "/other"), 10);
}

#[test]
fn share_threshold_makes_all_matching_values_share_one_counter() {
    let mut h = Harness::new(
        "domain: shared
descriptors:
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
",
    );
    let mut ok = 0;
    for i in 0..10 {
        ok += h.admitted(1, "shared", &[d(&[("path", &format!("/files/{i}"))])]);
    }
    assert_eq!(ok, 3);
}

#[test]
fn hits_addend_request_level_and_per_descriptor() {
    let mut h = Harness::new(
        "domain: hits
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10}
",
    );
    // 0 on the request means 1.
    assert_eq!(h.send_hits("hits", &[d(&[("k", "a")])], 0), Code::Ok);
    assert_eq!(h.response.statuses[0].limit_remaining, 9);
    assert_eq!(h.send_hits("hits", &[d(&[("k", "a")])], 4), Code::Ok);
    assert_eq!(h.response.statuses[0].limit_remaining, 5);
    // A descriptor's own addend overrides the request's; 0 only checks.
    let check = d(&[("k", "a")]).hits(0);
    assert_eq!(
        h.send_hits("hits", std::slice::from_ref(&check), 7),
        Code::Ok
    );
    assert_eq!(h.response.statuses[0].limit_remaining, 5);
    assert_eq!(
        h.send_hits("hits", &[d(&[("k", "a")]).hits(5)], 1),
        Code::Ok
    );
    assert_eq!(h.response.statuses[0].limit_remaining, 0);
    // Over the limit: envoyproxy/ratelimit counts a denied hit against the
    // limit that denied it.
    assert_eq!(
        h.send_hits("hits", &[d(&[("k", "a")]).hits(3)], 1),
        Code::OverLimit
    );
    // The count (13) is past the limit: a check says so, as there.
    assert_eq!(h.send_hits("hits", &[check], 1), Code::OverLimit);
    assert_eq!(h.response.statuses[0].limit_remaining, 0);
}

#[test]
fn a_denied_descriptor_consumes_nothing_from_the_others() {
    let mut h = Harness::new(
        "domain: layers
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: endpoint
    rate_limit: {unit: hour, requests_per_unit: 2}
",
    );
    let req = [d(&[("user", "u1")]), d(&[("endpoint", "/search")])];
    assert_eq!(h.admitted(5, "layers", &req), 2);
    assert_eq!(h.response.statuses[0].limit_remaining, 98);
    assert_eq!(h.response.statuses[0].code, Code::Ok);
    assert_eq!(h.response.statuses[1].code, Code::OverLimit);
}

#[test]
fn unknown_domain_is_not_limited() {
    let mut h = Harness::new("domain: known\ndescriptors: []\n");
    assert_eq!(h.admitted(3, "unknown", &[d(&[("a", "b")])]), 3);
    assert!(h.response.statuses[0].current_limit.is_none());
}

#[test]
fn limit_override_replaces_the_configured_limit() {
    let mut h = Harness::new(
        "domain: ov
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 100}
    shadow_mode: true
",
    );
    let req = [d(&[("k", "v")]).limit(2, Unit::Minute)];
    // The override's 2/minute is enforced, and never in shadow mode.
    assert_eq!(h.admitted(5, "ov", &req), 2);
    let cl = h.response.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(
        (cl.reported.requests_per_unit, cl.reported.unit),
        (2, Unit::Minute)
    );
    assert_eq!(
        h.admitted(3, "ov", &[d(&[("k", "v")]).limit(0, Unit::Second)]),
        0
    );
}

/// Where callers are not trusted, their overrides cannot lift a limit:
/// ignored, the configured limit decides; refused, the request is an
/// invalid argument.
#[test]
fn limit_overrides_can_be_ignored_or_refused() {
    use floodgate_policy::engine::{Honour, RequestLimits};
    const FILE: &str = "domain: ov
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
";
    let lifted = [d(&[("k", "v")]).limit(1000, Unit::Second)];
    let mut h = Harness::new(FILE);
    assert_eq!(
        h.admitted(5, "ov", &lifted),
        5,
        "allowed: Envoy's behaviour"
    );
    let with = |overrides| {
        let mut h = Harness::new(FILE);
        h.engine = h.engine.with_request_limits(RequestLimits {
            overrides,
            ..RequestLimits::default()
        });
        h
    };
    let mut h = with(Honour::Ignore);
    assert_eq!(h.admitted(5, "ov", &lifted), 2, "ignored");
    let mut h = with(Honour::Refuse);
    let e = common::ready(h.engine.evaluate("ov", &lifted, 0, &mut h.response)).unwrap_err();
    assert!(
        e.to_string().contains("limit overrides are not accepted"),
        "{e}"
    );
    assert_eq!(
        h.admitted(3, "ov", &[d(&[("k", "w")])]),
        2,
        "no override: decided"
    );
}

/// A limit override of no known unit (`UNKNOWN` = 0, or a number of no
/// unit) is an invalid argument, checked by the engine for every transport,
/// before the domain is looked up and whatever the overrides setting.
#[test]
fn an_override_of_an_unknown_unit_is_an_invalid_argument() {
    use floodgate_policy::engine::{Honour, LimitOverride, RequestLimits};
    const FILE: &str = "domain: ov
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
";
    for overrides in [Honour::Allow, Honour::Ignore, Honour::Refuse] {
        for (domain, number) in [("ov", 0), ("ov", 8), ("unknown", -1), ("ov", i32::MAX)] {
            let mut h = Harness::new(FILE);
            h.engine = h.engine.with_request_limits(RequestLimits {
                overrides,
                ..RequestLimits::default()
            });
            let mut bad = d(&[("k", "v")]);
            bad.limit = Some(LimitOverride {
                requests_per_unit: 5,
                unit_number: number,
            });
            let request = [d(&[("k", "w")]), bad];
            let e =
                common::ready(h.engine.evaluate(domain, &request, 0, &mut h.response)).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "invalid request: descriptor 1: the limit override has an unknown unit ({number})"
                ),
                "{overrides:?}"
            );
        }
    }
    for unit in Unit::ALL {
        let ov = LimitOverride::new(1, unit);
        assert_eq!(ov.unit(), Some(unit));
    }
}

#[test]
fn week_windows_start_on_thursday_midnight_utc() {
    let mut h = Harness::new(
        "domain: w
descriptors:
  - key: k
    rate_limit: {unit: week, requests_per_unit: 1}
",
    );
    assert_eq!(h.send("w", &[d(&[("k", "v")])]), Code::Ok);
    let reset = h.response.statuses[0].duration_until_reset;
    let now = START;
    assert_eq!(reset.as_secs(), 604_800 - now % 604_800);
    // 1970-01-01 was a Thursday: the window end is a Thursday 00:00 UTC.
    let end_days = (now + reset.as_secs()) / 86_400;
    assert_eq!(end_days % 7, 0);
}

#[test]
fn requests_per_unit_zero_or_missing_blocks() {
    let mut h = Harness::new(
        "domain: b
descriptors:
  - key: banned
    rate_limit:
      unit: second
",
    );
    assert_eq!(h.send("b", &[d(&[("banned", "x")])]), Code::OverLimit);
    let s = &h.response.statuses[0];
    assert_eq!(
        s.current_limit.as_ref().unwrap().reported.requests_per_unit,
        0
    );
    // A check-only hit is over once the window counted a hit, as there
    // (its counter is past 0); a key not hit in this window is not over.
    assert_eq!(
        h.send("b", &[d(&[("banned", "x")]).hits(0)]),
        Code::OverLimit
    );
    assert_eq!(h.send("b", &[d(&[("banned", "y")]).hits(0)]), Code::Ok);
    assert_eq!(h.response.statuses[0].limit_remaining, 0);
    h.advance(SEC);
    assert_eq!(h.send("b", &[d(&[("banned", "x")]).hits(0)]), Code::Ok);
}

#[test]
fn a_whitelisted_node_has_no_limit() {
    let mut h = Harness::new(
        "domain: wl
descriptors:
  - key: client
    value: trusted
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 1}
",
    );
    assert_eq!(h.admitted(5, "wl", &[d(&[("client", "trusted")])]), 5);
    assert_eq!(h.admitted(5, "wl", &[d(&[("client", "other")])]), 1);
}

#[test]
fn quota_mode_only_fails_when_every_quota_descriptor_is_over() {
    let mut h = Harness::new(
        "domain: q
descriptors:
  - key: soft_a
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: soft_b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 3}
",
    );
    let req = [d(&[("soft_a", "x")]), d(&[("soft_b", "x")])];
    // a is over after 1; the request only fails once b is over too.
    assert_eq!(h.admitted(5, "q", &req), 3);
}

#[test]
fn several_requests_of_one_descriptor_list_share_counters_by_value() {
    let mut h = Harness::new(
        "domain: v
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
",
    );
    let req: Vec<OwnedDescriptor> = vec![d(&[("k", "same")]), d(&[("k", "same")])];
    // Both descriptors hit the same counter: 2 hits against a limit of 1.
    assert_eq!(h.send("v", &req), Code::OverLimit);
}

#[test]
fn envoys_default_accounting_counts_every_matched_counter_when_asked() {
    let yaml = "domain: layers
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: endpoint
    rate_limit: {unit: hour, requests_per_unit: 2}
";
    let opts = floodgate_policy::read::LoadOptions {
        envoy_increment_all: Some(true),
        ..Default::default()
    };
    let spec = floodgate_policy::read::load_str("envoy.yaml", yaml, &opts).unwrap();
    let mut h = Harness::new(yaml);
    h.engine
        .replace_policy(floodgate_policy::PolicySet::compile(&spec).unwrap());
    let req = [d(&[("user", "u1")]), d(&[("endpoint", "/search")])];
    assert_eq!(h.admitted(5, "layers", &req), 2);
    // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false: the three denied
    // requests were counted against the user limit too.
    assert_eq!(h.response.statuses[0].limit_remaining, 95);
}
