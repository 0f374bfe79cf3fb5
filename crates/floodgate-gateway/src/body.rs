//! The body of a proxied response: the upstream's, streamed as it comes
//! (carrying the connection it came on back to the pool when it ends), or
//! one the gateway wrote itself (502, 504). An upstream body that stalls
//! (no frame within its idle timeout) ends with an error.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::connection::{ExchangeError, UpstreamBody};

/// Why a proxied response body ended early.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The upstream connection failed mid-body, or the body broke its
    /// framing.
    #[error("upstream body: {0}")]
    Upstream(#[from] ExchangeError),
    /// The upstream sent nothing for this long mid-body.
    #[error("upstream body idle for {0:?}")]
    Idle(Duration),
}

pin_project! {
    #[project = KindProj]
    enum Kind {
        Upstream {
            #[pin] body: UpstreamBody,
            // A frame read before the response was passed on, given first.
            first: Option<Frame<Bytes>>,
            idle: Duration,
            // Armed when the upstream has nothing to give; re-armed after
            // every frame.
            #[pin] timer: Option<Sleep>,
            fresh: bool,
        },
        Full { data: Option<Bytes> },
    }
}

pin_project! {
    /// A response body: the upstream's frames untouched (data and
    /// trailers), or a complete body of the gateway's own.
    pub struct ProxyBody {
        #[pin]
        kind: Kind,
    }
}

impl ProxyBody {
    /// A complete body written by the gateway.
    pub fn full(data: impl Into<Bytes>) -> Self {
        let data: Bytes = data.into();
        ProxyBody {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    /// The upstream's body, streamed, after `first` (a frame already read
    /// from it, if any). A body that yields nothing for `idle` ends with
    /// [`BodyError::Idle`] (and its connection is closed).
    pub fn upstream(body: UpstreamBody, first: Option<Frame<Bytes>>, idle: Duration) -> Self {
        ProxyBody {
            kind: Kind::Upstream {
                body,
                first,
                idle,
                timer: None,
                fresh: true,
            },
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.project().kind.project() {
            KindProj::Upstream {
                mut body,
                first,
                idle,
                mut timer,
                fresh,
            } => {
                if let Some(frame) = first.take() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                let polled = body.as_mut().poll_frame(cx);
                if polled.is_pending() {
                    let deadline = Instant::now() + *idle;
                    match timer.as_mut().as_pin_mut() {
                        Some(t) if *fresh => t.reset(deadline),
                        Some(_) => {}
                        None => timer.set(Some(tokio::time::sleep_until(deadline))),
                    }
                    *fresh = false;
                    if let Some(t) = timer.as_pin_mut()
                        && t.poll(cx).is_ready()
                    {
                        // The connection is in an unknown state: closed.
                        body.as_mut().get_mut().close();
                        return Poll::Ready(Some(Err(BodyError::Idle(*idle))));
                    }
                    return Poll::Pending;
                }
                *fresh = true;
                polled.map_err(BodyError::from)
            }
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Upstream { body, first, .. } => first.is_none() && body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Upstream { body, first, .. } => {
                let held = first
                    .as_ref()
                    .and_then(Frame::data_ref)
                    .map_or(0, |d| d.len() as u64);
                let hint = body.size_hint();
                let mut sum = SizeHint::new();
                sum.set_lower(hint.lower().saturating_add(held));
                if let Some(upper) = hint.upper() {
                    sum.set_upper(upper.saturating_add(held));
                }
                sum
            }
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

impl std::fmt::Debug for ProxyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Upstream { .. } => f.write_str("ProxyBody::Upstream"),
            Kind::Full { data } => f
                .debug_struct("ProxyBody::Full")
                .field("len", &data.as_ref().map_or(0, Bytes::len))
                .finish(),
        }
    }
}
