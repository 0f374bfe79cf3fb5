//! `floodgate serve` configured over xDS by a real management server
//! (`python/xds_server.py`: Envoy's aggregated discovery service over
//! grpcio, envoyproxy/ratelimit's `RateLimitConfig` generated from the
//! repository's proto files): a push, an update, a bad resource NACKed
//! with its error and the previous configuration kept, an older version
//! refused, the server killed and restarted, mTLS, a start without
//! configuration, a stream that never answers, a resource over the size
//! limit.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::Entry;
use floodgate_server::proto::rls::RateLimitRequest;
use floodgate_server::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit::tls::Pki;
use floodgate_testkit::{Floodgate, free_port, http_request, python, wait_until, workspace_root};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

const WAIT: Duration = Duration::from_secs(20);

/// The management server, its events (one JSON object per line of its
/// output) collected as they come. Killed on drop.
struct XdsServer {
    child: Child,
    stdin: ChildStdin,
    events: Arc<Mutex<Vec<Value>>>,
    port: u16,
}

impl XdsServer {
    /// Starts the server on `port` with `args`, once it listens.
    fn start(port: u16, args: &[&str]) -> XdsServer {
        let proto = workspace_root().join("crates/floodgate-runtime/proto");
        let script = workspace_root().join("crates/floodgate-cli/tests/python/xds_server.py");
        let mut child = Command::new(python())
            .arg(script)
            .arg(proto)
            .arg(port.to_string())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the xDS server");
        let stdin = child.stdin.take().unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let out = BufReader::new(child.stdout.take().unwrap());
        let sink = events.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        let server = XdsServer {
            child,
            stdin,
            events,
            port,
        };
        server.wait_event("listening", |_| true);
        server
    }

    fn url(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn send(&mut self, command: Value) {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sets the state of the world to `configs` at `version`.
    fn push(&mut self, version: u32, configs: Value) {
        self.send(json!({"push": version, "configs": configs}));
    }

    /// The first event named `name` that `pred` accepts, waited for.
    fn wait_event(&self, name: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let mut found = None;
        let seen = wait_until(WAIT, || {
            let events = self.events.lock().unwrap();
            found = events
                .iter()
                .find(|e| e["event"] == name && pred(e))
                .cloned();
            found.is_some()
        });
        assert!(
            seen,
            "no `{name}` event as expected; events: {:?}",
            self.events.lock().unwrap()
        );
        found.unwrap()
    }

    /// How many events named `name` came.
    fn count(&self, name: &str) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["event"] == name)
            .count()
    }

    /// The ACK of `version` (a request carrying it, without error).
    fn wait_ack(&self, version: &str) -> Value {
        self.wait_event("request", |e| {
            e["version"] == version && e["error"].is_null() && e["nonce"] != ""
        })
    }

    /// The NACK of a response (its error) once the client holds `held`.
    fn wait_nack(&self, held: &str, error: &str) -> Value {
        self.wait_event("request", |e| {
            e["version"] == held && e["error"].as_str().is_some_and(|m| m.contains(error))
        })
    }
}

impl Drop for XdsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One domain `xds`, `per_minute` requests a minute per `user`.
fn config(per_minute: u32) -> Value {
    json!([{
        "name": "limits",
        "domain": "xds",
        "descriptors": [{
            "key": "user",
            "rate_limit": {"unit": "MINUTE", "requests_per_unit": per_minute},
        }],
    }])
}

/// The settings of a client of `server`, reconnecting after 100 ms.
fn xds_env(server: &str) -> Vec<(&'static str, String)> {
    vec![
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".into()),
        ("CONFIG_GRPC_XDS_SERVER_URL", server.into()),
        ("CONFIG_GRPC_XDS_NODE_ID", "floodgate-test".into()),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,team=b".into()),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "x-tenant:t1".into(),
        ),
        (
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            "200ms".into(),
        ),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms".into()),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "200ms".into()),
    ]
}

fn spawn(env: &[(&'static str, String)]) -> Floodgate {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Floodgate::spawn(bin(), "", "0", &[], &env, |_| {})
}

/// The overall code of `/json` for `user`, or the status of an error.
fn decide(fg: &Floodgate, user: &str) -> String {
    let body =
        json!({"domain": "xds", "descriptors": [{"entries": [{"key": "user", "value": user}]}]});
    let (status, text) = http_request(
        fg.http,
        "POST",
        "/json",
        Some("application/json"),
        body.to_string().as_bytes(),
    )
    .expect("an answer");
    match status {
        200 | 429 => serde_json::from_str::<Value>(&text).unwrap()["overallCode"]
            .as_str()
            .unwrap()
            .to_owned(),
        other => format!("{other} {text}"),
    }
}

/// How many calls for a new `user` are allowed in a row (up to 10).
fn allowed(fg: &Floodgate, user: &str) -> usize {
    (0..10).take_while(|_| decide(fg, user) == "OK").count()
}

fn ready(fg: &Floodgate) -> (u16, String) {
    http_request(fg.http, "GET", "/ready", None, b"").unwrap_or((0, String::new()))
}

/// A push is applied (the listeners wait for it), its node, metadata and
/// headers as set; an update changes the decisions; a resource that does
/// not compile is NACKed with its error, the previous configuration kept
/// and counted as a failed reload; an older version than the one applied
/// on the stream is refused.
#[test]
fn pushes_update_and_a_bad_resource_is_nacked() {
    let mut server = XdsServer::start(free_port(), &[]);
    let mut fg = spawn(&xds_env(&server.url()));
    let first = server.wait_event("request", |_| true);
    assert_eq!(first["node"], "floodgate-test");
    assert_eq!(first["metadata"], json!({"zone": "a", "team": "b"}));
    assert_eq!(
        first["type_url"],
        "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
    );
    assert_eq!(
        server.wait_event("stream", |_| true)["headers"]["x-tenant"],
        "t1"
    );
    assert_ne!(ready(&fg).0, 200, "ready before any configuration");

    server.push(1, config(2));
    let http = fg.http;
    fg.wait_ready(http);
    server.wait_ack("1");
    assert_eq!(allowed(&fg, "a"), 2);

    server.push(2, config(4));
    server.wait_ack("2");
    assert_eq!(allowed(&fg, "b"), 4);

    let mut bad = config(1);
    bad[0]["descriptors"][0]["rate_limit"]["unit"] = json!("UNKNOWN");
    server.push(3, bad);
    server.wait_nack("2", "invalid rate limit unit");
    assert_eq!(allowed(&fg, "c"), 4, "the previous configuration stays");

    server.push(1, config(1));
    server.wait_nack("2", "older than the version held");
    assert_eq!(allowed(&fg, "d"), 4, "an older version is not applied");

    assert_eq!(
        fg.metric("floodgate_config_reloads_total{result=\"ok\"}"),
        2.0
    );
    assert_eq!(
        fg.metric("floodgate_config_reloads_total{result=\"error\"}"),
        2.0
    );
    assert_eq!(fg.metric("floodgate_config_last_reload_ok"), 0.0);
}

/// The server killed: decisions go on with the last configuration, the
/// client reconnects (with its backoff) and takes what the restarted
/// server pushes.
#[test]
fn a_killed_server_leaves_the_configuration_and_is_reconnected_to() {
    let port = free_port();
    let mut server = XdsServer::start(port, &[]);
    server.push(1, config(2));
    let mut fg = spawn(&xds_env(&server.url()));
    let http = fg.http;
    fg.wait_ready(http);
    drop(server);
    assert!(wait_until(WAIT, || fg
        .metric("floodgate_xds_reconnects_total")
        >= 1.0));
    assert_eq!(allowed(&fg, "a"), 2, "the last configuration stays");
    assert_eq!(ready(&fg).0, 200, "still ready on the last configuration");

    let mut server = XdsServer::start(port, &[]);
    server.push(1, config(3));
    server.wait_ack("1");
    assert!(wait_until(WAIT, || allowed(
        &fg,
        &format!("u{}", fastish())
    ) == 3));
}

/// A distinct user name per call.
fn fastish() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Over mTLS, as Envoy Gateway configures it: the client's certificate,
/// the server verified with the CA.
#[test]
fn configuration_over_mtls() {
    let pki = Pki::new("xds");
    let (srv, client) = (pki.leaf("xds-server"), pki.leaf("xds-client"));
    let ca = pki.ca_file.to_str().unwrap();
    let port = free_port();
    let tls = [
        "--tls",
        srv.cert.to_str().unwrap(),
        srv.key.to_str().unwrap(),
        ca,
    ];
    let mut server = XdsServer::start(port, &tls);
    server.push(1, config(2));
    let mut env = xds_env(&format!("localhost:{port}"));
    env.extend([
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".into()),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            client.cert.display().to_string(),
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
            client.key.display().to_string(),
        ),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ca.to_owned()),
    ]);
    let mut fg = spawn(&env);
    let http = fg.http;
    fg.wait_ready(http);
    server.wait_ack("1");
    assert_eq!(allowed(&fg, "a"), 2);
}

/// `ShouldRateLimit` before any configuration: envoyproxy/ratelimit's
/// answer (`UNKNOWN`, "no rate limit configuration loaded").
fn grpc_error(fg: &Floodgate) -> (tonic::Code, String) {
    block_on(async {
        let mut client = RateLimitServiceClient::connect(format!("http://{}", fg.grpc_addr()))
            .await
            .unwrap();
        let entry = Entry {
            key: "user".into(),
            value: "a".into(),
        };
        let request = RateLimitRequest {
            domain: "xds".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![entry],
                ..Default::default()
            }],
            ..Default::default()
        };
        let status = client.should_rate_limit(request).await.unwrap_err();
        (status.code(), status.message().to_owned())
    })
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(f)
}

/// The gRPC health of the RLS service: 1 SERVING, 2 NOT_SERVING.
fn grpc_health(fg: &Floodgate) -> u8 {
    block_on(crate::serve_grpc_drain::health(fg.grpc))
}

/// `FORCE_START_WITHOUT_INITIAL_CONFIG` with the server down: listening,
/// alive, not ready and every decision refused as envoyproxy/ratelimit
/// refuses it; ready once the server comes up and pushes.
#[test]
fn force_start_with_the_server_down() {
    let port = free_port();
    let mut env = xds_env(&format!("127.0.0.1:{port}"));
    env.push(("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".into()));
    let fg = spawn(&env);
    assert!(wait_until(WAIT, || http_request(
        fg.http,
        "GET",
        "/healthcheck",
        None,
        b""
    )
    .is_some_and(|r| r.0 == 200)));
    assert_eq!(ready(&fg), (503, "no configuration loaded\n".to_owned()));
    assert_eq!(
        grpc_health(&fg),
        2,
        "gRPC health serving without a configuration"
    );
    assert_eq!(
        grpc_error(&fg),
        (
            tonic::Code::Unknown,
            "no rate limit configuration loaded".to_owned()
        )
    );
    assert!(decide(&fg, "a").starts_with("400 "), "{}", decide(&fg, "a"));

    let mut server = XdsServer::start(port, &[]);
    server.push(1, config(2));
    assert!(wait_until(WAIT, || ready(&fg).0 == 200), "{}", fg.log());
    assert!(wait_until(WAIT, || grpc_health(&fg) == 1));
    assert_eq!(allowed(&fg, "a"), 2);
}

/// A stream that never answers: the listeners (forced up) serve, not
/// ready; a SIGTERM ends the process at once, with or without the
/// listeners up.
#[test]
fn a_stream_that_never_answers_blocks_neither_decisions_nor_shutdown() {
    let server = XdsServer::start(free_port(), &["--silent"]);
    let mut forced = xds_env(&server.url());
    forced.push(("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".into()));
    for env in [forced, xds_env(&server.url())] {
        let streams = server.count("stream");
        let mut fg = spawn(&env);
        assert!(wait_until(WAIT, || server.count("stream") > streams));
        fg.signal("TERM");
        let exited = fg.wait_exit(Duration::from_secs(10));
        assert!(
            exited.is_some(),
            "a waiting stream held the shutdown: {}",
            fg.log()
        );
    }
}

/// A resource over the message size limit ends the stream (the client
/// reconnects), the running configuration kept.
#[test]
fn a_huge_resource_is_refused_and_the_configuration_kept() {
    let mut server = XdsServer::start(free_port(), &[]);
    server.push(1, config(2));
    let mut env = xds_env(&server.url());
    env.push(("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "65536".into()));
    let mut fg = spawn(&env);
    let http = fg.http;
    fg.wait_ready(http);
    server.send(json!({"push_huge": 2, "bytes": 100_000}));
    assert!(
        wait_until(WAIT, || server.count("stream") >= 2),
        "{}",
        fg.log()
    );
    assert!(
        fg.log().contains("message length too large") || fg.log().contains("too large"),
        "{}",
        fg.log()
    );
    assert_eq!(allowed(&fg, "a"), 2);
    assert_eq!(ready(&fg).0, 200);
}

/// With files, `FORCE_START_WITHOUT_INITIAL_CONFIG` starts on a file that
/// does not load: not ready, decisions refused, until the file is fixed
/// (it is watched); without it, such a file stops the start.
#[test]
fn force_start_on_a_bad_file_waits_for_a_good_one() {
    let bad = "domain: files\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n";
    let env = [("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")];
    let fg = Floodgate::spawn(bin(), bad, "100ms", &[], &env, |_| {});
    assert!(wait_until(WAIT, || ready(&fg).0 == 503), "{}", fg.log());
    assert_eq!(ready(&fg).1, "no configuration loaded\n");
    assert_eq!(grpc_error(&fg).0, tonic::Code::Unknown);
    fg.write_config(&bad.replace("fortnight", "minute"));
    assert!(wait_until(WAIT, || ready(&fg).0 == 200), "{}", fg.log());
    let body =
        json!({"domain": "files", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}]});
    let call = || {
        http_request(
            fg.http,
            "POST",
            "/json",
            Some("application/json"),
            body.to_string().as_bytes(),
        )
        .unwrap()
        .0
    };
    assert_eq!((call(), call()), (200, 429));

    let mut refused = Floodgate::spawn(bin(), bad, "100ms", &[], &[], |_| {});
    assert!(refused.wait_exit(WAIT).is_some_and(|s| !s.success()));
}

/// The gateway reads its own section from files: over xDS it refuses to
/// start, saying why; `config check` checks the files whatever source the
/// environment names.
#[test]
fn the_gateway_and_config_check_keep_to_files() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("floodgate.yaml");
    std::fs::write(&file, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n").unwrap();
    let run = |args: &[&str]| {
        Command::new(bin())
            .args(args)
            .arg("--config")
            .arg(&file)
            .env("CONFIG_TYPE", "GRPC_XDS_SOTW")
            .env("CONFIG_GRPC_XDS_SERVER_URL", "127.0.0.1:1")
            .output()
            .unwrap()
    };
    let gateway = run(&["gateway", "--upstream", "http://127.0.0.1:1"]);
    let said = String::from_utf8_lossy(&gateway.stderr);
    assert!(
        !gateway.status.success() && said.contains("reads its `gateway:` section from files"),
        "{said}"
    );
    let check = run(&["config", "check"]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// A resource of another type, and one whose bytes do not decode, are
/// NACKed with what is wrong; the configuration in force stays.
#[test]
fn malformed_resources_are_nacked() {
    let mut server = XdsServer::start(free_port(), &[]);
    server.push(1, config(2));
    let mut fg = spawn(&xds_env(&server.url()));
    let http = fg.http;
    fg.wait_ready(http);
    server.wait_ack("1");
    let other = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    server.send(json!({"push_raw": 2, "type_url": other, "value_hex": ""}));
    server.wait_nack(
        "1",
        "resource of type `type.googleapis.com/envoy.config.cluster.v3.Cluster`",
    );
    let ours = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";
    server.send(json!({"push_raw": 3, "type_url": ours, "value_hex": "0aff"}));
    server.wait_nack("1", "resource cannot be decoded");
    assert_eq!(allowed(&fg, "a"), 2);
    assert_eq!(
        fg.metric("floodgate_config_reloads_total{result=\"error\"}"),
        2.0
    );
}
