//! The live dashboard on the admin listener: `/dashboard`, one page of
//! plain HTML and script (nothing fetched from anywhere else), updated
//! every second from `/dashboard/data` — the requests per second by final
//! outcome, the rules' decisions per second by outcome, the keys limited most right now (the engine's
//! [`LimitedKeys`](floodgate_policy::observe::LimitedKeys)), the store's
//! state, the configuration's generation and the reloads' results, and
//! the tables frontends add ([`Panel`]).
//!
//! The page writes every value as text (never as markup): keys come from
//! clients. Its Content-Security-Policy allows its own inline script and
//! style and requests to this listener only.

mod model;
mod panels;
mod prometheus;
mod requests;

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::admin::Admin;
use model::snapshot;
pub(crate) use panels::Panels;
pub use panels::{Panel, PanelSource};

/// The page.
const PAGE: &str = include_str!("page.html");
/// Its own inline script and style, and requests to this listener: nothing
/// else, whatever a key's text holds.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// Keys recorded per window (across the engine's shards).
pub(crate) const TRACKED_KEYS: usize = 2048;
/// The window the keys are counted over (they cover one or two of them).
pub(crate) const WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// The observer to give the engine (`Engine::with_observer`) so that the
/// dashboard lists the keys limited most.
pub(crate) fn observer() -> Arc<floodgate_policy::observe::LimitedKeys> {
    Arc::new(floodgate_policy::observe::LimitedKeys::new(
        TRACKED_KEYS,
        WINDOW,
    ))
}

/// `/dashboard`.
pub(crate) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
}

/// `/dashboard/data`.
pub(crate) async fn data(State(a): State<Admin>) -> impl IntoResponse {
    a.health.export_metrics();
    let snap = snapshot(&a.health, a.metrics.as_ref());
    let body = serde_json::to_string(&snap).unwrap_or_else(|_| "{}".into());
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
}
