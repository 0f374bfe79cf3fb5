//! The admin listener (loopback by default): `/metrics` (Prometheus),
//! `/healthcheck` and `/ready` ([`Health`]), the live dashboard
//! (`/dashboard`, see [`crate::dashboard`]), and whatever routes a binary
//! adds to [`router`]'s answer (`Router::merge`).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::health::Health;

/// What the admin routes read.
#[derive(Clone)]
pub(crate) struct Admin {
    pub health: Arc<Health>,
    pub metrics: Option<PrometheusHandle>,
}

/// The admin routes every binary serves: `/metrics` (empty without a
/// recorder), `/healthcheck`, `/ready`, `/dashboard`.
pub fn router(health: Arc<Health>, metrics: Option<PrometheusHandle>) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/dashboard", get(crate::dashboard::page))
        .route("/dashboard/data", get(crate::dashboard::data))
        .with_state(Admin {
            health: health.clone(),
            metrics,
        })
        .merge(health_routes(health))
}

/// `/healthcheck` and `/ready` ([`Health::healthcheck`],
/// [`Health::ready`]), for the admin listener and any other.
pub fn health_routes<S: Clone + Send + Sync + 'static>(health: Arc<Health>) -> Router<S> {
    let ready = health.clone();
    Router::new()
        .route("/healthcheck", get(|| async move { health.healthcheck() }))
        .route("/ready", get(|| async move { ready.ready() }))
}

async fn render_metrics(State(a): State<Admin>) -> impl IntoResponse {
    a.health.export_metrics();
    let text = a.metrics.as_ref().map(|h| h.render()).unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}
