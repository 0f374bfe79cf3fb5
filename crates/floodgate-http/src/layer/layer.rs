//! [`FloodgateLayer`]: the tower layer, and [`FloodgateService`], the
//! service it makes.

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use floodgate::Clock;
use floodgate_policy::error::ConfigErrors;
use floodgate_policy::{Backend, Engine, PolicySet};
use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::body::FloodgateBody;
use super::config::{ClientAddr, LayerSettings};
use super::request::{self, ResponseFuture};
use super::shared::{LayerStats, Shared};
use crate::HttpSection;
use crate::contract::Contract;
use crate::identity::HttpIdentity;

/// Rate limits HTTP requests with a Floodgate [`Engine`]: each request's
/// descriptors (from an [`HttpIdentity`]) are decided, and the answer
/// follows the [`Contract`] — rejected (429 + headers + problem body),
/// delayed (a shaper), or passed to the inner service with the
/// rate-limit headers added to its response.
///
/// Works with any tower-based server whose bodies carry [`bytes::Bytes`]:
/// axum, hyper (through `hyper-util`'s tower adapter), tonic.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use floodgate_http::FloodgateLayer;
/// use floodgate_policy::{Engine, MemoryBackend, PolicySet};
/// use floodgate_policy::read::{LoadOptions, load_str};
///
/// let text = std::fs::read_to_string("floodgate.yaml")?;
/// let options = LoadOptions { other_sections: vec!["http"], ..Default::default() };
/// let policy = PolicySet::compile(&load_str("floodgate.yaml", &text, &options)?)?;
/// let engine = Arc::new(Engine::new(policy, MemoryBackend::new(Default::default())?));
/// let layer = FloodgateLayer::from_yaml_str(engine, "floodgate.yaml", &text)?;
/// // axum::Router::new().route(...).layer(layer)
/// # Ok(()) }
/// ```
pub struct FloodgateLayer<B, C> {
    shared: Arc<Shared<B, C>>,
    /// The policy its requests are decided under, if not the engine's
    /// current one (see [`pinned_to`](Self::pinned_to)).
    pinned: Option<Arc<PolicySet>>,
}

impl<B, C> Clone for FloodgateLayer<B, C> {
    fn clone(&self) -> Self {
        FloodgateLayer {
            shared: self.shared.clone(),
            pinned: self.pinned.clone(),
        }
    }
}

impl<B, C> fmt::Debug for FloodgateLayer<B, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FloodgateLayer").finish_non_exhaustive()
    }
}

impl<B: Backend, C: Clock + 'static> FloodgateLayer<B, C> {
    /// A layer deciding with `engine` the descriptors `identity` builds,
    /// answering per the default contract, with the default settings.
    pub fn new(engine: Arc<Engine<B, C>>, identity: HttpIdentity) -> Self {
        Self::with(
            engine,
            identity,
            Contract::default(),
            LayerSettings::default(),
        )
    }

    /// A layer with a contract and settings.
    pub fn with(
        engine: Arc<Engine<B, C>>,
        identity: HttpIdentity,
        contract: Contract,
        settings: LayerSettings,
    ) -> Self {
        FloodgateLayer {
            shared: Arc::new(Shared::new(engine, identity, contract, settings)),
            pinned: None,
        }
    }

    /// The same layer (its queues, counts and adaptive limit), deciding
    /// the requests it [serves](Self::serve) under `policy` rather than
    /// the engine's current policy. A server whose configuration holds
    /// both the layer's section and the policies pins the layer built
    /// from a file to the policy compiled from that file, so that a
    /// reload, swapping both, never answers a request with one file's
    /// limits and the other's contract.
    pub fn pinned_to(&self, policy: Arc<PolicySet>) -> Self {
        FloodgateLayer {
            shared: self.shared.clone(),
            pinned: Some(policy),
        }
    }

    /// A layer from the `http:` section of the Floodgate file `text` (named
    /// `file` in messages): its identity, `responses` and `layer`.
    pub fn from_yaml_str(
        engine: Arc<Engine<B, C>>,
        file: &str,
        text: &str,
    ) -> Result<Self, ConfigErrors> {
        let s = HttpSection::from_yaml_str(file, text)?;
        Ok(Self::with(engine, s.identity, s.contract, s.layer))
    }

    /// Limits one request without the tower machinery: the same steps as
    /// [`FloodgateService`], with `inner` called — at most once — with the
    /// request when it is admitted. A server that knows the client's
    /// address gives it as `client` rather than insert it into the
    /// request's extensions (no extension map to allocate per request);
    /// with `None`, it is looked up there ([`LayerSettings::peer`]).
    ///
    /// ```
    /// # async fn run(layer: floodgate_http::FloodgateLayer<floodgate_policy::MemoryBackend, floodgate::SystemClock>) {
    /// use floodgate_http::layer::ClientAddr;
    /// let mut client = ClientAddr::new("192.0.2.1:4000".parse().unwrap());
    /// let req = http::Request::get("/").header("x-forwarded-for", "198.51.100.7").body(()).unwrap();
    /// // The address behind trusted proxies, for a log line: resolved once.
    /// let ip = layer.client_ip(&req, &mut client);
    /// let res = layer
    ///     .serve(client, req, |req| async move {
    ///         Ok::<_, std::convert::Infallible>(http::Response::new(bytes::Bytes::from("hi")))
    ///     })
    ///     .await;
    /// # let _ = (ip, res); }
    /// ```
    pub fn serve<F, Fut, ReqBody, ResBody, E>(
        &self,
        client: impl Into<Option<ClientAddr>>,
        req: Request<ReqBody>,
        inner: F,
    ) -> ResponseFuture<Fut, ResBody, E, B, C>
    where
        F: FnOnce(Request<ReqBody>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Response<ResBody>, E>> + Send + 'static,
        ReqBody: Send + 'static,
        ResBody: Send + 'static,
        E: Send + 'static,
    {
        request::start(
            &self.shared,
            req,
            (client.into(), self.pinned.as_ref()),
            inner,
        )
    }

    /// The address of the client that sent `req` from `client`'s peer,
    /// after the identity's trusted proxies (the peer's own when it trusts
    /// none). Kept in `client`: resolved once per request, whoever asks
    /// first.
    pub fn client_ip<T>(&self, req: &Request<T>, client: &mut ClientAddr) -> IpAddr {
        *client
            .resolved
            .get_or_insert_with(|| self.shared.identity.client_ip(req, client.peer.ip()))
    }

    /// The layer's counters.
    pub fn stats(&self) -> &LayerStats {
        &self.shared.stats
    }

    /// Requests in flight through the layer (counted when shedding is on;
    /// those waiting in the adaptive limit's queue included).
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.get()
    }

    /// The adaptive concurrency limit now (none without
    /// `shedding.adaptive`).
    pub fn adaptive_limit(&self) -> Option<usize> {
        self.shared
            .adaptive
            .as_ref()
            .map(super::adaptive::AdaptiveLimit::limit)
    }

    /// Requests waiting in the adaptive limit's queue now (none without
    /// `shedding.adaptive`).
    pub fn adaptive_waiting(&self) -> Option<usize> {
        self.shared
            .adaptive
            .as_ref()
            .map(super::adaptive::AdaptiveLimit::waiting)
    }

    /// Shaper-delayed requests waiting now.
    pub fn delayed(&self) -> usize {
        self.shared.delayed.get()
    }

    /// Values with a per-key concurrency queue now.
    pub fn keyed_queues(&self) -> usize {
        self.shared
            .keyed
            .as_ref()
            .map_or(0, super::queue::KeyedQueues::len)
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine<B, C>> {
        &self.shared.engine
    }
}

impl<S, B, C> Layer<S> for FloodgateLayer<B, C> {
    type Service = FloodgateService<S, B, C>;

    fn layer(&self, inner: S) -> Self::Service {
        FloodgateService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// A service limited by a [`FloodgateLayer`].
pub struct FloodgateService<S, B, C> {
    inner: S,
    shared: Arc<Shared<B, C>>,
}

impl<S, B, C> FloodgateService<S, B, C> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, B, C> Clone for FloodgateService<S, B, C> {
    fn clone(&self) -> Self {
        FloodgateService {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S, B, C> fmt::Debug for FloodgateService<S, B, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FloodgateService").finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody, B, C> Service<Request<ReqBody>> for FloodgateService<S, B, C>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
    B: Backend,
    C: Clock + 'static,
{
    type Response = Response<FloodgateBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error, B, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The clone is not ready; keep it and send the ready one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        request::start(&self.shared, req, (None, None), move |r| inner.call(r))
    }
}
