//! [`FloodgateLayer`]: the tower layer.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use floodgate::Clock;
use floodgate_policy::error::ConfigErrors;
use floodgate_policy::{Backend, Engine};
use http::{Request, Response};
use tower_layer::Layer;

use super::body::FloodgateBody;
use super::config::LayerSettings;
use super::direct;
use super::early::{Early, Pending};
use super::service::FloodgateService;
use super::shared::{LayerStats, Shared};
use crate::contract::{Contract, ContractConfig};
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
}

impl<B, C> Clone for FloodgateLayer<B, C> {
    fn clone(&self) -> Self {
        FloodgateLayer {
            shared: self.shared.clone(),
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
        }
    }

    /// A layer from the `http:` section of the Floodgate file `text` (named
    /// `file` in messages): its identity, `responses` and `layer`.
    pub fn from_yaml_str(
        engine: Arc<Engine<B, C>>,
        file: &str,
        text: &str,
    ) -> Result<Self, ConfigErrors> {
        let identity = HttpIdentity::from_yaml_str(file, text)?;
        let contract = Contract::new(ContractConfig::from_yaml_str(file, text)?);
        let settings = LayerSettings::from_yaml_str(file, text)?;
        Ok(Self::with(engine, identity, contract, settings))
    }

    /// Limits one request without the tower machinery (and without the
    /// boxed future of [`FloodgateService`]): the same steps, with `inner`
    /// called — at most once — with the request when it is admitted. For
    /// servers that call the layer from their own handler (the gateway).
    ///
    /// ```
    /// # async fn run(layer: floodgate_http::FloodgateLayer<floodgate_policy::MemoryBackend, floodgate::SystemClock>) {
    /// let req = http::Request::get("/").body(()).unwrap();
    /// let res = layer
    ///     .serve(req, |req| async move {
    ///         Ok::<_, std::convert::Infallible>(http::Response::new(bytes::Bytes::from("hi")))
    ///     })
    ///     .await;
    /// # let _ = res; }
    /// ```
    pub fn serve<F, Fut, ReqBody, ResBody, E>(
        &self,
        req: Request<ReqBody>,
        inner: F,
    ) -> impl Future<Output = Result<Response<FloodgateBody<ResBody>>, E>> + Send + 'static
    where
        F: FnOnce(Request<ReqBody>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Response<ResBody>, E>> + Send + 'static,
        ReqBody: Send + 'static,
        ResBody: Send + 'static,
        E: Send + 'static,
    {
        let decided = direct::decide(&self.shared, &req, None);
        direct::later(&self.shared, decided, inner, req, None)
    }

    /// Like [`serve`](Self::serve), with the client's address given rather
    /// than looked up in the request's extensions (a server that knows it
    /// need not insert it: no extension map to allocate per request).
    pub fn serve_from<F, Fut, ReqBody, ResBody, E>(
        &self,
        peer: SocketAddr,
        req: Request<ReqBody>,
        inner: F,
    ) -> impl Future<Output = Result<Response<FloodgateBody<ResBody>>, E>> + Send + 'static
    where
        F: FnOnce(Request<ReqBody>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Response<ResBody>, E>> + Send + 'static,
        ReqBody: Send + 'static,
        ResBody: Send + 'static,
        E: Send + 'static,
    {
        let decided = direct::decide(&self.shared, &req, Some(peer));
        direct::later(&self.shared, decided, inner, req, Some(peer))
    }

    /// The short path alone: decides `req` (from `peer`) now when its rule
    /// is known in advance, and returns what is left to do without
    /// building any future — the common case of a server calling the
    /// layer from its own handler costs no more than the decision. The
    /// outcome is exactly [`serve_from`](Self::serve_from)'s: on
    /// [`Early::Pass`] call the inner service and
    /// [`finish`](super::Admitted::finish) its response, send an
    /// [`Early::Answer`] as it is, and await [`finish_later`](Self::finish_later)
    /// for [`Early::Later`].
    ///
    /// ```
    /// # async fn run(layer: floodgate_http::FloodgateLayer<floodgate_policy::MemoryBackend, floodgate::SystemClock>) {
    /// use floodgate_http::layer::{Early, FloodgateBody};
    /// let peer = "192.0.2.1:4000".parse().unwrap();
    /// let req = http::Request::get("/").body(()).unwrap();
    /// let inner = |_req| async { Ok::<_, std::convert::Infallible>(http::Response::new(bytes::Bytes::from("hi"))) };
    /// let res = match layer.decide_early(peer, &req) {
    ///     Early::Pass(admitted) => {
    ///         let mut res = inner(req).await.unwrap();
    ///         admitted.finish(&mut res);
    ///         res.map(FloodgateBody::new)
    ///     }
    ///     Early::Answer(res) => res,
    ///     Early::Later(pending) => layer.finish_later(pending, peer, req, inner).await.unwrap(),
    /// };
    /// # let _ = res; }
    /// ```
    pub fn decide_early<T, RB>(&self, peer: SocketAddr, req: &Request<T>) -> Early<B, C, RB> {
        direct::decide(&self.shared, req, Some(peer)).into()
    }

    /// The rest of the layer's steps for a request
    /// [`decide_early`](Self::decide_early) left [`Early::Later`]; `inner`
    /// is called (at most once) with the request if it is admitted.
    pub fn finish_later<F, Fut, ReqBody, ResBody, E>(
        &self,
        pending: Pending<B, C, ResBody>,
        peer: SocketAddr,
        req: Request<ReqBody>,
        inner: F,
    ) -> impl Future<Output = Result<Response<FloodgateBody<ResBody>>, E>> + Send + 'static
    where
        F: FnOnce(Request<ReqBody>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Response<ResBody>, E>> + Send + 'static,
        ReqBody: Send + 'static,
        ResBody: Send + 'static,
        E: Send + 'static,
    {
        direct::later(&self.shared, pending.0, inner, req, Some(peer))
    }

    /// The layer's counters.
    pub fn stats(&self) -> &LayerStats {
        &self.shared.stats
    }

    /// Requests in flight through the layer (counted when shedding is on).
    pub fn in_flight(&self) -> usize {
        self.shared
            .shedder
            .as_ref()
            .map_or(0, |s| s.in_flight.get())
    }

    /// Shaper-delayed requests waiting now.
    pub fn delayed(&self) -> usize {
        self.shared.delayed.get()
    }

    /// Values with a per-key concurrency queue now.
    pub fn keyed_queues(&self) -> usize {
        self.shared.keyed.as_ref().map_or(0, |k| k.len())
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine<B, C>> {
        &self.shared.engine
    }

    /// The contract.
    pub fn contract(&self) -> &Contract {
        &self.shared.contract
    }
}

impl<S, B, C> Layer<S> for FloodgateLayer<B, C> {
    type Service = FloodgateService<S, B, C>;

    fn layer(&self, inner: S) -> Self::Service {
        FloodgateService::new(inner, self.shared.clone())
    }
}
