//! [`Gateway`]: one request through the limiter and the proxy. The
//! limiter is [`FloodgateLayer`] itself, so the gateway speaks exactly the
//! tower layer's HTTP contract; the layer (built from the `http:` section)
//! is swapped atomically when that section changes.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use floodgate::SystemClock;
use floodgate_http::FloodgateLayer;
use floodgate_http::layer::{ClientAddr, FloodgateBody, RequestCounters, RequestResult};
use floodgate_policy::{Backend, Engine, PolicySet};
use http::{Request, Response};
use hyper::body::Incoming;

use crate::access::AccessEntry;
use crate::body::ProxyBody;
use crate::forward::X_FORWARDED_PROTO;
use crate::keyed::KeyedFields;
use crate::proxy::{ClientInfo, Proxy};
use crate::responses::ResponseMetrics;
use crate::route_metrics::RouteMetrics;
use floodgate_http::HttpSection;

/// The limiter of a gateway: the layer and the identity it was built from.
pub struct Limiter<B> {
    section: HttpSection,
    layer: FloodgateLayer<B, SystemClock>,
    trusts_proxies: bool,
    keyed: KeyedFields,
    /// Requests by the section's routes, outcome and status class.
    routes: RouteMetrics,
}

impl<B: Backend> Limiter<B> {
    /// A limiter deciding with `engine` per `section`, under `policy`
    /// (compiled from the same files as `section`).
    pub(crate) fn new(
        engine: Arc<Engine<B, SystemClock>>,
        section: HttpSection,
        policy: &Arc<PolicySet>,
    ) -> Self {
        let identity = section.identity.clone();
        let layer = FloodgateLayer::with(
            engine,
            identity,
            section.contract.clone(),
            section.layer.clone(),
        )
        .pinned_to(policy.clone());
        Limiter {
            trusts_proxies: section.identity.config().client_ip.trusts_proxies(),
            keyed: KeyedFields::new(section.identity.config()),
            routes: RouteMetrics::new(&section.identity.config().routes),
            section,
            layer,
        }
    }

    /// The same limiter (its layer's queues, counts and adaptive limit)
    /// deciding under `policy`.
    fn pinned_to(&self, policy: &Arc<PolicySet>) -> Self {
        Limiter {
            section: self.section.clone(),
            layer: self.layer.pinned_to(policy.clone()),
            trusts_proxies: self.trusts_proxies,
            keyed: self.keyed.clone(),
            routes: self.routes.clone(),
        }
    }

    /// The layer.
    pub fn layer(&self) -> &FloodgateLayer<B, SystemClock> {
        &self.layer
    }

    /// The section it was built from.
    pub fn section(&self) -> &HttpSection {
        &self.section
    }
}

/// The gateway: an engine, the current limiter (none: limit nothing) and
/// the proxy.
pub struct Gateway<B> {
    engine: Arc<Engine<B, SystemClock>>,
    limiter: ArcSwap<Option<Limiter<B>>>,
    proxy: Proxy,
    access_log: bool,
    /// `floodgate_requests_total{api="http"}` of the requests the limiter
    /// has no part in (the layer counts the others).
    requests: RequestCounters,
    /// Responses by status class, and their time.
    responses: ResponseMetrics,
    /// Requests by outcome and status class while no limiter (and so no
    /// route) is loaded: all under `none`.
    unrouted: RouteMetrics,
}

impl<B: Backend> Gateway<B> {
    /// A plain proxy in front of `proxy` until a limiter is set
    /// ([`set_limiter`](Self::set_limiter)), with an access log line per
    /// request if `access_log` (see [`crate::access`]).
    pub(crate) fn new(engine: Arc<Engine<B, SystemClock>>, proxy: Proxy, access_log: bool) -> Self {
        Gateway {
            engine,
            limiter: ArcSwap::from_pointee(None),
            proxy,
            access_log,
            requests: RequestCounters::new("http"),
            responses: ResponseMetrics::new(),
            unrouted: RouteMetrics::new(&[]),
        }
    }

    /// The engine (its policy is swapped on reload).
    pub fn engine(&self) -> &Arc<Engine<B, SystemClock>> {
        &self.engine
    }

    /// The proxy.
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// The current limiter.
    pub fn limiter(&self) -> Arc<Option<Limiter<B>>> {
        self.limiter.load_full()
    }

    /// Puts in force the limiter for a (re)loaded `http:` section (none:
    /// limit nothing), deciding under `policy`, compiled from the same
    /// files; requests in flight finish with the previous one. An
    /// unchanged section keeps the running limiter's queues and counts,
    /// under the new policy: false.
    pub(crate) fn set_limiter(
        &self,
        section: Option<HttpSection>,
        policy: &Arc<PolicySet>,
    ) -> bool {
        let current = self.limiter.load_full();
        let limiter = match (current.as_ref(), section) {
            (None, None) => return false,
            (Some(l), Some(s)) if l.section == s => {
                self.limiter.store(Arc::new(Some(l.pinned_to(policy))));
                return false;
            }
            (_, s) => s.map(|s| Limiter::new(self.engine.clone(), s, policy)),
        };
        self.limiter.store(Arc::new(limiter));
        true
    }

    /// Handles one client request from `client`: limited per the contract,
    /// then forwarded. Owns its gateway (a server's service calls it
    /// directly, so the future is not wrapped in another one: futures are
    /// moved whole, and every wrapper is one more copy per request).
    pub(crate) async fn handle(
        self: Arc<Self>,
        mut req: Request<Incoming>,
        mut client: ClientInfo,
    ) -> Result<Response<GatewayBody>, Infallible> {
        let started = Instant::now();
        let mut access = self
            .access_log
            .then(|| AccessEntry::begin(&req, client.peer));
        let limiter = self.limiter.load_full();
        let routes = limiter
            .as_ref()
            .as_ref()
            .map_or(&self.unrouted, |l| &l.routes);
        let mut tally = Tally {
            routes,
            route: None,
            started,
        };
        // A request without one authority, or announcing a body over the
        // limit, is the client's error: refused before it is limited
        // (nothing is charged for it) or forwarded.
        if let Some(res) = self.proxy.check_request(&mut req) {
            self.requests.count(RequestResult::Error);
            return Ok(self.unlimited(access, res, &tally, RequestResult::Error));
        }
        let Some(l) = limiter.as_ref() else {
            // Boxed (here and below): the forwarding future is kilobytes,
            // and a future held inline is copied whole each time the one
            // holding it moves (into hyper's connection, per request).
            self.requests.count(RequestResult::Allowed);
            let Ok(res) = in_box(self.proxy.clone().forward(req, client)).await;
            return Ok(self.unlimited(access, res, &tally, RequestResult::Allowed));
        };
        // On the normal path the limiter reads. (The layer's identity
        // matches on its own for a `route` action: it cannot be handed
        // this index.)
        tally.route = l.section.identity.route_index(req.uri().path());
        // A keyed field the upstream could read otherwise than the
        // identity: refused, or removed (see `crate::keyed`).
        if l.keyed.check(req.headers_mut()).is_err() {
            let res = self.proxy.duplicate_keyed_field(req.version());
            self.requests.count(RequestResult::Error);
            return Ok(self.unlimited(access, res, &tally, RequestResult::Error));
        }
        let from = l.client(&req, &mut client, access.as_deref_mut());
        let proxy = self.proxy.clone();
        let limited = l.layer.serve(from, req, move |req| {
            // Allocated first, then written: the future is built in its
            // box rather than on the stack and copied there (kilobytes).
            in_box(proxy.forward(req, client))
        });
        let res = limited.await?;
        self.limited(access, &res, &tally);
        Ok(res)
    }

    /// A response of the limiter's, counted as it counted it, and logged.
    #[inline]
    fn limited(
        &self,
        access: Option<Box<AccessEntry>>,
        res: &Response<GatewayBody>,
        tally: &Tally<'_>,
    ) {
        let outcome = res.body().result().unwrap_or(RequestResult::Allowed);
        self.finished(tally, outcome, res.status());
        if let Some(a) = access {
            a.finish(res.status(), res.body().is_from_layer());
        }
    }

    /// A response the limiter had no part in, counted and logged.
    #[inline]
    fn unlimited(
        &self,
        access: Option<Box<AccessEntry>>,
        res: Response<ProxyBody>,
        tally: &Tally<'_>,
        outcome: RequestResult,
    ) -> Response<GatewayBody> {
        self.finished(tally, outcome, res.status());
        if let Some(a) = access {
            a.finish(res.status(), false);
        }
        res.map(FloodgateBody::new)
    }

    /// Counts a request of `outcome` answered `status`: by status class,
    /// by route, and timed.
    #[inline]
    fn finished(&self, tally: &Tally<'_>, outcome: RequestResult, status: http::StatusCode) {
        self.responses.finished(status, tally.started);
        tally.routes.count(tally.route, outcome, status);
    }
}

/// What a request is counted under once answered.
struct Tally<'a> {
    /// The counters of the limiter in force when it arrived.
    routes: &'a RouteMetrics,
    /// The index of its route template, once matched.
    route: Option<usize>,
    /// When its head arrived.
    started: Instant,
}

impl<B: Backend> Limiter<B> {
    /// The client's address behind trusted proxies, resolved once (the
    /// layer's descriptors use it too): only when a trusted hop may have
    /// named another one, and only when it is used here (the forwarded
    /// scheme kept, in `client`; the access log's, in `access`).
    #[inline]
    fn client(
        &self,
        req: &Request<Incoming>,
        client: &mut ClientInfo,
        access: Option<&mut AccessEntry>,
    ) -> ClientAddr {
        let mut from = ClientAddr::new(client.peer);
        let forwarded_proto = self.trusts_proxies && req.headers().contains_key(X_FORWARDED_PROTO);
        client.trusted_hop = false;
        if forwarded_proto || (self.trusts_proxies && access.is_some()) {
            let ip = self.layer.client_ip(req, &mut from);
            client.trusted_hop = forwarded_proto && ip != from.peer().ip();
            if let Some(a) = access {
                a.set_client(ip);
            }
        }
        from
    }
}

/// A response body of the gateway: the limiter's (holding its permits
/// until the body ends) over the proxy's.
pub(crate) type GatewayBody = FloodgateBody<ProxyBody>;

/// A future pinned in a box allocated first and written in place, rather
/// than built on the stack and copied there (the forwarding future is
/// kilobytes).
#[inline(always)]
fn in_box<F: Future>(future: F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), future))
}
