//! The admin listener (loopback by default): `/metrics` (Prometheus),
//! `/rlconfig` (the rules in force), `/healthcheck`, `/ready`.

use std::fmt::Write;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::service::Service;

#[derive(Clone)]
struct Admin {
    service: Arc<Service>,
    metrics: Option<PrometheusHandle>,
}

/// The admin routes.
pub fn router(service: Arc<Service>, metrics: Option<PrometheusHandle>) -> Router {
    let health = Router::new()
        .route("/healthcheck", get(crate::http::healthcheck))
        .route("/ready", get(crate::http::ready))
        .with_state(service.clone());
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/rlconfig", get(rlconfig))
        .with_state(Admin { service, metrics })
        .merge(health)
}

async fn render_metrics(State(a): State<Admin>) -> impl IntoResponse {
    crate::metrics::export_store(a.service.engine().backend());
    a.service.is_ready();
    let text = a.metrics.as_ref().map(|h| h.render()).unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// The rules in force, one per line: `domain path: limits`.
async fn rlconfig(State(a): State<Admin>) -> impl IntoResponse {
    let policy = a.service.engine().policy();
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
