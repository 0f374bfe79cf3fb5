//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` as a tonic
//! service, for programs that embed the decision service in their own tonic
//! server (`floodgate serve` answers the method on its fast path,
//! [`GrpcService`](super::GrpcService), with the same semantics).

use std::sync::Arc;

use floodgate::Apply;
use tonic::{Request, Response, Status};

use crate::metrics::Api;
use crate::proto::rls::rate_limit_service_server::RateLimitService;
use crate::proto::rls::{RateLimitRequest, RateLimitResponse};
use crate::service::Service;

use super::convert::{check_request, fill_response, status_of};

/// The RLS implementation over a [`Service`].
#[derive(Clone)]
pub struct RlsService {
    service: Arc<Service>,
}

impl RlsService {
    /// Serves `service`.
    pub fn new(service: Arc<Service>) -> Self {
        RlsService { service }
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let req = request.get_ref();
        let svc = &*self.service;
        if let Err(e) = check_request(req) {
            svc.metrics
                .failed(Api::Grpc, e.code(), std::time::Instant::now());
            return Err(status_of(&e));
        }
        let mut response = svc.pool.take();
        svc.decide(
            Api::Grpc,
            &req.domain,
            &req.descriptors,
            req.hits_addend,
            Apply::Commit,
            &mut response,
        )
        .await
        .map_err(|e| status_of(&e))?;
        let mut out = RateLimitResponse::default();
        fill_response(&response, &svc.headers, &mut out);
        Ok(Response::new(out))
    }
}
