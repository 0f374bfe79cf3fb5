//! `POST /v1/release`: gives back the in-flight units of concurrency
//! limits that an admitted `/v1/check` took, when the work it guarded is
//! done. The body is the check's (domain, descriptors, hits) with the
//! `permit` the check answered (optional with the in-memory store, which
//! counts units, not permits); the descriptors are matched again and every
//! concurrency limit they map to gets the request's units back. A limit
//! gives back at most what is held (with Redis, what the permit holds), so
//! releasing twice cannot admit more than the limit.
//!
//! 200 with the units sent back; errors as for `/v1/check`.

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use floodgate_policy::{PolicySet, Status};
use floodgate_runtime::AnyBackend;
use serde::{Deserialize, Serialize};

use super::check::reason;
use super::json_types::{JsonDescriptor, opt_u32_num, opt_u64_num};
use super::{ApiError, body};
use crate::metrics::Api;
use crate::service::Service;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseRequest<'a> {
    #[serde(borrow)]
    domain: Cow<'a, str>,
    #[serde(borrow)]
    descriptors: Vec<JsonDescriptor<'a>>,
    /// As in the check: hits of every descriptor without its own.
    #[serde(alias = "hits_addend", default, deserialize_with = "opt_u32_num")]
    hits: Option<u32>,
    /// Accepted so that a check's body can be sent as it is; a dry run
    /// took nothing, so `true` is refused.
    #[serde(default)]
    dry_run: bool,
    /// The permit the check answered (a number or a decimal string);
    /// required with Redis, which holds each permit on its own.
    #[serde(default, deserialize_with = "opt_u64_num")]
    permit: Option<u64>,
}

#[derive(Serialize)]
struct ReleaseResponse<'a> {
    /// Units sent back in all (each limit gives back at most what it holds).
    units: u64,
    statuses: Vec<ReleaseStatus<'a>>,
}

#[derive(Serialize)]
struct ReleaseStatus<'a> {
    reason: &'static str,
    rule: Option<&'a str>,
    hits: u64,
    /// Units sent back to the descriptor's concurrency limits.
    units: u64,
}

/// `POST /v1/release`.
pub async fn handle(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    match run(&svc, &headers, raw).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(
    svc: &Service,
    headers: &HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let invalid = |e: ApiError| {
        svc.metrics.failed(
            Api::Release,
            floodgate_policy::ErrorCode::InvalidArgument,
            started,
        );
        e
    };
    let bytes = body::json_call(svc, Api::Release, headers, raw, started)?;
    let req: ReleaseRequest<'_> = body::parse(&bytes).map_err(invalid)?;
    if req.dry_run {
        return Err(invalid(ApiError::bad_request(
            "a dry run takes nothing, so there is nothing to release (\"dry_run\" must be false)",
        )));
    }
    if req.permit.is_none() && matches!(svc.engine().backend(), AnyBackend::Redis(_)) {
        return Err(invalid(ApiError::bad_request(
            "\"permit\" is required with the Redis store, which holds each permit on its own: \
             send the permit /v1/check answered",
        )));
    }
    let mut response = svc.pool.take();
    svc.release(
        &req.domain,
        &req.descriptors,
        req.hits.unwrap_or(0),
        req.permit,
        &mut response,
    )
    .await
    .map_err(|e| ApiError::engine(&e))?;
    let policy = svc
        .engine()
        .policy_of(&response)
        .unwrap_or_else(|| std::sync::Arc::new(PolicySet::empty()));
    let mut sent = vec![0u64; response.statuses.len()];
    for l in response.limits() {
        if is_concurrency(&policy, l.rule, l.index) {
            sent[l.descriptor] = sent[l.descriptor].saturating_add(l.units);
        }
    }
    let body = ReleaseResponse {
        units: sent.iter().fold(0, |a, &b| a.saturating_add(b)),
        statuses: response
            .statuses
            .iter()
            .zip(&sent)
            .map(|(s, &units)| status(s, units, &policy))
            .collect(),
    };
    let json = serde_json::to_vec(&body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut out = (StatusCode::OK, json).into_response();
    out.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(out)
}

/// Whether limit `index` of rule `rule` is a concurrency limit (a limit
/// override never is).
fn is_concurrency(policy: &PolicySet, rule: Option<u32>, index: usize) -> bool {
    rule.and_then(|id| policy.rules().get(id as usize))
        .and_then(|r| r.limits().get(index))
        .is_some_and(|l| l.limit.is_concurrency())
}

fn status<'a>(s: &'a Status, units: u64, policy: &'a PolicySet) -> ReleaseStatus<'a> {
    ReleaseStatus {
        reason: reason(s.reason),
        rule: s
            .rule
            .and_then(|id| policy.rules().get(id as usize))
            .map(|r| r.label()),
        hits: s.hits,
        units,
    }
}
