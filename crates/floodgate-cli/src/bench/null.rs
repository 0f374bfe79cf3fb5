//! The do-nothing RLS server: decodes the request, answers OK with one OK
//! status per descriptor. The same tonic stack as the real server, no
//! decision: the ceiling a load generator can reach on this machine.

use std::net::SocketAddr;

use floodgate_server::proto::rls::rate_limit_response::{Code, DescriptorStatus};
use floodgate_server::proto::rls::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use floodgate_server::proto::rls::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

struct Null;

#[tonic::async_trait]
impl RateLimitService for Null {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let n = request.get_ref().descriptors.len();
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                };
                n
            ],
            ..Default::default()
        }))
    }
}

/// Serves until SIGTERM or SIGINT.
pub(super) async fn serve(addr: SocketAddr) -> anyhow::Result<()> {
    let shutdown = floodgate_runtime::host::shutdown_signal();
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("null RLS server listening on {}", listener.local_addr()?);
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(Null))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await?;
    Ok(())
}
