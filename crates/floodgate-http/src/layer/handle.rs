//! One request through the layer: shed, queue, decide, delay, call, and
//! answer per the contract.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use floodgate::{Apply, Clock, Decision, Outcome, Timestamp};
use floodgate_policy::compile::PolicySet;
use floodgate_policy::{Backend, Code, Response};
use http::{Request, Response as HttpResponse};

use super::body::FloodgateBody;
use super::config::OnError;
use super::queue::QueueError;
use super::shared::{Held, Hold, LayerStats, Shared};
use crate::contract::{QuotaUnit, Rejection, Report, Verdict};

pub(super) type Out<B> = HttpResponse<FloodgateBody<B>>;

const NO_PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// What a request keeps until its response body ends.
#[derive(Default)]
pub(super) struct Keep {
    parts: Vec<Box<dyn Hold>>,
}

impl Keep {
    fn push(&mut self, h: impl Hold + 'static) {
        self.parts.push(Box::new(h));
    }

    fn into_hold(self) -> Option<Box<dyn Hold>> {
        (!self.parts.is_empty()).then(|| Box::new(self.parts) as Box<dyn Hold>)
    }
}

pub(super) fn full<B>(res: HttpResponse<bytes::Bytes>) -> Out<B> {
    res.map(FloodgateBody::full)
}

/// Whether an admitted request holds units of an engine concurrency limit.
fn holds_units(response: &Response, policy: &PolicySet) -> bool {
    response.statuses.iter().any(|s| {
        s.decision.is_some_and(|d| d.is_allowed())
            && s.rule.is_some_and(|id| {
                policy
                    .rule(id)
                    .limits()
                    .iter()
                    .any(|l| l.limit.is_concurrency())
            })
    })
}

/// Whether `response` admits the request at once: nothing over the limit
/// and no shaper delay. Its report's verdict is then "allowed" whatever
/// else it holds.
pub(super) fn plainly_allowed(response: &Response) -> bool {
    response.overall != Code::OverLimit
        && !response.statuses.iter().any(|s| {
            s.decision
                .is_some_and(|d| matches!(d.outcome, Outcome::Delayed(x) if x > Duration::ZERO))
        })
}

/// The report of a layer concurrency rejection.
fn concurrency_report(report: &mut Report, name: &str, max: usize) {
    report.clear();
    let p = report.add_policy(name, max as u64, None, QuotaUnit::ConcurrentRequests);
    report.add_current(
        p,
        &Decision {
            outcome: Outcome::Denied,
            limit: max as u64,
            remaining: 0,
            reset_after: Duration::ZERO,
            retry_after: None,
        },
    );
    report.set_verdict(Verdict::Denied, None);
}

/// One request: `inner` is called (at most once) when it is admitted.
/// `peer` is the client's address when the caller knows it (else it is
/// looked up in the request's extensions).
pub(crate) async fn handle<F, Fut, ReqBody, ResBody, E, B, C>(
    shared: Arc<Shared<B, C>>,
    inner: F,
    req: Request<ReqBody>,
    peer: Option<SocketAddr>,
) -> Result<Out<ResBody>, E>
where
    F: FnOnce(Request<ReqBody>) -> Fut,
    Fut: Future<Output = Result<HttpResponse<ResBody>, E>>,
    B: Backend,
    C: Clock + 'static,
{
    let mut keep = Keep::default();
    // Priority shedding first: it protects everything behind it.
    if let Some(rejected) = shed(&shared, &req, &mut keep) {
        return Ok(rejected);
    }
    let mut held = descriptors(&shared, &req, peer);
    // Layer concurrency limits, waiting in line when configured.
    if let Some(rejected) = queues(&shared, &mut held, req.headers(), &mut keep).await {
        return Ok(rejected);
    }
    // The decision, from one clock reading taken just before it.
    let now = shared.engine.clock().now();
    // Every delay slot taken: a request the shaper would delay is to be
    // rejected, so it is first decided without charging anything — the
    // rejection costs it nothing, as a rejection over a full burst.
    if shared.delayed.get() >= shared.settings.max_delayed
        && let Ok(true) = decide(&shared, &mut held, Apply::Check).await
    {
        let s = held.scratch();
        match shared.engine.policy_of(&s.response) {
            Some(policy) => s
                .report
                .fill(&s.response, &policy, shared.contract.config()),
            // Decided under a policy replaced since: no delay to turn
            // into a rejection.
            None => s.report.clear(),
        }
        if let Verdict::Delayed(_) = s.report.verdict() {
            LayerStats::inc(&shared.stats.decided);
            LayerStats::inc(&shared.stats.delay_queue_full);
            s.report.deny_delayed();
            let res = shared.contract.reject(
                Rejection::Limited(&s.report),
                req.headers(),
                now,
                s.buf.text(),
            );
            return Ok(full(res));
        }
    }
    let decided = decide(&shared, &mut held, Apply::Commit).await;
    match decided {
        Ok(true) => {}
        Ok(false) => {
            drop(held);
            let res = inner(req).await?;
            return Ok(res.map(|b| FloodgateBody::inner(b, keep.into_hold())));
        }
        Err(e) => {
            drop(held);
            match shared.settings.on_error {
                OnError::Allow => {
                    LayerStats::inc(&shared.stats.fail_open);
                    metrics::counter!("floodgate_http_fail_open_total").increment(1);
                    let _ = e;
                    let res = inner(req).await?;
                    return Ok(res.map(|b| FloodgateBody::inner(b, keep.into_hold())));
                }
                OnError::Reject => {
                    LayerStats::inc(&shared.stats.fail_closed);
                    let res = shared.contract.reject(
                        Rejection::Unavailable,
                        req.headers(),
                        now,
                        &mut String::new(),
                    );
                    return Ok(full(res));
                }
            }
        }
    }
    LayerStats::inc(&shared.stats.decided);
    settle(&shared, &mut held);
    finish(shared, held, keep, req, now, inner).await
}

/// The request's pooled buffers, holding its descriptors (built for the
/// client at `peer`, else at the address in its extensions).
pub(super) fn descriptors<B: Backend, C: Clock + 'static, T>(
    shared: &Arc<Shared<B, C>>,
    req: &Request<T>,
    peer: Option<SocketAddr>,
) -> Held<B, C> {
    let mut held = Held {
        shared: shared.clone(),
        scratch: Some(shared.take()),
        holds_units: false,
    };
    let peer = peer
        .or_else(|| (shared.settings.peer)(req.extensions()))
        .unwrap_or(NO_PEER);
    let s = held.scratch();
    s.prerendered = false;
    shared.identity.request_descriptors(req, peer, &mut s.out);
    held
}

/// The report of a decided request (its headers, its verdict), and whether
/// it holds engine concurrency units.
pub(super) fn settle<B: Backend, C: Clock + 'static>(shared: &Shared<B, C>, held: &mut Held<B, C>) {
    let policy = shared.engine.policy_of(&held.scratch().response);
    if let Some(policy) = &policy {
        let s = held.scratch();
        if shared.contract.config().on_success || !plainly_allowed(&s.response) {
            s.report.fill(&s.response, policy, shared.contract.config());
            s.policy_value = shared
                .policy_headers
                .get(policy, &s.report, &shared.contract);
        } else {
            // Admitted, and nothing is written on admitted responses: the
            // report would only be read for its verdict, "allowed".
            s.report.clear();
            s.policy_value = None;
        }
        held.holds_units = holds_units(&held.scratch().response, policy);
    } else {
        // Decided under a policy a reload replaced in the meantime (its
        // rule ids do not index the new one): the verdict alone, without
        // the policy's names. A response holding units keeps its policy,
        // so none is lost here.
        let s = held.scratch();
        s.report.clear();
        s.policy_value = None;
        if s.response.overall == Code::OverLimit {
            s.report.set_verdict(Verdict::Denied, None);
        }
    }
}

/// A decided request, settled: rejected, delayed then passed on, or passed
/// on at once, its response given the contract's headers.
pub(super) async fn finish<F, Fut, ReqBody, ResBody, E, B, C>(
    shared: Arc<Shared<B, C>>,
    mut held: Held<B, C>,
    mut keep: Keep,
    req: Request<ReqBody>,
    now: Timestamp,
    inner: F,
) -> Result<Out<ResBody>, E>
where
    F: FnOnce(Request<ReqBody>) -> Fut,
    Fut: Future<Output = Result<HttpResponse<ResBody>, E>>,
    B: Backend,
    C: Clock + 'static,
{
    let mut elapsed = Duration::ZERO;
    match held.scratch().report.verdict() {
        Verdict::Denied => return Ok(denied(&shared, &mut held, req.headers(), now)),
        Verdict::Delayed(delay) => {
            // The slots were free a moment ago (else the request was
            // decided without charging, above). Taken by others since, the
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
            // shedding and the queues, in arrival order — once the delay
            // is over. Dropped with this future if the client goes away:
            // the slot and the engine's units are given back too.
            drop(std::mem::take(&mut keep));
            tokio::time::sleep(delay).await;
            drop(slot);
            elapsed = delay;
            if let Some(rejected) = shed(&shared, &req, &mut keep) {
                return Ok(rejected);
            }
            if let Some(rejected) = queues(&shared, &mut held, req.headers(), &mut keep).await {
                return Ok(rejected);
            }
        }
        Verdict::Allowed => {}
    }
    let mut res = inner(req).await?;
    {
        let s = held.scratch();
        shared.contract.write_headers_with(
            &s.report,
            now,
            elapsed,
            res.headers_mut(),
            &mut s.buf,
            s.policy_value.as_ref(),
        );
    }
    if held.holds_units {
        keep.push(held);
    } else {
        drop(held);
    }
    Ok(res.map(|b| FloodgateBody::inner(b, keep.into_hold())))
}

/// The contract's rejection of a request its report denies.
pub(super) fn denied<B: Backend, C: Clock + 'static, RB>(
    shared: &Shared<B, C>,
    held: &mut Held<B, C>,
    headers: &http::HeaderMap,
    now: Timestamp,
) -> Out<RB> {
    LayerStats::inc(&shared.stats.denied);
    let s = held.scratch();
    let res = shared
        .contract
        .reject(Rejection::Limited(&s.report), headers, now, s.buf.text());
    full(res)
}

/// Priority shedding: counts the request in flight (in `keep`), or
/// answers 503 when it must be shed.
fn shed<B: Backend, C: Clock + 'static, T, RB>(
    shared: &Shared<B, C>,
    req: &Request<T>,
    keep: &mut Keep,
) -> Option<Out<RB>> {
    let shedder = shared.shedder.as_ref()?;
    let low = shedder.is_low(req, &shared.identity);
    match shedder.enter(low) {
        Some(g) => {
            keep.push(g);
            None
        }
        None => {
            LayerStats::inc(&shared.stats.shed);
            metrics::counter!("floodgate_http_shed_total").increment(1);
            let retry_after = shedder.config.retry_after;
            let res = shared.contract.reject(
                Rejection::Overloaded { retry_after },
                req.headers(),
                shared.engine.clock().now(),
                &mut String::new(),
            );
            Some(full(res))
        }
    }
}

/// The layer's concurrency permits (global, then per key), waited for in
/// line; kept in `keep`. A full queue or a wait past its timeout is
/// answered per the contract.
async fn queues<B: Backend, C: Clock + 'static, RB>(
    shared: &Shared<B, C>,
    held: &mut Held<B, C>,
    headers: &http::HeaderMap,
    keep: &mut Keep,
) -> Option<Out<RB>> {
    if let Some(q) = &shared.global {
        match q.acquire().await {
            Ok(p) => keep.push(p),
            Err(e) => {
                return Some(queue_rejection(
                    shared,
                    held,
                    headers,
                    "concurrency",
                    q.limit().max,
                    e,
                ));
            }
        }
    }
    if let Some(kq) = &shared.keyed {
        let value = held
            .scratch()
            .out
            .iter()
            .find_map(|d| d.get(&kq.config.key))
            .map(Box::<str>::from);
        if let Some(v) = value {
            match kq.acquire(&v).await {
                Ok(p) => keep.push(p),
                Err(e) => {
                    let name = format!("concurrency:{}", kq.config.key);
                    let max = kq.config.limit.max;
                    return Some(queue_rejection(shared, held, headers, &name, max, e));
                }
            }
        }
    }
    None
}

/// One engine decision on the request's descriptors (`Ok(false)`: none,
/// nothing to decide).
async fn decide<B: Backend, C: Clock + 'static>(
    shared: &Shared<B, C>,
    held: &mut Held<B, C>,
    apply: Apply,
) -> Result<bool, floodgate_policy::EngineError> {
    let s = held.scratch();
    if s.out.is_empty() {
        return Ok(false);
    }
    let hits = s.out.hits_addend();
    let domain = shared.identity.domain();
    let engine = &shared.engine;
    // In memory, decided right here; a shared store's round trip is a
    // future of its own, boxed so that this one stays small (it is moved
    // whole, and its size is that of its largest await).
    match engine.evaluate_now(domain, &s.out, hits, apply, &mut s.response) {
        Some(decided) => decided,
        None => Box::pin(engine.evaluate_with(domain, &s.out, hits, apply, &mut s.response)).await,
    }
    .map(|()| true)
}

fn queue_rejection<B: Backend, C: Clock + 'static, RB>(
    shared: &Shared<B, C>,
    held: &mut Held<B, C>,
    headers: &http::HeaderMap,
    name: &str,
    max: usize,
    e: QueueError,
) -> Out<RB> {
    LayerStats::inc(&shared.stats.concurrency_rejected);
    let now = shared.engine.clock().now();
    let s = held.scratch();
    concurrency_report(&mut s.report, name, max);
    metrics::counter!("floodgate_http_concurrency_rejected_total",
        "reason" => match e { QueueError::Full => "full", QueueError::Timeout => "timeout" })
    .increment(1);
    let res = shared
        .contract
        .reject(Rejection::Limited(&s.report), headers, now, s.buf.text());
    full(res)
}
