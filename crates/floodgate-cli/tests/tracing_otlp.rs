//! OpenTelemetry tracing end to end: `floodgate serve` and `floodgate
//! gateway` export their spans to a real OTLP receiver (Python, grpcio and
//! opentelemetry-proto: `python/otlp_receiver.py`), over gRPC and over
//! HTTP, continuing the caller's `traceparent`; a collector down or stuck
//! never delays or fails a decision, and its queue stays bounded.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use floodgate_testkit::grpc::{grpc_status, rls_request};
use floodgate_testkit::tls::{Leaf, Pki};
use floodgate_testkit::{
    Floodgate, Gateway, free_port, h2_connect, python, wait_until, workspace_root,
};
use http_body_util::Full;
use serde_json::Value;

use crate::serve_support::rls::user_frame;

const CONFIG: &str = "domains:
  - domain: d
    descriptors:
      - key: user
        rate_limit: {name: per-user, requests_per_unit: 1000, unit: hour}
";

/// The caller's trace and span, as a `traceparent` names them (sampled).
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn traceparent(trace: &str) -> String {
    format!("00-{trace}-{PARENT}-01")
}

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// The receiver process and the spans it printed.
struct Receiver {
    child: Child,
    grpc: u16,
    http: u16,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    /// Starts the receiver: `answer` answers exports, `hang` never does.
    fn start(mode: &str) -> Receiver {
        Receiver::start_with(&[mode])
    }

    /// Starts an answering receiver over TLS with `server`'s certificate,
    /// requiring a client certificate from `client_ca`.
    fn start_tls(server: &Leaf, client_ca: &Path) -> Receiver {
        let path = |p: &Path| p.to_str().unwrap().to_owned();
        let (cert, key, ca) = (path(&server.cert), path(&server.key), path(client_ca));
        Receiver::start_with(&["answer", &cert, &key, &ca])
    }

    fn start_with(args: &[&str]) -> Receiver {
        let script = workspace_root().join("crates/floodgate-cli/tests/python/otlp_receiver.py");
        let mut child = Command::new(python())
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("run the OTLP receiver");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready = lines.next().expect("READY").expect("a line");
        let ports: Vec<u16> = ready
            .split(' ')
            .skip(1)
            .map(|p| p.parse().unwrap())
            .collect();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let seen = spans.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Some(json) = line.strip_prefix("SPAN ") {
                    seen.lock()
                        .unwrap()
                        .push(serde_json::from_str(json).unwrap());
                }
            }
        });
        Receiver {
            child,
            grpc: ports[0],
            http: ports[1],
            spans,
        }
    }

    /// The first span received named `name` in trace `trace`, waited for.
    fn span(&self, name: &str, trace: &str) -> Value {
        let found = self.span_within(name, trace, Duration::from_secs(20));
        found.unwrap_or_else(|| {
            panic!(
                "no span {name} of trace {trace}; received: {:?}",
                self.spans.lock().unwrap()
            )
        })
    }

    /// The first span received named `name` in trace `trace`, if one comes
    /// `within`.
    fn span_within(&self, name: &str, trace: &str, within: Duration) -> Option<Value> {
        let find = || {
            let spans = self.spans.lock().unwrap();
            spans
                .iter()
                .find(|s| s["name"] == name && s["trace_id"] == trace)
                .cloned()
        };
        wait_until(within, || find().is_some());
        find()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Tracing on, exporting to `endpoint` over `protocol`, with
/// envoyproxy/ratelimit's variables where it has one.
fn tracing_env(protocol: &'static str, endpoint: String) -> Vec<(&'static str, String)> {
    vec![
        ("TRACING_ENABLED", "true".into()),
        ("TRACING_EXPORTER_PROTOCOL", protocol.into()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("TRACING_SERVICE_NAME", "ratelimit".into()),
        ("TRACING_SERVICE_NAMESPACE", "edge".into()),
        ("TRACING_SERVICE_INSTANCE_ID", "pod-1".into()),
        ("FLOODGATE_TRACING_EXPORT_INTERVAL", "50ms".into()),
    ]
}

fn start(env: &[(&'static str, String)]) -> Floodgate {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Floodgate::start(bin(), CONFIG, &[], &env)
}

/// One `ShouldRateLimit` call of `user` with `headers`: its grpc-status.
async fn rls(port: u16, user: &str, headers: &[(&'static str, String)]) -> String {
    let mut h2 = h2_connect::<Full<Bytes>>(port).await;
    let mut req = rls_request(port, Full::new(user_frame("d", user)));
    for (name, value) in headers {
        req.headers_mut()
            .insert(*name, value.parse().expect("a header value"));
    }
    let res = h2.send_request(req).await.expect("an answer");
    grpc_status(res).await
}

/// A `POST` of `body` to `path` of the service's HTTP listener with a
/// `traceparent` of `trace`: its status.
async fn post(server: &Floodgate, path: &str, body: &str, trace: &str) -> u16 {
    let url = format!("http://127.0.0.1:{}{path}", server.http);
    let res = reqwest::Client::new()
        .post(url)
        .header("traceparent", traceparent(trace))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("an answer");
    res.status().as_u16()
}

/// `span` is a server span, child of the caller's, with the decision's
/// attributes (`rules`: the rule names, when the answer names them) and
/// the resource of the test's variables; no key's value.
fn assert_server_span(span: &Value, outcome: &str, rules: Option<&str>) {
    let a = &span["attributes"];
    assert_eq!(
        span["parent"], PARENT,
        "the caller's span is the parent: {span}"
    );
    assert_eq!(span["kind"], 2, "a server span: {span}");
    assert_eq!(a["domain"], "d", "{span}");
    assert_eq!(a["outcome"], outcome, "{span}");
    assert_eq!(a["store"], "memory", "{span}");
    if let Some(rules) = rules {
        assert_eq!(a["rules"], rules, "{span}");
    }
    let r = &span["resource"];
    assert_eq!(r["service.name"], "ratelimit", "{span}");
    assert_eq!(r["service.namespace"], "edge", "{span}");
    assert_eq!(r["service.instance.id"], "pod-1", "{span}");
    let text = span.to_string();
    assert!(!text.contains("alice"), "no key value in a span: {text}");
}

/// A `ShouldRateLimit` call carrying a `traceparent` is exported over
/// gRPC as a server span of that trace, child of the caller's span, with
/// the decision's attributes and the resource envoyproxy/ratelimit's
/// variables name; `/json` too.
#[tokio::test(flavor = "multi_thread")]
async fn rls_and_json_calls_continue_their_callers_trace_over_grpc() {
    let receiver = Receiver::start("answer");
    let server = start(&tracing_env(
        "grpc",
        format!("http://127.0.0.1:{}", receiver.grpc),
    ));
    let status = rls(server.grpc, "alice", &[("traceparent", traceparent(TRACE))]).await;
    assert_eq!(status, "0");
    assert_server_span(
        &receiver.span("ShouldRateLimit", TRACE),
        "allowed",
        Some("per-user"),
    );

    let json_trace = "0af7651916cd43dd8448eb211c80319c";
    let body = r#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}"#;
    assert_eq!(post(&server, "/json", body, json_trace).await, 200);
    assert_server_span(
        &receiver.span("POST /json", json_trace),
        "allowed",
        Some("per-user"),
    );
}

/// Over OTLP/HTTP (`POST /v1/traces`), `/v1/check`'s span arrives too.
#[tokio::test(flavor = "multi_thread")]
async fn spans_are_exported_over_http() {
    let receiver = Receiver::start("answer");
    let server = start(&tracing_env(
        "http",
        format!("http://127.0.0.1:{}", receiver.http),
    ));
    let trace = "11111111111111112222222222222222";
    let body = r#"{"domain":"d","descriptors":[[{"key":"user","value":"alice"}]]}"#;
    assert_eq!(post(&server, "/v1/check", body, trace).await, 200);
    // `/v1/check`'s statuses carry no `current_limit`, so no rule names.
    assert_server_span(&receiver.span("POST /v1/check", trace), "allowed", None);
    let status = rls(server.grpc, "bob", &[("traceparent", traceparent(TRACE))]).await;
    assert_eq!(status, "0");
    receiver.span("ShouldRateLimit", TRACE);
}

/// With a sampling ratio of 0, a call that starts its own trace exports
/// nothing, while a caller's sampled trace is still followed: once the
/// latter's span arrives, it is the only one.
#[tokio::test(flavor = "multi_thread")]
async fn a_ratio_of_zero_samples_only_the_callers_sampled_traces() {
    let receiver = Receiver::start("answer");
    let mut env = tracing_env("grpc", format!("http://127.0.0.1:{}", receiver.grpc));
    env.push(("TRACING_SAMPLING_RATE", "0".into()));
    let server = start(&env);
    for _ in 0..20 {
        assert_eq!(rls(server.grpc, "carol", &[]).await, "0");
    }
    // OTLP does not retry an export that fails (a machine loaded enough
    // to time one out loses its spans): the sampled call is sent again
    // until its span arrives.
    let mut received = false;
    for _ in 0..5 {
        let traced = [("traceparent", traceparent(TRACE))];
        assert_eq!(rls(server.grpc, "carol", &traced).await, "0");
        let within = Duration::from_secs(5);
        if receiver
            .span_within("ShouldRateLimit", TRACE, within)
            .is_some()
        {
            received = true;
            break;
        }
    }
    let spans = receiver.spans.lock().unwrap();
    assert!(
        received,
        "no span ShouldRateLimit of trace {TRACE}; received: {spans:?}"
    );
    assert!(spans.iter().all(|s| s["trace_id"] == TRACE), "{spans:?}");
}

/// B3, as Envoy's Zipkin tracer sends it, names the caller's trace too:
/// the single `b3` header and the `x-b3-*` headers, sampled or not (ratio
/// 0: only a caller's sampled trace is exported); given with a
/// `traceparent`, B3 wins, as in envoyproxy/ratelimit.
#[tokio::test(flavor = "multi_thread")]
async fn b3_headers_name_the_callers_trace() {
    let receiver = Receiver::start("answer");
    let mut env = tracing_env("grpc", format!("http://127.0.0.1:{}", receiver.grpc));
    env.push(("TRACING_SAMPLING_RATE", "0".into()));
    let server = start(&env);
    let unsampled = "cccccccccccccccc1111111111111111";
    let not_kept = [("b3", format!("{unsampled}-{PARENT}-0"))];
    assert_eq!(rls(server.grpc, "erin", &not_kept).await, "0");

    let (single, multi, both, w3c) = (
        "aaaaaaaaaaaaaaaa1111111111111111",
        "bbbbbbbbbbbbbbbb1111111111111111",
        "dddddddddddddddd1111111111111111",
        "eeeeeeeeeeeeeeee1111111111111111",
    );
    let calls = [
        vec![("b3", format!("{single}-{PARENT}-1"))],
        vec![
            ("x-b3-traceid", multi.to_owned()),
            ("x-b3-spanid", PARENT.to_owned()),
            ("x-b3-sampled", "1".to_owned()),
        ],
        vec![
            ("traceparent", traceparent(w3c)),
            ("b3", format!("{both}-{PARENT}-1")),
        ],
    ];
    let arrived = |trace| receiver.span_within("ShouldRateLimit", trace, Duration::from_secs(5));
    // OTLP does not retry a lost export: sent again until the spans arrive.
    for _ in 0..5 {
        for headers in &calls {
            assert_eq!(rls(server.grpc, "erin", headers).await, "0");
        }
        if [single, multi, both].iter().all(|t| arrived(t).is_some()) {
            break;
        }
    }
    for trace in [single, multi, both] {
        let span = receiver.span("ShouldRateLimit", trace);
        assert_eq!(span["parent"], PARENT, "{span}");
    }
    let spans = receiver.spans.lock().unwrap();
    let traces: Vec<&Value> = spans.iter().map(|s| &s["trace_id"]).collect();
    assert!(
        !traces.iter().any(|t| *t == unsampled || *t == w3c),
        "an unsampled B3 trace, or the traceparent B3 overrides: {traces:?}"
    );
}

/// An `https://` collector requiring a client certificate, over gRPC and
/// over HTTP, reached with the OpenTelemetry SDK's variables: the CA, the
/// client certificate and key, and headers (a percent-encoded value) that
/// every export carries.
#[tokio::test(flavor = "multi_thread")]
async fn spans_reach_a_collector_over_mtls_with_its_headers() {
    let pki = Pki::new("otlp");
    let (collector, client) = (pki.leaf("collector"), pki.leaf("client"));
    let receiver = Receiver::start_tls(&collector, &pki.ca_file);
    let file = |p: &Path| p.display().to_string();
    for (protocol, port, trace) in [
        ("grpc", receiver.grpc, "12121212121212121212121212121212"),
        ("http", receiver.http, "34343434343434343434343434343434"),
    ] {
        let mut env = tracing_env(protocol, format!("https://localhost:{port}"));
        env.extend([
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", file(&pki.ca_file)),
            (
                "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
                file(&client.cert),
            ),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", file(&client.key)),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-api-key=s3cret%20key".into(),
            ),
        ]);
        let server = start(&env);
        let arrived = || receiver.span_within("ShouldRateLimit", trace, Duration::from_secs(5));
        for _ in 0..5 {
            let traced = [("traceparent", traceparent(trace))];
            assert_eq!(rls(server.grpc, "ivy", &traced).await, "0");
            if arrived().is_some() {
                break;
            }
        }
        let span = receiver.span("ShouldRateLimit", trace);
        assert_eq!(span["api_key"], "s3cret key", "{protocol}: {span}");
    }
}

/// A client certificate without its key, an unreadable CA, a header that
/// is not one: refused at startup, naming what is wrong.
#[test]
fn bad_collector_settings_are_refused_at_startup() {
    let pki = Pki::new("otlp-bad");
    let client = pki.leaf("client");
    let cert = client.cert.display().to_string();
    let cases: [(&[(&str, &str)], &str); 3] = [
        (
            &[("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert)],
            "needs both",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem")],
            "/nonexistent/ca.pem",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_HEADERS", "bad name=1")],
            "not a header name",
        ),
    ];
    for (vars, expected) in cases {
        let out = Command::new(bin())
            .args(["serve", "--config"])
            .arg(workspace_root().join("examples/floodgate.yaml"))
            .env("TRACING_ENABLED", "true")
            .env("TRACING_EXPORTER_PROTOCOL", "grpc")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://localhost:4317")
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{vars:?} accepted: {err}");
        assert!(err.contains(expected), "{vars:?}: {err}");
    }
}

/// Decisions answered while the collector is unreachable, then while it
/// accepts exports and never answers them: each within a bound generous
/// for a loaded machine, none failed; the spans beyond the queue are
/// dropped and counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_collector_down_or_stuck_never_delays_a_decision() {
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let down = start(&tracing_env("grpc", nobody));
    decide_promptly(&down, 200).await;

    let stuck = Receiver::start("hang");
    for (protocol, port) in [("grpc", stuck.grpc), ("http", stuck.http)] {
        let mut env = tracing_env(protocol, format!("http://127.0.0.1:{port}"));
        env.push(("FLOODGATE_TRACING_QUEUE_SIZE", "16".into()));
        let server = start(&env);
        decide_promptly(&server, 300).await;
        let dropped = || server.metric("floodgate_tracing_spans_dropped_total") > 0.0;
        assert!(
            wait_until(Duration::from_secs(10), dropped),
            "{protocol}: spans beyond the queue are dropped and counted"
        );
    }
}

/// `n` calls, each with a sampled `traceparent`, each answered OK within
/// two seconds.
async fn decide_promptly(server: &Floodgate, n: usize) {
    for i in 0..n {
        let started = Instant::now();
        let trace = format!("{:032x}", i + 1);
        let status = rls(server.grpc, "dave", &[("traceparent", traceparent(&trace))]).await;
        let took = started.elapsed();
        assert_eq!(status, "0", "call {i}");
        assert!(took < Duration::from_secs(2), "call {i} took {took:?}");
    }
}

/// The gateway's requests are spans of their client's trace, with the
/// answer's status.
#[test]
fn gateway_requests_continue_their_clients_trace() {
    let receiver = Receiver::start("answer");
    let up = crate::gateway_lifecycle::upstream();
    let yaml = format!(
        "gateway:\n  upstream: http://{}\nhttp:\n  domain: gw\n  descriptors:\n    - [{{header: {{name: x-user, key: user}}}}]\n\
         domains:\n  - domain: gw\n    descriptors:\n      - key: user\n        rate_limit: {{requests: 100, per: 1h}}\n",
        up.addr
    );
    let env = tracing_env("http", format!("http://127.0.0.1:{}", receiver.http));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let gw = Gateway::start(bin(), &yaml, &[], &env);
    let trace = "33333333333333334444444444444444";
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .args([
            "-H",
            &format!("traceparent: {}", traceparent(trace)),
            "-H",
            "x-user: erin",
        ])
        .arg(format!("http://{}/", gw.addr()))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    let span = receiver.span("gateway request", trace);
    assert_eq!(span["parent"], PARENT, "{span}");
    assert_eq!(
        span["attributes"]["http.response.status_code"], 200,
        "{span}"
    );
    assert_eq!(span["attributes"]["outcome"], "forwarded", "{span}");
}

/// On the Redis store, a decision's script call is a client span, child
/// of the call it decides for; the request's span names the store.
#[tokio::test(flavor = "multi_thread")]
async fn a_redis_call_is_a_child_of_the_decision() {
    let redis = floodgate_testkit::Redis::start();
    let receiver = Receiver::start("answer");
    let env = tracing_env("grpc", format!("http://127.0.0.1:{}", receiver.grpc));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = ["--redis-url", &redis.addr()];
    let server = Floodgate::start(bin(), CONFIG, &args, &env);
    assert_eq!(
        rls(server.grpc, "frank", &[("traceparent", traceparent(TRACE))]).await,
        "0"
    );
    let call = receiver.span("ShouldRateLimit", TRACE);
    assert_eq!(call["attributes"]["store"], "redis", "{call}");
    assert_eq!(call["attributes"]["sync_mode"], "exact", "{call}");
    let script = receiver.span("redis EVALSHA", TRACE);
    assert_eq!(script["parent"], call["span_id"], "{script}");
    assert_eq!(script["kind"], 3, "a client span: {script}");
}

/// The spans still waiting at SIGTERM are exported before the process
/// exits, within the shutdown grace, however far the next export was.
#[tokio::test(flavor = "multi_thread")]
async fn shutdown_exports_the_spans_still_waiting() {
    let receiver = Receiver::start("answer");
    let mut env = tracing_env("grpc", format!("http://127.0.0.1:{}", receiver.grpc));
    env.push(("FLOODGATE_TRACING_EXPORT_INTERVAL", "1h".into()));
    env.push(("FLOODGATE_SHUTDOWN_GRACE", "5s".into()));
    let mut server = start(&env);
    assert_eq!(
        rls(server.grpc, "gina", &[("traceparent", traceparent(TRACE))]).await,
        "0"
    );
    server.signal("TERM");
    let exited = server.wait_exit(Duration::from_secs(20));
    assert!(exited.is_some_and(|s| s.success()), "{}", server.log());
    receiver.span("ShouldRateLimit", TRACE);
}
