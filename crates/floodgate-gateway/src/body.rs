//! The body of a proxied response: the upstream's, streamed as it comes
//! (carrying the connection it came on back to the pool when it ends), or
//! one the gateway wrote itself (502, 504). An upstream body that stalls
//! (no frame within its idle timeout) ends with an error.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
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

// A response is moved whole several times on its way to the client:
// what every response carries is kept small (the idle timer and a frame
// of trailers, rarely needed, are boxed).
pin_project! {
    #[project = KindProj]
    enum Kind {
        Upstream {
            #[pin] body: UpstreamBody,
            // A frame read before the response was passed on, given first.
            first: Option<First>,
            idle: Duration,
            // Armed when the upstream has nothing to give; re-armed after
            // every frame.
            timer: Option<Pin<Box<Sleep>>>,
            fresh: bool,
        },
        Full { data: Option<Bytes> },
    }
}

/// A frame read ahead: data (the usual one), or trailers.
enum First {
    Data(Bytes),
    Trailers(Box<HeaderMap>),
}

impl First {
    fn new(frame: Frame<Bytes>) -> Option<Self> {
        match frame.into_data() {
            Ok(data) => Some(First::Data(data)),
            Err(frame) => frame
                .into_trailers()
                .ok()
                .map(|t| First::Trailers(Box::new(t))),
        }
    }

    fn into_frame(self) -> Frame<Bytes> {
        match self {
            First::Data(data) => Frame::data(data),
            First::Trailers(t) => Frame::trailers(*t),
        }
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
                first: first.and_then(First::new),
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
                timer,
                fresh,
            } => {
                if let Some(first) = first.take() {
                    return Poll::Ready(Some(Ok(first.into_frame())));
                }
                let polled = body.as_mut().poll_frame(cx);
                if polled.is_pending() {
                    let deadline = Instant::now() + *idle;
                    match timer {
                        Some(t) if *fresh => t.as_mut().reset(deadline),
                        Some(_) => {}
                        None => *timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
                    }
                    *fresh = false;
                    if let Some(t) = timer
                        && t.as_mut().poll(cx).is_ready()
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
                let held = match first {
                    Some(First::Data(d)) => d.len() as u64,
                    _ => 0,
                };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::GatewayBody;

    /// A response travels by value from the upstream's client through the
    /// proxy, the limiter and the server's connection to the client, each
    /// step a copy of it: what every response carries is kept to what it
    /// needs (the idle timer and trailers read ahead are boxed). A guard
    /// against an inline field slipping in; the bounds have a little room.
    #[test]
    fn a_response_stays_small() {
        use std::mem::size_of;
        let body = size_of::<ProxyBody>();
        let upstream = size_of::<UpstreamBody>();
        assert!(
            body <= upstream + 96,
            "ProxyBody is {body} bytes, its upstream body {upstream}"
        );
        let response = size_of::<http::Response<GatewayBody>>();
        assert!(
            response <= size_of::<http::response::Parts>() + upstream + 120,
            "a gateway response is {response} bytes"
        );
    }

    #[test]
    fn trailers_read_ahead_are_given_first() {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-t", http::HeaderValue::from_static("1"));
        let first = First::new(Frame::trailers(trailers.clone())).unwrap();
        assert_eq!(first.into_frame().into_trailers().unwrap(), trailers);
        let data = First::new(Frame::data(Bytes::from_static(b"ab"))).unwrap();
        assert_eq!(data.into_frame().into_data().unwrap(), "ab");
    }
}
