//! The gRPC listener: `RateLimitService`, `grpc.health.v1.Health` (serving
//! while the store can decide) and server reflection (v1 and v1alpha).

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

use crate::error::ServerError;
use crate::grpc::RlsService;
use crate::proto::FILE_DESCRIPTOR_SET;
use crate::proto::rls::rate_limit_service_server::RateLimitServiceServer;
use crate::service::Service;

/// The RLS service name, as health checks ask for it.
pub const RLS_SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// Starts serving on `listener` until `stop` turns true.
pub async fn spawn(
    svc: Arc<Service>,
    listener: TcpListener,
    body_limit: usize,
    mut stop: watch::Receiver<bool>,
) -> Result<JoinHandle<Result<(), String>>, ServerError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ServerError::Runtime(format!("reflection: {e}")))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| ServerError::Runtime(format!("reflection: {e}")))?;
    let rls = RateLimitServiceServer::new(RlsService::new(svc.clone()))
        .max_decoding_message_size(body_limit);

    // Health follows readiness (the store, and draining on shutdown).
    let watcher = {
        let svc = svc.clone();
        let mut stop = stop.clone();
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

    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    Ok(tokio::spawn(async move {
        Server::builder()
            .add_service(health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(rls)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = stop.wait_for(|v| *v).await;
            })
            .await
            .map_err(|e| e.to_string())
    }))
}
