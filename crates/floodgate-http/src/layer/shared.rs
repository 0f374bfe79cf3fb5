//! What every request of a layer shares: the engine, identity and contract,
//! a pool of reusable buffers, counters, and the guard that gives back
//! concurrency units when a request ends.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};

use floodgate::{Apply, Clock};
use floodgate_policy::{Backend, Engine, Response};

use super::adaptive::AdaptiveLimit;
use super::charge::CostCounters;
use super::config::LayerSettings;
use super::policy_cache::PolicyCache;
use super::queue::{ConcurrencyQueue, KeyedQueues};
use super::requests::{RequestCounters, RequestResult};
use super::shed::Gauge;
use crate::contract::{Contract, HeaderBuf, Report};
use crate::identity::{HttpIdentity, RequestDescriptors};

/// Counters of a layer (cumulative).
#[derive(Debug, Default)]
pub struct LayerStats {
    /// Requests decided by the engine.
    pub decided: AtomicU64,
    /// Requests rejected by a limit.
    pub denied: AtomicU64,
    /// Requests delayed by a shaper.
    pub delayed: AtomicU64,
    /// Requests rejected because too many were already delayed.
    pub delay_queue_full: AtomicU64,
    /// Requests shed by priority.
    pub shed: AtomicU64,
    /// Requests rejected by a layer concurrency limit (queue full or timed out).
    pub concurrency_rejected: AtomicU64,
    /// Limiter failures let through (fail open).
    pub fail_open: AtomicU64,
    /// Limiter failures rejected (fail closed).
    pub fail_closed: AtomicU64,
    /// Concurrency releases or charges after the response that could not
    /// run (no async runtime).
    pub release_lost: AtomicU64,
    /// Concurrency limits whose release found the request's permit holding
    /// nothing: with Redis, its lease ended before the request did (the
    /// units were freed then).
    pub release_not_held: AtomicU64,
    /// Concurrency limits the store could neither release nor queue the
    /// release of (their units are freed when their leases end).
    pub release_failed: AtomicU64,
    /// Costs known after the response the store could not charge.
    pub charge_failed: AtomicU64,
}

impl LayerStats {
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Counts the limits a release found not held or could not release
    /// (rare: a permit outliving its lease, a store that is away).
    #[cold]
    fn count_release_anomalies(&self, report: &floodgate_policy::engine::ReleaseReport) {
        for (counter, n, result) in [
            (&self.release_not_held, report.not_held, "not_held"),
            (&self.release_failed, report.failed, "failed"),
        ] {
            if n > 0 {
                counter.fetch_add(n as u64, Ordering::Relaxed);
                metrics::counter!("floodgate_http_releases_total", "result" => result)
                    .increment(n as u64);
            }
        }
    }
}

/// The buffers of one request, reused.
#[derive(Default)]
pub(crate) struct Scratch {
    pub out: RequestDescriptors,
    pub response: Response,
    pub report: Report,
    pub buf: HeaderBuf,
    /// `RateLimit-Policy` of this request, from the cache.
    pub policy_value: Option<http::HeaderValue>,
    /// The plan's path rendered this admitted request's `RateLimit` into
    /// `buf`'s text already (and `policy_value`); `report` is not filled.
    pub prerendered: bool,
}

const POOL_MAX: usize = 256;

pub(crate) struct Shared<B, C> {
    pub engine: Arc<Engine<B, C>>,
    pub identity: HttpIdentity,
    pub contract: Contract,
    pub settings: LayerSettings,
    pub stats: LayerStats,
    /// `floodgate_requests_total{api="http"}`, by final outcome.
    pub requests: RequestCounters,
    /// Requests in flight (counted when shedding is on).
    pub in_flight: Gauge,
    /// The adaptive concurrency limit (`shedding.adaptive`).
    pub adaptive: Option<AdaptiveLimit>,
    pub global: Option<ConcurrencyQueue>,
    pub keyed: Option<KeyedQueues>,
    pub delayed: Gauge,
    /// The engine plan (used when the identity builds one descriptor) and
    /// header pieces, per policy set.
    pub policy_cache: PolicyCache,
    pub plannable: bool,
    /// A cost is charged after the response (`response_cost`): an admitted
    /// request keeps its descriptors until it is. Its counters.
    pub response_costs: Option<CostCounters>,
    #[allow(clippy::vec_box)] // moved in and out whole
    pool: Mutex<Vec<Box<Scratch>>>,
}

impl<B: Backend, C: Clock + 'static> Shared<B, C> {
    pub(super) fn new(
        engine: Arc<Engine<B, C>>,
        identity: HttpIdentity,
        contract: Contract,
        settings: LayerSettings,
    ) -> Self {
        let adaptive = settings.shedding.as_ref().and_then(|s| s.adaptive);
        let now = engine.clock().now();
        Shared {
            in_flight: Gauge::default(),
            adaptive: adaptive.map(|a| AdaptiveLimit::new(a, now)),
            global: settings.global_concurrency.map(ConcurrencyQueue::new),
            keyed: settings.keyed_concurrency.clone().map(KeyedQueues::new),
            delayed: Gauge::default(),
            policy_cache: PolicyCache::default(),
            plannable: identity.descriptor_count() == 1,
            response_costs: identity
                .config()
                .response_cost
                .as_ref()
                .map(|_| CostCounters::new()),
            engine,
            identity,
            contract,
            settings,
            stats: LayerStats::default(),
            requests: RequestCounters::new("http"),
            pool: Mutex::new(Vec::new()),
        }
    }

    /// Counts a request by its final outcome.
    #[inline]
    pub(super) fn counted(&self, result: RequestResult) {
        self.requests.count(result);
    }

    pub(super) fn take(&self) -> Box<Scratch> {
        let pooled = self.pool.lock().ok().and_then(|mut p| p.pop());
        pooled.unwrap_or_else(|| {
            Box::new(Scratch {
                out: self.identity.new_output(),
                ..Scratch::default()
            })
        })
    }

    pub(super) fn put(&self, scratch: Box<Scratch>) {
        if let Ok(mut p) = self.pool.lock() {
            if p.len() < POOL_MAX {
                p.push(scratch);
            }
        }
    }
}

/// Anything kept alive until a request ends; dropping it does the work.
pub(crate) trait Hold: Send + Sync {
    /// How the request was answered: its response's status, or none when
    /// the inner service failed. Told before the response goes out.
    fn answered(&mut self, _status: Option<http::StatusCode>) {}

    /// The response's trailers, as its body ends with them.
    fn trailers(&mut self, _trailers: &http::HeaderMap) {}

    /// The response's body ended (with or without trailers); not told
    /// when it fails or is dropped first.
    fn ended(&mut self) {}

    /// Done with the request as its body ends with trailers (the last
    /// frame), before they are sent: what still runs (a remote store's
    /// charge of the cost they tell), for them to wait for, so that the
    /// client sees the response end once its cost counts.
    fn close(self: Box<Self>) -> Option<Finishing> {
        None
    }
}

/// Work a request left running on the runtime as it ended.
pub(crate) type Finishing = tokio::task::JoinHandle<()>;

impl Hold for tokio::sync::OwnedSemaphorePermit {}
impl Hold for super::queue::KeyedPermit {}
impl<B: Backend, C: Clock + 'static> Hold for Held<B, C> {}
impl Hold for Vec<Box<dyn Hold>> {
    fn answered(&mut self, status: Option<http::StatusCode>) {
        for h in self {
            h.answered(status);
        }
    }

    fn trailers(&mut self, trailers: &http::HeaderMap) {
        for h in self {
            h.trailers(trailers);
        }
    }

    fn ended(&mut self) {
        for h in self {
            h.ended();
        }
    }

    fn close(self: Box<Self>) -> Option<Finishing> {
        // A request holds one charge after the response at most.
        self.into_iter()
            .fold(None, |running, h| h.close().or(running))
    }
}

/// A request's buffers, holding concurrency units when `holds_units`:
/// dropping it gives them back (at body end, on cancellation, on panic),
/// then returns the buffers to the pool.
pub(crate) struct Held<B: Backend, C: Clock + 'static> {
    pub shared: Arc<Shared<B, C>>,
    pub scratch: Option<Box<Scratch>>,
    pub holds_units: bool,
}

impl<B: Backend, C: Clock + 'static> Held<B, C> {
    pub(super) fn scratch(&mut self) -> &mut Scratch {
        self.scratch.get_or_insert_with(Box::default)
    }
}

impl<B: Backend, C: Clock + 'static> Held<B, C> {
    /// Gives back the request's units (if it holds any), then charges its
    /// descriptors `after` (if not 0: a cost known after the response,
    /// forced, so that it counts whole, debt included), then returns the
    /// buffers to the pool. An in-memory store is done at once; a remote
    /// one finishes on the runtime: its task.
    pub(super) fn finish(&mut self, after: u64) -> Option<Finishing> {
        let mut scratch = self.scratch.take()?;
        if !self.holds_units && after == 0 {
            self.shared.put(scratch);
            return None;
        }
        let (shared, units) = (self.shared.clone(), self.holds_units);
        let mut finish = Box::pin(async move {
            if units {
                let report = shared.engine.release(&scratch.response).await;
                if report.not_held + report.failed > 0 {
                    shared.stats.count_release_anomalies(&report);
                }
            }
            if after > 0 {
                super::charge::spare_in_flight(&shared.engine, &mut scratch);
                scratch.out.charge(after);
                let (domain, out) = (shared.identity.domain(), &scratch.out);
                let forced = shared.engine.evaluate_with(
                    domain,
                    out,
                    0,
                    Apply::Force,
                    &mut scratch.response,
                );
                if forced.await.is_err() {
                    LayerStats::inc(&shared.stats.charge_failed);
                    metrics::counter!("floodgate_http_response_charge_failures_total").increment(1);
                }
            }
            shared.put(scratch);
        });
        let mut cx = Context::from_waker(Waker::noop());
        if finish.as_mut().poll(&mut cx).is_ready() {
            return None;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => Some(handle.spawn(finish)),
            Err(_) => {
                LayerStats::inc(&self.shared.stats.release_lost);
                None
            }
        }
    }
}

impl<B: Backend, C: Clock + 'static> Drop for Held<B, C> {
    fn drop(&mut self) {
        self.finish(0);
    }
}
