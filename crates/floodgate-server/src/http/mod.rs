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

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::post;

use crate::decision::DecisionService;

pub use error::ApiError;

/// The public HTTP routes, with bodies limited to `body_limit` bytes.
pub fn router(service: Arc<DecisionService>, body_limit: usize) -> Router {
    Router::new()
        .route("/json", post(envoy_json::handle))
        .route("/v1/check", post(check::handle))
        .route("/v1/release", post(release::handle))
        .merge(floodgate_runtime::admin::health_routes(
            service.health().clone(),
        ))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            body_limit,
            body::reject_declared_oversize,
        ))
        .layer(axum::middleware::from_fn_with_state(
            service.clone(),
            bounded,
        ))
        .with_state(service)
}

/// Every call within the service's bounds: refused at once (503) when as
/// many calls as `server.limits.max_requests` are in flight; answered 504
/// when it takes longer than `server.limits.request_timeout` (a body that
/// never comes whole included).
async fn bounded(
    State(s): State<Arc<DecisionService>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let Ok(_call) = s.calls.try_acquire() else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "RESOURCE_EXHAUSTED",
            "too many calls in flight; try again",
        )
        .into_response();
    };
    match tokio::time::timeout(s.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "DEADLINE_EXCEEDED",
            format!("the call took longer than {:?}", s.request_timeout),
        )
        .into_response(),
    }
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such endpoint")
}
