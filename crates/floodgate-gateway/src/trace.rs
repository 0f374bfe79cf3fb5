//! The gateway's request spans (see [`floodgate_runtime::host::otel`]): with
//! tracing on, each request is handled in a span of its own continuing the
//! client's `traceparent`, its answer's status and whether the limiter
//! answered recorded on it. Off, the request is handled as it is, no span
//! made: [`handle`] chooses once per request, one branch.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use floodgate_policy::Backend;
use http::{Request, Response};
use hyper::body::Incoming;
use tracing::Instrument;

use crate::gateway::{Gateway, GatewayBody};
use crate::proxy::ClientInfo;

type Answer = Result<Response<GatewayBody>, Infallible>;

pin_project_lite::pin_project! {
    /// A request handled as it is, or in its span.
    #[project = HandledProj]
    pub(crate) enum Handled<P, T> {
        /// Tracing off.
        Plain { #[pin] handling: P },
        /// Tracing on.
        Traced { #[pin] handling: T },
    }
}

impl<P: Future<Output = Answer>, T: Future<Output = Answer>> Future for Handled<P, T> {
    type Output = Answer;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        match self.project() {
            HandledProj::Plain { handling } => handling.poll(cx),
            HandledProj::Traced { handling } => handling.poll(cx),
        }
    }
}

/// Handles `req` from `client` on `gateway`, in a span when tracing is on.
pub(crate) fn handle<B: Backend>(
    gateway: Arc<Gateway<B>>,
    req: Request<Incoming>,
    client: ClientInfo,
) -> Handled<impl Future<Output = Answer>, impl Future<Output = Answer>> {
    if !floodgate_runtime::host::otel::enabled() {
        return Handled::Plain {
            handling: gateway.handle(req, client),
        };
    }
    Handled::Traced {
        handling: Box::pin(traced(gateway, req, client)),
    }
}

/// [`Gateway::handle`] in a server span.
async fn traced<B: Backend>(
    gateway: Arc<Gateway<B>>,
    req: Request<Incoming>,
    client: ClientInfo,
) -> Answer {
    let span = tracing::info_span!(
        target: floodgate_runtime::host::otel::TARGET,
        "gateway request",
        otel.kind = "server",
        http.request.method = req.method().as_str(),
        http.response.status_code = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    floodgate_runtime::host::otel::continue_trace(&span, req.headers());
    let Ok(res) = gateway.handle(req, client).instrument(span.clone()).await;
    span.record(
        "http.response.status_code",
        i64::from(res.status().as_u16()),
    );
    // The limiter answered (denied, shed, failed closed) or the request
    // went on to the upstream.
    let outcome = if res.body().is_from_layer() {
        "limited"
    } else {
        "forwarded"
    };
    span.record("outcome", outcome);
    Ok(res)
}
