//! The layer's response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

use super::body::FloodgateBody;

type Boxed<B, E> = Pin<Box<dyn Future<Output = Result<Response<FloodgateBody<B>>, E>> + Send>>;

/// The future of [`FloodgateService`](super::FloodgateService): the
/// decision, any delay or queueing, then the inner service. Dropping it
/// (the client went away) gives back everything the request held.
pub struct ResponseFuture<B, E> {
    inner: Boxed<B, E>,
}

impl<B, E> ResponseFuture<B, E> {
    pub(crate) fn new(
        f: impl Future<Output = Result<Response<FloodgateBody<B>>, E>> + Send + 'static,
    ) -> Self {
        ResponseFuture { inner: Box::pin(f) }
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<FloodgateBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
