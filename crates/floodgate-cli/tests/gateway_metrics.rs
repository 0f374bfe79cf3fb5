//! The gateway's request metrics against counted runs: responses by
//! status class and their time — requests the upstream answers (2xx), the
//! limiter denies (429: 4xx) and an unreachable upstream fails (502: 5xx),
//! each counted once in its class and in the duration histogram, the
//! upstream's time for each exchange that brought a response — and
//! requests by route, outcome and status class, with the upstream's
//! failures by kind, from a real misbehaving upstream.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use floodgate_testkit::prometheus::{Sample, scrape};
use floodgate_testkit::{Gateway, Upstream, free_port, http_request, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// A gateway in front of `upstream`, two requests an hour on `/api/`.
fn config(upstream: &str) -> String {
    format!(
        "gateway:\n  upstream: http://{upstream}\nhttp:\n  domain: gw\n  routes: [\"/api/{{*rest}}\"]\n  descriptors:\n    - [route]\ndomains:\n  - domain: gw\n    descriptors:\n      - key: route\n        rate_limit: {{requests: 2, per: 1h}}\n"
    )
}

/// `n` GETs of `path`: their statuses.
fn send(gw: &Gateway, path: &str, n: usize) -> Vec<u16> {
    (0..n)
        .map(|_| http_request(gw.port, "GET", path, None, b"").unwrap().0)
        .collect()
}

fn value(samples: &[Sample], name: &str, status: Option<&str>) -> f64 {
    samples
        .iter()
        .find(|s| {
            s.name == name && status.is_none_or(|c| s.labels.get("status").is_some_and(|v| v == c))
        })
        .map_or(0.0, |s| s.value)
}

/// The counts of each class, the request histogram's count and the
/// upstream one's.
fn counted(gw: &Gateway) -> ([f64; 3], f64, f64) {
    let s = scrape(gw.admin, "/metrics");
    let class = |c| value(&s, "floodgate_gateway_responses_total", Some(c));
    (
        [class("2xx"), class("4xx"), class("5xx")],
        value(&s, "floodgate_gateway_request_duration_seconds_count", None),
        value(
            &s,
            "floodgate_gateway_upstream_duration_seconds_count",
            None,
        ),
    )
}

#[test]
fn responses_are_counted_by_status_class_and_timed() {
    let up = crate::gateway_lifecycle::upstream();
    let gw = Gateway::start(bin(), &config(&up.addr.to_string()), &[], &[]);
    let statuses = [send(&gw, "/api/a", 5), send(&gw, "/other", 2)].concat();
    assert_eq!(statuses, [200, 200, 429, 429, 429, 200, 200]);
    // The four admitted went upstream, each timed there.
    assert_eq!(counted(&gw), ([4.0, 3.0, 0.0], 7.0, 4.0));
}

#[test]
fn an_unreachable_upstream_counts_as_5xx() {
    let closed = format!("127.0.0.1:{}", free_port());
    let gw = Gateway::start(bin(), &config(&closed), &[], &[]);
    assert_eq!(send(&gw, "/other", 3), [502, 502, 502]);
    // No exchange brought a response head: none timed upstream.
    assert_eq!(counted(&gw), ([0.0, 0.0, 3.0], 3.0, 0.0));
    let s = scrape(gw.admin, "/metrics");
    let refused = [("kind", "connect_refused")];
    assert_eq!(
        sum(&s, "floodgate_gateway_upstream_errors_total", &refused),
        3.0
    );
}

/// The value of the series of `name` with `labels` (0 when absent).
fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v))
        })
        .map(|s| s.value)
        .sum()
}

/// An upstream that answers 200 (closing the connection after it), except
/// to a path holding `/reset` (the connection reset on reading the request
/// head), `/close` (closed, without a response), `/garbage` (not an HTTP
/// response) or `/slow` (no response ever).
async fn misbehave(listener: tokio::net::TcpListener) {
    while let Ok((mut conn, _)) = listener.accept().await {
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
            let asks = |word: &[u8]| line.windows(word.len()).any(|w| w == word);
            let answer: &[u8] = if asks(b"/reset") {
                // A zero linger: closing sends RST, not FIN.
                let _ = socket2::SockRef::from(&conn).set_linger(Some(Duration::ZERO));
                return;
            } else if asks(b"/close") {
                b""
            } else if asks(b"/garbage") {
                b"garbage\r\n\r\n"
            } else if asks(b"/slow") {
                // Never answers: held until the gateway gives up.
                return std::future::pending().await;
            } else {
                b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n"
            };
            let _ = conn.write_all(answer).await;
            let _ = conn.shutdown().await;
        });
    }
}

/// Two routes of two requests an hour each; other paths unlimited.
fn routed_config(upstream: &str) -> String {
    format!(
        "gateway:\n  upstream: http://{upstream}\nhttp:\n  domain: gw\n  routes: [\"/api/{{*rest}}\", \"/users/{{id}}\"]\n  descriptors:\n    - [route]\ndomains:\n  - domain: gw\n    descriptors:\n      - key: route\n        rate_limit: {{requests: 2, per: 1h}}\n"
    )
}

#[test]
fn requests_are_counted_by_route_outcome_and_upstream_failure() {
    let up = Upstream::start(misbehave);
    let gw = Gateway::start(bin(), &routed_config(&up.addr.to_string()), &[], &[]);
    let statuses = [
        send(&gw, "/api/a", 3),
        send(&gw, "/users/1", 1),
        send(&gw, "/users/reset", 1),
        send(&gw, "/users/2", 1),
        send(&gw, "/other", 2),
        send(&gw, "/other/reset", 1),
        send(&gw, "/bad%zz", 1),
    ];
    let want: [&[u16]; 7] = [
        &[200, 200, 429],
        &[200],
        &[502],
        &[429],
        &[200, 200],
        &[502],
        &[400],
    ];
    assert_eq!(statuses, want);
    // Nothing listens on the upstream's port any more: refused.
    drop(up);
    assert_eq!(send(&gw, "/other", 2), [502, 502]);
    let s = scrape(gw.admin, "/metrics");
    let requests = |route, outcome, status| {
        let labels = [("route", route), ("outcome", outcome), ("status", status)];
        sum(&s, "floodgate_gateway_requests_total", &labels)
    };
    let counts = [
        ("/api/{*rest}", "allowed", "2xx", 2.0),
        ("/api/{*rest}", "denied", "4xx", 1.0),
        ("/users/{id}", "allowed", "2xx", 1.0),
        ("/users/{id}", "allowed", "5xx", 1.0),
        ("/users/{id}", "denied", "4xx", 1.0),
        ("none", "allowed", "2xx", 2.0),
        ("none", "allowed", "5xx", 3.0),
        ("none", "error", "4xx", 1.0),
    ];
    for (route, outcome, status, n) in counts {
        assert_eq!(
            requests(route, outcome, status),
            n,
            "{route} {outcome} {status}"
        );
    }
    // Nothing else: every request counted once.
    assert_eq!(sum(&s, "floodgate_gateway_requests_total", &[]), 12.0);
    let kinds = |kind| {
        sum(
            &s,
            "floodgate_gateway_upstream_errors_total",
            &[("kind", kind)],
        )
    };
    assert_eq!((kinds("reset"), kinds("connect_refused")), (2.0, 2.0));
    assert_eq!(sum(&s, "floodgate_gateway_upstream_errors_total", &[]), 4.0);
}

/// The gateway's upstream failures of each kind.
fn failures(gw: &Gateway) -> BTreeMap<String, f64> {
    let s = scrape(gw.admin, "/metrics");
    let of_kind = s
        .iter()
        .filter(|x| x.name == "floodgate_gateway_upstream_errors_total" && x.value > 0.0);
    of_kind
        .map(|x| (x.labels["kind"].clone(), x.value))
        .collect()
}

#[test]
fn each_kind_of_upstream_failure_is_counted() {
    let up = Upstream::start(misbehave);
    let args = ["--upstream-response-timeout", "300ms"];
    let gw = Gateway::start(bin(), &config(&up.addr.to_string()), &args, &[]);
    let statuses = [
        send(&gw, "/close", 1),
        send(&gw, "/garbage", 2),
        send(&gw, "/slow", 1),
    ];
    assert_eq!(statuses, [vec![502], vec![502, 502], vec![504]]);
    let want = [
        ("closed", 1.0),
        ("protocol", 2.0),
        ("response_timeout", 1.0),
    ];
    assert_eq!(failures(&gw), want.map(|(k, n)| (k.to_owned(), n)).into());
    // An `https://` upstream that speaks plain HTTP fails the handshake.
    let plain = crate::gateway_lifecycle::upstream();
    let tls = config(&plain.addr.to_string()).replace("http://", "https://");
    let gw = Gateway::start(bin(), &tls, &[], &[]);
    assert_eq!(send(&gw, "/other", 1), [502]);
    assert_eq!(failures(&gw), [("tls".to_owned(), 1.0)].into());
}

/// A gateway of `routes` (a YAML list), limiting nothing it is sent here.
fn reloadable_config(upstream: &str, routes: &str) -> String {
    format!(
        "gateway:\n  upstream: http://{upstream}\nserver: {{reload_interval: 100ms}}\nhttp:\n  domain: gw\n  routes: {routes}\n  descriptors:\n    - [route]\ndomains:\n  - domain: gw\n    descriptors:\n      - key: route\n        rate_limit: {{requests: 100, per: 1h}}\n"
    )
}

#[test]
fn a_reload_counts_under_the_new_routes() {
    let up = crate::gateway_lifecycle::upstream();
    let addr = up.addr.to_string();
    let gw = Gateway::start(bin(), &reloadable_config(&addr, r#"["/a"]"#), &[], &[]);
    assert_eq!([send(&gw, "/a", 1), send(&gw, "/b/1", 1)], [[200], [200]]);
    gw.write_config(&reloadable_config(&addr, r#"["/a", "/b/{id}"]"#));
    // The new route's counters are registered with its section, at 0.
    let registered = floodgate_testkit::wait_until(Duration::from_secs(10), || {
        let s = scrape(gw.admin, "/metrics");
        s.iter()
            .any(|x| x.labels.get("route").is_some_and(|r| r == "/b/{id}"))
    });
    assert!(registered, "{}", gw.log());
    assert_eq!([send(&gw, "/a", 1), send(&gw, "/b/1", 1)], [[200], [200]]);
    let s = scrape(gw.admin, "/metrics");
    let forwarded = |route| {
        let labels = [("route", route), ("outcome", "allowed"), ("status", "2xx")];
        sum(&s, "floodgate_gateway_requests_total", &labels)
    };
    // `/a` counts on across the reload; `/b/1` was `none` before it.
    assert_eq!(
        (forwarded("/a"), forwarded("/b/{id}"), forwarded("none")),
        (2.0, 1.0, 1.0)
    );
}

/// A gateway whose adaptive limit is pinned at 2: the sheddable class
/// (`x-priority: low`) gets one place, the default class both.
fn adaptive_config(upstream: &str) -> String {
    format!(
        "gateway:\n  upstream: http://{upstream}\nhttp:\n  domain: gw\n  descriptors:\n    - [method]\n  layer:\n    shedding:\n      low_priority: {{header: {{name: x-priority, values: [low]}}}}\n      adaptive: {{min: 2, max: 2, initial: 2}}\ndomains:\n  - domain: gw\n    descriptors:\n      - key: method\n        rate_limit: {{requests: 1000, per: 1h}}\n"
    )
}

/// GET `path` through curl with `header`: its status.
fn curl(port: u16, path: &str, header: &str) -> u16 {
    let out = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", header])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
}

/// The adaptive limit is on `/metrics`, and what it sheds is counted by
/// class and, per route, as `shed`: with one request held at the
/// upstream, a sheddable request is shed while a default one passes.
#[test]
fn the_adaptive_limit_and_its_sheds_by_class_are_on_metrics() {
    let upstream = Upstream::start(misbehave);
    let gw = Gateway::start(
        bin(),
        &adaptive_config(&upstream.addr.to_string()),
        &[],
        &[],
    );
    let samples = scrape(gw.admin, "/metrics");
    assert_eq!(sum(&samples, "floodgate_http_adaptive_limit", &[]), 2.0);
    let mut held = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "120"])
        .arg(format!("http://127.0.0.1:{}/slow", gw.port))
        .spawn()
        .expect("curl");
    let mut shed = 0;
    let held_in_flight = wait_until(Duration::from_secs(30), || {
        let status = curl(gw.port, "/x", "x-priority: low");
        shed += usize::from(status == 503);
        status == 503
    });
    assert!(held_in_flight, "a sheddable request was never shed");
    assert_eq!(curl(gw.port, "/x", "x-priority: normal"), 200);
    let samples = scrape(gw.admin, "/metrics");
    let by_class = |c| sum(&samples, "floodgate_http_shed_total", &[("class", c)]);
    assert_eq!(by_class("sheddable"), shed as f64);
    assert_eq!(by_class("default"), 0.0);
    let shed_requests = [("outcome", "shed"), ("status", "5xx")];
    let by_route = sum(&samples, "floodgate_gateway_requests_total", &shed_requests);
    assert_eq!(
        by_route, shed as f64,
        "the route metric's outcome is the layer's"
    );
    let _ = held.kill();
    let _ = held.wait();
}
