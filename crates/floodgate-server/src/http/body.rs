//! Reading a JSON request body: size limit, content type, syntax — each
//! failure a clear error.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use floodgate_policy::{PolicySet, Status};
use serde::Deserialize;

use super::ApiError;
use crate::decision::DecisionService;
use crate::metrics::{Api, ErrorClass};

/// The body, or the error to answer (413 when over the limit).
pub(super) fn bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        let status = r.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                status,
                "PAYLOAD_TOO_LARGE",
                "the request body is larger than the configured body limit",
            )
        } else {
            ApiError::new(status, "INVALID_ARGUMENT", r.body_text())
        }
    })
}

/// Requires `Content-Type: application/json` (415 otherwise).
pub(super) fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    if mime.eq_ignore_ascii_case("application/json") || mime.to_ascii_lowercase().ends_with("+json")
    {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UNSUPPORTED_MEDIA_TYPE",
            format!(
                "expected Content-Type: application/json, found `{}`",
                if ct.is_empty() { "nothing" } else { ct }
            ),
        ))
    }
}

/// Parses JSON, borrowing strings from `bytes` where it can.
pub(super) fn parse<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON request: {e}")))
}

/// Counts a refused call of `api` as an invalid argument, passing its
/// error on.
pub(super) fn invalid(
    svc: &DecisionService,
    api: Api,
    started: Instant,
) -> impl Fn(ApiError) -> ApiError {
    move |e| {
        svc.metrics
            .failed(api, ErrorClass::InvalidArgument, started);
        e
    }
}

/// A JSON API call's body (`api`), read and checked: its bytes, or the
/// error to answer, counted in the call's metrics (413 as resource
/// exhaustion, every other refusal as an invalid argument).
pub(super) fn json_call(
    svc: &DecisionService,
    api: Api,
    headers: &HeaderMap,
    raw: Result<Bytes, BytesRejection>,
    started: Instant,
) -> Result<Bytes, ApiError> {
    let bytes = bytes(raw).inspect_err(|e| {
        let class = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ErrorClass::ResourceExhausted
        } else {
            ErrorClass::InvalidArgument
        };
        svc.metrics.failed(api, class, started);
    })?;
    require_json(headers).map_err(invalid(svc, api, started))?;
    Ok(bytes)
}

/// The policy a response was decided under (replaced by a reload since:
/// an empty one, so that no name is shown).
pub(super) fn policy_of(
    svc: &DecisionService,
    response: &floodgate_policy::Response,
) -> Arc<PolicySet> {
    (svc.engine().policy_of(response)).unwrap_or_else(|| Arc::new(PolicySet::empty()))
}

/// The label of the rule that decided `s`, in `policy`.
pub(super) fn rule_label<'a>(policy: &'a PolicySet, s: &Status) -> Option<&'a str> {
    let rule = policy.rules().get(s.rule? as usize)?;
    Some(rule.label())
}
