//! The gRPC listener: `RateLimitService` (on the fast path, see
//! [`GrpcService`]), `grpc.health.v1.Health` (serving while the store can
//! decide) and server reflection (v1 and v1alpha), over HTTP/2.

use std::sync::Arc;
use std::time::Duration;

use http::Request;
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic_health::ServingStatus;

use crate::grpc::GrpcService;
use crate::proto::FILE_DESCRIPTOR_SET;
use crate::service::Service;
use floodgate_runtime::RuntimeError;

/// The RLS service name, as health checks ask for it.
pub const RLS_SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// Starts serving on `listener` until `stop` turns true.
pub async fn spawn(
    svc: Arc<Service>,
    listener: TcpListener,
    body_limit: usize,
    stop: watch::Receiver<bool>,
) -> Result<JoinHandle<Result<(), String>>, RuntimeError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| RuntimeError::Runtime(format!("reflection: {e}")))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| RuntimeError::Runtime(format!("reflection: {e}")))?;

    // Health follows readiness (the store, and draining on shutdown, which
    // turns it NOT_SERVING at once).
    let watcher = {
        let svc = svc.clone();
        let mut stop = stop.clone();
        let mut draining = svc.watch_draining();
        async move {
            let mut last = None;
            loop {
                let ready = svc.is_ready();
                if last != Some(ready) {
                    let status = if ready {
                        ServingStatus::Serving
                    } else {
                        ServingStatus::NotServing
                    };
                    reporter.set_service_status("", status).await;
                    reporter.set_service_status(RLS_SERVICE, status).await;
                    last = Some(ready);
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    _ = async { draining.wait_for(|d| *d).await.map(|_| ()) } => {
                        reporter.set_service_status("", ServingStatus::NotServing).await;
                        reporter.set_service_status(RLS_SERVICE, ServingStatus::NotServing).await;
                        return;
                    }
                    _ = stop.changed() => {
                        reporter.set_service_status("", ServingStatus::NotServing).await;
                        reporter.set_service_status(RLS_SERVICE, ServingStatus::NotServing).await;
                        return;
                    }
                }
            }
        }
    };
    tokio::spawn(watcher);

    let routes = tonic::service::Routes::new(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .prepare();
    let grpc = Arc::new(GrpcService::new(svc, routes, body_limit));
    Ok(tokio::spawn(accept_loop(listener, grpc, stop)))
}

/// Accepts HTTP/2 connections until `stop`, then waits for the open ones
/// to finish their calls (the caller bounds the wait).
async fn accept_loop(
    listener: TcpListener,
    grpc: Arc<GrpcService>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let graceful = GracefulShutdown::new();
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(1024)
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(4 << 20)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    let stopped = async move {
        let _ = stop.wait_for(|v| *v).await;
    };
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let grpc = grpc.clone();
                let service = service_fn(move |req: Request<Incoming>| {
                    let grpc = grpc.clone();
                    async move { grpc.call(req).await }
                });
                let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "gRPC connection ended");
                    }
                });
            }
            _ = &mut stopped => break,
        }
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
