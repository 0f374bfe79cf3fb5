//! The service's life cycle end to end: hot reload (a new limit takes
//! effect; a broken edit is rejected and the old limit keeps enforcing),
//! graceful shutdown (in-flight calls finish, exit status 0), and
//! `config check` on the service's sections.
//!
//! The limits are fixed windows of a day: tests that count in them first
//! make sure 00:00 UTC is not about to pass.

use crate::serve_support;

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use floodgate_testkit::{Floodgate, Redis, http_request, wait_until};
use serve_support::{DAY, clear_of_boundary};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

fn limit_config(n: u32) -> String {
    format!(
        "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {{requests_per_unit: {n}, unit: day}}\n"
    )
}

/// (status, requestsPerUnit) of one `/json` call for `user`.
fn call(s: &Floodgate, user: &str) -> (u16, u64) {
    let body = format!(
        r#"{{"domain":"d","descriptors":[{{"entries":[{{"key":"user","value":"{user}"}}]}}]}}"#
    );
    let (status, text) = http_request(
        s.http,
        "POST",
        "/json",
        Some("application/json"),
        body.as_bytes(),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    (
        status,
        v["statuses"][0]["currentLimit"]["requestsPerUnit"]
            .as_u64()
            .unwrap_or(0),
    )
}

fn hot_reload_on(s: &Floodgate) {
    // Up to two reloads are awaited (10 s each at most) while "b" counts.
    clear_of_boundary(DAY, Duration::from_secs(30));
    assert_eq!(call(s, "a"), (200, 2));
    assert_eq!(call(s, "a"), (200, 2));
    assert_eq!(call(s, "a").0, 429);

    // A new limit takes effect without a restart.
    s.write_config(&limit_config(4));
    assert!(
        wait_until(Duration::from_secs(10), || call(s, "probe").1 == 4),
        "new limit not applied; log:\n{}",
        s.log()
    );
    for _ in 0..4 {
        assert_eq!(call(s, "b").0, 200);
    }
    assert_eq!(call(s, "b").0, 429);

    // A broken edit is rejected, counted, and the old limit keeps enforcing.
    s.write_config("domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: lots, unit: day}\n");
    assert!(
        wait_until(Duration::from_secs(10), || {
            s.metric("floodgate_config_reloads_total{result=\"error\"}") >= 1.0
        }),
        "rejection not counted; log:\n{}",
        s.log()
    );
    assert!(s.log().contains("configuration rejected"), "{}", s.log());
    assert_eq!(call(s, "b").0, 429);
    assert_eq!(call(s, "c"), (200, 4));
    assert_eq!(s.metric("floodgate_config_last_reload_ok"), 0.0);

    // Putting back what is running clears the alarm: nothing refused is
    // left on disk.
    s.write_config(&limit_config(4));
    assert!(
        wait_until(Duration::from_secs(10), || {
            s.metric("floodgate_config_last_reload_ok") == 1.0
        }),
        "the failed reload's alarm stayed after the revert; log:\n{}",
        s.log()
    );
    assert_eq!(call(s, "c"), (200, 4));
}

#[test]
fn hot_reload_applies_valid_edits_and_rejects_broken_ones() {
    let s = Floodgate::start(bin(), &limit_config(2), &[], &[]);
    hot_reload_on(&s);
}

#[test]
fn hot_reload_on_redis() {
    let redis = Redis::start();
    let s = Floodgate::start(
        bin(),
        &limit_config(2),
        &["--redis-url", &redis.addr()],
        // Every call is Redis's to decide, however loaded the machine (the
        // default 50 ms would let the local fallback decide a late one).
        &[("REDIS_TIMEOUT", "10s")],
    );
    hot_reload_on(&s);
}

/// With polling off (`--reload-interval 0`), an edit waits for SIGHUP;
/// SIGHUP reloads at once (and no longer ends the process, as it would by
/// default); a SIGHUP with nothing changed changes nothing.
#[test]
fn sighup_reloads_at_once_without_polling() {
    let mut s = Floodgate::start_polling(bin(), &limit_config(2), "0", &[], &[]);
    clear_of_boundary(DAY, Duration::from_secs(30));
    assert_eq!(call(&s, "a"), (200, 2));
    s.write_config(&limit_config(5));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(call(&s, "probe").1, 2, "reloaded without being asked");
    s.signal("HUP");
    assert!(
        wait_until(Duration::from_secs(10), || call(&s, "probe").1 == 5),
        "SIGHUP did not reload; log:\n{}",
        s.log()
    );
    assert!(s.log().contains("SIGHUP received"), "{}", s.log());
    // Counted just after it is applied.
    assert!(wait_until(Duration::from_secs(10), || s
        .metric("floodgate_config_reloads_total{result=\"ok\"}")
        == 1.0));
    s.signal("HUP");
    assert!(
        wait_until(Duration::from_secs(10), || s
            .log()
            .contains("the configuration is unchanged")),
        "{}",
        s.log()
    );
    assert_eq!(
        s.metric("floodgate_config_reloads_total{result=\"ok\"}"),
        1.0
    );
    assert_eq!(call(&s, "probe").1, 5);
    assert!(
        s.wait_exit(Duration::from_millis(100)).is_none(),
        "SIGHUP ended the process"
    );
}

/// Waits until the service holds a call's connection, then lets it read
/// the head sent with it.
fn holds_the_call(s: &Floodgate) {
    assert!(
        wait_until(Duration::from_secs(10), || s
            .metric("floodgate_connections{listener=\"http\"}")
            >= 1.0),
        "the call's connection was never accepted; log:\n{}",
        s.log()
    );
    std::thread::sleep(Duration::from_millis(100));
}

#[test]
fn graceful_shutdown_drains_in_flight_calls_and_exits_zero() {
    let mut s = Floodgate::start(bin(), &limit_config(100), &["--shutdown-grace", "5s"], &[]);
    // A call in flight: its headers and half its body are sent.
    let body = br#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"drain"}]}]}"#;
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", s.http)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        conn,
        "POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    conn.write_all(&body[..10]).unwrap();
    holds_the_call(&s);
    s.signal("TERM");
    // Draining: the public listener no longer answers healthy.
    assert!(
        wait_until(Duration::from_secs(10), || http_request(
            s.http,
            "GET",
            "/healthcheck",
            None,
            b""
        )
        .map(|r| r.0)
        .unwrap_or(0)
            != 200),
        "still healthy after SIGTERM; log:\n{}",
        s.log()
    );
    // Still running: the call is not finished.
    assert!(
        s.wait_exit(Duration::from_millis(300)).is_none(),
        "exited before the call finished"
    );
    conn.write_all(&body[10..]).unwrap();
    let mut reply = Vec::new();
    let _ = conn.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("\"overallCode\":\"OK\""), "{reply}");
    let status = s
        .wait_exit(Duration::from_secs(5))
        .expect("exits after draining");
    assert!(status.success(), "{status:?}\n{}", s.log());
    assert!(s.log().contains("stopped"), "{}", s.log());
}

#[test]
fn shutdown_grace_bounds_the_wait() {
    let mut s = Floodgate::start(
        bin(),
        &limit_config(100),
        &["--shutdown-grace", "300ms"],
        &[],
    );
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", s.http)).unwrap();
    write!(
        conn,
        "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{"
    )
    .unwrap();
    holds_the_call(&s);
    s.signal("INT");
    let status = s
        .wait_exit(Duration::from_secs(5))
        .expect("exits after the grace period");
    assert!(status.success(), "{status:?}");
    assert!(s.log().contains("grace period over"), "{}", s.log());
}

#[test]
fn config_check_validates_the_service_sections() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "server:\n  grpc: 0.0.0.0:8081\n  admin: 127.0.0.1:6070\n  response_headers: {enabled: true}\nstore:\n  backend: redis\n  url: 127.0.0.1:6379\n  failure_policy: local\n  divide_by: 2\n".to_owned()
            + &limit_config(3),
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["config", "check"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // No domain: only the sections are checked.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "server:\n  grpc: somewhere\n  colour: blue\nstore:\n  backend: etcd\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["config", "check", "--allow-empty-config"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("unknown key 'colour'"), "{err}");
    assert!(
        err.contains("backend: expected memory or redis, found `etcd`"),
        "{err}"
    );
    // The service's own keys are read once the host's are valid.
    let service = dir.path().join("service.yaml");
    std::fs::write(&service, "server:\n  grpc: somewhere\n  workers: 1\n").unwrap();
    let out = Command::new(bin())
        .args(["config", "check", "--allow-empty-config"])
        .arg(&service)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("service.yaml:2:9: grpc: "), "{err}");
    // serve refuses it the same way, naming the problems.
    let out = Command::new(bin())
        .args(["serve", "--allow-empty-config", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown key 'colour'"));
}

#[test]
fn the_bundled_example_runs_on_the_memory_store() {
    let root = floodgate_testkit::workspace_root();
    let example = std::fs::read_to_string(root.join("examples/floodgate.yaml")).unwrap();
    let s = Floodgate::start(bin(), &example, &[], &[]);
    let body = br#"{"domain":"quickstart","descriptors":[{"entries":[{"key":"user","value":"newcomer"}]}]}"#;
    let codes: Vec<u16> = (0..4)
        .map(|_| http_request(s.http, "POST", "/json", None, body).unwrap().0)
        .collect();
    assert_eq!(codes, [200, 200, 200, 429]);
}

/// The README's promise on an injected clock: whatever the time, the
/// fourth call within a minute is over the limit, also when the calls
/// straddle a minute boundary.
#[test]
fn the_quick_start_denies_any_fourth_call_within_a_minute() {
    use floodgate::{Apply, ManualClock, StoreConfig, Timestamp};
    use floodgate_policy::{Code, Engine, MemoryBackend, OwnedDescriptor, Response};
    use std::sync::Arc;

    let root = floodgate_testkit::workspace_root();
    let flags = floodgate_runtime::settings::Flags::new().with(
        "config",
        root.join("examples/floodgate.yaml").display().to_string(),
    );
    let compiled = floodgate_runtime::host::load(
        &flags,
        &floodgate_runtime::settings::Env::new(&|_| None),
        &<floodgate_server::Rls as floodgate_runtime::host::Frontend>::sections(),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .compiled;
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000_000)));
    let engine = Engine::with_clock(
        compiled.policy,
        MemoryBackend::new(StoreConfig::default()).unwrap(),
        clock.clone(),
    );
    let mut response = Response::default();
    // Four calls spread over 59 s, starting 1.5 s later in the minute each
    // time (so some straddle a boundary wherever the minutes begin).
    for k in 0..40u64 {
        let start = Timestamp::from_millis(1_000_000_000 + k * 61_500);
        let user = [OwnedDescriptor::new([("user", format!("u{k}"))])];
        let mut codes = Vec::new();
        for at in [0, 20_000, 40_000, 59_000] {
            clock.set(start.saturating_add(Duration::from_millis(at)));
            engine
                .evaluate_now("quickstart", &user, 1, Apply::Commit, &mut response)
                .expect("decided in memory")
                .unwrap();
            codes.push(response.overall);
        }
        assert_eq!(
            codes,
            [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit],
            "calls from {start:?}"
        );
    }
}

#[test]
fn serve_without_arguments_uses_the_bundled_example() {
    let root = floodgate_testkit::workspace_root();
    let (grpc, http, admin) = (
        floodgate_testkit::free_port(),
        floodgate_testkit::free_port(),
        floodgate_testkit::free_port(),
    );
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(bin())
        .arg("serve")
        .current_dir(&root)
        .env("FLOODGATE_GRPC_ADDR", format!("127.0.0.1:{grpc}"))
        .env("FLOODGATE_HTTP_ADDR", format!("127.0.0.1:{http}"))
        .env("FLOODGATE_ADMIN_ADDR", format!("127.0.0.1:{admin}"))
        .env_remove("FLOODGATE_CONFIG")
        .env_remove("RUNTIME_ROOT")
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let ready = wait_until(Duration::from_secs(20), || {
        matches!(
            http_request(http, "GET", "/ready", None, b""),
            Some((200, _))
        )
    });
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let status = child.wait().unwrap();
    let text = std::fs::read_to_string(log.path()).unwrap();
    assert!(ready, "{text}");
    assert!(text.contains("files=examples/floodgate.yaml"), "{text}");
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_redis_outage_turns_readiness_off_and_the_failure_policy_answers() {
    let redis = Redis::start();
    let config = "store:\n  backend: redis\n  url: REDIS\n  timeout: 50ms\n  connect_timeout: 100ms\n  failure_policy: fail_closed\n  breaker: {failures: 2, cool_down: 30s}\n"
        .replace("REDIS", &redis.addr())
        + &limit_config(5);
    let s = Floodgate::start(bin(), &config, &[], &[]);
    assert_eq!(call(&s, "r"), (200, 5));
    drop(redis);
    // Failing closed: every answer is over the limit, never an error.
    for _ in 0..4 {
        assert_eq!(call(&s, "r").0, 429);
    }
    assert!(
        wait_until(Duration::from_secs(5), || {
            matches!(
                http_request(s.http, "GET", "/ready", None, b""),
                Some((503, _))
            )
        }),
        "readiness still on; log:\n{}",
        s.log()
    );
    // Liveness stays on: the process is healthy, its store is not.
    assert_eq!(
        http_request(s.http, "GET", "/healthcheck", None, b"")
            .unwrap()
            .0,
        200
    );
    assert!(s.metric("floodgate_redis_fail_closed_total") >= 4.0);
    assert_eq!(s.metric("floodgate_redis_breaker_state"), 1.0);
    assert_eq!(s.metric("floodgate_backend_ready"), 0.0);
}

/// `POST` `body` to `path` of the service's HTTP API: (status, JSON body).
fn post_json(s: &Floodgate, path: &str, body: &str) -> (u16, serde_json::Value) {
    let (status, text) = http_request(
        s.http,
        "POST",
        path,
        Some("application/json"),
        body.as_bytes(),
    )
    .unwrap();
    (status, serde_json::from_str(&text).unwrap_or_default())
}

#[test]
fn permits_held_through_an_outage_are_gauges() {
    let redis = Redis::start();
    let config = "store:\n  backend: redis\n  url: REDIS\n  timeout: 1s\n  connect_timeout: 100ms\n  failure_policy: local\n  breaker: {failures: 1, cool_down: 30s}\ndomains:\n  - domain: jobs\n    descriptors:\n      - key: job\n        rate_limit: {algorithm: concurrency, max: 2, name: in-flight}\n"
        .replace("REDIS", &redis.addr());
    let s = Floodgate::start(bin(), &config, &[], &[]);
    let job = r#"{"domain": "jobs", "descriptors": [{"entries": {"job": "render"}}]}"#;
    // Checks one job in; returns its permit.
    let check = || {
        let (status, b) = post_json(&s, "/v1/check", job);
        assert_eq!(status, 200, "{b}");
        b["permit"].as_str().unwrap().to_owned()
    };
    let release = |permit: &str| {
        let body = format!(
            r#"{{"domain": "jobs", "descriptors": [{{"entries": {{"job": "render"}}}}], "permit": "{permit}"}}"#
        );
        let (status, b) = post_json(&s, "/v1/release", &body);
        assert_eq!(status, 200, "{b}");
    };
    // Taken on Redis: not local.
    let permit = check();
    release(&permit);
    assert_eq!(s.metric("floodgate_redis_local_permits"), 0.0);
    // One held on Redis when it goes away.
    let on_redis = check();
    drop(redis);
    // Redis is gone: the local store admits, and remembers the permits.
    let first = check();
    let _second = check();
    assert!(s.metric("floodgate_redis_local_fallbacks_total") >= 2.0);
    assert_eq!(
        s.metric("floodgate_redis_local_permits"),
        2.0,
        "{}",
        s.log()
    );
    // Given back locally.
    release(&first);
    assert_eq!(
        s.metric("floodgate_redis_local_permits"),
        1.0,
        "{}",
        s.log()
    );
    // Redis's, given back while it is down: queued for it, not credited to
    // the local store.
    assert_eq!(s.metric("floodgate_redis_deferred_releases"), 0.0);
    release(&on_redis);
    assert_eq!(
        s.metric("floodgate_redis_deferred_releases"),
        1.0,
        "{}",
        s.log()
    );
    assert_eq!(s.metric("floodgate_redis_releases_deferred_total"), 1.0);
    assert_eq!(s.metric("floodgate_redis_local_permits"), 1.0);
}
