//! The gateway's requests by route, status class and outcome
//! (`floodgate_gateway_requests_total{route, status, outcome}`).
//!
//! `route` is a template of the `http:` section's `routes`, or `none` for
//! a path no template matches (and for every request while no `http:`
//! section is loaded): a bounded set, never the request's path. The
//! handles of every label combination are registered when a limiter is
//! built (on reload, the new section's); a request picks its handle by the
//! index of its template ([`HttpIdentity::route_index`]), so counting it
//! is one atomic increment: no lookup by name, no lock, no allocation.
//!
//! [`HttpIdentity::route_index`]: floodgate_http::HttpIdentity::route_index

use floodgate_http::layer::RequestResult;
use http::StatusCode;
use metrics::Counter;

use crate::responses::{CLASSES, class_of};

/// The name of the metric.
const REQUESTS: &str = "floodgate_gateway_requests_total";

/// The `route` label of a path no template matches.
const NO_ROUTE: &str = "none";

/// The counters of one set of routes: one per route (and `none`),
/// outcome and status class.
#[derive(Clone)]
pub(crate) struct RouteMetrics {
    counters: Box<[Counter]>,
    /// The row of `none`: the number of templates.
    none: usize,
}

/// Counters per route: one per outcome and status class.
const PER_ROUTE: usize = RequestResult::ALL.len() * CLASSES.len();

impl RouteMetrics {
    /// Registers the counters of `templates` (in the order of their
    /// indexes) and of `none` in the installed recorder.
    pub(crate) fn new(templates: &[String]) -> Self {
        metrics::describe_counter!(
            REQUESTS,
            "Requests by route template (none: no template matched), status class of the response and outcome, as floodgate_requests_total's result: allowed, delayed, denied, shed, failed_open, failed_closed, error (refused by the gateway before the limiter)."
        );
        let routes = templates.iter().map(String::as_str).chain([NO_ROUTE]);
        let mut counters = Vec::with_capacity((templates.len() + 1) * PER_ROUTE);
        for route in routes {
            for outcome in RequestResult::ALL {
                for class in CLASSES {
                    counters.push(metrics::counter!(
                        REQUESTS,
                        "route" => route.to_owned(),
                        "outcome" => outcome.label(),
                        "status" => class,
                    ));
                }
            }
        }
        RouteMetrics {
            counters: counters.into(),
            none: templates.len(),
        }
    }

    /// Counts a request to the template of index `route` (of the
    /// templates these counters were registered for; none: no template
    /// matched) answered `status`, of `outcome`.
    #[inline]
    pub(crate) fn count(&self, route: Option<usize>, outcome: RequestResult, status: StatusCode) {
        let row = route.unwrap_or(self.none);
        let at = row * PER_ROUTE + outcome as usize * CLASSES.len() + class_of(status);
        self.counters[at].increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    /// The counts recorded, by (route, outcome, status).
    fn counts(snapshot: metrics_util::debugging::Snapshot) -> Vec<(String, String, String, u64)> {
        let mut out = Vec::new();
        for (key, _, _, value) in snapshot.into_vec() {
            let DebugValue::Counter(n) = value else {
                continue;
            };
            let label = |name| {
                let l = key.key().labels().find(|l| l.key() == name).unwrap();
                l.value().to_owned()
            };
            if n > 0 {
                out.push((label("route"), label("outcome"), label("status"), n));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn each_request_lands_in_its_route_outcome_and_class() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let m = metrics::with_local_recorder(&recorder, || {
            RouteMetrics::new(&["/a/{id}".into(), "/b".into()])
        });
        m.count(Some(0), RequestResult::Allowed, StatusCode::OK);
        m.count(Some(0), RequestResult::Allowed, StatusCode::OK);
        m.count(
            Some(1),
            RequestResult::Denied,
            StatusCode::TOO_MANY_REQUESTS,
        );
        m.count(None, RequestResult::Allowed, StatusCode::BAD_GATEWAY);
        m.count(None, RequestResult::Error, StatusCode::BAD_REQUEST);
        let s = |a: &str, b: &str, c: &str, n| (a.into(), b.into(), c.into(), n);
        assert_eq!(
            counts(snapshotter.snapshot()),
            [
                s("/a/{id}", "allowed", "2xx", 2),
                s("/b", "denied", "4xx", 1),
                s("none", "allowed", "5xx", 1),
                s("none", "error", "4xx", 1),
            ]
        );
    }
}
