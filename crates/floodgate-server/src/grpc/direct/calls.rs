//! What a call gets: `ShouldRateLimit` decided at once when the store is
//! in memory (from the request's bytes where they arrived, into a shared
//! block), or later when it needs IO; any other unary call answered by
//! tonic's services.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use floodgate_policy::ErrorCode;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use tonic::service::Routes;
use tracing::Instrument;

use super::super::fast::{NO_CONFIGURATION, message_fault, not_grpc_type, not_post};
use super::super::rls::{self, Decided};
use super::request::RequestHead;
use crate::decision::DecisionService;
use crate::metrics::{Api, ErrorClass};

/// The most bytes of a tonic service's answer taken.
const TONIC_ANSWER_CAP: usize = 4 << 20;

/// What a call is answered.
pub(super) enum Answer {
    /// One message (a whole gRPC frame), then `grpc-status: 0`.
    Message(Bytes),
    /// A trailers-only gRPC error.
    Error(i32, String),
    /// A plain HTTP answer: its status and text (`Allow: POST` with 405).
    Plain(u16, String),
    /// What a tonic service answered: its head, body and trailers.
    Tonic(Box<(http::response::Parts, Bytes, Option<HeaderMap>)>),
}

/// An answer still to come, for the stream it names.
pub(super) type Later = Pin<Box<dyn Future<Output = (u32, Answer)> + Send>>;

/// What decides a call.
pub(super) struct Calls {
    pub(super) svc: Arc<DecisionService>,
    pub(super) routes: Routes,
}

static NO_FIELDS: LazyLock<HeaderMap> = LazyLock::new(HeaderMap::new);

impl Calls {
    /// The answer to `ShouldRateLimit` on stream `id` with `body` (its
    /// gRPC frame): now when the store decides without IO, else later.
    pub(super) fn rls(
        &self,
        id: u32,
        body: &[u8],
        fields: Option<&HeaderMap>,
        timeout: Duration,
        started: Instant,
    ) -> Result<Answer, Later> {
        let svc = &self.svc;
        if let Some((code, message, invalid)) = message_fault(body) {
            if invalid {
                svc.metrics
                    .failed(Api::Grpc, ErrorCode::InvalidArgument, started);
            }
            return Ok(Answer::Error(code, message.to_owned()));
        }
        let span = crate::trace::rls(fields.unwrap_or(&NO_FIELDS));
        if let Some(decided) = span.in_scope(|| rls::decide_now(svc, &body[5..], started)) {
            return Ok(decided.into());
        }
        let svc = svc.clone();
        let body = Bytes::copy_from_slice(&body[5..]);
        let decided = async move {
            match tokio::time::timeout(timeout, rls::decide_later(&svc, &body, started)).await {
                Ok(decided) => decided.into(),
                Err(_) => expired(&svc, started, timeout),
            }
        };
        Err(Box::pin(
            async move { (id, decided.await) }.instrument(span),
        ))
    }

    /// The answer of tonic's services to the unary call of `path` on
    /// stream `id`.
    pub(super) fn tonic(
        &self,
        id: u32,
        path: &str,
        fields: Option<HeaderMap>,
        body: Bytes,
        timeout: Duration,
    ) -> Later {
        let mut routes = self.routes.clone();
        let uri = path.parse::<http::Uri>();
        Box::pin(async move {
            let Ok(uri) = uri else {
                return (id, Answer::Plain(400, "bad path\n".to_owned()));
            };
            let mut req = Request::new(tonic::body::Body::new(Full::new(body)));
            *req.method_mut() = Method::POST;
            *req.uri_mut() = uri;
            *req.headers_mut() = fields.unwrap_or_default();
            let call = tower_service::Service::call(&mut routes, req);
            let Ok(Ok(answer)) = tokio::time::timeout(timeout, call).await else {
                let message = format!("no answer within the call's deadline ({timeout:?})");
                return (
                    id,
                    Answer::Error(ErrorCode::DeadlineExceeded.grpc_code(), message),
                );
            };
            let (head, body) = answer.into_parts();
            match Limited::new(body, TONIC_ANSWER_CAP).collect().await {
                Ok(all) => {
                    let trailers = all.trailers().cloned();
                    (
                        id,
                        Answer::Tonic(Box::new((head, all.to_bytes(), trailers))),
                    )
                }
                Err(e) => (
                    id,
                    Answer::Error(tonic::Code::Internal as i32, e.to_string()),
                ),
            }
        })
    }

    /// The answer of an RLS call refused before its body is read: not
    /// POST, not gRPC, or before the first configuration.
    pub(super) fn rls_refusal(&self, head: &RequestHead) -> Option<Answer> {
        if let Some(method) = &head.not_post {
            return Some(Answer::Plain(405, not_post(method)));
        }
        match &head.content_type {
            None => return Some(Answer::Plain(415, not_grpc_type("none"))),
            Some(Err(found)) => return Some(Answer::Plain(415, not_grpc_type(found))),
            Some(Ok(())) => {}
        }
        if !self.svc.health().is_configured() {
            return Some(Answer::Error(
                tonic::Code::Unknown as i32,
                NO_CONFIGURATION.into(),
            ));
        }
        None
    }

    /// A call refused for the calls in flight.
    pub(super) fn shed(&self) -> Answer {
        self.svc.metrics.shed(Api::Grpc, Instant::now());
        let message = "too many calls in flight; try again".to_owned();
        Answer::Error(tonic::Code::ResourceExhausted as i32, message)
    }

    /// A call refused for its body's size.
    pub(super) fn too_large(&self, started: Instant) -> Answer {
        let svc = &self.svc;
        svc.metrics
            .failed(Api::Grpc, ErrorClass::ResourceExhausted, started);
        let message = format!(
            "the message is larger than the limit of {} bytes",
            svc.body_limit
        );
        Answer::Error(tonic::Code::ResourceExhausted as i32, message)
    }

    /// A call whose deadline passed before its body ended.
    pub(super) fn expired(&self, started: Instant, timeout: Duration) -> Answer {
        expired(&self.svc, started, timeout)
    }
}

/// A call whose deadline passed before it was decided.
fn expired(svc: &DecisionService, started: Instant, timeout: Duration) -> Answer {
    svc.metrics
        .failed(Api::Grpc, ErrorCode::DeadlineExceeded, started);
    let message = format!("no decision within the call's deadline ({timeout:?})");
    Answer::Error(ErrorCode::DeadlineExceeded.grpc_code(), message)
}

impl From<Decided> for Answer {
    fn from(decided: Decided) -> Self {
        match decided {
            Decided::Message(m) => Answer::Message(m),
            Decided::Failed(code, message) => Answer::Error(code, message),
        }
    }
}
