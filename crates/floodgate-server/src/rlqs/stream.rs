//! One RLQS stream (one Envoy instance): its domain, the buckets it
//! reported, and the loop that answers each report with the buckets'
//! assignments, pushes a bucket's new assignment when the streams sharing
//! it change, and abandons a bucket whose rule a reload removed
//! ([`push`](super::push)). A stream holds state only for the buckets it
//! reported: one that never reports costs its connection only.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::Apply;
use floodgate_policy::engine::{EngineError, Reason, Response};
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use crate::proto::rlqs::rate_limit_quota_response::BucketAction;
use crate::proto::rlqs::rate_limit_quota_usage_reports::BucketQuotaUsage;
use crate::proto::rlqs::{RateLimitQuotaResponse, RateLimitQuotaUsageReports};

use super::Rlqs;
use super::assignment::{self, Kind};
use super::fleet::Sharing;
use super::mapping::{self, BucketKey};
use super::shares::{Assigned, Nudge};
use super::token_bucket;
use super::weights::{self, Peers};

/// What the stream sends: answers, and an error status that ends it.
pub(crate) type Outbound = mpsc::Sender<Result<RateLimitQuotaResponse, Status>>;

/// Nudges a stream may have waiting (more are dropped: the bucket's
/// next report answers).
const NUDGES: usize = 64;

/// What a stream holds of a bucket it reported.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// A rule limited it when last seen.
    pub(super) limited: bool,
    /// When its assignment was last pushed (not answering a report).
    pub(super) pushed: Option<Instant>,
    /// Its use as of its last report (see [`weights`](super::weights)).
    pub(super) usage: Option<u64>,
}

/// A stream's state.
pub(crate) struct QuotaStream {
    pub(super) rlqs: Arc<Rlqs>,
    pub(super) id: u64,
    pub(super) domain: Option<String>,
    /// Each bucket reported.
    pub(super) buckets: HashMap<BucketKey, Held>,
    /// The policy generation the buckets were last checked against.
    pub(super) generation: u64,
    pub(super) response: Response,
    /// Where the shares tell this stream its buckets' streams changed.
    nudge: Nudge,
    nudges: Option<mpsc::Receiver<BucketKey>>,
}

impl QuotaStream {
    /// A new stream, numbered `id`.
    pub(crate) fn new(rlqs: Arc<Rlqs>, id: u64) -> Self {
        let generation = rlqs.svc.engine().policy().generation();
        let (nudge, nudges) = mpsc::channel(NUDGES);
        QuotaStream {
            rlqs,
            id,
            domain: None,
            buckets: HashMap::new(),
            generation,
            response: Response::default(),
            nudge,
            nudges: Some(nudges),
        }
    }

    /// Answers `inbound` on `out` until either ends, the service drains,
    /// or a report is refused (its status sent last); then forgets the
    /// stream's buckets.
    pub(crate) async fn run(
        mut self,
        mut inbound: Streaming<RateLimitQuotaUsageReports>,
        out: Outbound,
    ) {
        let metrics = self.rlqs.metrics.clone();
        metrics.streams.increment(1.0);
        let mut draining = self.rlqs.svc.health().watch_draining();
        let mut tick = tokio::time::interval(removals_every(self.rlqs.settings.assignment_ttl));
        let mut nudges = self.nudges.take().unwrap_or_else(|| mpsc::channel(1).1);
        loop {
            let answer = tokio::select! {
                message = inbound.message() => match message {
                    Ok(Some(reports)) => self.on_reports(reports).await,
                    Ok(None) | Err(_) => break,
                },
                _ = tick.tick() => Ok(self.on_tick().await),
                Some(key) = nudges.recv() => Ok(self.push(&key).await.into_iter().collect()),
                () = drained(&mut draining) => Err(Status::unavailable("the service is shutting down")),
                () = out.closed() => break,
            };
            let end = answer.is_err();
            let message = answer.map(|actions| (!actions.is_empty()).then_some(actions));
            if let Some(message) = message.transpose()
                && (out
                    .send(message.map(|bucket_action| RateLimitQuotaResponse { bucket_action }))
                    .await
                    .is_err()
                    || end)
            {
                break;
            }
        }
        self.rlqs.shares.leave(self.buckets.keys(), self.id);
        let (backend, ttl) = (
            self.rlqs.svc.engine().backend(),
            self.rlqs.settings.assignment_ttl,
        );
        (self.rlqs.fleet)
            .leave(backend, self.buckets.keys(), self.id, ttl)
            .await;
        metrics.streams.decrement(1.0);
        metrics.buckets.set(self.rlqs.shares.len() as f64);
    }

    /// The actions answering `reports`, or the status refusing them.
    async fn on_reports(
        &mut self,
        reports: RateLimitQuotaUsageReports,
    ) -> Result<Vec<BucketAction>, Status> {
        let domain = self.domain_of(reports.domain)?;
        let mut actions = Vec::with_capacity(reports.bucket_quota_usages.len());
        for usage in reports.bucket_quota_usages {
            self.rlqs.metrics.reports.increment(1);
            if let Some(action) = self.on_usage(&domain, usage).await? {
                actions.push(action);
            }
        }
        self.rlqs.metrics.buckets.set(self.rlqs.shares.len() as f64);
        Ok(actions)
    }

    /// The stream's domain: named by its first report; a later report
    /// naming another is refused.
    fn domain_of(&mut self, named: String) -> Result<String, Status> {
        match &self.domain {
            Some(d) if named.is_empty() || *d == named => Ok(d.clone()),
            Some(d) => Err(Status::invalid_argument(format!(
                "the stream's domain is `{d}`, a report names `{named}`: open a new stream for another domain"
            ))),
            None if named.is_empty() => Err(Status::invalid_argument(
                "the first report of a stream names no domain",
            )),
            None => {
                self.domain = Some(named.clone());
                Ok(named)
            }
        }
    }

    /// Charges one bucket's allowed requests and chooses its assignment
    /// (none if the store cannot decide now: the bucket keeps its
    /// assignment until its time to live ends).
    async fn on_usage(
        &mut self,
        domain: &str,
        usage: BucketQuotaUsage,
    ) -> Result<Option<BucketAction>, Status> {
        let (key, allowed, local) = self.accept(domain, usage)?;
        if !self.charge(domain, &key, allowed).await? {
            return Ok(None);
        }
        Ok(Some(self.assign(&key, local, true).await))
    }

    /// The assignment of `key` from its status in `self.response`, shared
    /// among its streams (`local`: the use of this instance's; `reporting`:
    /// this stream reported it now, and counts among the fleet's).
    pub(super) async fn assign(
        &mut self,
        key: &BucketKey,
        local: Vec<Option<u64>>,
        reporting: bool,
    ) -> BucketAction {
        let status = &self.response.statuses[0];
        let mut mine = None;
        if let Some(held) = self.buckets.get_mut(key) {
            held.limited = matches!(status.reason, Reason::Limited | Reason::Blocked);
            mine = held.usage;
        }
        let ttl = self.rlqs.settings.assignment_ttl;
        let policy = self.rlqs.svc.engine().policy_of(&self.response);
        let rule = policy.as_ref().zip(status.rule).map(|(p, id)| p.rule(id));
        let bucket = rule.and_then(|r| Some((token_bucket::of(r)?, r.cost)));
        let peers = Peers {
            usages: local.clone(),
            times: 1,
        };
        let (mut kind, mut strategy) = assignment::strategy(status, &peers, mine, bucket);
        if matches!(kind, Kind::Share | Kind::TokenBucket) {
            let backend = self.rlqs.svc.engine().backend();
            let stream = reporting.then_some((self.id, mine));
            let (sharing, counted) = (self.rlqs.fleet)
                .report(backend, key, stream, local, ttl)
                .await;
            if !counted {
                self.rlqs.metrics.unshared.increment(1);
            }
            let status = &self.response.statuses[0];
            (kind, strategy) = match sharing {
                Sharing::Streams(peers) => assignment::strategy(status, &peers, mine, bucket),
                Sharing::Blanket(k) => assignment::blanket(k),
            };
        }
        self.rlqs.metrics.action(kind);
        let terms = assignment::terms(&strategy);
        let assigned = Assigned {
            at: Instant::now(),
            kind,
            terms,
        };
        self.rlqs.shares.assigned(key, self.id, assigned);
        assignment::assign(key, strategy, ttl)
    }

    /// Checks one bucket's usage and records that this stream reported
    /// it: its key, the requests it allowed, and the use of each of this
    /// instance's streams that report it.
    fn accept(
        &mut self,
        domain: &str,
        usage: BucketQuotaUsage,
    ) -> Result<(BucketKey, u64, Vec<Option<u64>>), Status> {
        let bucket = usage
            .bucket_id
            .ok_or_else(|| Status::invalid_argument("a usage report has no bucket id"))?;
        let key = BucketKey::of(domain, &bucket)?;
        let allowed = mapping::allowed(usage.num_requests_allowed)?;
        let settings = self.rlqs.settings;
        if !self.buckets.contains_key(&key) && self.buckets.len() >= settings.max_buckets_per_stream
        {
            return Err(Status::resource_exhausted(format!(
                "a stream may report at most {} buckets (server.rlqs.max_buckets_per_stream)",
                settings.max_buckets_per_stream
            )));
        }
        let elapsed = (usage.time_elapsed).and_then(|d| Duration::try_from(d).ok());
        // Its demand: what it denied was asked of it too (a stream denied
        // all is not idle).
        let asked = allowed.saturating_add(usage.num_requests_denied.min(mapping::MAX_REPORTED));
        let used = weights::usage(asked, elapsed);
        let local = (self.rlqs.shares)
            .report(
                &key,
                (self.id, used),
                &self.nudge,
                Instant::now(),
                settings.assignment_ttl,
            )
            .map_err(|_| {
                Status::resource_exhausted(format!(
                    "the service holds {} buckets, its most (server.rlqs.max_buckets)",
                    settings.max_buckets
                ))
            })?;
        self.buckets.entry(key.clone()).or_default().usage = used;
        Ok((key, allowed, local))
    }

    /// Charges `allowed` requests to `key`'s rule (looks only, when none),
    /// its status in `self.response`; false when the store cannot decide
    /// now.
    pub(super) async fn charge(
        &mut self,
        domain: &str,
        key: &BucketKey,
        allowed: u64,
    ) -> Result<bool, Status> {
        // Allowed requests were admitted already: charged whatever the
        // counter says.
        let apply = if allowed > 0 {
            Apply::Force
        } else {
            Apply::Check
        };
        let descriptor = [key.descriptor(allowed.max(1))];
        let engine = self.rlqs.svc.engine();
        match engine
            .evaluate_with(domain, &descriptor, 0, apply, &mut self.response)
            .await
        {
            Ok(()) => Ok(true),
            Err(EngineError::InvalidArgument(e)) => Err(Status::invalid_argument(e)),
            Err(e) => {
                tracing::warn!(error = %e, "an RLQS usage report could not be charged");
                Ok(false)
            }
        }
    }
}

/// Resolves once the service drains (never if it cannot tell).
async fn drained(draining: &mut tokio::sync::watch::Receiver<bool>) {
    if draining.wait_for(|d| *d).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// How often a stream looks for buckets a reload removed and for streams
/// fallen silent, and pushes a bucket's assignment at most: every half
/// time to live, at least every 10 ms however short the time to live (a
/// timer needs a period).
pub(super) fn removals_every(ttl: std::time::Duration) -> std::time::Duration {
    (ttl / 2).max(std::time::Duration::from_millis(10))
}
