//! The admin listener (loopback by default): `/metrics` (Prometheus),
//! `/healthcheck` and `/ready` ([`Health`]), the live dashboard
//! (`/dashboard`, see `docs/service.md`), and whatever routes a binary
//! adds to [`router`]'s answer (`Router::merge`), served by [`spawn`] to
//! requests that name it (loopback names, IP addresses, `server.admin_hosts`).
//!
//! The metrics listener (`server.metrics`, off by default, on every
//! interface when given a port alone) serves [`probes`] only: `/metrics`
//! (`server.metrics_path`), `/healthcheck` and `/ready`, to any `Host`, for Prometheus and the
//! kubelet on the pod network; the same routes' handlers, served by
//! [`serve`] as the admin listener is, the internals left out.

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

/// The admin routes every binary serves: [`probes`] and `/dashboard`.
pub(crate) fn router(health: Arc<Health>, metrics: Option<PrometheusHandle>) -> Router {
    let admin = Admin {
        health: health.clone(),
        metrics: metrics.clone(),
    };
    Router::new()
        .route("/dashboard", get(crate::dashboard::page))
        .route("/dashboard/data", get(crate::dashboard::data))
        .with_state(admin)
        .merge(probes(health, metrics, "/metrics"))
}

/// What the metrics listener serves, and nothing else: the metrics at
/// `path` (`/metrics`; empty without a recorder), `/healthcheck`, `/ready`.
pub(crate) fn probes(health: Arc<Health>, metrics: Option<PrometheusHandle>, path: &str) -> Router {
    let admin = Admin {
        health: health.clone(),
        metrics,
    };
    Router::new()
        .route(path, get(render_metrics))
        .with_state(admin)
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
    let hosts = Arc::new(AdminHosts::new(hosts));
    let router = router.layer(axum::middleware::from_fn_with_state(hosts, only_its_names));
    serve("admin", addr, router, limits, tls, stop).await
}

/// Serves `router` as the `what` listener on `addr` (none: no listener)
/// as [`spawn`] serves the admin listener, for any `Host`: the metrics
/// listener, with [`probes`]. Its connections have a cap of their own
/// ([`ADMIN_CONNECTIONS`]).
pub(crate) async fn serve(
    what: &'static str,
    addr: Option<SocketAddr>,
    router: Router,
    limits: &ConnectionLimits,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
) -> Result<Option<JoinHandle<()>>, RuntimeError> {
    let Some(addr) = addr else { return Ok(None) };
    let listener = bind(what, addr).await?;
    let http = Http::new(limits, Protocols::Http1AndHttp2);
    let service = hyper_util::service::TowerToHyperService::new(router);
    let places = ADMIN_CONNECTIONS;
    Ok(Some(spawn_service(
        what, listener, service, http, tls, places, stop,
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
