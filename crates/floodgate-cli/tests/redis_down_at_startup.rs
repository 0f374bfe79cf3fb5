//! A restart during a Redis outage: the service and the gateway start with
//! Redis refusing connections, decide by their failure policy (readiness
//! following it), and use Redis once a real `redis-server` comes up on its
//! address — found by the background probes, with no traffic needed. And
//! an outage in operation: said once, with the policy deciding, and its
//! end once.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use floodgate_testkit::{
    Floodgate, Gateway, Redis, free_port, http_request, median_time, wait_until,
};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

const ONE_PER_DAY: &str = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 1, unit: day}\n";

fn json_call(port: u16, user: &str) -> Option<u16> {
    let body = format!(
        r#"{{"domain":"d","descriptors":[{{"entries":[{{"key":"user","value":"{user}"}}]}}]}}"#
    );
    http_request(port, "POST", "/json", None, body.as_bytes()).map(|r| r.0)
}

fn status(port: u16, path: &str) -> Option<u16> {
    http_request(port, "GET", path, None, b"").map(|r| r.0)
}

/// The service's Redis and failure-policy series, to say why a decision
/// was not Redis's.
fn redis_metrics(admin: u16) -> String {
    let (_, m) = http_request(admin, "GET", "/metrics", None, b"").unwrap_or_default();
    m.lines()
        .filter(|l| l.starts_with("floodgate_redis") || l.contains("failure"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `floodgate serve` on Redis at `redis_port` with the failure policy
/// `policy`, serving (alive), ready or not.
fn serve(redis_port: u16, policy: &str) -> Floodgate {
    let redis_url = format!("127.0.0.1:{redis_port}");
    let args = [
        "--store",
        "redis",
        "--redis-url",
        &redis_url,
        "--failure-policy",
        policy,
        "--redis-breaker-cool-down",
        "200ms",
        // Generous: once Redis is up, a loaded machine's slow reply is
        // still Redis's answer, not the failure policy's.
        "--redis-timeout",
        "2s",
    ];
    let mut s = Floodgate::spawn(bin(), ONE_PER_DAY, "1s", &args, &[], |_| {});
    // The public listener too: the admin listener starts first.
    let up = wait_until(Duration::from_secs(20), || {
        status(s.admin, "/healthcheck") == Some(200) && status(s.http, "/healthcheck") == Some(200)
    });
    assert!(up, "{policy}: not serving; log:\n{}", s.log());
    assert_eq!(s.wait_exit(Duration::ZERO), None, "{policy}: exited");
    s
}

#[test]
fn the_service_starts_without_redis_and_finds_it_later() {
    for (policy, ready, code) in [
        ("local", 200, 200),
        ("fail_open", 200, 200),
        ("fail_closed", 503, 429),
    ] {
        let redis_port = free_port();
        let s = serve(redis_port, policy);
        let log = s.log();
        assert!(log.contains("Redis cannot be reached"), "{policy}: {log}");
        assert_eq!(status(s.admin, "/ready"), Some(ready), "{policy}");
        // Decided by the failure policy, at once (the breaker is open:
        // no call waits for Redis).
        let mut n = 0;
        let took = median_time(5, || {
            n += 1;
            assert_eq!(
                json_call(s.http, &format!("early-{n}")),
                Some(code),
                "{policy}"
            );
        });
        // Well below the Redis timeout: no decision waited for Redis.
        assert!(took < Duration::from_millis(1000), "{policy}: {took:?}");

        // Redis comes up: the probes find it without any traffic, and
        // decisions count in it.
        let redis = Redis::start_on(redis_port);
        let back = wait_until(Duration::from_secs(10), || {
            status(s.admin, "/ready") == Some(200)
                && http_request(s.admin, "GET", "/metrics", None, b"")
                    .is_some_and(|(_, m)| m.contains("floodgate_redis_breaker_state 0"))
        });
        assert!(back, "{policy}: Redis not found again; log:\n{}", s.log());
        let user = format!("later-{policy}");
        let answers = [json_call(s.http, &user), json_call(s.http, &user)];
        assert_eq!(
            answers,
            [Some(200), Some(429)],
            "{policy}: not decided by Redis; Redis metrics:\n{}\nlog:\n{}",
            redis_metrics(s.admin),
            s.log()
        );
        let keys = Command::new("redis-cli")
            .args(["-p", &redis.port().to_string(), "--scan"])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&keys.stdout).trim().is_empty(),
            "{policy}: nothing counted in Redis"
        );
    }
}

#[test]
fn the_gateway_starts_without_redis() {
    let redis_port = free_port();
    let config = format!(
        "gateway:\n  upstream: http://127.0.0.1:{}\nstore:\n  backend: redis\n  url: 127.0.0.1:{redis_port}\n  failure_policy: local\n",
        free_port()
    );
    // No domain: a plain proxy, allowed explicitly.
    let p = Gateway::start(bin(), &config, &["--allow-empty-config"], &[]);
    let admin = p.admin;
    assert!(p.log().contains("Redis cannot be reached"), "{}", p.log());
    let _redis = Redis::start_on(redis_port);
    let back = wait_until(Duration::from_secs(10), || {
        http_request(admin, "GET", "/metrics", None, b"")
            .is_some_and(|(_, m)| m.contains("floodgate_redis_breaker_state 0"))
    });
    assert!(back, "{}", p.log());
}

/// Redis dies under a running service: one warning says that the failure
/// policy decides and how, however many calls fail; one line says when
/// Redis answers again.
#[test]
fn an_outage_in_operation_is_said_once_and_its_end_once() {
    const OUTAGE: &str = "its circuit breaker is open";
    const END: &str = "Redis answers again";
    let redis = Redis::start();
    let port = redis.port();
    let s = serve(port, "fail_open");
    assert_eq!(json_call(s.http, "before"), Some(200));
    drop(redis);
    let said = wait_until(Duration::from_secs(20), || {
        json_call(s.http, "during");
        s.log().contains(OUTAGE)
    });
    assert!(said, "the outage was not said; log:\n{}", s.log());
    for n in 0..20 {
        assert_eq!(json_call(s.http, &format!("during-{n}")), Some(200));
    }
    let log = s.log();
    let line = log.lines().find(|l| l.contains(OUTAGE)).unwrap_or_default();
    assert!(
        line.contains("WARN") && line.contains("fail_open"),
        "{line}"
    );
    let _redis = Redis::start_on(port);
    let ended = wait_until(Duration::from_secs(20), || s.log().contains(END));
    assert!(ended, "the end was not said; log:\n{}", s.log());
    let log = s.log();
    assert_eq!(log.matches(OUTAGE).count(), 1, "{log}");
    assert_eq!(log.matches(END).count(), 1, "{log}");
}
