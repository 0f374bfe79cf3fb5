//! One request through the layer: shed, build its descriptors, wait for
//! the layer's concurrency permits, decide, delay, call the inner service,
//! answer per the contract — one state machine, [`ResponseFuture`].
//!
//! Whatever needs no waiting runs as the request arrives, before any
//! future of the layer's is built: a request shed, rejected, or admitted by
//! an in-memory decision leaves only the inner service's future to wait for
//! (then the headers to add to its response), or nothing. A request that
//! must wait — for a permit of the layer's queues, a shared store's round
//! trip, a shaper's delay — continues in the steps' future, boxed.

use std::fmt;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use floodgate::{Apply, Clock, Decision, Outcome, Timestamp};
use floodgate_policy::{Backend, Code, EngineError, Fallback, PolicySet};
use http::{HeaderMap, Request, Response as HttpResponse};
use pin_project_lite::pin_project;

use super::adaptive::{Admission, Priority};
use super::admission;
use super::body::FloodgateBody;
use super::charge::ChargeAfter;
use super::config::{ClientAddr, OnError};
use super::queue::QueueError;
use super::requests::RequestResult;
use super::shared::{Held, Hold, LayerStats, Scratch, Shared};
use super::shed::{Queued, ShedHold};
use crate::contract::{HeaderBuf, QuotaUnit, RATELIMIT, RATELIMIT_POLICY, Rejection, Verdict};

pub(crate) type Out<B> = HttpResponse<FloodgateBody<B>>;
/// The layer's own answer (a rejection), before it takes the response
/// body type of the inner service's.
type Answer = HttpResponse<bytes::Bytes>;
type Boxed<RB, E> = Pin<Box<dyn Future<Output = Result<Out<RB>, E>> + Send>>;

/// The peer of a request whose address nobody knows.
const NO_PEER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

pin_project! {
    /// A request through the layer (see the module docs): the inner
    /// service's response with the rate-limit headers added, or the layer's
    /// own answer. Dropping it (the client went away) gives back everything
    /// the request held.
    pub struct ResponseFuture<Fut, RB, E, B, C>
    where
        B: Backend,
        C: Clock,
        C: 'static,
    {
        #[pin]
        state: State<Fut, RB, E, B, C>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<Fut, RB, E, B, C>
    where
        B: Backend,
        C: Clock,
        C: 'static,
    {
        /// Admitted: the inner service, then its response completed.
        Inner { #[pin] fut: Fut, admitted: Option<Admitted<B, C>> },
        /// Answered by the layer (its own body, whatever the inner
        /// service's: the future stays small, moved per request).
        Answered { res: Option<(Answer, RequestResult)> },
        /// Waiting for a permit, the store or a delay.
        Waiting { fut: Boxed<RB, E> },
    }
}

impl<Fut, RB, E, B, C> Future for ResponseFuture<Fut, RB, E, B, C>
where
    Fut: Future<Output = Result<HttpResponse<RB>, E>>,
    B: Backend,
    C: Clock + 'static,
{
    type Output = Result<Out<RB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Inner { fut, admitted } => {
                let res = ready!(fut.poll(cx));
                let mut admitted = admitted.take().expect("polled after completion");
                Poll::Ready(match res {
                    Ok(res) => Ok(admitted.respond(res)),
                    Err(e) => {
                        admitted.keep.answered(None);
                        Err(e)
                    }
                })
            }
            StateProj::Answered { res } => {
                let (res, result) = res.take().expect("polled after completion");
                Poll::Ready(Ok(full(res, result)))
            }
            StateProj::Waiting { fut } => fut.as_mut().poll(cx),
        }
    }
}

impl<Fut, RB, E, B: Backend, C: Clock + 'static> fmt::Debug for ResponseFuture<Fut, RB, E, B, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// One request from `client` (none: its peer is looked up in the request's
/// extensions), decided under the `pinned` policy if any (else the
/// engine's current one); `inner` is called, at most once, when it is
/// admitted.
pub(crate) fn start<F, Fut, ReqBody, RB, E, B, C>(
    shared: &Arc<Shared<B, C>>,
    req: Request<ReqBody>,
    (client, pinned): (Option<ClientAddr>, Option<&Arc<PolicySet>>),
    inner: F,
) -> ResponseFuture<Fut, RB, E, B, C>
where
    F: FnOnce(Request<ReqBody>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<HttpResponse<RB>, E>> + Send + 'static,
    ReqBody: Send + 'static,
    RB: Send + 'static,
    E: Send + 'static,
    B: Backend,
    C: Clock + 'static,
{
    let state = |state| ResponseFuture { state };
    let mut keep = Keep::default();
    // Priority shedding first: it protects everything behind it.
    match shed(shared, &req, &mut keep) {
        ShedOutcome::Pass => {}
        ShedOutcome::Shed(rejected) => {
            return state(State::Answered {
                res: Some((rejected, RequestResult::Shed)),
            });
        }
        ShedOutcome::Wait(queued) => {
            let pinned = pinned.cloned();
            let fut = after_queue(shared.clone(), queued, req, (client, pinned), keep, inner);
            return state(State::Waiting { fut: Box::pin(fut) });
        }
    }
    let mut held = describe(shared, &req, (client, pinned));
    // The layer's queues wait; so does a request that may have to be
    // rejected for want of a delay slot (it is first decided without
    // charging: see `steps`).
    let waits = shared.global.is_some()
        || shared.keyed.is_some()
        || admission::slots_full(shared.delayed.get(), shared.settings.max_delayed);
    if !waits {
        let now = shared.engine.clock().now();
        if let Some(decided) = decide_now(shared, &mut held, Apply::Commit) {
            return state(
                match conclude(shared, held, keep, req.headers(), now, decided) {
                    Err(res) => State::Answered { res: Some(res) },
                    Ok(admitted) if admitted.delay().is_none() => State::Inner {
                        fut: inner(req),
                        admitted: Some(admitted),
                    },
                    Ok(admitted) => State::Waiting {
                        fut: Box::pin(admitted.run(shared.clone(), req, inner)),
                    },
                },
            );
        }
    }
    state(State::Waiting {
        fut: Box::pin(steps(shared.clone(), held, keep, req, inner)),
    })
}

/// The request's descriptors, built in pooled buffers, for `client` (none:
/// its peer is looked up in the request's extensions), to be decided
/// under the `pinned` policy (none: the engine's current one).
fn describe<B: Backend, C: Clock + 'static, T>(
    shared: &Arc<Shared<B, C>>,
    req: &Request<T>,
    (client, pinned): (Option<ClientAddr>, Option<&Arc<PolicySet>>),
) -> Held<B, C> {
    let mut held = Held {
        shared: shared.clone(),
        scratch: Some(shared.take()),
        holds_units: false,
    };
    let client = client.unwrap_or_else(|| {
        ClientAddr::new((shared.settings.peer)(req.extensions()).unwrap_or(NO_PEER))
    });
    let s = held.scratch();
    s.prerendered = false;
    match pinned {
        Some(policy) => s.response.pin(policy),
        None => s.response.unpin(),
    }
    let (peer, resolved) = (client.peer.ip(), client.resolved);
    let ext = req.extensions();
    shared
        .identity
        .build_resolved(req, peer, resolved, ext, &mut s.out);
    held
}

/// A request that waits in the adaptive limit's queue first, then goes
/// through the other [`steps`].
async fn after_queue<F, Fut, ReqBody, RB, E, B, C>(
    shared: Arc<Shared<B, C>>,
    queued: Queued<B, C>,
    req: Request<ReqBody>,
    (client, pinned): (Option<ClientAddr>, Option<Arc<PolicySet>>),
    mut keep: Keep,
    inner: F,
) -> Result<Out<RB>, E>
where
    F: FnOnce(Request<ReqBody>) -> Fut,
    Fut: Future<Output = Result<HttpResponse<RB>, E>>,
    B: Backend,
    C: Clock + 'static,
{
    if let Some(rejected) = waited(&shared, queued, req.headers(), &mut keep).await {
        return Ok(full(rejected, RequestResult::Shed));
    }
    let held = describe(&shared, &req, (client, pinned.as_ref()));
    steps(shared, held, keep, req, inner).await
}

/// The steps of a request that waits: the layer's queues, then the
/// decision (from a shared store), then its outcome.
async fn steps<F, Fut, ReqBody, RB, E, B, C>(
    shared: Arc<Shared<B, C>>,
    mut held: Held<B, C>,
    mut keep: Keep,
    req: Request<ReqBody>,
    inner: F,
) -> Result<Out<RB>, E>
where
    F: FnOnce(Request<ReqBody>) -> Fut,
    Fut: Future<Output = Result<HttpResponse<RB>, E>>,
    B: Backend,
    C: Clock + 'static,
{
    // Layer concurrency limits, waiting in line when configured.
    if let Some(rejected) = queues(&shared, &mut held, req.headers(), &mut keep).await {
        return Ok(full(rejected, RequestResult::Denied));
    }
    // The decision, from one clock reading taken just before it.
    let now = shared.engine.clock().now();
    // Every delay slot taken: a request the shaper would delay is to be
    // rejected, so it is first decided without charging anything (see
    // `admission`).
    if admission::slots_full(shared.delayed.get(), shared.settings.max_delayed)
        && let Ok(Decided::Engine | Decided::Planned) =
            decide(&shared, &mut held, Apply::Check).await
    {
        let s = held.scratch();
        let policy = shared.engine.policy_of(&s.response);
        let (report, contract) = (&mut s.report, &shared.contract);
        admission::judge(report, &s.response, policy.as_deref(), contract, false);
        if admission::refused_for_want_of_slot(report) {
            LayerStats::inc(&shared.stats.decided);
            LayerStats::inc(&shared.stats.delay_queue_full);
            shared.counted(RequestResult::Denied);
            let res = shared.contract.reject(
                Rejection::Limited(&s.report),
                req.headers(),
                now,
                &mut s.buf,
            );
            return Ok(full(res, RequestResult::Denied));
        }
    }
    let decided = decide(&shared, &mut held, Apply::Commit).await;
    match conclude(&shared, held, keep, req.headers(), now, decided) {
        Err((res, result)) => Ok(full(res, result)),
        Ok(admitted) => admitted.run(shared, req, inner).await,
    }
}

/// How the engine decided a request.
enum Decided {
    /// No descriptor: nothing to decide.
    Nothing,
    /// By the layer's plan (its rule holds no concurrency units).
    Planned,
    /// By the engine's lookup.
    Engine,
}

/// The engine's decision on the request's descriptors when it needs no
/// waiting (an in-memory store); none when it needs the store's round trip.
fn decide_now<B: Backend, C: Clock + 'static>(
    shared: &Shared<B, C>,
    held: &mut Held<B, C>,
    apply: Apply,
) -> Option<Result<Decided, EngineError>> {
    let s = held.scratch();
    if s.out.is_empty() {
        return Some(Ok(Decided::Nothing));
    }
    let engine = &shared.engine;
    let domain = shared.identity.domain();
    if shared.plannable && shared.policy_cache.decide(engine, domain, apply, s) {
        return Some(Ok(Decided::Planned));
    }
    let hits = s.out.hits_addend();
    engine
        .evaluate_now(domain, &s.out, hits, apply, &mut s.response)
        .map(|r| r.map(|()| Decided::Engine))
}

/// The engine's decision on the request's descriptors, waiting for the
/// store if it must.
async fn decide<B: Backend, C: Clock + 'static>(
    shared: &Shared<B, C>,
    held: &mut Held<B, C>,
    apply: Apply,
) -> Result<Decided, EngineError> {
    if let Some(decided) = decide_now(shared, held, apply) {
        return decided;
    }
    let s = held.scratch();
    let hits = s.out.hits_addend();
    let domain = shared.identity.domain();
    shared
        .engine
        .evaluate_with(domain, &s.out, hits, apply, &mut s.response)
        .await
        .map(|()| Decided::Engine)
}

/// What is left once a request is decided: admitted (maybe after a
/// shaper's delay), or answered by the layer (a rejection, moved as it
/// is: no allocation per answer).
type Next<B, C> = Result<Admitted<B, C>, (Answer, RequestResult)>;

/// The outcome of a decision: rejected, delayed or admitted (a limiter
/// failure is let through or rejected, per `on_error`).
#[allow(clippy::result_large_err)]
fn conclude<B: Backend, C: Clock + 'static>(
    shared: &Shared<B, C>,
    mut held: Held<B, C>,
    keep: Keep,
    headers: &HeaderMap,
    now: Timestamp,
    decided: Result<Decided, EngineError>,
) -> Next<B, C> {
    let planned = match decided {
        Ok(Decided::Nothing) => {
            shared.counted(RequestResult::Allowed);
            return Admitted::bare(keep, RequestResult::Allowed);
        }
        Ok(Decided::Planned) => true,
        Ok(Decided::Engine) => false,
        Err(_) => return limiter_failed(shared, keep, headers, now),
    };
    LayerStats::inc(&shared.stats.decided);
    let on_success = shared.contract.on_success;
    // A planned rule holds no units: an admitted request keeps nothing.
    if planned
        && !on_success
        && shared.response_costs.is_none()
        && admission::plainly_allowed(&held.scratch().response)
    {
        shared.counted(RequestResult::Allowed);
        return Admitted::bare(keep, RequestResult::Allowed);
    }
    if !(planned && on_success && admitted_headers(shared, held.scratch())) {
        settle(shared, &mut held);
    }
    let fallback = held.scratch().response.fallback();
    let delay = match held.scratch().report.verdict() {
        Verdict::Denied => {
            LayerStats::inc(&shared.stats.denied);
            let result = RequestResult::denied_by(fallback);
            shared.counted(result);
            let s = held.scratch();
            let rejection = Rejection::Limited(&s.report);
            let res = shared.contract.reject(rejection, headers, now, &mut s.buf);
            return Err((res, result));
        }
        // Counted once the delay is over (shed or queued out then, it is
        // counted so instead).
        Verdict::Delayed(delay) => delay,
        Verdict::Allowed => {
            let result = RequestResult::allowed_by(fallback);
            shared.counted(result);
            if !on_success && !held.holds_units && shared.response_costs.is_none() {
                return Admitted::bare(keep, result);
            }
            Duration::ZERO
        }
    };
    Ok(Admitted {
        headers: Some((held, now, delay)),
        keep,
        result: admitted_as(delay, fallback),
    })
}

/// What an admitted request delayed by `delay` counts as (a delayed one
/// is counted once its delay is over).
fn admitted_as(delay: Duration, fallback: Option<Fallback>) -> RequestResult {
    if delay.is_zero() {
        RequestResult::allowed_by(fallback)
    } else {
        RequestResult::Delayed
    }
}

/// A request the engine could not decide: let through (fail open) or
/// rejected with 503, per `on_error`.
#[allow(clippy::result_large_err)]
fn limiter_failed<B: Backend, C: Clock + 'static>(
    shared: &Shared<B, C>,
    keep: Keep,
    headers: &HeaderMap,
    now: Timestamp,
) -> Next<B, C> {
    match shared.settings.on_error {
        OnError::Allow => {
            LayerStats::inc(&shared.stats.fail_open);
            metrics::counter!("floodgate_http_fail_open_total").increment(1);
            shared.counted(RequestResult::FailedOpen);
            Admitted::bare(keep, RequestResult::FailedOpen)
        }
        OnError::Reject => {
            LayerStats::inc(&shared.stats.fail_closed);
            shared.counted(RequestResult::FailedClosed);
            let mut buf = HeaderBuf::new();
            let res = shared
                .contract
                .reject(Rejection::Unavailable, headers, now, &mut buf);
            Err((res, RequestResult::FailedClosed))
        }
    }
}

/// What an admitted request adds to the inner service's response, and
/// keeps until its body ends.
struct Admitted<B: Backend, C: Clock + 'static> {
    /// The request's buffers and decision time, when its response gets
    /// the contract's headers, and the shaper's delay to sleep first (zero:
    /// none).
    headers: Option<(Held<B, C>, Timestamp, Duration)>,
    keep: Keep,
    /// What the request is counted as.
    result: RequestResult,
}

impl<B: Backend, C: Clock + 'static> Admitted<B, C> {
    /// Admitted with nothing to write, counted as `result`.
    #[allow(clippy::result_large_err)]
    fn bare(keep: Keep, result: RequestResult) -> Next<B, C> {
        Ok(Admitted {
            headers: None,
            keep,
            result,
        })
    }

    /// The shaper's delay, if any.
    fn delay(&self) -> Option<Duration> {
        self.headers.as_ref().map(|h| h.2).filter(|d| !d.is_zero())
    }

    /// Sleeps the shaper's delay, if any, then calls the inner service and
    /// completes its response.
    async fn run<F, Fut, ReqBody, RB, E>(
        mut self,
        shared: Arc<Shared<B, C>>,
        req: Request<ReqBody>,
        inner: F,
    ) -> Result<Out<RB>, E>
    where
        F: FnOnce(Request<ReqBody>) -> Fut,
        Fut: Future<Output = Result<HttpResponse<RB>, E>>,
    {
        if let Some((held, _, delay)) = self.headers.as_mut().filter(|h| !h.2.is_zero()) {
            // The slots were free a moment ago (else the request was decided
            // without charging, in `steps`). Taken by others since, the
            // charged request still waits, one over the bound, rather than
            // be rejected after paying.
            let slot = shared
                .delayed
                .try_enter(shared.settings.max_delayed)
                .unwrap_or_else(|| shared.delayed.enter());
            LayerStats::inc(&shared.stats.delayed);
            // A delayed request is not in flight yet: while it sleeps, its
            // place in the in-flight count and its concurrency permits are
            // given back (others may use them), and taken again — through
            // shedding and the queues, in arrival order — once the delay is
            // over. Dropped with this future if the client goes away: the
            // slot and the engine's units are given back too.
            self.keep.clear();
            tokio::time::sleep(*delay).await;
            drop(slot);
            let keep = &mut self.keep;
            let outcome = shed(&shared, &req, keep);
            if let Some(rejected) = shed_or_wait(&shared, outcome, req.headers(), keep).await {
                return Ok(full(rejected, RequestResult::Shed));
            }
            if let Some(rejected) = queues(&shared, held, req.headers(), keep).await {
                return Ok(full(rejected, RequestResult::Denied));
            }
            shared.counted(RequestResult::Delayed);
        }
        match inner(req).await {
            Ok(res) => Ok(self.respond(res)),
            Err(e) => {
                self.keep.answered(None);
                Err(e)
            }
        }
    }

    /// The inner service's response, with the contract's headers, its
    /// body holding what the request keeps.
    fn respond<RB>(self, mut res: HttpResponse<RB>) -> Out<RB> {
        let Admitted {
            headers,
            mut keep,
            result,
        } = self;
        keep.answered(Some(res.status()));
        if let Some((mut held, now, elapsed)) = headers {
            let contract = &held.shared.contract;
            let s = held.scratch.get_or_insert_with(Box::default);
            let headers = res.headers_mut();
            if s.prerendered {
                if let Some(policy) = s.policy_value.take() {
                    headers.insert(RATELIMIT_POLICY, policy);
                }
                if let Some(current) = s.buf.value() {
                    headers.insert(RATELIMIT, current);
                }
            } else {
                let policy = s.policy_value.as_ref();
                contract.write_headers(&s.report, now, elapsed, headers, &mut s.buf, policy);
            }
            if held.shared.response_costs.is_some() {
                let charge = ChargeAfter::new(held, res.headers());
                keep.extend(charge.map(|c| Box::new(c) as Box<dyn Hold>));
            } else if held.holds_units {
                keep.push(Box::new(held));
            }
        }
        let keep = (!keep.is_empty()).then(|| Box::new(keep) as Box<dyn Hold>);
        res.map(|b| FloodgateBody::inner(b, keep, result))
    }
}

/// What a request keeps until its response body ends.
type Keep = Vec<Box<dyn Hold>>;

/// The layer's own answer to a request counted as `result`.
fn full<B>(res: HttpResponse<bytes::Bytes>, result: RequestResult) -> Out<B> {
    res.map(|b| FloodgateBody::full(b, result))
}

/// The report of a decided request (its headers, its verdict), and whether
/// it holds engine concurrency units.
fn settle<B: Backend, C: Clock + 'static>(shared: &Shared<B, C>, held: &mut Held<B, C>) {
    let s = held.scratch();
    let policy = shared.engine.policy_of(&s.response);
    let contract = &shared.contract;
    // Nothing written on admitted responses: then the report is read for
    // its verdict alone. A response holding units keeps its policy, so
    // none is lost to a reload here.
    let lines = contract.on_success;
    let filled = admission::judge(
        &mut s.report,
        &s.response,
        policy.as_deref(),
        contract,
        lines,
    );
    s.policy_value = match &policy {
        Some(p) if filled => shared.policy_cache.get(p, &s.report, contract),
        _ => None,
    };
    if let Some(policy) = policy {
        held.holds_units = admission::holds_units(&s.response, &policy);
    }
}

/// For an admitted request decided by the plan under one rule: renders its
/// `RateLimit` and `RateLimit-Policy` from the rule's cached pieces,
/// exactly as the contract would from a filled report; false (nothing
/// changed) when that does not apply — a delay, a denial, a shadow rule, a
/// rule not rendered yet or reported differently — and the report is to be
/// filled.
fn admitted_headers<B: Backend, C: Clock + 'static>(
    shared: &Shared<B, C>,
    s: &mut Scratch,
) -> bool {
    let r = &s.response;
    let [status] = &r.statuses[..] else {
        return false;
    };
    let (Some(rule), Some(d)) = (status.rule, status.decision) else {
        return false;
    };
    if r.overall != Code::Ok
        || r.shadowed
        || status.code != Code::Ok
        || status.shadow
        || d.outcome != Outcome::Allowed
    {
        return false;
    }
    let Some(policy) = shared.policy_cache.admitted(
        r.generation(),
        rule,
        d.remaining,
        d.reset_after,
        s.buf.text(),
    ) else {
        return false;
    };
    s.report.clear();
    s.policy_value = Some(policy);
    s.prerendered = true;
    true
}

/// What priority shedding made of a request.
enum ShedOutcome<B: Backend, C: Clock + 'static> {
    /// Counted in flight (under the adaptive limit if there is one): on.
    Pass,
    /// Shed: the layer's 503.
    Shed(Answer),
    /// Waiting in the adaptive limit's queue.
    Wait(Queued<B, C>),
}

/// Priority shedding: counts the request in flight, under the adaptive
/// limit if there is one (in `keep`), lets it wait in the adaptive limit's
/// queue, or answers 503 when it must be shed.
fn shed<B: Backend, C: Clock + 'static, T>(
    shared: &Arc<Shared<B, C>>,
    req: &Request<T>,
    keep: &mut Keep,
) -> ShedOutcome<B, C> {
    let Some(shedding) = shared.settings.shedding.as_ref() else {
        return ShedOutcome::Pass;
    };
    let priority = shedding.priority(req, &shared.identity);
    let Some(gauge) = shedding.enter(priority, &shared.in_flight) else {
        return ShedOutcome::Shed(shed_answer(shared, req.headers(), priority));
    };
    let Some(limit) = &shared.adaptive else {
        keep.push(Box::new(ShedHold::<B, C>::new(gauge, None)));
        return ShedOutcome::Pass;
    };
    match limit.admit(priority, shared.engine.clock().now()) {
        Admission::Admitted(ticket) => {
            let hold = ShedHold::new(gauge, Some((shared.clone(), ticket)));
            keep.push(Box::new(hold));
            ShedOutcome::Pass
        }
        Admission::Waiting(w) => ShedOutcome::Wait(Queued::new(gauge, shared.clone(), w, priority)),
        Admission::Shed => ShedOutcome::Shed(shed_answer(shared, req.headers(), priority)),
    }
}

/// What [`shed`] made of a request, waiting in the adaptive limit's
/// queue if it must: none when the request goes on (its place in `keep`),
/// the 503 when it is shed.
async fn shed_or_wait<B: Backend, C: Clock + 'static>(
    shared: &Arc<Shared<B, C>>,
    shed: ShedOutcome<B, C>,
    headers: &HeaderMap,
    keep: &mut Keep,
) -> Option<Answer> {
    match shed {
        ShedOutcome::Pass => None,
        ShedOutcome::Shed(answer) => Some(answer),
        ShedOutcome::Wait(queued) => waited(shared, queued, headers, keep).await,
    }
}

/// Waits in the adaptive limit's queue: none when admitted (its place in
/// `keep`), the 503 when shed (its bound passed, or it was pushed out).
async fn waited<B: Backend, C: Clock + 'static>(
    shared: &Arc<Shared<B, C>>,
    queued: Queued<B, C>,
    headers: &HeaderMap,
    keep: &mut Keep,
) -> Option<Answer> {
    let priority = queued.priority;
    match queued.admitted().await {
        Some(hold) => {
            keep.push(Box::new(hold));
            None
        }
        None => Some(shed_answer(shared, headers, priority)),
    }
}

/// The 503 of a request of class `priority` that is shed, counted.
fn shed_answer<B: Backend, C: Clock + 'static>(
    shared: &Shared<B, C>,
    headers: &HeaderMap,
    priority: Priority,
) -> Answer {
    LayerStats::inc(&shared.stats.shed);
    metrics::counter!("floodgate_http_shed_total", "class" => priority.label()).increment(1);
    shared.counted(RequestResult::Shed);
    let retry_after = shared
        .settings
        .shedding
        .as_ref()
        .and_then(|s| s.retry_after);
    shared.contract.reject(
        Rejection::Overloaded { retry_after },
        headers,
        shared.engine.clock().now(),
        &mut HeaderBuf::new(),
    )
}

/// The layer's concurrency permits (global, then per key), waited for in
/// line; kept in `keep`. A full queue or a wait past its timeout is
/// answered per the contract, as a denial by a policy of the limit.
async fn queues<B: Backend, C: Clock + 'static>(
    shared: &Shared<B, C>,
    held: &mut Held<B, C>,
    headers: &HeaderMap,
    keep: &mut Keep,
) -> Option<Answer> {
    let (name, max, e) = 'rejected: {
        if let Some(q) = &shared.global {
            match q.acquire().await {
                Ok(p) => keep.push(Box::new(p)),
                Err(e) => break 'rejected ("concurrency", q.limit.max, e),
            }
        }
        let kq = shared.keyed.as_ref()?;
        let out = &held.scratch().out;
        let value: Box<str> = out.iter().find_map(|d| d.get(&kq.config.key))?.into();
        match kq.acquire(&value).await {
            Ok(p) => {
                keep.push(Box::new(p));
                return None;
            }
            Err(e) => (&*kq.name, kq.config.limit.max, e),
        }
    };
    LayerStats::inc(&shared.stats.concurrency_rejected);
    metrics::counter!("floodgate_http_concurrency_rejected_total",
        "reason" => match e { QueueError::Full => "full", QueueError::Timeout => "timeout" })
    .increment(1);
    shared.counted(RequestResult::Denied);
    let now = shared.engine.clock().now();
    let s = held.scratch();
    s.report.clear();
    let p = s
        .report
        .add_policy(name, max as u64, None, QuotaUnit::ConcurrentRequests);
    let denied = Decision {
        outcome: Outcome::Denied,
        limit: max as u64,
        remaining: 0,
        reset_after: Duration::ZERO,
        retry_after: None,
    };
    s.report.add_current(p, &denied);
    s.report.set_verdict(Verdict::Denied, None);
    let rejection = Rejection::Limited(&s.report);
    Some(shared.contract.reject(rejection, headers, now, &mut s.buf))
}
