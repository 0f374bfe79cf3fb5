//! The gRPC listener: `RateLimitService` (on the fast path, see
//! [`GrpcService`]), `grpc.health.v1.Health` (serving while the store can
//! decide), the rate limit quota service (RLQS) and server reflection
//! (v1 and v1alpha), over HTTP/2.

mod answer;
mod deadline;
pub(crate) mod direct;
mod fast;
mod rls;
pub(crate) mod wire;

use std::sync::Arc;

use floodgate_runtime::listener::{Http, Listen, spawn_service};
use floodgate_runtime::tls::TlsAcceptor;
use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic_health::ServingStatus;

use crate::decision::DecisionService;
use crate::proto::FILE_DESCRIPTOR_SET;
use crate::settings::GrpcHttp2;
use fast::GrpcService;
pub(crate) use fast::NO_CONFIGURATION;
use floodgate_runtime::RuntimeError;

/// The RLS service name, as health checks ask for it.
pub(crate) const RLS_SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// What the gRPC listener serves, and with which HTTP/2 server.
pub(crate) struct Grpc {
    pub rlqs: crate::RlqsSettings,
    pub http2: crate::settings::GrpcHttp2,
}

/// Starts serving (RLQS with `grpc.rlqs`) on `listener` (TCP or a Unix socket) under `http`'s protections, TLS
/// terminated by `tls` if any, at most `places` connections at once, until
/// `stop` turns true.
pub(crate) async fn spawn<L: Listen>(
    svc: Arc<DecisionService>,
    grpc: Grpc,
    listener: L,
    http: Http,
    tls: Option<TlsAcceptor>,
    places: usize,
    stop: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, RuntimeError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_error = |e| RuntimeError::Runtime(format!("reflection: {e}"));
    let reflection_v1 = reflection().build_v1().map_err(reflection_error)?;
    let reflection_v1alpha = reflection().build_v1alpha().map_err(reflection_error)?;

    tokio::spawn(follow_readiness(svc.clone(), reporter, stop.clone()));

    let routes = tonic::service::Routes::new(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(crate::rlqs::Rlqs::server(svc.clone(), grpc.rlqs))
        .prepare();
    let http = match grpc.http2 {
        GrpcHttp2::Hyper => http,
        GrpcHttp2::Direct => {
            let server = direct::DirectServer::new(svc.clone(), routes.clone());
            http.with_http2_server(Arc::new(server))
        }
    };
    let grpc = Arc::new(GrpcService::new(svc, routes));
    let service = service_fn(move |req: Request<Incoming>| {
        let grpc = grpc.clone();
        async move { grpc.call(req).await }
    });
    Ok(spawn_service(
        "grpc", listener, service, http, tls, places, stop,
    ))
}

/// Health follows readiness as it changes (the store, told by
/// [`Health::watch_store`](floodgate_runtime::host::Health::watch_store), the
/// first configuration of a binary started without one, and
/// draining on shutdown or the listener's stop, which turn it NOT_SERVING
/// for good).
async fn follow_readiness(
    svc: Arc<DecisionService>,
    reporter: tonic_health::server::HealthReporter,
    mut stop: watch::Receiver<bool>,
) {
    let mut draining = svc.health().watch_draining();
    let mut store = svc.health().watch_store();
    let mut configured = svc.health().watch_configured();
    let set = async |status| {
        for service in ["", RLS_SERVICE] {
            reporter.set_service_status(service, status).await;
        }
    };
    let mut last = None;
    loop {
        let ready = svc.health().is_ready();
        if last != Some(ready) {
            set(if ready {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            })
            .await;
            last = Some(ready);
        }
        tokio::select! {
            () = store_changed(&mut store) => continue,
            Ok(()) = configured.changed() => continue,
            _ = async { draining.wait_for(|d| *d).await.map(|_| ()) } => {}
            _ = stop.changed() => {}
        }
        return set(ServingStatus::NotServing).await;
    }
}

/// Waits for the store's next change; forever for a store that never
/// changes (or is gone).
async fn store_changed(store: &mut Option<watch::Receiver<()>>) {
    let Some(rx) = store else {
        return std::future::pending().await;
    };
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}
