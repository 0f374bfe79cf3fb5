//! envoyproxy/ratelimit's `POST /json`: a proto3-JSON `RateLimitRequest`
//! in, a proto3-JSON `RateLimitResponse` out; 200 when OK, 429 when over
//! the limit, 400 for any error (as that service answers). A shaper's
//! delay is decided as over gRPC
//! ([`decide_rls`](DecisionService::decide_rls)).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use floodgate_policy::{Code, Status};
use serde::{Deserialize, Serialize};

use super::json_types::{JsonDescriptor, opt_u32_num};
use super::{ApiError, body};
use crate::decision::{DecisionService, carried_delay};
use crate::metrics::Api;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request<'a> {
    #[serde(borrow, default)]
    domain: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    descriptors: Vec<JsonDescriptor<'a>>,
    #[serde(
        rename = "hitsAddend",
        alias = "hits_addend",
        default,
        deserialize_with = "opt_u32_num"
    )]
    hits_addend: Option<u32>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonResponse<'a> {
    overall_code: &'static str,
    statuses: Vec<JsonStatus<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    response_headers_to_add: Vec<JsonHeader>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dynamic_metadata: Option<JsonMetadata>,
}

/// `dynamic_metadata`: the delay an `OK` answer carries
/// ([`carried_delay`]).
#[derive(Serialize)]
struct JsonMetadata {
    delay_ms: f64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonStatus<'a> {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit<'a>>,
    #[serde(skip_serializing_if = "is_zero")]
    limit_remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonLimit<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    requests_per_unit: u32,
    unit: &'static str,
}

#[derive(Serialize)]
struct JsonHeader {
    key: String,
    value: String,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// The proto name of a code.
pub(super) fn code_name(c: Code) -> &'static str {
    match c {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

fn status(s: &Status) -> JsonStatus<'_> {
    let current_limit = s.current_limit.as_ref().map(|l| JsonLimit {
        name: l.name.as_deref().unwrap_or(""),
        requests_per_unit: l.reported.requests_per_unit,
        unit: l.reported.unit.name(),
    });
    // Whole seconds, as proto3 JSON writes a duration of them: `"42s"`.
    let duration_until_reset = (s.reports_reset()).then(|| format!("{}s", s.reset_seconds()));
    JsonStatus {
        code: code_name(s.code),
        current_limit,
        limit_remaining: s.limit_remaining,
        duration_until_reset,
    }
}

/// `POST /json`.
pub(super) async fn handle(
    State(svc): State<Arc<DecisionService>>,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    match run(&svc, raw).await {
        Ok(r) => r,
        // envoyproxy/ratelimit answers every error with 400; a body over
        // the limit keeps its 413.
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => e.into_response(),
        Err(e) => e.with_status(StatusCode::BAD_REQUEST).into_response(),
    }
}

async fn run(
    svc: &DecisionService,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    if !svc.health().is_configured() {
        return Err(ApiError::unconfigured());
    }
    let bytes = body::bytes(raw)?;
    let req: Request<'_> = body::parse(&bytes).map_err(body::invalid(svc, Api::Json, started))?;
    let mut response = svc.pool.take();
    svc.decide_rls(
        Api::Json,
        &req.domain,
        &req.descriptors,
        req.hits_addend.unwrap_or(0),
        &mut response,
    )
    .await
    .map_err(|e| ApiError::engine(&e))?;
    let mut headers = Vec::new();
    let mut buf = String::new();
    svc.headers.emit(&response, &mut buf, |name, value| {
        headers.push(JsonHeader {
            key: name.text.to_string(),
            value: value.to_owned(),
        });
    });
    let http_status = match response.overall {
        Code::Ok => StatusCode::OK,
        Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
    };
    let body = JsonResponse {
        overall_code: code_name(response.overall),
        statuses: response.statuses.iter().map(status).collect(),
        response_headers_to_add: headers,
        dynamic_metadata: carried_delay(&response).map(|d| JsonMetadata {
            delay_ms: d.as_secs_f64() * 1000.0,
        }),
    };
    Ok((http_status, Json(body)).into_response())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A reset as proto3 JSON writes a duration, in whole seconds rounded
    /// up; none without a limit or a reset.
    #[test]
    fn durations_as_proto3_json() {
        let reset = |d| {
            let s = Status {
                duration_until_reset: d,
                ..Status::default()
            };
            status(&s).duration_until_reset
        };
        assert_eq!(reset(Duration::from_secs(42)).as_deref(), Some("42s"));
        assert_eq!(reset(Duration::from_millis(1500)).as_deref(), Some("2s"));
        assert_eq!(reset(Duration::from_nanos(5)).as_deref(), Some("1s"));
        assert_eq!(reset(Duration::ZERO), None);
    }
}
