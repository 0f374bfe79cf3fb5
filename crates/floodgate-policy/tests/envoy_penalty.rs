//! What a denied call is charged in an envoyproxy/ratelimit file: fixed
//! windows count as that service's counters do (in both of its accounting
//! modes), every other algorithm charges nothing unless the rule says
//! `penalty: true`, so a client calling steadily is never locked out.

use crate::common;

use std::time::Duration;

use common::{Harness, d};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Code, PolicySet};

/// A harness on the envoyproxy/ratelimit file `yaml`, with that service's
/// default accounting (every matched counter counts every request) when
/// `increment_all`.
fn harness(yaml: &str, increment_all: bool) -> Harness {
    let h = Harness::new(yaml);
    let opts = LoadOptions {
        envoy_increment_all: Some(increment_all),
        ..Default::default()
    };
    let spec = load_str("envoy.yaml", yaml, &opts).unwrap_or_else(|e| panic!("{e}"));
    h.engine.replace_policy(PolicySet::compile(&spec).unwrap());
    h
}

/// An envoyproxy/ratelimit file of domain `d` whose key `k` has `rate_limit`.
fn file(rate_limit: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate_limit}\n")
}

/// Calls `k` once a second for `secs` seconds; the seconds (from the
/// first call) at which it was admitted.
fn every_second(h: &mut Harness, secs: u64) -> Vec<u64> {
    let k = [d(&[("k", "client")])];
    let mut admitted = Vec::new();
    for t in 0..secs {
        if h.send("d", &k) == Code::Ok {
            admitted.push(t);
        }
        h.advance(Duration::from_secs(1));
    }
    admitted
}

/// How many of `admitted` fall in each run of `window` consecutive
/// seconds within the first `secs`.
fn per_window(admitted: &[u64], window: u64, secs: u64) -> Vec<usize> {
    (0..=secs - window)
        .map(|start| {
            let end = start + window;
            admitted.iter().filter(|&&t| t >= start && t < end).count()
        })
        .collect()
}

#[test]
fn a_sliding_log_admits_a_steady_client_twice_in_every_window() {
    let rule = file("{algorithm: sliding_log, requests: 2, per: 10s}");
    for increment_all in [false, true] {
        let mut h = harness(&rule, increment_all);
        let admitted = every_second(&mut h, 60);
        assert_eq!(
            admitted,
            [0, 1, 10, 11, 20, 21, 30, 31, 40, 41, 50, 51],
            "increment_all: {increment_all}"
        );
        assert!(per_window(&admitted, 10, 60).iter().all(|&n| n == 2));
    }
}

#[test]
fn a_token_bucket_wait_does_not_grow_with_denied_calls() {
    // 2 per 10 s: one token every 5 s, 2 at most.
    let rule = file("{algorithm: token_bucket, requests: 2, per: 10s}");
    for increment_all in [false, true] {
        let mut h = harness(&rule, increment_all);
        let k = [d(&[("k", "client")])];
        let mut admitted = Vec::new();
        let mut next_allowed = None;
        for t in 0..60u64 {
            if h.send("d", &k) == Code::Ok {
                admitted.push(t);
                if let Some(at) = next_allowed.take() {
                    assert_eq!(t, at, "admitted when its last denial said");
                }
            } else {
                let wait = h.response.statuses[0].decision.unwrap().retry_after;
                let wait = wait.expect("a bucket knows its wait").as_secs();
                assert!((1..5).contains(&wait), "at {t}s: wait {wait}s");
                next_allowed = Some(t + wait);
            }
            h.advance(Duration::from_secs(1));
        }
        let mut expected = vec![0, 1];
        expected.extend((5..60).step_by(5));
        assert_eq!(admitted, expected, "increment_all: {increment_all}");
    }
}

#[test]
fn a_sliding_window_is_not_locked_out_by_a_steady_client() {
    let rule = file("{algorithm: sliding_window, requests: 2, per: 10s}");
    for increment_all in [false, true] {
        let mut h = harness(&rule, increment_all);
        let admitted = every_second(&mut h, 60);
        // Windows start every 10 s; the previous one's admissions weigh in
        // for what is left of the last 10 s: its 2 let one in halfway
        // through the next (2 × 5/10 + 1), whose 1 lets one in at each
        // start after: one in every window, as its estimate allows.
        assert_eq!(
            admitted,
            [0, 1, 15, 20, 30, 40, 50],
            "increment_all: {increment_all}"
        );
    }
}

#[test]
fn a_leaky_bucket_and_a_shaper_charge_no_denial() {
    for rule in [
        "{algorithm: leaky_bucket, requests: 1, per: 5s, burst: 1}",
        "{algorithm: gcra, requests: 1, per: 5s, burst: 1}",
        "{algorithm: shaper, rate: 12r/m, nodelay: true}",
    ] {
        let mut h = harness(&file(rule), false);
        let admitted = every_second(&mut h, 60);
        let expected: Vec<u64> = (0..60).step_by(5).collect();
        assert_eq!(admitted, expected, "{rule}");
    }
}

#[test]
fn penalty_true_locks_a_steady_client_out_on_purpose() {
    let rule = file("{algorithm: sliding_log, requests: 2, per: 10s, penalty: true}");
    let mut h = harness(&rule, false);
    assert_eq!(every_second(&mut h, 60), [0, 1]);
    // Once it stops calling for a whole window, it is let in again.
    h.advance(Duration::from_secs(10));
    assert_eq!(every_second(&mut h, 3), [0, 1]);
    let bucket = file("{algorithm: token_bucket, requests: 2, per: 10s, penalty: true}");
    let mut h = harness(&bucket, false);
    assert_eq!(every_second(&mut h, 60), [0, 1]);
}

#[test]
fn a_fixed_window_counts_as_envoyproxy_ratelimit_does() {
    for rule in [
        "{unit: hour, requests_per_unit: 5}",
        "{algorithm: fixed_window, requests: 5, per: 1h}",
        "{requests: 5, per: 1h}",
    ] {
        let yaml = format!(
            "{}  - key: j\n    rate_limit: {{unit: hour, requests_per_unit: 1}}\n",
            file(rule)
        );
        let k = [d(&[("k", "a")])];
        let j = [d(&[("j", "a")])];
        let both = [k[0].clone(), j[0].clone()];
        for increment_all in [false, true] {
            let mut h = harness(&yaml, increment_all);
            assert_eq!(h.send_hits("d", &k, 3), Code::Ok);
            // Its own denial is counted in both modes (its counter goes
            // over: 6 of 5), so even one more hit is then denied.
            assert_eq!(h.send_hits("d", &k, 3), Code::OverLimit);
            assert_eq!(h.send("d", &k), Code::OverLimit);
            // Another rule's denial counts only in that service's default
            // mode (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`).
            let mut h = harness(&yaml, increment_all);
            assert_eq!(h.send("d", &j), Code::Ok);
            assert_eq!(h.send_hits("d", &both, 2), Code::OverLimit);
            assert_eq!(h.send_hits("d", &k, 3), Code::Ok);
            let left = h.response.statuses[0].limit_remaining;
            assert_eq!(left, if increment_all { 0 } else { 2 }, "{rule}");
        }
    }
}

#[test]
fn penalty_false_charges_a_fixed_window_nothing_for_a_denial() {
    let rule = file("{algorithm: fixed_window, requests: 5, per: 1h, penalty: false}");
    for increment_all in [false, true] {
        let mut h = harness(&rule, increment_all);
        let k = [d(&[("k", "a")])];
        assert_eq!(h.send_hits("d", &k, 3), Code::Ok);
        assert_eq!(h.send_hits("d", &k, 3), Code::OverLimit);
        assert_eq!(h.send_hits("d", &k, 2), Code::Ok);
        assert_eq!(h.response.statuses[0].limit_remaining, 0);
    }
}

#[test]
fn penalty_is_refused_on_a_concurrency_limit_and_outside_the_extensions() {
    let refused = |rule: &str| {
        load_str("x.yaml", &file(rule), &LoadOptions::default())
            .unwrap_err()
            .to_string()
    };
    let e = refused("{algorithm: concurrency, max: 2, penalty: true}");
    assert!(
        e.contains("penalty does not apply to a concurrency limit"),
        "{e}"
    );
    // A rule in that service's own terms keeps its rules: no such key.
    let e = refused("{unit: second, requests_per_unit: 1, penalty: true}");
    assert!(e.contains("config error, unknown key 'penalty'"), "{e}");
    let e = refused("{algorithm: sliding_log, requests: 1, per: 1s, penalty: maybe}");
    assert!(e.contains("expected true or false"), "{e}");
    // Beside a limit that cannot be read, it is still a key of the rule.
    let e = refused("{algorithm: sliding_log, requests: 1, penalty: true}");
    assert!(e.contains("needs 'per'") && !e.contains("'penalty'"), "{e}");
}
