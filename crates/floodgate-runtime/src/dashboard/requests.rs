//! The dashboard's headline: requests by final outcome, summed over the
//! APIs of `floodgate_requests_total` (the page turns them into rates).

use serde::Serialize;

use super::prometheus::samples;

/// Requests since start by final outcome, every API together
/// (cumulative; each request counted once).
#[derive(Debug, Default, PartialEq, Serialize)]
pub(crate) struct RequestCounts {
    allowed: u64,
    /// Admitted after a shaper's delay.
    delayed: u64,
    denied: u64,
    /// Rejected by load shedding.
    shed: u64,
    /// The store could not decide (a Redis outage's `fail_open`, the
    /// gateway's `on_error: allow`); let through.
    failed_open: u64,
    /// The store could not decide (`fail_closed`, `on_error: reject`);
    /// rejected.
    failed_closed: u64,
    error: u64,
}

/// The request counts in the metrics `text`.
pub(crate) fn request_counts(text: &str) -> RequestCounts {
    let mut c = RequestCounts::default();
    for s in samples(text, "floodgate_requests_total") {
        let n = s.value as u64;
        let field = match s.label("result") {
            Some("allowed") => &mut c.allowed,
            Some("delayed") => &mut c.delayed,
            Some("denied") => &mut c.denied,
            Some("shed") => &mut c.shed,
            Some("failed_open") => &mut c.failed_open,
            Some("failed_closed") => &mut c.failed_closed,
            Some("error") => &mut c.error,
            _ => continue,
        };
        *field += n;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_api_by_result() {
        let text = "floodgate_requests_total{api=\"grpc\",result=\"allowed\"} 3\n\
                    floodgate_requests_total{api=\"http\",result=\"allowed\"} 4\n\
                    floodgate_requests_total{api=\"http\",result=\"denied\"} 5\n\
                    floodgate_requests_total{api=\"check\",result=\"failed_open\"} 1\n\
                    floodgate_request_duration_seconds_count{api=\"grpc\"} 9\n";
        let c = request_counts(text);
        assert_eq!(
            c,
            RequestCounts {
                allowed: 7,
                denied: 5,
                failed_open: 1,
                ..RequestCounts::default()
            }
        );
    }
}
