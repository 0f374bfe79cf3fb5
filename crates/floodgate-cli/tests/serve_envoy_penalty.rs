//! Rules of an envoyproxy/ratelimit file moved to other algorithms, through
//! the real `floodgate serve` binary with that service's own accounting
//! (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`), in memory and on
//! Redis: a client that keeps calling is admitted again as soon as the
//! algorithm allows, its denied calls charged nothing.

use std::time::Duration;

use floodgate_testkit::{Floodgate, Redis, http_request, wait_until};

use crate::serve_support::serve_envoy_file;

/// 2 per second, as a sliding log and as a token bucket.
const MOVED: &str = "domain: moved
descriptors:
  - key: log
    rate_limit: {algorithm: sliding_log, requests: 2, per: 1s}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket}
";

/// `floodgate serve` on [`MOVED`], loaded from its own directory as an
/// envoyproxy/ratelimit deployment is, with `env`.
fn serve(env: &[(&str, &str)]) -> (tempfile::TempDir, Floodgate) {
    let mut all = vec![
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"),
        ("FLOODGATE_SHUTDOWN_GRACE", "0"),
    ];
    all.extend_from_slice(env);
    serve_envoy_file("moved.yaml", MOVED, &all)
}

/// The status of one `/json` call of `key` for client `value`.
fn call(s: &Floodgate, key: &str, value: &str) -> u16 {
    let body = format!(
        r#"{{"domain":"moved","descriptors":[{{"entries":[{{"key":"{key}","value":"{value}"}}]}}]}}"#
    );
    http_request(s.http, "POST", "/json", None, body.as_bytes())
        .unwrap()
        .0
}

/// Calls `key` for one client without pause: whether, once denied, it is
/// admitted again within 3 s (never, were its denials charged: a sliding
/// log would log them, a bucket would move its next admission later).
fn admitted_again(s: &Floodgate, key: &str) -> bool {
    let mut denied = 0;
    wait_until(Duration::from_secs(3), || {
        if call(s, key, "steady") == 200 {
            return denied > 0;
        }
        denied += 1;
        false
    })
}

/// Each rule admits a steady client again, time after time.
fn a_steady_client_is_admitted_again(s: &Floodgate) {
    for key in ["log", "bucket"] {
        for _ in 0..2 {
            assert!(admitted_again(s, key), "{key}: {}", s.log());
        }
    }
}

#[test]
fn moved_rules_readmit_a_steady_client_in_memory() {
    let (_dir, s) = serve(&[]);
    a_steady_client_is_admitted_again(&s);
}

#[test]
fn moved_rules_readmit_a_steady_client_on_redis() {
    let redis = Redis::start();
    let url = redis.addr();
    // A loaded machine can pass the default 50 ms, and the local fallback
    // would decide a call.
    let (_dir, s) = serve(&[("REDIS_URL", url.as_str()), ("REDIS_TIMEOUT", "10s")]);
    a_steady_client_is_admitted_again(&s);
    assert!(s.log().contains("store=redis"), "{}", s.log());
}
