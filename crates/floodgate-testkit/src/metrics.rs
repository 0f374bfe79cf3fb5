//! Reading one value of a process's `/metrics` (Prometheus text format).

use crate::http_request;

/// The value of the first sample of `GET /metrics` on 127.0.0.1:`admin`
/// whose line starts with `prefix` (0 when there is none). Panics when the
/// admin listener does not answer 200.
pub fn metric(admin: u16, prefix: &str) -> f64 {
    let (status, text) = http_request(admin, "GET", "/metrics", None, b"")
        .unwrap_or_else(|| panic!("nothing answers /metrics on port {admin}"));
    assert_eq!(status, 200, "/metrics on port {admin}: {text}");
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}
