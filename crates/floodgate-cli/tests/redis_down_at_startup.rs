//! A restart during a Redis outage: the service and the gateway start with
//! Redis refusing connections, decide by their failure policy (readiness
//! following it), and use Redis once a real `redis-server` comes up on its
//! address — found by the background probes, with no traffic needed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use floodgate_testkit::{Process, Redis, free_port, http_request, wait_until};

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

/// The median time of `n` calls of `f`.
fn median(n: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[n / 2]
}

struct Serve {
    process: Process,
    http: u16,
    admin: u16,
}

fn serve(redis_port: u16, policy: &str) -> Serve {
    let (http, admin) = (free_port(), free_port());
    let mut process = Process::spawn("floodgate.yaml", ONE_PER_DAY, |path| {
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .arg("--config")
            .arg(path)
            .args(["--grpc-addr", "off"])
            .args(["--http-addr", &format!("127.0.0.1:{http}")])
            .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
            .args(["--store", "redis"])
            .args(["--redis-url", &format!("127.0.0.1:{redis_port}")])
            .args(["--failure-policy", policy])
            .args(["--redis-breaker-cool-down", "200ms"])
            // Generous: once Redis is up, a loaded machine's slow reply is
            // still Redis's answer, not the failure policy's.
            .args(["--redis-timeout", "2s"])
            .env_remove("REDIS_URL");
        cmd
    });
    // Serving (alive), ready or not.
    let up = wait_until(Duration::from_secs(20), || {
        status(admin, "/healthcheck") == Some(200)
    });
    assert!(up, "{policy}: not serving; log:\n{}", process.log());
    assert_eq!(process.wait_exit(Duration::ZERO), None, "{policy}: exited");
    Serve {
        process,
        http,
        admin,
    }
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
        let log = s.process.log();
        assert!(log.contains("Redis cannot be reached"), "{policy}: {log}");
        assert_eq!(status(s.admin, "/ready"), Some(ready), "{policy}");
        // Decided by the failure policy, at once (the breaker is open:
        // no call waits for Redis).
        let mut n = 0;
        let took = median(5, || {
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
        assert!(
            back,
            "{policy}: Redis not found again; log:\n{}",
            s.process.log()
        );
        let user = format!("later-{policy}");
        assert_eq!(json_call(s.http, &user), Some(200), "{policy}");
        assert_eq!(json_call(s.http, &user), Some(429), "{policy}");
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
    let (listen, admin) = (free_port(), free_port());
    let config = format!(
        "gateway:\n  listen: 127.0.0.1:{listen}\n  upstream: http://127.0.0.1:{}\nstore:\n  backend: redis\n  url: 127.0.0.1:{redis_port}\n  failure_policy: local\nserver:\n  admin: 127.0.0.1:{admin}\n",
        free_port()
    );
    let mut p = Process::spawn("gateway.yaml", &config, |path| {
        let mut cmd = Command::new(bin());
        // No domain: a plain proxy, allowed explicitly.
        cmd.arg("gateway")
            .arg("--config")
            .arg(path)
            .arg("--allow-empty-config");
        cmd
    });
    p.wait_ready(admin);
    assert!(p.log().contains("Redis cannot be reached"), "{}", p.log());
    let _redis = Redis::start_on(redis_port);
    let back = wait_until(Duration::from_secs(10), || {
        http_request(admin, "GET", "/metrics", None, b"")
            .is_some_and(|(_, m)| m.contains("floodgate_redis_breaker_state 0"))
    });
    assert!(back, "{}", p.log());
}
