//! `POST /v1/release`: gives back the in-flight units of concurrency
//! limits that an admitted `/v1/check` took, when the work it guarded is
//! done. The body is the check's (domain, descriptors, hits) with the
//! `permit` the check answered; the descriptors are matched again and each
//! concurrency limit they map to gives back at most what that permit took
//! of it, once. A permit never issued, issued for other descriptors, or
//! released already frees nothing, whatever the store.
//!
//! 200 with the units given back (or queued for Redis); 409 when the permit
//! held nothing the descriptors name; 503 when Redis cannot take the
//! release and this instance cannot keep it for later; other errors as for
//! `/v1/check`.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use floodgate_policy::engine::ReleaseReport;
use floodgate_policy::{EngineError, Permit, PolicySet, Released};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use super::check::reason;
use super::json_types::{JsonDescriptor, opt_u32_num};
use super::{ApiError, body};
use crate::decision::DecisionService;
use crate::metrics::{Api, Outcome};

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
    /// The permit the check answered (the decimal string; a number is
    /// taken too); required.
    #[serde(default, deserialize_with = "opt_permit")]
    permit: Option<Permit>,
}

#[derive(Serialize)]
struct ReleaseResponse<'a> {
    /// Units given back or queued in all (each limit gives back at most
    /// what the permit took of it).
    units: u64,
    /// Why nothing was given back (the status is then not 200).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ApiError>,
    statuses: Vec<ReleaseStatus<'a>>,
}

#[derive(Serialize)]
struct ReleaseStatus<'a> {
    reason: &'static str,
    rule: Option<&'a str>,
    hits: u64,
    /// Units given back (or queued) by the descriptor's concurrency limits.
    units: u64,
    /// What became of them (see [`Outcome`]): the least favourable of
    /// its concurrency limits' results.
    result: &'static str,
}

/// A permit as the decimal string `/v1/check` answers, or a number.
fn opt_permit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Permit>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Permit>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("the permit /v1/check answered (a decimal string)")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Err(E::custom(
                "a permit is not a floating-point number: send the string /v1/check answered",
            ))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            v.parse::<Permit>().map(Some).map_err(E::custom)
        }
    }
    d.deserialize_any(V)
}

/// `POST /v1/release`.
pub(super) async fn handle(
    State(svc): State<Arc<DecisionService>>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let invalid = body::invalid(&svc, Api::Release, started);
    let bytes = body::json_call(&svc, Api::Release, &headers, raw, started)?;
    let req: ReleaseRequest<'_> = body::parse(&bytes).map_err(&invalid)?;
    if req.dry_run {
        return Err(invalid(ApiError::bad_request(
            "a dry run takes nothing, so there is nothing to release (\"dry_run\" must be false)",
        )));
    }
    let mut response = svc.pool.take();
    let report = svc
        .release(
            &req.domain,
            &req.descriptors,
            req.hits.unwrap_or(0),
            // None is refused once the request itself is found valid.
            req.permit.unwrap_or(Permit::NONE),
            &mut response,
        )
        .await
        .map_err(|e| ApiError::engine(&e))?;
    let policy = body::policy_of(&svc, &response);
    let n = response.statuses.len();
    let mut units = vec![0u64; n];
    let mut outcomes = vec![Outcome::None; n];
    let mut concurrency = 0usize;
    for l in response.limits() {
        if !is_concurrency(&policy, l.rule, l.index) {
            continue;
        }
        concurrency += 1;
        if let Some(r) = l.release {
            let u = r.map_or(0, Released::units);
            units[l.descriptor] = units[l.descriptor].saturating_add(u);
            outcomes[l.descriptor] = outcomes[l.descriptor].max(Outcome::of(r));
        }
    }
    let (code, error) = verdict(&report, concurrency);
    let statuses = (response.statuses.iter().zip(units.iter().zip(&outcomes)))
        .map(|(s, (&units, &o))| ReleaseStatus {
            reason: reason(s.reason),
            rule: body::rule_label(&policy, s),
            hits: s.hits,
            units,
            result: o.label(),
        })
        .collect();
    let body = ReleaseResponse {
        units: report.units(),
        error,
        statuses,
    };
    Ok((code, Json(body)).into_response())
}

/// The status of a release that did `report` to `concurrency` limits: 200
/// when it gave back (or queued) anything; otherwise the store's error
/// when it failed, 409 when the permit held nothing there.
fn verdict(report: &ReleaseReport, concurrency: usize) -> (StatusCode, Option<ApiError>) {
    if report.units() > 0 {
        return (StatusCode::OK, None);
    }
    let error = match &report.error {
        Some(e) => {
            let class = EngineError::Backend(e.clone()).code();
            ApiError::of_code(class, format!("the release was not taken: {e}"))
        }
        None if concurrency == 0 => ApiError::new(
            StatusCode::CONFLICT,
            "PERMIT_NOT_HELD",
            "no concurrency limit matches these descriptors: there is nothing to release",
        ),
        None => ApiError::new(
            StatusCode::CONFLICT,
            "PERMIT_NOT_HELD",
            "the permit holds no units of the concurrency limits these descriptors match: it \
             was never issued, was issued for other descriptors, was released already, or its \
             lease ended; nothing was released",
        ),
    };
    (error.status(), Some(error))
}

/// Whether limit `index` of rule `rule` is a concurrency limit (a limit
/// override never is).
fn is_concurrency(policy: &PolicySet, rule: Option<u32>, index: usize) -> bool {
    rule.and_then(|id| policy.rules().get(id as usize))
        .and_then(|r| r.limits().get(index))
        .is_some_and(|l| l.limit.is_concurrency())
}
