//! The admin listener (loopback by default): `/metrics` (Prometheus),
//! `/healthcheck` and `/ready` ([`Health`]), the live dashboard
//! (`/dashboard`, see `docs/service.md`), and whatever routes a binary
//! adds to [`router`]'s answer (`Router::merge`), served by [`spawn`] to
//! requests that name it (loopback names, IP addresses, `server.admin_hosts`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::admin_hosts::{AdminHosts, authority_of, misdirected};
use crate::error::RuntimeError;
use crate::health::Health;
use crate::listener::{ADMIN_CONNECTIONS, ConnectionLimits, Http, Protocols, bind, spawn_service};

/// What the admin routes read.
#[derive(Clone)]
pub(crate) struct Admin {
    pub health: Arc<Health>,
    pub metrics: Option<PrometheusHandle>,
}

/// The admin routes every binary serves: `/metrics` (empty without a
/// recorder), `/healthcheck`, `/ready`, `/dashboard`.
pub(crate) fn router(health: Arc<Health>, metrics: Option<PrometheusHandle>) -> Router {
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

/// Serves `router` on the admin listener `addr` (none: no admin
/// listener) under `limits`' protections, TLS terminated by `tls` if any,
/// HTTP/1.1 and HTTP/2, with a cap
/// of its own ([`ADMIN_CONNECTIONS`]: a flood of the public listeners
/// leaves it reachable), until `stop` turns true. It answers requests for
/// loopback names, IP addresses and `hosts` (`server.admin_hosts`), and
/// 421 to any other.
pub(crate) async fn spawn(
    addr: Option<SocketAddr>,
    hosts: &[String],
    router: Router,
    limits: &ConnectionLimits,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
) -> Result<Option<JoinHandle<()>>, RuntimeError> {
    let Some(addr) = addr else { return Ok(None) };
    let hosts = Arc::new(AdminHosts::new(hosts));
    let router = router.layer(axum::middleware::from_fn_with_state(hosts, only_its_names));
    let listener = bind("admin", addr).await?;
    let http = Http::new(limits, Protocols::Http1AndHttp2);
    let service = hyper_util::service::TowerToHyperService::new(router);
    let places = ADMIN_CONNECTIONS;
    Ok(Some(spawn_service(
        "admin", listener, service, http, tls, places, stop,
    )))
}

async fn render_metrics(State(a): State<Admin>) -> impl IntoResponse {
    a.health.export_metrics();
    let text = a
        .metrics
        .as_ref()
        .map(metrics_exporter_prometheus::PrometheusHandle::render)
        .unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// Passes on the requests that name the listener; 421 to the others.
async fn only_its_names(
    State(hosts): State<Arc<AdminHosts>>,
    req: Request,
    next: Next,
) -> axum::response::Response {
    if hosts.answers(authority_of(&req)) {
        next.run(req).await
    } else {
        misdirected()
    }
}
