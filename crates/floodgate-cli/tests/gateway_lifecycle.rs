//! `floodgate gateway` end to end, the real binary in front of a real
//! upstream: a reload is all or nothing (a new file with any invalid part
//! changes nothing, and is counted and logged as refused; a valid one puts
//! its policies and its `http:` section in force together), and shutdown
//! honours `server.shutdown_delay` / `FLOODGATE_SHUTDOWN_DELAY` (not ready
//! while still serving, then the drain and a clean exit).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use floodgate_testkit::{Gateway, Redis, Upstream, http_request, wait_until};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// The demo upstream (`floodgate bench upstream`'s), served in this
/// process on an ephemeral port.
pub(crate) fn upstream() -> Upstream {
    Upstream::start(|listener| {
        floodgate_gateway::demo::serve_demo(
            listener,
            bytes::Bytes::from_static(b"from the upstream\n"),
        )
    })
}

/// What the scenarios of this file do with a gateway: count and await its
/// reloads, and send it requests as a user.
trait Scenario {
    /// Reloads counted so far: (applied, refused or rejected).
    fn reloads(&self) -> (f64, f64);

    /// Writes `config`, then waits until the gateway has counted one more
    /// reload, applied or not; returns the new counts.
    fn reload(&self, config: &str) -> (f64, f64);

    /// One GET through the gateway as `user`: the status and the
    /// `RateLimit-Policy` field.
    fn get(&self, path: &str, user: &str) -> (u16, String);
}

impl Scenario for Gateway {
    fn reloads(&self) -> (f64, f64) {
        (
            self.metric("floodgate_config_reloads_total{result=\"ok\"}"),
            self.metric("floodgate_config_reloads_total{result=\"error\"}"),
        )
    }

    fn reload(&self, config: &str) -> (f64, f64) {
        let before = self.reloads();
        self.write_config(config);
        let mut after = before;
        let counted = wait_until(Duration::from_secs(10), || {
            after = self.reloads();
            after.0 + after.1 > before.0 + before.1
        });
        assert!(
            counted,
            "the reload was never counted; log:\n{}",
            self.log()
        );
        after
    }

    fn get(&self, path: &str, user: &str) -> (u16, String) {
        let (status, head) = get(self.port, path, user);
        let policy = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("ratelimit-policy")
                    .then(|| value.trim().to_owned())
            })
            .unwrap_or_default();
        (status, policy)
    }
}

/// One HTTP/1.1 GET on a new connection: the status and the response
/// head (status 0 when nothing answers).
pub(crate) fn get(port: u16, path: &str, user: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: gw\r\nx-user: {user}\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let head = text.split_once("\r\n\r\n").map(|(h, _)| h).unwrap_or(&text);
    (status, head.to_owned())
}

/// The statuses of `n` requests to `/api/orders` as `user`, and the
/// `RateLimit-Policy` of the last.
fn burst(gw: &Gateway, user: &str, n: usize) -> (Vec<u16>, String) {
    let mut statuses = Vec::new();
    let mut policy = String::new();
    for _ in 0..n {
        let (s, p) = gw.get("/api/orders", user);
        statuses.push(s);
        policy = p;
    }
    (statuses, policy)
}

/// `ok` 200s, then one `denied`.
fn expected(ok: usize, denied: u16) -> Vec<u16> {
    let mut v = vec![200; ok];
    v.push(denied);
    v
}

/// The parts of one reload scenario's configuration.
struct Parts<'a> {
    upstream: SocketAddr,
    /// `store:` section (empty: memory).
    store: &'a str,
    /// Lines appended to `gateway:` (indented by 2).
    gateway: &'a str,
    /// The `http.routes` list.
    routes: &'a str,
    /// Lines appended to `http:` (indented by 2).
    http: &'a str,
    /// The per-user limit on the `/api/` route: name and requests per hour.
    limit: (&'a str, u32),
    /// Rules appended to the domain (indented by 6).
    rules: &'a str,
}

impl Parts<'_> {
    /// The memory store, the `/api/` route and 3 requests an hour per
    /// user, nothing else.
    fn plain(upstream: SocketAddr) -> Parts<'static> {
        Parts {
            upstream,
            store: "",
            gateway: "",
            routes: ROUTES,
            http: "",
            limit: ("l1", 3),
            rules: "",
        }
    }

    fn yaml(&self) -> String {
        let (name, n) = self.limit;
        format!(
            r#"gateway:
  upstream: http://{up}
{gateway}server: {{reload_interval: 100ms, shutdown_grace: 5s}}
{store}http:
  domain: gw
  routes: {routes}
  descriptors:
    - [{{header: {{name: x-user, key: user}}}}, route]
{http}domains:
  - domain: gw
    descriptors:
      - key: user
        descriptors:
          - key: route
            value: "/api/{{*rest}}"
            rate_limit: {{name: {name}, requests: {n}, per: 1h}}
{rules}"#,
            up = self.upstream,
            gateway = self.gateway,
            store = self.store,
            routes = self.routes,
            http = self.http,
            rules = self.rules,
        )
    }
}

const ROUTES: &str = r#"["/api/{*rest}"]"#;
/// Two templates matching the same paths: the identity does not compile.
const CLASHING_ROUTES: &str = r#"["/api/{*rest}", "/api/{*other}"]"#;
const L1: &str = r#""l1";q=3;w=3600"#;
const L2: &str = r#""l2";q=6;w=3600"#;

/// Starts on limit L1 (3 an hour), then offers new files that raise the
/// limit to L2 (6) but are invalid elsewhere: each is refused whole — L1
/// keeps deciding, with L1's `RateLimit-Policy` — and counted and logged
/// with its error. A valid file then puts L2 and its `http:` section
/// (status 503) in force together. `redis`: the store, where a rule Redis
/// cannot decide is one more invalid part.
fn reload_all_or_nothing(redis: Option<&Redis>) {
    let up = upstream();
    let store = redis
        .map(|r| format!("store: {{backend: redis, url: {}}}\n", r.addr()))
        .unwrap_or_default();
    let base = Parts {
        store: &store,
        ..Parts::plain(up.addr)
    };
    let gw = Gateway::start(bin(), &base.yaml(), &[], &[]);
    assert_eq!(burst(&gw, "u1", 4), (expected(3, 429), L1.to_owned()));

    let raised = Parts {
        limit: ("l2", 6),
        ..base
    };
    let mut invalid: Vec<(&str, String, &str)> = vec![
        (
            "a broken http section",
            Parts {
                routes: CLASHING_ROUTES,
                ..raised
            }
            .yaml(),
            "matches the same paths",
        ),
        (
            "a broken gateway section",
            Parts {
                gateway: "  limits: {max_headers: lots}\n",
                ..raised
            }
            .yaml(),
            "found `lots`",
        ),
        (
            "a broken server section",
            Parts {
                http: "  responses: {status: 503}\n",
                ..raised
            }
            .yaml()
            .replace("shutdown_grace: 5s", "shutdown_grace: 5s, colour: blue"),
            "colour",
        ),
    ];
    if redis.is_some() {
        invalid.push((
            "a rule Redis cannot decide",
            Parts {
                rules: "      - key: odd\n        rate_limit: {name: too-fine, algorithm: token_bucket, requests: 1, per: 1500ns}\n",
                ..raised
            }
            .yaml(),
            "too-fine",
        ));
    }
    for (n, (what, yaml, error)) in invalid.iter().enumerate() {
        let (applied, refused) = gw.reload(yaml);
        assert_eq!(
            (applied, refused),
            (0.0, n as f64 + 1.0),
            "{what}: a reload with an invalid part must be refused whole; log:\n{}",
            gw.log()
        );
        let user = format!("refused-{n}");
        assert_eq!(
            burst(&gw, &user, 4),
            (expected(3, 429), L1.to_owned()),
            "{what}: L1 still decides; log:\n{}",
            gw.log()
        );
        let log = gw.log();
        assert!(log.contains("configuration refused"), "{what}: {log}");
        assert!(log.contains(error), "{what}: `{error}` not logged: {log}");
        assert_eq!(gw.metric("floodgate_config_last_reload_ok"), 0.0);
    }

    // A valid file: the new limit and the new http section, together.
    let good = Parts {
        http: "  responses: {status: 503}\n",
        ..raised
    };
    let (applied, _) = gw.reload(&good.yaml());
    assert_eq!(applied, 1.0, "log:\n{}", gw.log());
    assert_eq!(burst(&gw, "after", 7), (expected(6, 503), L2.to_owned()));
    assert_eq!(gw.metric("floodgate_config_last_reload_ok"), 1.0);
    assert!(gw.log().contains("http section reloaded"), "{}", gw.log());
}

#[test]
fn a_reload_with_any_invalid_part_changes_nothing() {
    reload_all_or_nothing(None);
}

#[test]
fn a_reload_with_any_invalid_part_changes_nothing_on_redis() {
    let redis = Redis::start();
    reload_all_or_nothing(Some(&redis));
}

/// The gateway says what it loaded and runs with: its file, the domains
/// and rules in it, the store.
#[test]
fn the_gateway_logs_what_it_loaded() {
    let up = upstream();
    let gw = Gateway::start(bin(), &Parts::plain(up.addr).yaml(), &[], &[]);
    let log = gw.log();
    let line = log
        .lines()
        .find(|l| l.contains("configuration loaded"))
        .unwrap_or_else(|| panic!("no line says what was loaded; log:\n{log}"));
    for part in ["gateway.yaml", "domains=1", "rules=", "store=memory"] {
        assert!(line.contains(part), "{part} missing: {line}");
    }
}

/// A gateway that limits nothing (no `http:` section, no rule) says so at
/// WARN: a proxy without limits is allowed, never silent.
#[test]
fn a_gateway_that_limits_nothing_says_so() {
    let up = upstream();
    let gw = Gateway::start(
        bin(),
        &plain_config(up.addr, "shutdown_grace: 0s"),
        &[],
        &[PLAIN],
    );
    assert_eq!(gw.get("/", "u").0, 200);
    assert!(
        wait_until(Duration::from_secs(10), || gw
            .log()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("limits nothing"))),
        "{}",
        gw.log()
    );
    // A limiting gateway: no warning up to its "listening" line, which
    // follows the warning when there is one.
    let limited = Gateway::start(bin(), &Parts::plain(up.addr).yaml(), &[], &[]);
    assert!(
        wait_until(Duration::from_secs(10), || limited
            .log()
            .contains("gateway listening")),
        "{}",
        limited.log()
    );
    assert!(
        !limited.log().contains("limits nothing"),
        "{}",
        limited.log()
    );
}

/// Without `--config`, the gateway reads `./floodgate.yaml` or its own
/// quick start, never the decision service's example (which has no
/// `gateway:` section), and says which files it looked for.
#[test]
fn without_a_configuration_the_gateway_names_its_own_defaults() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("examples")).unwrap();
    let root = floodgate_testkit::workspace_root();
    std::fs::copy(
        root.join("examples/floodgate.yaml"),
        dir.path().join("examples/floodgate.yaml"),
    )
    .unwrap();
    let out = std::process::Command::new(bin())
        .arg("gateway")
        .current_dir(dir.path())
        .env_remove("FLOODGATE_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("./examples/gateway.yaml not found"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("upstream"),
        "read the service's example: {stderr}"
    );
}

/// With polling off (`reload_interval: 0`) an edit waits for SIGHUP, which
/// puts the new policies and `http:` section in force at once and leaves
/// the gateway serving.
#[test]
fn sighup_reloads_the_gateway_at_once_without_polling() {
    let up = upstream();
    let base = Parts::plain(up.addr);
    let off = |p: &Parts<'_>| {
        p.yaml()
            .replace("reload_interval: 100ms", "reload_interval: 0")
    };
    let mut gw = Gateway::start(bin(), &off(&base), &[], &[]);
    assert_eq!(burst(&gw, "u1", 4), (expected(3, 429), L1.to_owned()));
    gw.write_config(&off(&Parts {
        limit: ("l2", 6),
        http: "  responses: {status: 503}\n",
        ..base
    }));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        gw.get("/api/orders", "u2").1,
        L1,
        "reloaded without being asked"
    );
    gw.signal("HUP");
    assert!(
        wait_until(Duration::from_secs(10), || gw.reloads().0 == 1.0),
        "SIGHUP did not reload; log:\n{}",
        gw.log()
    );
    assert!(gw.log().contains("SIGHUP received"), "{}", gw.log());
    assert_eq!(burst(&gw, "u3", 7), (expected(6, 503), L2.to_owned()));
    assert!(
        gw.wait_exit(Duration::from_millis(100)).is_none(),
        "SIGHUP ended the gateway"
    );
}

/// A plain proxy's configuration: no domain, so it is started with
/// [`PLAIN`] (an empty configuration allowed).
fn plain_config(upstream: SocketAddr, server: &str) -> String {
    format!("gateway:\n  upstream: http://{upstream}\nserver: {{{server}}}\n")
}

/// The environment a [`plain_config`] is started with.
const PLAIN: (&str, &str) = ("FLOODGATE_ALLOW_EMPTY_CONFIG", "true");

/// After SIGTERM, `/ready` answers 503 at once while requests — on new
/// connections too — are still proxied for the whole delay; then the
/// gateway drains and exits 0, well within delay + grace.
fn serves_through_the_delay(mut gw: Gateway, delay: Duration, grace: Duration) {
    assert_eq!(gw.get("/", "before").0, 200);
    let signalled = Instant::now();
    gw.signal("TERM");
    assert!(
        wait_until(Duration::from_secs(1), || matches!(
            http_request(gw.admin, "GET", "/ready", None, b""),
            Some((503, _))
        )),
        "still ready; log:\n{}",
        gw.log()
    );
    let mut served = 0;
    while signalled.elapsed() + Duration::from_millis(300) < delay {
        let status = gw.get("/", "during").0;
        if status != 200 && signalled.elapsed() >= delay {
            // A machine slow enough for the delay to run out meanwhile.
            break;
        }
        assert_eq!(status, 200, "log:\n{}", gw.log());
        served += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(served > 0, "no request was tried during the delay");
    let early = gw.wait_exit(Duration::from_millis(10));
    let checked = signalled.elapsed();
    assert!(
        early.is_none() || checked >= delay,
        "exited during the shutdown delay ({checked:?}); log:\n{}",
        gw.log()
    );
    let status = match early {
        Some(s) => s,
        None => gw
            .wait_exit(delay + grace + Duration::from_secs(2))
            .expect("exits after the delay"),
    };
    let took = signalled.elapsed();
    assert!(status.success(), "{status:?}\n{}", gw.log());
    assert!(took >= delay, "exited after {took:?}, before the delay");
    assert!(took < delay + grace, "exited after {took:?}");
    let log = gw.log();
    assert!(log.contains("shutdown delay"), "{log}");
    assert!(log.contains("stopped"), "{log}");
    assert!(!log.contains("grace period over"), "{log}");
    assert_eq!(get(gw.port, "/", "after").0, 0, "still listening");
}

#[test]
fn the_shutdown_delay_keeps_serving_while_not_ready() {
    let up = upstream();
    let config = plain_config(up.addr, "shutdown_delay: 2s, shutdown_grace: 5s");
    let gw = Gateway::start(bin(), &config, &[], &[PLAIN]);
    serves_through_the_delay(gw, Duration::from_secs(2), Duration::from_secs(5));
}

#[test]
fn the_shutdown_delay_from_the_environment_overrides_the_file() {
    let up = upstream();
    let config = plain_config(up.addr, "shutdown_delay: 0, shutdown_grace: 5s");
    let gw = Gateway::start(
        bin(),
        &config,
        &[],
        &[("FLOODGATE_SHUTDOWN_DELAY", "1500ms"), PLAIN],
    );
    serves_through_the_delay(gw, Duration::from_millis(1500), Duration::from_secs(5));
}

#[test]
fn without_a_shutdown_delay_shutdown_begins_at_once() {
    let up = upstream();
    let mut gw = Gateway::start(
        bin(),
        &plain_config(up.addr, "shutdown_grace: 5s"),
        &[],
        &[PLAIN],
    );
    assert_eq!(gw.get("/", "before").0, 200);
    gw.signal("TERM");
    let status = gw
        .wait_exit(Duration::from_secs(5))
        .expect("exits after draining");
    assert!(status.success(), "{status:?}\n{}", gw.log());
    assert!(!gw.log().contains("shutdown delay"), "{}", gw.log());
}

#[test]
fn a_bad_shutdown_delay_stops_startup_naming_it() {
    let up = upstream();
    for (config, env, named) in [
        (
            plain_config(up.addr, "shutdown_delay: soon"),
            None,
            "shutdown_delay",
        ),
        (
            plain_config(up.addr, "shutdown_delay: -1s"),
            None,
            "shutdown_delay",
        ),
        (
            plain_config(up.addr, "shutdown_grace: 5s"),
            Some("soon"),
            "FLOODGATE_SHUTDOWN_DELAY",
        ),
    ] {
        let mut env: Vec<(&str, &str)> = env
            .map(|v| vec![("FLOODGATE_SHUTDOWN_DELAY", v)])
            .unwrap_or_default();
        env.push(PLAIN);
        let mut process = Gateway::spawn(bin(), &config, &[], &env, |_| {});
        let status = process.wait_exit(Duration::from_secs(10));
        let log = process.log();
        let Some(status) = status else {
            panic!("started with {config} {env:?}; log:\n{log}");
        };
        assert!(!status.success(), "{config} {env:?}");
        assert!(log.contains(named), "{config} {env:?}: {log}");
    }
}

/// The standard parts with `gateway.access_log: true` and `n` requests an
/// hour per user.
fn access_logged(upstream: SocketAddr, n: u32) -> Parts<'static> {
    Parts {
        gateway: "  access_log: true\n",
        limit: ("l1", n),
        ..Parts::plain(upstream)
    }
}

/// `gateway.access_log: true`: one line per request, passed whatever the
/// log level (here `warn`), with the status the client got and whether the
/// limiter answered; the query is never logged.
#[test]
fn the_access_log_has_a_line_per_request() {
    let up = upstream();
    let config = access_logged(up.addr, 1).yaml().replace(
        "server: {reload_interval: 100ms,",
        "server: {log: {level: warn, format: json}, reload_interval: 100ms,",
    );
    let gw = Gateway::start(bin(), &config, &[], &[]);
    assert_eq!(gw.get("/api/orders?token=secret", "ann").0, 200);
    assert_eq!(gw.get("/api/orders?token=secret", "ann").0, 429);
    let lines = |gw: &Gateway| -> Vec<serde_json::Value> {
        gw.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["target"] == "floodgate::access")
            .collect()
    };
    let mut found = Vec::new();
    let logged = wait_until(Duration::from_secs(10), || {
        found = lines(&gw);
        found.len() >= 2
    });
    assert!(logged, "no access lines; log:\n{}", gw.log());
    assert_eq!(found.len(), 2, "{found:?}");
    for (line, (status, limited)) in found.iter().zip([(200, false), (429, true)]) {
        assert_eq!(line["level"], "INFO", "{line}");
        assert_eq!(line["method"], "GET", "{line}");
        assert_eq!(line["path"], "/api/orders", "{line}");
        assert_eq!(line["version"], "HTTP/1.1", "{line}");
        assert_eq!(line["status"], status, "{line}");
        assert_eq!(line["limited"], limited, "{line}");
        assert_eq!(line["client"], "127.0.0.1", "{line}");
        assert!(
            line["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{line}"
        );
        assert!(line["micros"].as_u64().is_some(), "{line}");
    }
    assert!(!gw.log().contains("secret"), "{}", gw.log());
}

/// Off by default: no access lines, even at level `info`.
#[test]
fn no_access_log_unless_asked() {
    let up = upstream();
    let gw = Gateway::start(
        bin(),
        &plain_config(up.addr, "log: {level: info}"),
        &[],
        &[PLAIN],
    );
    assert_eq!(gw.get("/", "ann").0, 200);
    assert_eq!(gw.get("/", "ann").0, 200);
    assert!(!gw.log().contains("floodgate::access"), "{}", gw.log());
}

/// Without an `http:` section (nothing limited) the proxy logs as well.
#[test]
fn the_access_log_without_limits() {
    let up = upstream();
    let config = plain_config(up.addr, "log: {level: error}")
        .replace("gateway:\n", "gateway:\n  access_log: true\n");
    let gw = Gateway::start(bin(), &config, &[], &[PLAIN]);
    assert_eq!(gw.get("/a/b?q=1", "ann").0, 200);
    let logged = wait_until(Duration::from_secs(10), || {
        gw.log().contains("floodgate::access")
    });
    assert!(logged, "{}", gw.log());
    let log = gw.log();
    let line = log
        .lines()
        .find(|l| l.contains("floodgate::access"))
        .unwrap();
    for want in ["method=GET", "path=/a/b ", "status=200", "limited=false"] {
        assert!(line.contains(want), "{want} not in {line}");
    }
    assert!(!line.contains("q=1"), "{line}");
}

/// Behind a trusted proxy the access log names the client the identity
/// resolved from `X-Forwarded-For`, with or without `X-Forwarded-Proto`;
/// the header of an untrusted peer is ignored.
#[test]
fn the_access_log_names_the_client_behind_a_trusted_proxy() {
    let up = upstream();
    let parts = access_logged(up.addr, 100);
    let config = |trusted: &str| {
        parts
            .yaml()
            .replace(
                "server: {reload_interval: 100ms,",
                "server: {log: {level: warn, format: json}, reload_interval: 100ms,",
            )
            .replace(
                "  domain: gw\n",
                &format!("  domain: gw\n  client_ip: {{trusted_proxies: [{trusted}]}}\n"),
            )
    };
    for (trusted, client) in [("127.0.0.0/8", "203.0.113.7"), ("10.0.0.0/8", "127.0.0.1")] {
        let gw = Gateway::start(bin(), &config(trusted), &[], &[]);
        for proto in ["", "X-Forwarded-Proto: https\r\n"] {
            let mut s = TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let request = format!(
                "GET /api/orders HTTP/1.1\r\nHost: gw\r\nx-user: ann\r\n\
                 X-Forwarded-For: 203.0.113.7\r\n{proto}Connection: close\r\n\r\n"
            );
            s.write_all(request.as_bytes()).unwrap();
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            assert!(
                out.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&out)
            );
        }
        let lines = || -> Vec<serde_json::Value> {
            gw.log()
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|v| v["target"] == "floodgate::access")
                .collect()
        };
        let logged = wait_until(Duration::from_secs(10), || lines().len() >= 2);
        assert!(logged, "no access lines; log:\n{}", gw.log());
        for line in lines() {
            assert_eq!(line["client"], client, "trusting {trusted}: {line}");
        }
    }
}
