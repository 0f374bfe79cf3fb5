//! Beyond envoyproxy/ratelimit: per-rule algorithms, arbitrary periods,
//! several limits per rule, costs, penalties, blocks, allow/deny lists,
//! shadow mode and kill switches, in Floodgate's own format.

use crate::common;

use std::time::Duration;

use common::{Harness, d};
use floodgate::Outcome;
use floodgate_policy::Code;
use floodgate_policy::engine::Reason;
use floodgate_policy::unit::Unit;

fn domain(rules: &str) -> String {
    format!("domains:\n  - domain: api\n    descriptors:\n{rules}")
}

#[test]
fn token_bucket_with_burst_refills_continuously() {
    let mut h = Harness::new(&domain(
        "      - key: user
        rate_limit: {algorithm: token_bucket, requests: 10, per: 1s, burst: 20}
",
    ));
    let req = [d(&[("user", "u")])];
    assert_eq!(h.admitted(30, "api", &req), 20);
    let s = &h.response.statuses[0];
    assert_eq!(
        s.decision.unwrap().retry_after,
        Some(Duration::from_millis(100))
    );
    // The burst exceeds the rate, so the burst is reported: the reported
    // limit is never below what can remain.
    let cl = s.current_limit.as_ref().unwrap();
    assert_eq!(
        (cl.reported.requests_per_unit, cl.reported.unit),
        (20, Unit::Second)
    );
    h.advance(Duration::from_millis(250));
    assert_eq!(h.admitted(5, "api", &req), 2);
}

#[test]
fn the_reported_limit_is_never_below_the_remaining() {
    let mut h = Harness::new(&domain(
        "      - key: a
        rate_limit: {algorithm: token_bucket, requests: 10, per: 1s, burst: 20}
      - key: b
        rate_limit: {algorithm: token_bucket, requests: 10, per: 1s, burst: 5}
      - key: c
        rate_limit: {algorithm: shaper, rate: 10r/s, burst: 20, nodelay: true}
      - key: d
        rate_limit: {algorithm: shaper, rate: 100r/s, burst: 5, nodelay: true}
",
    ));
    for (key, reported) in [("a", 20), ("b", 10), ("c", 21), ("d", 100)] {
        h.send("api", &[d(&[(key, "x")])]);
        let s = &h.response.statuses[0];
        let cl = s.current_limit.as_ref().unwrap();
        assert_eq!(cl.reported.requests_per_unit, reported, "{key}");
        assert!(s.limit_remaining <= reported, "{key}: {s:?}");
    }
}

#[test]
fn arbitrary_periods_and_sliding_algorithms() {
    let mut h = Harness::new(&domain(
        "      - key: login
        rate_limit: {algorithm: sliding_log, requests: 3, per: 15m}
      - key: search
        rate_limit: {algorithm: sliding_window, requests: 4, per: 90s, sub_windows: 3}
      - key: daily
        rate_limit: {requests: 2, per: 5m}
",
    ));
    assert_eq!(h.admitted(5, "api", &[d(&[("login", "alice")])]), 3);
    let retry = h.response.statuses[0]
        .decision
        .unwrap()
        .retry_after
        .unwrap();
    assert_eq!(retry, Duration::from_secs(900));
    h.advance(Duration::from_secs(899));
    assert_eq!(h.admitted(1, "api", &[d(&[("login", "alice")])]), 0);
    h.advance(Duration::from_secs(1));
    assert_eq!(h.admitted(5, "api", &[d(&[("login", "alice")])]), 3);
    assert_eq!(h.admitted(10, "api", &[d(&[("search", "q")])]), 4);
    assert_eq!(h.admitted(5, "api", &[d(&[("daily", "x")])]), 2);
    let cl = h.response.statuses[0].current_limit.as_ref().unwrap();
    // 2 per 5 minutes is reported as its rate in the shortest unit that
    // holds 5 minutes: 24 per hour.
    assert_eq!(
        (cl.reported.requests_per_unit, cl.reported.unit),
        (24, Unit::Hour)
    );
}

#[test]
fn several_limits_on_one_rule_are_atomic_and_the_narrowest_is_reported() {
    let mut h = Harness::new(&domain(
        "      - key: user
        rate_limit:
          name: per-user
          limits:
            - {algorithm: token_bucket, requests: 10, per: 1s}
            - {requests: 15, per: 1h}
",
    ));
    let req = [d(&[("user", "u")])];
    assert_eq!(h.admitted(12, "api", &req), 10);
    // The per-second limit is exhausted; it is the one reported.
    let cl = h.response.statuses[0].current_limit.clone().unwrap();
    assert_eq!(
        (cl.reported.requests_per_unit, cl.reported.unit),
        (10, Unit::Second)
    );
    assert_eq!(cl.name.as_deref(), Some("per-user"));
    h.advance(Duration::from_secs(1));
    // The hour has 5 left: the denied requests above consumed nothing of it.
    assert_eq!(h.admitted(10, "api", &req), 5);
    let cl = h.response.statuses[0].current_limit.clone().unwrap();
    assert_eq!(
        (cl.reported.requests_per_unit, cl.reported.unit),
        (15, Unit::Hour)
    );
}

#[test]
fn costs_weigh_requests() {
    let mut h = Harness::new(&domain(
        "      - key: endpoint
        value: /export
        cost: 5
        rate_limit: {requests: 20, per: 1m}
",
    ));
    assert_eq!(h.admitted(10, "api", &[d(&[("endpoint", "/export")])]), 4);
    // hits_addend multiplies with the rule's cost.
    h.advance(Duration::from_secs(60));
    assert_eq!(
        h.send_hits("api", &[d(&[("endpoint", "/export")])], 4),
        Code::Ok
    );
    assert_eq!(h.response.statuses[0].limit_remaining, 0);
}

#[test]
fn penalty_counts_denied_requests_and_block_for_locks_the_key_out() {
    let mut h = Harness::new(&domain(
        "      - key: penalized
        rate_limit: {requests: 3, per: 1m, penalty: true}
      - key: blocked
        rate_limit: {algorithm: sliding_log, requests: 2, per: 1m, block_for: 10m}
",
    ));
    let p = [d(&[("penalized", "x")])];
    assert_eq!(h.admitted(3, "api", &p), 3);
    assert_eq!(h.admitted(2, "api", &p), 0);
    let b = [d(&[("blocked", "x")])];
    assert_eq!(h.admitted(3, "api", &b), 2);
    let retry = h.response.statuses[0]
        .decision
        .unwrap()
        .retry_after
        .unwrap();
    assert_eq!(retry, Duration::from_secs(600));
    // Long after the log has emptied, the block still holds.
    h.advance(Duration::from_secs(300));
    assert_eq!(h.admitted(1, "api", &b), 0);
    h.advance(Duration::from_secs(300));
    assert_eq!(h.admitted(3, "api", &b), 2);
}

#[test]
fn allow_and_deny_lists_by_value_and_network() {
    let mut h = Harness::new(
        "domains:
  - domain: api
    allow:
      - {key: remote_address, cidrs: [10.0.0.0/8, '2001:db8::/32']}
      - {key: api_key, values: [internal-batch]}
    deny:
      - {key: remote_address, cidrs: [192.0.2.0/24]}
      - {key: api_key, values: [revoked]}
    descriptors:
      - key: remote_address
        rate_limit: {requests: 1, per: 1m}
      - key: api_key
        rate_limit: {requests: 1, per: 1m}
",
    );
    let ip = |v: &str| [d(&[("remote_address", v)])];
    assert_eq!(h.admitted(5, "api", &ip("10.1.2.3")), 5);
    assert_eq!(h.response.statuses[0].reason, Reason::Unlimited);
    assert_eq!(h.admitted(5, "api", &ip("2001:db8::7")), 5);
    assert_eq!(h.admitted(5, "api", &ip("192.0.2.77")), 0);
    assert_eq!(h.response.statuses[0].reason, Reason::Denied);
    assert_eq!(h.admitted(5, "api", &ip("198.51.100.1")), 1);
    assert_eq!(
        h.admitted(5, "api", &[d(&[("api_key", "internal-batch")])]),
        5
    );
    assert_eq!(h.admitted(5, "api", &[d(&[("api_key", "revoked")])]), 0);
}

#[test]
fn global_shadow_mode_reports_but_never_denies() {
    let mut h = Harness::new(
        "settings:
  shadow_mode: true
domains:
  - domain: api
    descriptors:
      - key: k
        rate_limit: {requests: 1, per: 1m}
",
    );
    assert_eq!(h.admitted(5, "api", &[d(&[("k", "v")])]), 5);
    // The per-descriptor status still tells the truth.
    assert_eq!(h.response.statuses[0].code, Code::OverLimit);
    assert!(h.response.shadowed);
}

#[test]
fn kill_switches_disable_one_rule_or_everything() {
    let mut h = Harness::new(&domain(
        "      - key: off
        enabled: false
        rate_limit: {requests: 1, per: 1m}
        descriptors:
          - key: sub
            rate_limit: {requests: 2, per: 1m}
      - key: on
        rate_limit: {requests: 1, per: 1m}
",
    ));
    assert_eq!(h.admitted(5, "api", &[d(&[("off", "v")])]), 5);
    // A switched-off rule is as if it had no limit: the descriptor matches
    // nothing that limits it (`no_match`, no rule), as a node without a
    // limit does; the rules below it still apply.
    let s = &h.response.statuses[0];
    assert_eq!((s.reason, s.rule), (Reason::NoMatch, None));
    assert_eq!(h.admitted(5, "api", &[d(&[("off", "v"), ("sub", "x")])]), 2);
    assert_eq!(h.admitted(5, "api", &[d(&[("on", "v")])]), 1);
    let mut all_off = Harness::new(
        "settings: {enforce: false}
domains:
  - domain: api
    descriptors:
      - key: on
        rate_limit: {requests: 1, per: 1m}
",
    );
    assert_eq!(all_off.admitted(5, "api", &[d(&[("on", "v")])]), 5);
    assert_eq!(all_off.response.statuses[0].reason, Reason::Disabled);
}

#[test]
fn tiers_choose_limits_through_the_tree() {
    let mut h = Harness::new(&domain(
        "      - key: tier
        value: free
        descriptors:
          - key: api_key
            rate_limit: {requests: 2, per: 1h}
      - key: tier
        value: pro
        descriptors:
          - key: api_key
            rate_limit: {requests: 5, per: 1h}
      - key: tier
        value: enterprise
        descriptors:
          - key: api_key
            rate_limit: {unlimited: true}
",
    ));
    let req = |tier: &str, key: &str| [d(&[("tier", tier), ("api_key", key)])];
    assert_eq!(h.admitted(10, "api", &req("free", "k1")), 2);
    assert_eq!(h.admitted(10, "api", &req("pro", "k2")), 5);
    assert_eq!(h.admitted(10, "api", &req("enterprise", "k3")), 10);
}

#[test]
fn the_shaper_delays_as_nginx_does() {
    let mut h = Harness::new(&domain(
        "      - key: upload
        rate_limit: {algorithm: shaper, rate: 10r/s, burst: 2}
",
    ));
    let req = [d(&[("upload", "x")])];
    let mut delays = Vec::new();
    for _ in 0..4 {
        h.send("api", &req);
        delays.push(h.response.statuses[0].decision.unwrap().outcome);
    }
    assert_eq!(
        delays,
        [
            Outcome::Allowed,
            Outcome::Delayed(Duration::from_millis(100)),
            Outcome::Delayed(Duration::from_millis(200)),
            Outcome::Denied
        ]
    );
}

#[test]
fn dry_runs_charge_nothing() {
    let mut h = Harness::new(&domain(
        "      - key: k
        rate_limit: {requests: 2, per: 1m}
",
    ));
    let req = [d(&[("k", "v")])];
    for _ in 0..5 {
        common::ready(h.engine.evaluate_with(
            "api",
            &req,
            1,
            floodgate::Apply::Check,
            &mut h.response,
        ))
        .unwrap();
        assert_eq!(h.response.overall, Code::Ok);
    }
    assert_eq!(h.admitted(5, "api", &req), 2);
}

#[test]
fn concurrency_rules_hold_until_released() {
    let mut h = Harness::new(&domain(
        "      - key: tenant
        rate_limit: {algorithm: concurrency, max: 2}
",
    ));
    let req = [d(&[("tenant", "t")])];
    let mut held = Vec::new();
    for _ in 0..2 {
        assert_eq!(h.send("api", &req), Code::Ok);
        held.push(std::mem::take(&mut h.response));
    }
    assert_eq!(h.send("api", &req), Code::OverLimit);
    common::ready(h.engine.release(&held.pop().unwrap()));
    assert_eq!(h.send("api", &req), Code::Ok);
}

#[test]
fn bad_requests_are_clear_errors() {
    let mut h = Harness::new(&domain(
        "      - key: k
        rate_limit: {requests: 2, per: 1m}
",
    ));
    let engine = &h.engine;
    let mut r = floodgate_policy::Response::default();
    let run = |dom: &str,
               ds: &[floodgate_policy::OwnedDescriptor],
               r: &mut floodgate_policy::Response| {
        common::ready(engine.evaluate(dom, ds, 1, r))
    };
    let err = run("", &[d(&[("k", "v")])], &mut r).unwrap_err();
    assert!(err.to_string().contains("domain must not be empty"));
    assert!(
        run("api", &[], &mut r)
            .unwrap_err()
            .to_string()
            .contains("must not be empty")
    );
    // A descriptor without entries, or with an empty key, matches nothing
    // (as in envoyproxy/ratelimit): answered, not refused.
    run("api", &[d(&[]), d(&[("", "v")]), d(&[("k", "w")])], &mut r).unwrap();
    let reasons: Vec<_> = r.statuses.iter().map(|s| s.reason).collect();
    assert_eq!(reasons, [Reason::NoMatch, Reason::NoMatch, Reason::Limited]);
    assert!(r.statuses[..2].iter().all(|s| s.current_limit.is_none()));
    let many: Vec<_> = (0..10_000).map(|i| d(&[("k", &*i.to_string())])).collect();
    assert!(
        run("api", &many, &mut r)
            .unwrap_err()
            .to_string()
            .contains("too many descriptors")
    );
    let huge = "v".repeat(1 << 20);
    assert!(
        run("api", &[d(&[("k", &*huge)])], &mut r)
            .unwrap_err()
            .to_string()
            .contains("too long")
    );
    // And the engine keeps serving.
    assert_eq!(h.admitted(3, "api", &[d(&[("k", "v")])]), 2);
}

#[test]
fn the_documented_shaper_example_passes_6_delays_15_rejects_the_rest() {
    let mut h = Harness::new(&domain(
        "      - key: remote_address
        rate_limit: {algorithm: shaper, rate: 10r/s, burst: 20, delay: 5}
",
    ));
    let req = [d(&[("remote_address", "198.51.100.7")])];
    let (mut now, mut later, mut rejected) = (0, Vec::new(), 0);
    for _ in 0..30 {
        h.send("api", &req);
        match h.response.statuses[0].decision.unwrap().outcome {
            Outcome::Allowed => now += 1,
            Outcome::Delayed(d) => later.push(d.as_millis()),
            _ => rejected += 1,
        }
    }
    assert_eq!(now, 6);
    assert_eq!(later, (1..=15).map(|k| k * 100).collect::<Vec<_>>());
    assert_eq!(rejected, 9);
}

#[test]
fn shadow_rules_are_decided_together_like_a_dry_run() {
    // nginx's limit_req_dry_run over two zones: when one zone would reject,
    // neither is charged — exactly as if both were enforced.
    let mut h = Harness::new(&domain(
        "      - key: zone_a
        shadow_mode: true
        rate_limit: {requests: 1, per: 1h}
      - key: zone_b
        shadow_mode: true
        rate_limit: {requests: 5, per: 1h}
",
    ));
    let req = [d(&[("zone_a", "k")]), d(&[("zone_b", "k")])];
    // Every request passes (shadow), the first charges both zones, the
    // others are rejected by zone a and charge nothing.
    assert_eq!(h.admitted(4, "api", &req), 4);
    assert_eq!(h.response.statuses[1].limit_remaining, 4);
    assert!(h.response.statuses[0].decision.unwrap().is_denied());
}
