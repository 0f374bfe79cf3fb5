//! The gateway's responses by status class and their time, against a
//! counted run: requests the upstream answers (2xx), the limiter denies
//! (429: 4xx) and an unreachable upstream fails (502: 5xx) — each counted
//! once in its class, and each in the duration histogram; the upstream's
//! time counted for each exchange that brought a response.

use std::path::Path;

use floodgate_testkit::prometheus::{Sample, scrape};
use floodgate_testkit::{Gateway, free_port, http_request};

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
}
