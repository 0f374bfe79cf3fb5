//! The layer's short path: a request whose one descriptor selects a rule
//! known in advance (an engine [`DirectPlan`]) is decided before any future
//! is built, and only what is left to wait for is returned: the inner
//! service's future (plus the headers to add to its response), a finished
//! rejection, or — for a delay — the general steps from the decision on.
//!
//! Everything else (shedding, the layer's concurrency queues, several
//! descriptors, a shared store, a full delay queue) takes the general path
//! of [`handle`](super::handle::handle), unchanged.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use arc_swap::ArcSwapOption;
use floodgate::{Apply, Clock, Outcome, Timestamp};
use floodgate_policy::{Backend, Code, Descriptor, DirectPlan, Engine};
use http::{Request, Response as HttpResponse};
use pin_project_lite::pin_project;

use super::body::FloodgateBody;
use super::handle::{Keep, Out, denied, descriptors, finish, handle, plainly_allowed, settle};
use super::shared::{Held, LayerStats, Shared};
use crate::contract::{RATELIMIT, RATELIMIT_POLICY, Verdict};

type Boxed<RB, E> = Pin<Box<dyn Future<Output = Result<Out<RB>, E>> + Send>>;

/// The engine plan of the current policy for a layer's descriptor shape
/// (none: that policy has no rule for it that can be decided directly).
struct Cached {
    generation: u64,
    plan: Option<DirectPlan>,
}

/// A layer's plan, remade when the engine's policy is replaced.
#[derive(Default)]
pub(crate) struct PlanCache {
    current: ArcSwapOption<Cached>,
}

impl PlanCache {
    fn load(&self) -> arc_swap::Guard<Option<Arc<Cached>>> {
        self.current.load()
    }

    /// Decides `d` directly into `held`'s response if the `cached` plan
    /// applies (`false`: decide it the general way).
    fn decide<B: Backend, C: Clock>(
        &self,
        cached: Option<&Cached>,
        engine: &Engine<B, C>,
        domain: &str,
        held: &mut Held<B, C>,
    ) -> bool {
        let s = held.scratch();
        let Some(d) = s.out.as_slice().first() else {
            return false;
        };
        let hits = s.out.hits_addend();
        if let Some(cached) = cached {
            if let Some(plan) = &cached.plan {
                let decided = engine.evaluate_direct(plan, d, hits, Apply::Commit, &mut s.response);
                if decided.is_some() {
                    return true;
                }
            }
            if cached.generation == engine.generation() {
                // Current, and this request is not of the planned shape.
                return false;
            }
        }
        // The first request, or a policy replaced since: plan again (for
        // this request's shape); this one goes the general way.
        let keys: Vec<&str> = (0..d.len()).map(|i| d.entry(i).0).collect();
        let generation = engine.generation();
        let plan = engine.direct_plan(domain, &keys);
        self.current.store(Some(Arc::new(Cached {
            generation: plan.as_ref().map_or(generation, DirectPlan::generation),
            plan,
        })));
        false
    }
}

/// Whether the current policy is known to have no plan for the layer's
/// descriptor: the request then goes the general way at once, without
/// building its descriptors twice.
fn known_unplanned<B: Backend, C: Clock>(cached: Option<&Cached>, engine: &Engine<B, C>) -> bool {
    cached.is_some_and(|c| c.plan.is_none() && c.generation == engine.generation())
}

pin_project! {
    /// What a request through the layer waits for.
    #[project = LimitedProj]
    pub(crate) enum Limited<Fut, G, RB, E, B, C>
    where
        B: Backend,
        C: Clock,
        C: 'static,
    {
        /// The inner service, then (if any) the headers to add.
        Pass { #[pin] fut: Fut, after: Option<(Held<B, C>, Timestamp)> },
        /// Answered already.
        Ready { res: Option<Out<RB>> },
        /// The general steps, held inline: no allocation per request.
        General { #[pin] fut: G },
        /// A short-path decision the general steps finish (a delay).
        Finish { fut: Boxed<RB, E> },
    }
}

impl<Fut, G, RB, E, B, C> Future for Limited<Fut, G, RB, E, B, C>
where
    Fut: Future<Output = Result<HttpResponse<RB>, E>>,
    G: Future<Output = Result<Out<RB>, E>>,
    B: Backend,
    C: Clock + 'static,
{
    type Output = Result<Out<RB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            LimitedProj::Pass { fut, after } => {
                let mut res = ready!(fut.poll(cx))?;
                if let Some((held, now)) = after.take() {
                    write_admitted(held, now, &mut res);
                }
                Poll::Ready(Ok(res.map(|b| FloodgateBody::inner(b, None))))
            }
            LimitedProj::Ready { res } => {
                Poll::Ready(Ok(res.take().expect("polled after completion")))
            }
            LimitedProj::General { fut } => fut.poll(cx),
            LimitedProj::Finish { fut } => fut.as_mut().poll(cx),
        }
    }
}

/// Whether a layer can take the short path at all: nothing it does before
/// the decision (shedding, its concurrency queues) and one descriptor.
pub(crate) fn eligible<B, C>(shared: &Shared<B, C>) -> bool {
    shared.shedder.is_none()
        && shared.global.is_none()
        && shared.keyed.is_none()
        && shared.identity.descriptor_count() == 1
}

/// The rate-limit headers of a request admitted on the short path, added
/// to the inner service's response (then its buffers go back to the pool).
pub(crate) fn write_admitted<B: Backend, C: Clock + 'static, RB>(
    mut held: Held<B, C>,
    now: Timestamp,
    res: &mut HttpResponse<RB>,
) {
    let s = held.scratch();
    if s.prerendered {
        let headers = res.headers_mut();
        if let Some(policy) = s.policy_value.take() {
            headers.insert(RATELIMIT_POLICY, policy);
        }
        if let Some(current) = s.buf.value() {
            headers.insert(RATELIMIT, current);
        }
        return;
    }
    let shared = held.shared.clone();
    let s = held.scratch();
    shared.contract.write_headers_with(
        &s.report,
        now,
        std::time::Duration::ZERO,
        res.headers_mut(),
        &mut s.buf,
        s.policy_value.as_ref(),
    );
}

/// What the short path made of a request before anything is awaited.
pub(crate) enum Decided<B: Backend, C: Clock + 'static, RB> {
    /// Admitted, holding nothing: call the inner service, then add these
    /// headers (none: nothing to add) with [`write_admitted`].
    Pass(Option<(Held<B, C>, Timestamp)>),
    /// Answered (a rejection).
    Ready(Out<RB>),
    /// Decided, and left to the general steps to finish (a delay, or units
    /// held).
    Finish(Held<B, C>, Timestamp),
    /// Not decided: the general steps from the start.
    General,
}

/// Decides `req` now when the short path applies; charges nothing
/// otherwise ([`Decided::General`]).
pub(crate) fn decide<B, C, T, RB>(
    shared: &Arc<Shared<B, C>>,
    req: &Request<T>,
    peer: Option<SocketAddr>,
) -> Decided<B, C, RB>
where
    B: Backend,
    C: Clock + 'static,
{
    let cached = shared.plans.load();
    if !shared.direct_eligible
        || shared.delayed.get() >= shared.settings.max_delayed
        || known_unplanned(cached.as_deref(), &shared.engine)
    {
        return Decided::General;
    }
    let mut held = descriptors(shared, req, peer);
    if held.scratch().out.is_empty() {
        // Nothing to decide.
        return Decided::Pass(None);
    }
    let now = shared.engine.clock().now();
    let domain = shared.identity.domain();
    if !shared
        .plans
        .decide(cached.as_deref(), &shared.engine, domain, &mut held)
    {
        return Decided::General;
    }
    LayerStats::inc(&shared.stats.decided);
    let s = held.scratch();
    let on_success = shared.contract.config().on_success;
    if !on_success && plainly_allowed(&s.response) {
        // Admitted, nothing to write (and no units held: a plan has no
        // concurrency limit).
        return Decided::Pass(None);
    }
    if on_success && admitted_headers(shared, held.scratch()) {
        // Admitted, its headers rendered from the rule's cached pieces
        // (no report to fill).
        return Decided::Pass(Some((held, now)));
    }
    settle(shared, &mut held);
    match held.scratch().report.verdict() {
        Verdict::Denied => Decided::Ready(denied(shared, &mut held, req.headers(), now)),
        Verdict::Allowed if !held.holds_units => Decided::Pass(on_success.then_some((held, now))),
        _ => Decided::Finish(held, now),
    }
}

/// What is left to wait for once [`decide`] has not answered: the general
/// steps (from the start, or finishing a decision). `decide`, then this,
/// is one request through the layer.
pub(crate) fn later<F, Fut, ReqBody, ResBody, E, B, C>(
    shared: &Arc<Shared<B, C>>,
    decided: Decided<B, C, ResBody>,
    inner: F,
    req: Request<ReqBody>,
    peer: Option<SocketAddr>,
) -> Limited<
    Fut,
    impl Future<Output = Result<Out<ResBody>, E>> + Send + use<F, Fut, ReqBody, ResBody, E, B, C>,
    ResBody,
    E,
    B,
    C,
>
where
    F: FnOnce(Request<ReqBody>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<HttpResponse<ResBody>, E>> + Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
    E: Send + 'static,
    B: Backend,
    C: Clock + 'static,
{
    match decided {
        Decided::Pass(after) => Limited::Pass {
            fut: inner(req),
            after,
        },
        Decided::Ready(res) => Limited::Ready { res: Some(res) },
        Decided::Finish(held, now) => Limited::Finish {
            fut: Box::pin(finish(
                shared.clone(),
                held,
                Keep::default(),
                req,
                now,
                inner,
            )),
        },
        Decided::General => Limited::General {
            fut: handle(shared.clone(), inner, req, peer),
        },
    }
}

/// For an admitted request decided on the short path under one rule:
/// renders its `RateLimit` and `RateLimit-Policy` from the rule's cached
/// pieces, exactly as the contract would from a filled report; false
/// (nothing changed) when that does not apply — a delay, a denial, a shadow
/// rule, a rule not rendered yet or reported differently — and the report
/// is to be filled.
fn admitted_headers<B: Backend, C: Clock + 'static>(
    shared: &Shared<B, C>,
    s: &mut super::shared::Scratch,
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
    let Some(policy) = shared.policy_headers.admitted(
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
