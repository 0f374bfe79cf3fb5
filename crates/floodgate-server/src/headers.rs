//! Rate limit headers of the most restrictive descriptor: envoyproxy/ratelimit's
//! `RateLimit-Limit/Remaining/Reset` (names configurable) and Envoy's
//! `DRAFT_VERSION_03` `X-RateLimit-*` form, for gRPC
//! `response_headers_to_add` and HTTP responses alike.

use std::fmt::Write;

use floodgate_policy::{Response, Status};
use http::HeaderName;

use crate::settings::{HeaderSettings, SettingError};

/// The header names, validated once at startup.
#[derive(Clone, Debug)]
pub struct RateLimitHeaders {
    enabled: bool,
    x_ratelimit: bool,
    limit: HeaderName,
    remaining: HeaderName,
    reset: HeaderName,
}

const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

impl RateLimitHeaders {
    /// From the settings.
    pub fn new(s: &HeaderSettings) -> Result<Self, SettingError> {
        let name = |n: &str, what: &str| {
            HeaderName::from_bytes(n.as_bytes())
                .map_err(|_| SettingError::new(what, format!("`{n}` is not a valid header name")))
        };
        Ok(RateLimitHeaders {
            enabled: s.enabled,
            x_ratelimit: s.x_ratelimit,
            limit: name(&s.limit, "LIMIT_LIMIT_HEADER")?,
            remaining: name(&s.remaining, "LIMIT_REMAINING_HEADER")?,
            reset: name(&s.reset, "LIMIT_RESET_HEADER")?,
        })
    }

    /// Whether any header is produced.
    pub fn any(&self) -> bool {
        self.enabled || self.x_ratelimit
    }

    /// Calls `emit` for each header of `response` (nothing when no
    /// descriptor has a limit). `buf` is scratch space.
    pub fn emit(
        &self,
        response: &Response,
        buf: &mut String,
        mut emit: impl FnMut(&HeaderName, &str),
    ) {
        if !self.any() {
            return;
        }
        let Some(pick) = most_restrictive(&response.statuses) else {
            return;
        };
        let Some(limit) = pick.current_limit.as_ref() else {
            return;
        };
        let reset = pick.duration_until_reset.as_secs();
        let num = |v: u64,
                   name: &HeaderName,
                   buf: &mut String,
                   emit: &mut dyn FnMut(&HeaderName, &str)| {
            buf.clear();
            let _ = write!(buf, "{v}");
            emit(name, buf);
        };
        if self.enabled {
            num(
                u64::from(limit.reported.requests_per_unit),
                &self.limit,
                buf,
                &mut emit,
            );
            num(
                u64::from(pick.limit_remaining),
                &self.remaining,
                buf,
                &mut emit,
            );
            num(reset, &self.reset, buf, &mut emit);
        }
        if self.x_ratelimit {
            buf.clear();
            let _ = write!(buf, "{}", limit.reported.requests_per_unit);
            for s in &response.statuses {
                if let Some(l) = &s.current_limit {
                    let _ = write!(
                        buf,
                        ", {};w={}",
                        l.reported.requests_per_unit,
                        l.reported.unit.seconds()
                    );
                    if let Some(n) = l.name.as_deref().filter(|n| !n.is_empty()) {
                        let _ = write!(buf, ";name=\"{}\"", n.replace(['"', '\\'], ""));
                    }
                }
            }
            emit(&X_LIMIT, buf);
            num(
                u64::from(pick.limit_remaining),
                &X_REMAINING,
                buf,
                &mut emit,
            );
            num(reset, &X_RESET, buf, &mut emit);
        }
    }
}

/// The status with the least remaining among those with a limit (the first
/// on ties), as Envoy picks it.
pub fn most_restrictive(statuses: &[Status]) -> Option<&Status> {
    let mut best: Option<&Status> = None;
    for s in statuses.iter().filter(|s| s.current_limit.is_some()) {
        if best.is_none_or(|b| s.limit_remaining < b.limit_remaining) {
            best = Some(s);
        }
    }
    best
}
