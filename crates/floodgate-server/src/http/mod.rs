//! The HTTP API: envoyproxy/ratelimit's `POST /json`, Floodgate's
//! `POST /v1/check` and `POST /v1/release`, `/healthcheck` and `/ready`.

mod body;
mod check;
mod check_limits;
mod envoy_json;
mod error;
mod json_types;
mod release;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::routing::post;
use tracing::Instrument;

use crate::call::Counted;
use crate::decision::DecisionService;
use crate::metrics::{Api, ErrorClass};

pub(crate) use error::ApiError;

/// The public HTTP routes, with bodies limited to the service's
/// `body_limit` bytes.
pub fn router(service: Arc<DecisionService>) -> Router {
    Router::new()
        .route("/json", post(envoy_json::handle))
        .route("/v1/check", post(check::handle))
        .route("/v1/release", post(release::handle))
        .merge(floodgate_runtime::host::health_routes(
            service.health().clone(),
        ))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(service.body_limit))
        .layer(axum::middleware::from_fn_with_state(
            service.clone(),
            bounded,
        ))
        .with_state(service)
}

/// Every call within the service's bounds: refused at once (503) when as
/// many calls as `server.limits.max_requests` are in flight (a call counts
/// until its response is sent), or (413) when
/// its body's declared length is over the body limit, before reading any
/// of it (the limit on the body itself covers the rest); answered 504 when
/// it takes longer than `server.limits.request_timeout` (a body that never
/// comes whole included).
async fn bounded(
    State(s): State<Arc<DecisionService>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    // The API refusals below are counted under (a match, nothing kept).
    let api = Api::of_path(request.uri().path());
    let Some(call) = s.calls.begin() else {
        s.metrics.shed_at(api, Instant::now());
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "RESOURCE_EXHAUSTED",
            "too many calls in flight; try again",
        )
        .into_response();
    };
    let declared = (request.headers().get(header::CONTENT_LENGTH))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > s.body_limit as u64) {
        s.metrics
            .failed_at(api, ErrorClass::ResourceExhausted, Instant::now());
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
            format!(
                "the request body is larger than the configured body limit ({} bytes)",
                s.body_limit
            ),
        )
        .into_response();
    }
    let span = crate::trace::http_call(api, request.headers());
    let answer = next.run(request).instrument(span);
    match tokio::time::timeout(s.request_timeout, answer).await {
        // The call holds its place until its response is sent.
        Ok(response) => response.map(|b| axum::body::Body::new(Counted::new(b, Some(call)))),
        Err(_) => {
            s.metrics
                .failed_at(api, ErrorClass::DeadlineExceeded, Instant::now());
            ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "DEADLINE_EXCEEDED",
                format!("the call took longer than {:?}", s.request_timeout),
            )
            .into_response()
        }
    }
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such endpoint")
}
