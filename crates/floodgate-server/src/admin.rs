//! What the service adds to the host's admin listener (loopback by
//! default; the host serves `/metrics`, `/healthcheck`, `/ready`):
//! `/rlconfig`, the rules in force.

use std::fmt::Write;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::decision::DecisionService;

/// The service's admin route: the rules in force (`/rlconfig`).
pub(crate) fn routes(service: Arc<DecisionService>) -> Router {
    Router::new()
        .route("/rlconfig", get(rlconfig))
        .with_state(service)
}

/// The rules in force, one per line: `domain path: limits`.
async fn rlconfig(State(service): State<Arc<DecisionService>>) -> impl IntoResponse {
    let policy = service.engine().policy();
    let mut out = String::new();
    let s = &policy.settings;
    let _ = writeln!(
        out,
        "settings: enforce={} shadow_mode={} near_limit_ratio={}",
        s.enforce, s.shadow_mode, s.near_limit_ratio
    );
    for r in policy.rules() {
        let _ = write!(out, "{}: {}", r.domain, r.path);
        if let Some(n) = &r.name {
            let _ = write!(out, " name={n}");
        }
        for l in r.limits() {
            let _ = write!(
                out,
                " [{} per {:?}]",
                l.reported.requests_per_unit, l.reported.unit
            );
        }
        if r.shadow {
            out.push_str(" shadow_mode");
        }
        if !r.enabled {
            out.push_str(" disabled");
        }
        out.push('\n');
    }
    ([(header::CONTENT_TYPE, "text/plain")], out)
}
