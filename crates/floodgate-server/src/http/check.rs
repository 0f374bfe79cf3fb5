//! `POST /v1/check`: Floodgate's own JSON API, with everything the engine
//! decides — each descriptor's outcome (allowed, delayed, denied, never),
//! remaining, reset, retry-after and delay, the rule that matched and why;
//! dry runs (`"dry_run": true` decides without charging); several limits
//! per rule (the narrowest is reported, and each in `limits`).
//!
//! 200 when the request may proceed, 429 when it is over the limit (with
//! `Retry-After` when known), and the rate limit headers when enabled,
//! rendered as the gateway renders them (each limit in its own window,
//! shadow-mode rules never shown); errors as `{"error": {...}}` with the
//! status of their [`ErrorCode`](floodgate_policy::ErrorCode).

use std::cell::RefCell;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use floodgate::{Apply, Decision, Outcome};
use floodgate_http::contract::{Contract, Report};
use floodgate_policy::engine::{CurrentLimit, Reason};
use floodgate_policy::spec::Reported;
use floodgate_policy::{Code, PolicySet, Status};
use serde::{Deserialize, Serialize};

use super::check_limits::{self, LimitJson};
use super::envoy_json::code_name;
use super::json_types::{JsonDescriptor, opt_u32_num};
use super::{ApiError, body};
use crate::decision::DecisionService;
use crate::metrics::Api;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckRequest<'a> {
    #[serde(borrow)]
    domain: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    descriptors: Vec<JsonDescriptor<'a>>,
    /// Hits charged to every descriptor without its own (0 or absent: 1).
    #[serde(alias = "hits_addend", default, deserialize_with = "opt_u32_num")]
    hits: Option<u32>,
    /// Decide without charging anything.
    #[serde(default)]
    dry_run: bool,
}

#[derive(Serialize)]
struct CheckResponse<'a> {
    code: &'static str,
    allowed: bool,
    dry_run: bool,
    shadowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
    /// The permit an admitted request holds its concurrency limits under
    /// (a decimal string), for `/v1/release`.
    #[serde(skip_serializing_if = "Option::is_none")]
    permit: Option<String>,
    statuses: Vec<CheckStatus<'a>>,
}

#[derive(Serialize)]
struct CheckStatus<'a> {
    code: &'static str,
    reason: &'static str,
    rule: Option<&'a str>,
    shadow: bool,
    hits: u64,
    current_limit: Option<Limit<'a>>,
    limit_remaining: u32,
    duration_until_reset_ms: u64,
    decision: Option<DecisionJson>,
    limits: Vec<LimitJson<'a>>,
}

/// A limit in Envoy's terms.
#[derive(Serialize)]
pub(super) struct Limit<'a> {
    requests_per_unit: u32,
    unit: &'static str,
    name: Option<&'a str>,
}

impl<'a> Limit<'a> {
    /// The limit `reported`, named `name`.
    pub(super) fn new(reported: &Reported, name: Option<&'a str>) -> Self {
        Limit {
            requests_per_unit: reported.requests_per_unit,
            unit: reported.unit.name(),
            name,
        }
    }

    /// A status's current limit.
    pub(super) fn current(l: &'a CurrentLimit) -> Self {
        Limit::new(&l.reported, l.name.as_deref())
    }
}

/// A decision.
#[derive(Serialize)]
pub(super) struct DecisionJson {
    outcome: &'static str,
    limit: u64,
    remaining: u64,
    reset_after_ms: u64,
    retry_after_ms: Option<u64>,
    delay_ms: Option<u64>,
}

/// Milliseconds, rounded up (so a client never retries early).
fn ms(d: Duration) -> u64 {
    d.as_nanos().div_ceil(1_000_000).min(u128::from(u64::MAX)) as u64
}

/// The name of a reason.
pub(super) fn reason(r: Reason) -> &'static str {
    match r {
        Reason::NoMatch => "no_match",
        Reason::Limited => "limited",
        Reason::Unlimited => "unlimited",
        Reason::Replaced => "replaced",
        Reason::Blocked => "blocked",
        Reason::Denied => "denied",
        Reason::Disabled => "disabled",
    }
}

/// The JSON of a decision.
pub(super) fn decision(d: &Decision) -> DecisionJson {
    let (outcome, delay) = match d.outcome {
        Outcome::Allowed => ("allowed", None),
        Outcome::Delayed(w) => ("delayed", Some(ms(w))),
        Outcome::Denied => ("denied", None),
        Outcome::Never => ("never", None),
    };
    DecisionJson {
        outcome,
        limit: d.limit,
        remaining: d.remaining,
        reset_after_ms: ms(d.reset_after),
        retry_after_ms: d.retry_after.map(ms),
        delay_ms: delay,
    }
}

fn status<'a>(
    response: &floodgate_policy::Response,
    index: usize,
    s: &'a Status,
    policy: &'a PolicySet,
    held: &[Option<floodgate_policy::Held>],
) -> CheckStatus<'a> {
    CheckStatus {
        code: code_name(s.code),
        reason: reason(s.reason),
        rule: body::rule_label(policy, s),
        shadow: s.shadow,
        hits: s.hits,
        current_limit: s.current_limit.as_ref().map(Limit::current),
        limit_remaining: s.limit_remaining,
        duration_until_reset_ms: ms(s.duration_until_reset),
        decision: s.decision.as_ref().map(decision),
        limits: check_limits::limits(response, index, s, policy, held),
    }
}

/// `POST /v1/check`.
pub(super) async fn handle(
    State(svc): State<Arc<DecisionService>>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    if !svc.health().is_configured() {
        return Err(ApiError::unconfigured());
    }
    let bytes = body::json_call(&svc, Api::Check, &headers, raw, started)?;
    let req: CheckRequest<'_> =
        body::parse(&bytes).map_err(body::invalid(&svc, Api::Check, started))?;
    let apply = if req.dry_run {
        Apply::Check
    } else {
        Apply::Commit
    };
    let mut response = svc.pool.take();
    svc.decide(
        Api::Check,
        &req.domain,
        &req.descriptors,
        req.hits.unwrap_or(0),
        apply,
        &mut response,
    )
    .await
    .map_err(|e| ApiError::engine(&e))?;
    let policy = body::policy_of(&svc, &response);
    let held = svc.engine().held(&response);
    let over = response.overall == Code::OverLimit;
    let retry_after = response.narrowest().and_then(|d| d.retry_after);
    let retry_after = retry_after.filter(|_| over);
    let body = CheckResponse {
        code: code_name(response.overall),
        allowed: !over,
        dry_run: req.dry_run,
        shadowed: response.shadowed,
        retry_after_ms: retry_after.map(ms),
        permit: response
            .permit()
            .filter(|_| !over && !req.dry_run)
            .map(|p| p.to_string()),
        statuses: response
            .statuses
            .iter()
            .enumerate()
            .map(|(i, s)| status(&response, i, s, &policy, &held))
            .collect(),
    };
    Ok(respond(&svc, &response, &policy, body, retry_after))
}

/// The HTTP answer carrying `body`: 429 when over the limit, with
/// `Retry-After` (`retry_after`, when known) and the rate limit headers of
/// `response` decided under `policy`.
fn respond(
    svc: &DecisionService,
    response: &floodgate_policy::Response,
    policy: &PolicySet,
    body: CheckResponse<'_>,
    retry_after: Option<std::time::Duration>,
) -> Response {
    let code = if body.allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut out = (code, Json(body)).into_response();
    let h = out.headers_mut();
    if let Some(r) = retry_after {
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from(
                r.as_nanos()
                    .div_ceil(1_000_000_000)
                    .min(u128::from(u64::MAX)) as u64,
            ),
        );
    }
    rate_limit_headers(svc, response, policy, h);
    out
}

/// The contract every `/v1/check` answer is rendered under: no rule hidden
/// or renamed (the body names every rule anyway).
static CONTRACT: LazyLock<Contract> = LazyLock::new(Contract::default);

thread_local! {
    /// The report of the answer being written, reused from one to the next.
    static REPORT: RefCell<(Report, String)> = RefCell::default();
}

/// Adds the rate limit headers of `response` to `h`: Floodgate chooses
/// their form here, so they are rendered from the contract's report (each
/// limit in its own window, shadow-mode rules left out), as the gateway
/// renders them — not in the RLS protocol's units.
fn rate_limit_headers(
    svc: &DecisionService,
    response: &floodgate_policy::Response,
    policy: &PolicySet,
    h: &mut HeaderMap,
) {
    if response.generation() != 0 && policy.generation() != response.generation() {
        // Reloaded since: the rules it was decided by are gone (the body
        // leaves their details out too).
        return;
    }
    REPORT.with_borrow_mut(|(report, buf)| {
        report.fill(response, policy, &CONTRACT);
        svc.headers.emit_report(report, buf, |name, value| {
            if let Ok(v) = HeaderValue::from_str(value) {
                h.insert(name.http.clone(), v);
            }
        });
    });
}
