//! The decision service shared by every API: the engine on the chosen
//! store, pooled responses, header names, metric handles, readiness.

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::Apply;
use floodgate_policy::engine::ReleaseReport;
use floodgate_policy::{Code, Descriptor, Engine, EngineError, Permit, Response};

use floodgate_runtime::RuntimeError;
use floodgate_runtime::host::otel;
use floodgate_runtime::host::{AnyBackend, Health};

use crate::call::Calls;
use crate::metrics::{Api, ServiceMetrics};
use crate::pool::ResponsePool;
use crate::settings::{RlsDelayed, RlsSettings};
use floodgate_http::contract::EnvoyHeaders;
use floodgate_http::layer::RequestResult;

/// Everything a request needs, built once at startup.
pub struct DecisionService {
    engine: Arc<Engine<AnyBackend>>,
    health: Arc<Health>,
    /// Reusable responses.
    pub pool: ResponsePool,
    /// Rate limit headers to add.
    pub headers: EnvoyHeaders,
    /// Request-path metric handles.
    pub metrics: ServiceMetrics,
    /// Places for the calls in flight (`server.limits.max_requests`),
    /// each held until its response is sent.
    pub calls: Calls,
    /// The longest a call may take when its caller sets no shorter
    /// deadline.
    pub request_timeout: std::time::Duration,
    /// Largest request body or gRPC message, in bytes.
    pub body_limit: usize,
    /// What a shaper's delay becomes over RLS (`server.rls_delayed`).
    rls_delayed: RlsDelayed,
}

impl DecisionService {
    /// A service deciding with `health`'s engine ([`Health::start`]).
    pub fn new(health: Arc<Health>, settings: &RlsSettings) -> Result<Self, RuntimeError> {
        Ok(DecisionService {
            metrics: ServiceMetrics::new(health.engine().policy().settings.envoy_stats),
            engine: health.engine().clone(),
            health,
            pool: ResponsePool::default(),
            headers: crate::headers::envoy_headers(&settings.headers)
                .map_err(|e| RuntimeError::Runtime(e.to_string()))?,
            calls: Calls::new(settings.max_requests),
            request_timeout: settings.request_timeout,
            body_limit: settings.body_limit,
            rls_delayed: settings.rls_delayed,
        })
    }

    /// The engine.
    pub fn engine(&self) -> &Engine<AnyBackend> {
        &self.engine
    }

    /// Liveness and readiness.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// Decides one request and records its metrics.
    pub async fn decide<D: Descriptor>(
        &self,
        api: Api,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        apply: Apply,
        response: &mut Response,
    ) -> Result<(), EngineError> {
        let started = Instant::now();
        let result = self
            .engine
            .evaluate_with(domain, descriptors, hits_addend, apply, response)
            .await;
        self.record(api, domain, started, &result, response);
        result
    }

    /// Decides one request of an RLS caller (`ShouldRateLimit`, `/json`),
    /// which cannot hold a request for a shaper's delay: as
    /// `server.rls_delayed` says, the delay is refused (`OVER_LIMIT`, its
    /// reset the delay, nothing charged: see
    /// [`Engine::evaluate_undelayed`]) or admitted at once, charged, the
    /// delay carried in the answer ([`carried_delay`]). Records its
    /// metrics.
    pub async fn decide_rls<D: Descriptor>(
        &self,
        api: Api,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        response: &mut Response,
    ) -> Result<(), EngineError> {
        let started = Instant::now();
        let engine = &self.engine;
        let result = match self.rls_delayed {
            RlsDelayed::OverLimit => {
                engine
                    .evaluate_undelayed(domain, descriptors, hits_addend, response)
                    .await
            }
            RlsDelayed::Ok => {
                engine
                    .evaluate_with(domain, descriptors, hits_addend, Apply::Commit, response)
                    .await
            }
        };
        self.record(api, domain, started, &result, response);
        result
    }

    /// Whether the store decides without IO (in memory):
    /// [`decide_rls_now`](Self::decide_rls_now) then always decides.
    pub fn decides_at_once(&self) -> bool {
        floodgate_policy::Backend::as_sync(self.engine.backend()).is_some()
    }

    /// [`decide_rls`](Self::decide_rls) at once, without a future, when
    /// the store needs no IO (in memory); none, with nothing done, when
    /// it does.
    pub fn decide_rls_now<D: Descriptor>(
        &self,
        api: Api,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        response: &mut Response,
    ) -> Option<Result<(), EngineError>> {
        let started = Instant::now();
        let engine = &self.engine;
        let result = match self.rls_delayed {
            RlsDelayed::OverLimit => {
                engine.evaluate_undelayed_now(domain, descriptors, hits_addend, response)
            }
            RlsDelayed::Ok => {
                engine.evaluate_now(domain, descriptors, hits_addend, Apply::Commit, response)
            }
        }?;
        self.record(api, domain, started, &result, response);
        Some(result)
    }

    /// Records a decision's metrics and, when tracing, its attributes on
    /// the request's span; logs a failure other than the caller's.
    fn record(
        &self,
        api: Api,
        domain: &str,
        started: Instant,
        result: &Result<(), EngineError>,
        response: &Response,
    ) {
        let backend = self.engine.backend();
        match result {
            Ok(()) => {
                let outcome = self.metrics.decided(api, response, started);
                otel::record_decision(backend, domain, outcome.label(), Some(response));
            }
            Err(e) => {
                otel::record_decision(backend, domain, RequestResult::Error.label(), None);
                self.metrics.failed(api, e.code(), started);
                if !matches!(e, EngineError::InvalidArgument(_)) {
                    tracing::warn!(error = %e, "decision failed");
                }
            }
        }
    }

    /// Gives back the in-flight units `permit` took when a request of
    /// `descriptors` was admitted (see [`Engine::release_request`]) and
    /// records its metrics: the request, and what became of each
    /// concurrency limit (`floodgate_releases_total`).
    pub async fn release<D: Descriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        permit: Permit,
        response: &mut Response,
    ) -> Result<ReleaseReport, EngineError> {
        let started = Instant::now();
        let result = self
            .engine
            .release_request(domain, descriptors, hits_addend, permit, response)
            .await;
        match &result {
            Ok(report) => {
                self.metrics
                    .counted(Api::Release, RequestResult::Allowed, started);
                crate::metrics::released(response);
                if let Some(e) = &report.error {
                    tracing::warn!(error = %e, "release failed");
                }
            }
            Err(e) => self.metrics.failed(Api::Release, e.code(), started),
        }
        result
    }
}

/// The delay an RLS answer carries (`dynamic_metadata`'s `delay_ms`): an
/// `OK` answer's longest enforced shaper delay, none when nothing delays
/// it. An RLS caller proceeds at once; this says how long it would have
/// waited.
pub(crate) fn carried_delay(response: &Response) -> Option<Duration> {
    if response.overall != Code::Ok {
        return None;
    }
    let delay = response.narrowest()?.delay();
    (!delay.is_zero()).then_some(delay)
}

/// The name of the carried delay in `dynamic_metadata`, in milliseconds.
pub(crate) const DELAY_KEY: &str = "delay_ms";
