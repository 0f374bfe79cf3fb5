//! [`FloodgateService`]: the inner service behind the limiter.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use floodgate::Clock;
use floodgate_policy::Backend;
use http::{Request, Response};
use tower_service::Service;

use super::body::FloodgateBody;
use super::request::{self, ResponseFuture};
use super::shared::Shared;

/// A service limited by a [`FloodgateLayer`](super::FloodgateLayer).
pub struct FloodgateService<S, B, C> {
    inner: S,
    shared: Arc<Shared<B, C>>,
}

impl<S, B, C> FloodgateService<S, B, C> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<B, C>>) -> Self {
        FloodgateService { inner, shared }
    }

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
        request::start(&self.shared, req, None, move |r| inner.call(r))
    }
}
