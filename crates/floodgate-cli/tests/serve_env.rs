//! Settings from the environment and flags, on the real binary: the values
//! teams migrating from envoyproxy/ratelimit carry over (zeros, Go
//! durations), warnings for its variables Floodgate does not implement,
//! and boolean flags that override the environment both ways.
//!
//! The limit is a fixed window of a day: tests that count in it first make
//! sure 00:00 UTC is not about to pass.

use crate::serve_support;

use std::path::Path;
use std::time::Duration;

use floodgate_testkit::{Floodgate, Redis, http_request};
use serve_support::{DAY, clear_of_boundary};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

const ONE_PER_DAY: &str = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 1, unit: day}\n";

/// Status and body of one `/json` call for `user`.
fn call(s: &Floodgate, user: &str) -> (u16, String) {
    let body = format!(
        r#"{{"domain":"d","descriptors":[{{"entries":[{{"key":"user","value":"{user}"}}]}}]}}"#
    );
    http_request(s.http, "POST", "/json", None, body.as_bytes()).unwrap()
}

/// `floodgate serve` on [`ONE_PER_DAY`] and `redis`, configured by the
/// environment alone: `env`, with no shutdown grace and no polling. Redis
/// is given 10 s unless `env` says otherwise: on a loaded machine the
/// default 50 ms can pass, and the local fallback would decide a call.
fn on_redis(redis: &Redis, env: &[(&str, &str)]) -> Floodgate {
    let url = redis.addr();
    let mut all = vec![("REDIS_URL", url.as_str()), ("REDIS_TIMEOUT", "10s")];
    all.extend_from_slice(env);
    all.extend([
        ("FLOODGATE_SHUTDOWN_GRACE", "0"),
        ("FLOODGATE_RELOAD_INTERVAL", "0"),
    ]);
    Floodgate::start(bin(), ONE_PER_DAY, &[], &all)
}

#[test]
fn envoy_zeros_and_go_durations_are_accepted() {
    let redis = Redis::start();
    let s = on_redis(
        &redis,
        &[
            // envoyproxy/ratelimit's default: the local cache off.
            ("LOCAL_CACHE_SIZE_IN_BYTES", "0"),
            ("REDIS_POOL_SIZE", "0"),
            ("REDIS_TIMEOUT", "1.5s"),
        ],
    );
    clear_of_boundary(DAY, Duration::from_secs(10));
    assert_eq!(call(&s, "zero").0, 200, "{}", s.log());
    assert_eq!(call(&s, "zero").0, 429, "{}", s.log());
    assert!(s.log().contains("store=redis"), "{}", s.log());
}

/// envoyproxy/ratelimit's implicit pipelining settings are read and used:
/// decisions go through the window (counted per pipeline written).
#[test]
fn the_envoy_pipelining_window_is_used() {
    let redis = Redis::start();
    let s = on_redis(
        &redis,
        &[
            ("REDIS_PIPELINE_WINDOW", "500us"),
            ("REDIS_PIPELINE_LIMIT", "8"),
        ],
    );
    clear_of_boundary(DAY, Duration::from_secs(10));
    assert_eq!(call(&s, "piped").0, 200, "{}", s.log());
    assert_eq!(call(&s, "piped").0, 429, "{}", s.log());
    assert!(!s.log().contains("REDIS_PIPELINE"), "{}", s.log());
    let (_, text) = http_request(s.admin, "GET", "/metrics", None, b"").unwrap();
    let pipelines: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("floodgate_redis_pipelines_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pipelines counter in:\n{text}"));
    assert!(pipelines >= 2, "{pipelines}");
}

#[test]
fn more_go_durations_are_accepted() {
    for timeout in ["1m30s", "250ms"] {
        let s = Floodgate::start(
            bin(),
            ONE_PER_DAY,
            &["--shutdown-grace", "1.5s", "--shutdown-delay", "0.25s"],
            &[
                ("REDIS_TIMEOUT", timeout),
                ("FLOODGATE_SHUTDOWN_GRACE", timeout),
            ],
        );
        assert_eq!(call(&s, "go").0, 200, "{}", s.log());
    }
}

#[test]
fn a_bad_value_names_the_variable() {
    let out = std::process::Command::new(bin())
        .args(["serve", "--config"])
        .arg(floodgate_testkit::workspace_root().join("examples/floodgate.yaml"))
        .env("REDIS_TIMEOUT", "1.5")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("REDIS_TIMEOUT"), "{err}");
}

#[test]
fn unsupported_envoy_variables_are_warned_about_by_name() {
    let s = Floodgate::start(
        bin(),
        ONE_PER_DAY,
        &[],
        &[
            ("EXPIRATION_JITTER_MAX_SECONDS", "300"),
            ("REDIS_PERSECOND_URL", "127.0.0.1:6380"),
        ],
    );
    let log = s.log();
    for name in ["EXPIRATION_JITTER_MAX_SECONDS", "REDIS_PERSECOND_URL"] {
        let warnings: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("WARN") && l.contains(name))
            .collect();
        assert_eq!(warnings.len(), 1, "{name}:\n{log}");
        assert!(warnings[0].contains("not support"), "{}", warnings[0]);
    }
}

#[test]
fn boolean_flags_override_the_environment_both_ways() {
    // SHADOW_MODE=true in the environment, --shadow-mode=false wins.
    let s = Floodgate::start(
        bin(),
        ONE_PER_DAY,
        &["--shadow-mode=false", "--response-headers=false"],
        &[
            ("SHADOW_MODE", "true"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ],
    );
    clear_of_boundary(DAY, Duration::from_secs(10));
    assert_eq!(call(&s, "a").0, 200);
    let (status, body) = call(&s, "a");
    assert_eq!(status, 429, "{body}");
    assert!(!body.contains("RateLimit-Limit"), "{body}");
    drop(s);

    // The bare flag still means true, over SHADOW_MODE=false.
    let s = Floodgate::start(
        bin(),
        ONE_PER_DAY,
        &["--shadow-mode", "--response-headers=true"],
        &[("SHADOW_MODE", "false")],
    );
    assert_eq!(call(&s, "b").0, 200);
    let (status, body) = call(&s, "b");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("RateLimit-Limit"), "{body}");
}

#[test]
fn a_bad_boolean_flag_is_refused() {
    let out = std::process::Command::new(bin())
        .args(["serve", "--shadow-mode=maybe"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--shadow-mode") && err.contains("maybe"),
        "{err}"
    );
}

/// A port without an address (`:port`, a bare port, `DEBUG_PORT` alone)
/// puts the admin listener on loopback, as the docs promise
/// (`PROMETHEUS_ADDR=:port` is the metrics listener, on every interface:
/// `metrics_listener`); every listener bound beyond loopback is named in a
/// warning at start-up.
#[test]
fn a_bare_admin_port_is_loopback_and_exposed_listeners_are_logged() {
    use floodgate_testkit::{Process, free_port};
    let start = |args: Vec<String>, env: Vec<(&str, String)>, http: u16| {
        let mut p = Process::spawn("floodgate.yaml", ONE_PER_DAY, |path| {
            let mut cmd = std::process::Command::new(bin());
            cmd.arg("serve")
                .arg("--config")
                .arg(path)
                .args(["--grpc-addr", "off"])
                .args(args)
                .env_remove("FLOODGATE_ADMIN_ADDR");
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd
        });
        p.wait_ready(http);
        p
    };
    for how in ["flag", "bare", "DEBUG_PORT"] {
        let (http, admin) = (free_port(), free_port());
        let mut args = vec!["--http-addr".to_owned(), format!("127.0.0.1:{http}")];
        let mut env = Vec::new();
        match how {
            "flag" => args.extend(["--admin-addr".to_owned(), format!(":{admin}")]),
            "bare" => args.extend(["--admin-addr".to_owned(), admin.to_string()]),
            _ => env.push(("DEBUG_PORT", admin.to_string())),
        }
        let p = start(args, env, http);
        let log = p.log();
        assert!(
            log.contains(&format!("listener=\"admin\" addr=127.0.0.1:{admin}")),
            "{how}: {log}"
        );
        assert!(!log.contains("beyond loopback"), "{how}: {log}");
        assert_eq!(
            http_request(admin, "GET", "/ready", None, b"").map(|r| r.0),
            Some(200),
            "{how}"
        );
    }
    // A public listener on every interface is named.
    let http = free_port();
    let p = start(
        vec![
            "--http-addr".to_owned(),
            format!("0.0.0.0:{http}"),
            "--admin-addr".to_owned(),
            "off".to_owned(),
        ],
        Vec::new(),
        http,
    );
    let log = p.log();
    assert!(
        log.contains("listening beyond loopback")
            && log.contains(&format!("listener=\"http\" addr=0.0.0.0:{http}")),
        "{log}"
    );
}

/// `GET /ready` on `[ip]:port` over HTTP/1.1: the status.
fn ready_at(ip: std::net::IpAddr, port: u16) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect((ip, port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let host = std::net::SocketAddr::new(ip, port);
    let head = format!("GET /ready HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}

/// envoyproxy/ratelimit's `HOST`, `GRPC_HOST` and `DEBUG_HOST` as `::`:
/// each listener answers over IPv4 and IPv6 alike, on one socket. (A host
/// or a port alone taking the other half's default is checked by the
/// settings' tests, without needing envoyproxy/ratelimit's fixed ports
/// free on the machine.)
#[test]
fn envoy_hosts_listen_dual_stack() {
    use floodgate_testkit::{Process, free_port};
    let (http, grpc, admin) = (free_port(), free_port(), free_port());
    let mut p = Process::spawn("floodgate.yaml", ONE_PER_DAY, |path| {
        let mut cmd = std::process::Command::new(bin());
        cmd.arg("serve").arg("--config").arg(path);
        for v in [
            "FLOODGATE_GRPC_ADDR",
            "FLOODGATE_HTTP_ADDR",
            "FLOODGATE_ADMIN_ADDR",
            "USE_PROMETHEUS",
        ] {
            cmd.env_remove(v);
        }
        cmd.envs([("HOST", "::"), ("GRPC_HOST", "::"), ("DEBUG_HOST", "::")]);
        cmd.envs([
            ("PORT", http.to_string()),
            ("GRPC_PORT", grpc.to_string()),
            ("DEBUG_PORT", admin.to_string()),
        ]);
        cmd
    });
    p.wait_ready(http);
    let log = p.log();
    for (name, port) in [("http", http), ("grpc", grpc), ("admin", admin)] {
        let line = format!("listener=\"{name}\" addr=[::]:{port}");
        assert!(log.contains(&line), "{line}:\n{log}");
    }
    for ip in ["127.0.0.1", "::1"] {
        let ip = ip.parse().unwrap();
        for port in [http, admin] {
            assert_eq!(ready_at(ip, port), Some(200), "{ip} {port}:\n{log}");
        }
        let connected = std::net::TcpStream::connect((ip, grpc));
        assert!(connected.is_ok(), "{ip} {grpc}: {connected:?}");
    }
}

/// `LOG_LEVEL` takes logrus' names: `warning` keeps the WARN lines and
/// drops the INFO ones.
#[test]
fn log_level_warning_keeps_warnings_only() {
    let s = Floodgate::start(
        bin(),
        ONE_PER_DAY,
        &[],
        &[
            ("LOG_LEVEL", "warning"),
            ("EXPIRATION_JITTER_MAX_SECONDS", "300"),
        ],
    );
    assert_eq!(call(&s, "logged").0, 200);
    let log = s.log();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("EXPIRATION_JITTER_MAX_SECONDS")),
        "{log}"
    );
    assert!(!log.lines().any(|l| l.contains("INFO")), "{log}");
}
