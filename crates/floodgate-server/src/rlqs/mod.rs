//! Envoy's Rate Limit Quota Service (RLQS v3,
//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`) on the gRPC
//! listener: Envoy's `rate_limit_quota` filter buckets requests itself,
//! reports each bucket's usage, and enforces the assignments streamed
//! back. A bucket is a descriptor of the report's domain
//! ([`mapping`]), its allowed requests charged to the rule that matches
//! it, its assignment a share of that rule's limit ([`assignment`])
//! among the streams reporting it: this instance's ([`shares`]), or with
//! Redis every instance's ([`fleet`]), weighted by their use
//! ([`weights`]) — for a token-bucket rule a share of its burst and rate
//! ([`token_bucket`]). A bucket's new assignment is pushed when its
//! streams change ([`push`]); the dashboard lists the buckets
//! ([`panel`]).

mod assignment;
mod fleet;
mod mapping;
mod panel;
mod push;
mod shares;
#[cfg(test)]
mod simulation;
mod stream;
mod token_bucket;
mod weights;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::Stream;
use metrics::{Counter, Gauge};
use tonic::{Request, Response, Status, Streaming};

use crate::decision::DecisionService;
use crate::proto::rlqs::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use crate::proto::rlqs::{RateLimitQuotaResponse, RateLimitQuotaUsageReports};
use assignment::Kind;
use shares::Shares;
use stream::QuotaStream;

/// The RLQS settings (`server.rlqs.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RlqsSettings {
    /// How long an assignment holds; a stream that has not reported a
    /// bucket for as long no longer shares its limit.
    pub assignment_ttl: Duration,
    /// Most buckets held at once, over every stream.
    pub max_buckets: usize,
    /// Most buckets one stream may report.
    pub max_buckets_per_stream: usize,
}

/// The service: the decision service's engine, the shares, the metrics.
pub(crate) struct Rlqs {
    svc: Arc<DecisionService>,
    shares: Shares,
    fleet: fleet::Fleet,
    settings: RlqsSettings,
    metrics: Arc<RlqsMetrics>,
    next_stream: AtomicU64,
}

impl Rlqs {
    /// The tonic service, deciding with `svc`'s engine.
    pub(crate) fn server(
        svc: Arc<DecisionService>,
        settings: RlqsSettings,
    ) -> RateLimitQuotaServiceServer<RlqsService> {
        let health = svc.health().clone();
        let rlqs = Arc::new(Rlqs {
            svc,
            shares: Shares::new(settings.max_buckets),
            fleet: fleet::Fleet::new(),
            settings,
            metrics: Arc::new(RlqsMetrics::new()),
            next_stream: AtomicU64::new(0),
        });
        health.add_dashboard_panel(panel::source(Arc::downgrade(&rlqs)));
        RateLimitQuotaServiceServer::new(RlqsService(rlqs))
    }
}

/// The answers of one stream.
type Answers = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

/// The service as tonic serves it.
pub(crate) struct RlqsService(Arc<Rlqs>);

#[tonic::async_trait]
impl RateLimitQuotaService for RlqsService {
    type StreamRateLimitQuotasStream = Answers;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Answers>, Status> {
        let id = self.0.next_stream.fetch_add(1, Ordering::Relaxed);
        let (out, answers) = tokio::sync::mpsc::channel(4);
        tokio::spawn(QuotaStream::new(self.0.clone(), id).run(request.into_inner(), out));
        let answers = futures_util::stream::unfold(answers, |mut rx| async move {
            rx.recv().await.map(|answer| (answer, rx))
        });
        Ok(Response::new(Box::pin(answers)))
    }
}

/// RLQS metric handles, resolved once. Labels are the action kinds,
/// never a bucket.
struct RlqsMetrics {
    streams: Gauge,
    buckets: Gauge,
    reports: Counter,
    unshared: Counter,
    actions: [Counter; 5],
}

impl RlqsMetrics {
    fn new() -> Self {
        metrics::describe_gauge!("floodgate_rlqs_streams", "RLQS streams open.");
        metrics::describe_gauge!(
            "floodgate_rlqs_buckets",
            "RLQS buckets held over every stream."
        );
        metrics::describe_counter!(
            "floodgate_rlqs_reports_total",
            "RLQS bucket usage reports received."
        );
        metrics::describe_counter!(
            "floodgate_rlqs_unshared_total",
            "RLQS bucket reports whose streams Redis could not count over the fleet, assigned by the store's failure policy."
        );
        metrics::describe_counter!(
            "floodgate_rlqs_actions_total",
            "RLQS bucket actions sent, by kind."
        );
        RlqsMetrics {
            streams: metrics::gauge!("floodgate_rlqs_streams"),
            buckets: metrics::gauge!("floodgate_rlqs_buckets"),
            reports: metrics::counter!("floodgate_rlqs_reports_total"),
            unshared: metrics::counter!("floodgate_rlqs_unshared_total"),
            actions: Kind::ALL
                .map(|k| metrics::counter!("floodgate_rlqs_actions_total", "kind" => k.label())),
        }
    }

    /// Counts an action of `kind` sent.
    fn action(&self, kind: Kind) {
        self.actions[kind as usize].increment(1);
    }
}
