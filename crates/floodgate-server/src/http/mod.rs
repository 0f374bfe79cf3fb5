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
use axum::routing::{get, post};

use crate::service::Service;

pub use error::ApiError;

/// The public HTTP routes, with bodies limited to `body_limit` bytes.
pub fn router(service: Arc<Service>, body_limit: usize) -> Router {
    Router::new()
        .route("/json", post(envoy_json::handle))
        .route("/v1/check", post(check::handle))
        .route("/v1/release", post(release::handle))
        .route("/healthcheck", get(healthcheck))
        .route("/ready", get(ready))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            body_limit,
            body::reject_declared_oversize,
        ))
        .with_state(service)
}

/// Liveness: 200 while the process serves (503 once it is shutting down).
async fn healthcheck(State(s): State<Arc<Service>>) -> (StatusCode, &'static str) {
    s.health().healthcheck()
}

/// Readiness: 200 when the store can decide and shutdown has not begun.
async fn ready(State(s): State<Arc<Service>>) -> (StatusCode, &'static str) {
    s.health().ready()
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such endpoint")
}
