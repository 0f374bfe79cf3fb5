//! Where envoyproxy/ratelimit's answers are subtle, case by case, against
//! what its source does (`src/service/ratelimit.go`,
//! `src/config/config_impl.go`, `src/limiter/base_limiter.go`,
//! `src/redis/fixed_cache_impl.go`); the differential test of the service
//! compares everything else over random configurations.

use crate::common;

use std::time::Duration;

use common::{Harness, d};
use floodgate::Apply;
use floodgate_policy::engine::Reason;
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::unit::Unit;
use floodgate_policy::{Code, OwnedDescriptor, PolicySet};

/// A harness on `yaml`, in reference mode when `increment_all`.
fn harness(yaml: &str, increment_all: bool) -> Harness {
    let h = Harness::new(yaml);
    let opts = LoadOptions {
        envoy_increment_all: Some(increment_all),
        ..Default::default()
    };
    let spec = load_str("envoy.yaml", yaml, &opts).unwrap();
    h.engine.replace_policy(PolicySet::compile(&spec).unwrap());
    h
}

fn remaining(h: &Harness) -> Vec<(Code, u32)> {
    h.response
        .statuses
        .iter()
        .map(|s| (s.code, s.limit_remaining))
        .collect()
}

const FIVE: &str = "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: u
    rate_limit: {unlimited: true, name: free}
  - key: r
    rate_limit: {unit: hour, requests_per_unit: 9, replaces: [{name: free}]}
";

#[test]
fn the_same_descriptor_twice_is_charged_and_reported_in_order() {
    for increment_all in [false, true] {
        let mut h = harness(FIVE, increment_all);
        let k = d(&[("k", "a")]);
        let twice = [k.clone().hits(2), k.clone().hits(2)];
        assert_eq!(h.send("d", &twice), Code::Ok);
        // The first reports the count after its own hits, the second after both.
        assert_eq!(remaining(&h), [(Code::Ok, 3), (Code::Ok, 1)]);
        // 4 + 1 fits, 4 + 1 + 1 does not.
        let two = [k.clone(), k.clone()];
        assert_eq!(h.send("d", &two), Code::OverLimit);
        if increment_all {
            // Both counted: 5, then 6.
            assert_eq!(remaining(&h), [(Code::Ok, 0), (Code::OverLimit, 0)]);
        } else {
            // Nothing charged, the first told what is left.
            assert_eq!(remaining(&h), [(Code::Ok, 1), (Code::OverLimit, 0)]);
        }
    }
}

#[test]
fn a_descriptor_without_entries_matches_nothing_but_takes_an_override() {
    let mut h = harness(FIVE, true);
    let empty = OwnedDescriptor::default();
    assert_eq!(h.send("d", &[empty.clone(), d(&[("k", "a")])]), Code::Ok);
    assert_eq!(h.response.statuses[0].reason, Reason::NoMatch);
    assert!(h.response.statuses[0].current_limit.is_none());
    // An override applies to it: one counter for the domain's empty
    // descriptors of that unit.
    let capped = empty.limit(1, Unit::Minute);
    assert_eq!(h.send("d", std::slice::from_ref(&capped)), Code::Ok);
    assert_eq!(h.send("d", &[capped]), Code::OverLimit);
    // In an unknown domain nothing applies, not even an override.
    let capped = OwnedDescriptor::default().limit(0, Unit::Minute);
    assert_eq!(h.send("elsewhere", &[capped]), Code::Ok);
}

#[test]
fn an_unlimited_rule_is_never_replaced() {
    let mut h = harness(FIVE, true);
    assert_eq!(h.send("d", &[d(&[("u", "x")]), d(&[("r", "x")])]), Code::Ok);
    let s = &h.response.statuses;
    assert_eq!(
        (s[0].reason, s[0].limit_remaining),
        (Reason::Unlimited, u32::MAX)
    );
    assert_eq!((s[1].reason, s[1].limit_remaining), (Reason::Limited, 8));
}

#[test]
fn an_override_counter_is_shared_whatever_the_limit_sent() {
    let mut h = harness(FIVE, true);
    let ov = |n| d(&[("k", "o")]).limit(n, Unit::Hour);
    for _ in 0..3 {
        assert_eq!(h.send("d", &[ov(10)]), Code::Ok);
    }
    // The limit changes; the window's count stays.
    assert_eq!(h.send("d", &[ov(4)]), Code::Ok);
    assert_eq!(h.response.statuses[0].limit_remaining, 0);
    assert_eq!(h.send("d", &[ov(4)]), Code::OverLimit);
}

#[test]
fn reference_mode_counts_a_hits_addend_above_the_limit() {
    let mut h = harness(FIVE, true);
    let k = d(&[("k", "huge")]);
    assert_eq!(h.send("d", &[k.clone().hits(1 << 40)]), Code::OverLimit);
    // The key stays over its limit for the rest of its window, a check
    // included.
    assert_eq!(h.send("d", &[k.clone().hits(0)]), Code::OverLimit);
    h.advance(Duration::from_secs(3599));
    assert_eq!(h.send("d", std::slice::from_ref(&k)), Code::OverLimit);
    h.advance(Duration::from_secs(1));
    assert_eq!(h.send("d", &[k]), Code::Ok);
    assert_eq!(h.response.statuses[0].limit_remaining, 4);
}

#[test]
fn a_dry_run_reports_what_the_real_call_gets() {
    let yaml = "domains:
  - domain: d
    descriptors:
      - key: b
        rate_limit: {algorithm: token_bucket, requests: 10, per: 1s, burst: 20}
      - key: w
        rate_limit: {requests: 3, per: 1m}
      - key: s
        rate_limit: {algorithm: shaper, rate: 6r/m, burst: 10, nodelay: true}
";
    let mut h = Harness::new(yaml);
    let engine = &h.engine;
    let mut dry = floodgate_policy::Response::default();
    for req in [
        vec![d(&[("b", "x")]).hits(13)],
        vec![d(&[("b", "x")]).hits(13), d(&[("w", "x")]).hits(4)],
        vec![d(&[("w", "y")]), d(&[("w", "y")]).hits(2)],
        // A shaper whose counters live in an nginx zone.
        vec![d(&[("s", "x")])],
        vec![d(&[("s", "x")]).hits(3), d(&[("w", "z")])],
        vec![d(&[("w", "v")]).hits(2), d(&[("s", "x")]).hits(20)],
        vec![d(&[("s", "y")]).hits(5), d(&[("s", "y")]).hits(5)],
    ] {
        common::ready(engine.evaluate_with("d", &req, 0, Apply::Check, &mut dry)).unwrap();
        common::ready(engine.evaluate("d", &req, 0, &mut h.response)).unwrap();
        assert_eq!(dry.overall, h.response.overall, "{req:?}");
        for (a, b) in dry.statuses.iter().zip(&h.response.statuses) {
            assert_eq!(a.code, b.code, "{req:?}");
            assert_eq!(a.limit_remaining, b.limit_remaining, "{req:?}");
            assert_eq!(a.decision, b.decision, "{req:?}");
        }
        // The real call was the first to charge anything.
        h.advance(Duration::from_secs(120));
    }
}

#[test]
fn envoy_files_may_choose_an_algorithm_per_rule() {
    let yaml = "domain: algos
descriptors:
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 3}
  - key: log
    rate_limit: {algorithm: sliding_log, requests: 2, per: 7s}
  - key: both
    rate_limit:
      name: both
      limits:
        - {algorithm: token_bucket, requests: 1, per: 1s}
        - {requests_per_unit: 5, unit: hour}
  - key: classic
    rate_limit: {unit: minute, requests_per_unit: 2}
";
    let mut h = harness(yaml, false);
    assert_eq!(h.admitted(5, "algos", &[d(&[("bucket", "a")])]), 3);
    assert_eq!(h.admitted(5, "algos", &[d(&[("log", "a")])]), 2);
    let cl = h.response.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(
        (cl.reported.requests_per_unit, cl.reported.unit),
        (17, Unit::Minute)
    );
    h.advance(Duration::from_secs(7));
    assert_eq!(h.admitted(5, "algos", &[d(&[("log", "a")])]), 2);
    assert_eq!(h.admitted(3, "algos", &[d(&[("both", "a")])]), 1);
    assert_eq!(h.admitted(3, "algos", &[d(&[("classic", "a")])]), 2);
}

#[test]
fn other_unknown_keys_are_still_refused_in_envoy_files() {
    for (yaml, key) in [
        (
            "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, penalty: true}\n",
            "penalty",
        ),
        (
            "domain: x\ndescriptors:\n  - key: k\n    algorithm: token_bucket\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
            "algorithm",
        ),
        (
            "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: sliding_log, requests: 1, per: 1s, bogus: 1}\n",
            "bogus",
        ),
    ] {
        let e = load_str("x.yaml", yaml, &LoadOptions::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("config error, unknown key '{key}'")),
            "{e}"
        );
    }
    let e = load_str(
        "x.yaml",
        "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: sliding_log, requests: 1, per: 1s, unit: fortnight}\n",
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("invalid rate limit unit 'fortnight'"),
        "{e}"
    );
}

#[test]
fn a_period_no_unit_expresses_is_reported_as_its_rate() {
    let mut h = Harness::new(
        "domains:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {requests: 5, per: 7s}
      - key: two
        rate_limit: {requests: 10, per: 2m}
",
    );
    assert_eq!(
        h.send("d", &[d(&[("k", "a")]), d(&[("two", "a")])]),
        Code::Ok
    );
    for (s, want) in h
        .response
        .statuses
        .iter()
        .zip([(42, Unit::Minute), (300, Unit::Hour)])
    {
        let cl = s.current_limit.as_ref().unwrap();
        assert_eq!((cl.reported.requests_per_unit, cl.reported.unit), want);
        assert!(cl.reported.requests_per_unit >= s.limit_remaining);
    }
}

#[test]
fn a_value_spelled_as_a_pattern_selects_that_pattern() {
    let mut h = harness(
        "domain: p
descriptors:
  - key: path
    value: /a*
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: /a/b*
    rate_limit: {unit: hour, requests_per_unit: 7}
",
        false,
    );
    assert_eq!(h.send("p", &[d(&[("path", "/a/b*")])]), Code::Ok);
    assert_eq!(h.response.statuses[0].limit_remaining, 6);
    assert_eq!(h.send("p", &[d(&[("path", "/a/bc")])]), Code::Ok);
    assert_eq!(h.response.statuses[0].limit_remaining, 0);
}

#[test]
fn an_unlimited_descriptor_is_no_quota_descriptor() {
    let mut h = harness(
        "domain: q
descriptors:
  - key: free
    quota_mode: true
    rate_limit: {unlimited: true}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 0}
",
        true,
    );
    // The only quota descriptor that counts is over: the request is.
    let req = [d(&[("free", "x")]), d(&[("quota", "x")])];
    assert_eq!(h.send("q", &req), Code::OverLimit);
}
