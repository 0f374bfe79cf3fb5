//! Reading a JSON request body: size limit, content type, syntax — each
//! failure a clear error.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use serde::Deserialize;

use super::ApiError;

/// The body, or the error to answer (413 when over the limit).
pub fn bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
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

/// Answers 413 at once for a body whose declared length is over `limit`,
/// before reading any of it (the limit on the body itself covers the rest).
pub async fn reject_declared_oversize(
    axum::extract::State(limit): axum::extract::State<usize>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
            format!("the request body is larger than the configured body limit ({limit} bytes)"),
        )
        .into_response();
    }
    next.run(request).await
}

/// Requires `Content-Type: application/json` (415 otherwise).
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
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
pub fn parse<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON request: {e}")))
}

/// A JSON API call's body (`api`), read and checked: its bytes, or the
/// error to answer, counted in the call's metrics (413 as resource
/// exhaustion, every other refusal as an invalid argument).
pub fn json_call(
    svc: &crate::decision::DecisionService,
    api: crate::metrics::Api,
    headers: &HeaderMap,
    raw: Result<Bytes, BytesRejection>,
    started: std::time::Instant,
) -> Result<Bytes, ApiError> {
    let bytes = bytes(raw).inspect_err(|e| {
        let class = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            crate::metrics::ErrorClass::ResourceExhausted
        } else {
            crate::metrics::ErrorClass::InvalidArgument
        };
        svc.metrics.failed(api, class, started);
    })?;
    require_json(headers).inspect_err(|_| {
        svc.metrics
            .failed(api, crate::metrics::ErrorClass::InvalidArgument, started);
    })?;
    Ok(bytes)
}
