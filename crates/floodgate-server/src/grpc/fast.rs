//! `ShouldRateLimit` served straight on hyper's HTTP/2: the gRPC frame is
//! read from the request body, decoded in place ([`wire`](super::wire)),
//! decided with a pooled response, and the answer written in one buffer —
//! no per-call codec machinery. Every other gRPC path (health,
//! reflection) goes to tonic.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use floodgate_policy::ErrorCode;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use tonic::service::Routes;
use tracing::Instrument;

use super::answer::{Answer, GRPC_MESSAGE, GRPC_STATUS, GrpcBody};
use super::deadline::parse_grpc_timeout;
use super::rls::{self, Decided};
use crate::call::Counted;
use crate::decision::DecisionService;
use crate::metrics::{Api, ErrorClass};

/// The RLS method's path.
pub(super) const RLS_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

fn grpc_headers(map: &mut HeaderMap) {
    map.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
}

/// A trailers-only error answer.
fn error(code: i32, message: &str) -> Response<tonic::body::Body> {
    let mut r = Response::new(tonic::body::Body::empty());
    grpc_headers(r.headers_mut());
    r.headers_mut()
        .insert(GRPC_STATUS.clone(), HeaderValue::from(code));
    r.headers_mut().insert(
        GRPC_MESSAGE.clone(),
        floodgate_http::contract::grpc_message(message),
    );
    r
}

/// Checks that a content type (`None`: absent) is gRPC's protobuf one:
/// `application/grpc`, optionally `+proto`, optionally with parameters
/// (any case); on failure, what was found, for the message.
pub(super) fn grpc_content_type(value: Option<&[u8]>) -> Result<(), String> {
    let Some(value) = value else {
        return Err("none".into());
    };
    // As `HeaderValue::to_str`: visible ASCII and tabs.
    let visible = value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
    let text = std::str::from_utf8(value)
        .ok()
        .filter(|_| visible)
        .ok_or_else(|| "a non-ASCII value".to_owned())?;
    let media = text.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case("application/grpc")
        || media.eq_ignore_ascii_case("application/grpc+proto")
    {
        Ok(())
    } else {
        Err(format!("`{text}`"))
    }
}

/// A plain HTTP answer (no gRPC status) to a request that is not a gRPC
/// call.
fn not_grpc(status: StatusCode, message: String) -> Response<tonic::body::Body> {
    let mut r = Response::new(tonic::body::Body::new(Full::new(Bytes::from(message))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The gRPC listener's service: the fast RLS path, tonic for the rest.
#[derive(Clone)]
pub(super) struct GrpcService {
    service: Arc<DecisionService>,
    routes: Routes,
}

impl GrpcService {
    /// The fast path for `service`, `routes` for every other method.
    pub(super) fn new(service: Arc<DecisionService>, routes: Routes) -> Self {
        GrpcService { service, routes }
    }

    /// Answers one request; its response holds its place among the calls
    /// in flight until it is sent.
    pub(super) async fn call<B>(
        &self,
        req: Request<B>,
    ) -> Result<Response<Counted<GrpcBody>>, Infallible>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        // Calls in flight over every connection are bounded: beyond, a
        // call is refused at once rather than held.
        let Some(call) = self.service.calls.begin() else {
            self.service.metrics.shed(Api::Grpc, Instant::now());
            let refused = error(
                tonic::Code::ResourceExhausted as i32,
                "too many calls in flight; try again",
            );
            return Ok(refused.map(|b| Counted::new(b.into(), None)));
        };
        let answer = self.answer(req).await;
        Ok(answer.map(|b| Counted::new(b, Some(call))))
    }

    /// Answers an admitted call.
    async fn answer<B>(&self, req: Request<B>) -> Response<GrpcBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if req.uri().path() != RLS_PATH {
            let mut routes = self.routes.clone();
            let Ok(r) = tower_service::Service::call(&mut routes, req).await;
            return r.map(GrpcBody::from);
        }
        if let Some(r) = not_a_grpc_call(&req) {
            return r.map(GrpcBody::from);
        }
        // The caller's deadline, or the server's when it sets none (a call
        // whose body never comes is not held forever).
        let longest = self.service.request_timeout;
        let timeout = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| parse_grpc_timeout(v.as_bytes()))
            .map_or(longest, |t| t.min(longest));
        let started = Instant::now();
        let span = crate::trace::rls(req.headers());
        let answer = self.rls(req, started).instrument(span);
        // The caller has given up by then: stop waiting (for the body or
        // for the store) and say so.
        match tokio::time::timeout(timeout, answer).await {
            Ok(r) => r,
            Err(_) => {
                self.service
                    .metrics
                    .failed(Api::Grpc, ErrorCode::DeadlineExceeded, started);
                error(
                    ErrorCode::DeadlineExceeded.grpc_code(),
                    &format!("no decision within the call's deadline ({timeout:?})"),
                )
                .map(GrpcBody::from)
            }
        }
    }

    async fn rls<B>(&self, req: Request<B>, started: Instant) -> Response<GrpcBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.decide(req, started)
            .await
            .unwrap_or_else(|e| e.map(GrpcBody::from))
    }

    /// The answer to an RLS call, or the error answering it.
    async fn decide<B>(&self, req: Request<B>, started: Instant) -> Answered
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let svc = &*self.service;
        if !svc.health().is_configured() {
            return Err(unconfigured());
        }
        let body = read_message(svc, req.into_body(), started).await?;
        // In memory the decision is made at once, with no future. A remote
        // store's decision holds a few KiB of state while it waits: boxed,
        // so that the call's own task, moved around by the runtime, stays
        // small.
        let message = &body[5..];
        let decided = match rls::decide_now(svc, message, started) {
            Some(decided) => decided,
            None => Box::pin(rls::decide_later(svc, message, started)).await,
        };
        match decided {
            Decided::Message(m) => Ok(answered(m)),
            Decided::Failed(code, message) => Err(error(code, &message)),
        }
    }
}

/// An RLS call's answer, or the error answering it.
type Answered = Result<Response<GrpcBody>, Response<tonic::body::Body>>;

/// The plain HTTP answer to a call of the RLS method that is not a gRPC
/// call, as the gRPC-over-HTTP/2 protocol prescribes (so that no client
/// takes an error for a success; the body is never read); none for a gRPC
/// call.
fn not_a_grpc_call<B>(req: &Request<B>) -> Option<Response<tonic::body::Body>> {
    if req.method() != Method::POST {
        let mut r = not_grpc(
            StatusCode::METHOD_NOT_ALLOWED,
            not_post(req.method().as_str()),
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return Some(r);
    }
    let content_type = req.headers().get(header::CONTENT_TYPE);
    let found = grpc_content_type(content_type.map(HeaderValue::as_bytes)).err()?;
    Some(not_grpc(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        not_grpc_type(&found),
    ))
}

/// What a call of the RLS method with the HTTP `method` other than POST
/// is told.
pub(super) fn not_post(method: &str) -> String {
    format!("{RLS_PATH} is a gRPC method: expected POST, found {method}\n")
}

/// What a call of the RLS method with a content type other than gRPC's
/// is told (`found`: the type, or `none`).
pub(super) fn not_grpc_type(found: &str) -> String {
    format!(
        "{RLS_PATH} is a gRPC method: expected Content-Type: application/grpc \
         (or application/grpc+proto), found {found}\n"
    )
}

/// The answer of a service started without a configuration, until its
/// first: envoyproxy/ratelimit's (`UNKNOWN`, its message).
fn unconfigured() -> Response<tonic::body::Body> {
    error(tonic::Code::Unknown as i32, NO_CONFIGURATION)
}

/// What a call is answered before the first configuration is loaded.
pub(crate) const NO_CONFIGURATION: &str = "no rate limit configuration loaded";

/// An invalid call's error, counted.
fn invalid(svc: &DecisionService, started: Instant, message: &str) -> Response<tonic::body::Body> {
    svc.metrics
        .failed(Api::Grpc, ErrorCode::InvalidArgument, started);
    error(ErrorCode::InvalidArgument.grpc_code(), message)
}

/// The call's body, checked to hold exactly one uncompressed gRPC message
/// (at offset 5, after its prefix) within the size limit; or the error
/// answering it.
async fn read_message<B>(
    svc: &DecisionService,
    body: B,
    started: Instant,
) -> Result<Bytes, Response<tonic::body::Body>>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let body = match whole(Limited::new(body, svc.body_limit + 5)).await {
        Ok(b) => b,
        Err(e) if e.is::<LengthLimitError>() => {
            // As gRPC servers answer a message over their limit.
            svc.metrics
                .failed(Api::Grpc, ErrorClass::ResourceExhausted, started);
            return Err(error(
                tonic::Code::ResourceExhausted as i32,
                &format!(
                    "the message is larger than the limit of {} bytes",
                    svc.body_limit
                ),
            ));
        }
        Err(e) => {
            return Err(invalid(
                svc,
                started,
                &format!("cannot read the request: {e}"),
            ));
        }
    };
    match message_fault(&body) {
        None => Ok(body),
        Some((code, message, true)) => Err(counted(svc, started, code, message)),
        Some((code, message, false)) => Err(error(code, message)),
    }
}

/// Why a call's body is not exactly one uncompressed gRPC message: the
/// error's code, its message, and whether the call counts as invalid.
pub(super) fn message_fault(body: &[u8]) -> Option<(i32, &'static str, bool)> {
    let invalid = ErrorCode::InvalidArgument.grpc_code();
    if body.len() < 5 {
        return Some((invalid, "missing gRPC message", true));
    }
    if body[0] != 0 {
        let code = tonic::Code::Unimplemented as i32;
        return Some((code, "compressed messages are not supported", false));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if len != body.len() - 5 {
        return Some((invalid, "exactly one gRPC message is expected", true));
    }
    None
}

/// An invalid call's error, counted (`code` is `INVALID_ARGUMENT`'s).
fn counted(
    svc: &DecisionService,
    started: Instant,
    code: i32,
    message: &str,
) -> Response<tonic::body::Body> {
    debug_assert_eq!(code, ErrorCode::InvalidArgument.grpc_code());
    invalid(svc, started, message)
}

/// A body's data, whole: its one chunk as it came (a call's message
/// usually arrives in one DATA frame), or the chunks joined.
async fn whole<B: Body<Data = Bytes>>(body: B) -> Result<Bytes, B::Error> {
    let mut body = std::pin::pin!(body);
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(chunk) = frame?.into_data() else {
            continue;
        };
        match &mut joined {
            Some(j) => j.extend_from_slice(&chunk),
            None if first.is_empty() => first = chunk,
            None => {
                let mut j = BytesMut::with_capacity(first.len() + chunk.len());
                j.extend_from_slice(&first);
                j.extend_from_slice(&chunk);
                joined = Some(j);
            }
        }
    }
    Ok(joined.map_or(first, BytesMut::freeze))
}

/// The answer carrying the encoded message: one message, then the
/// trailers.
fn answered(message: Bytes) -> Response<GrpcBody> {
    let mut r = Response::new(GrpcBody::Answer(Answer::new(message)));
    grpc_headers(r.headers_mut());
    r
}
