//! Rate limit headers of the most restrictive descriptor: envoyproxy/ratelimit's
//! `RateLimit-Limit/Remaining/Reset` (names configurable) and Envoy's
//! `DRAFT_VERSION_03` `X-RateLimit-*` form, for gRPC
//! `response_headers_to_add` and HTTP responses alike.

use std::fmt::Write;

use floodgate_policy::{Response, Status};
use http::HeaderName;

use crate::settings::{HeaderSettings, SettingError};

/// A header name as configured (kept for gRPC and JSON answers) and as
/// HTTP uses it.
#[derive(Clone, Debug)]
pub struct Header {
    /// The HTTP name (lower case).
    pub http: HeaderName,
    /// The name as configured.
    pub text: Box<str>,
}

impl Header {
    fn new(text: &str, what: &str) -> Result<Self, SettingError> {
        let http = HeaderName::from_bytes(text.as_bytes())
            .map_err(|_| SettingError::new(what, format!("`{text}` is not a valid header name")))?;
        Ok(Header {
            http,
            text: text.into(),
        })
    }
}

/// The headers to add, validated once at startup.
#[derive(Clone, Debug)]
pub struct RateLimitHeaders {
    enabled: bool,
    x_ratelimit: bool,
    limit: Header,
    remaining: Header,
    reset: Header,
    x_limit: Header,
    x_remaining: Header,
    x_reset: Header,
}

impl RateLimitHeaders {
    /// From the settings.
    pub fn new(s: &HeaderSettings) -> Result<Self, SettingError> {
        Ok(RateLimitHeaders {
            enabled: s.enabled,
            x_ratelimit: s.x_ratelimit,
            limit: Header::new(&s.limit, "LIMIT_LIMIT_HEADER")?,
            remaining: Header::new(&s.remaining, "LIMIT_REMAINING_HEADER")?,
            reset: Header::new(&s.reset, "LIMIT_RESET_HEADER")?,
            x_limit: Header::new("X-RateLimit-Limit", "x_ratelimit")?,
            x_remaining: Header::new("X-RateLimit-Remaining", "x_ratelimit")?,
            x_reset: Header::new("X-RateLimit-Reset", "x_ratelimit")?,
        })
    }

    /// Whether any header is produced.
    pub fn any(&self) -> bool {
        self.enabled || self.x_ratelimit
    }

    /// Calls `emit` for each header of `response` (nothing when no
    /// descriptor has a limit). `buf` is scratch space.
    pub fn emit<'s>(
        &'s self,
        response: &Response,
        buf: &mut String,
        mut emit: impl FnMut(&'s Header, &str),
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
        let emit: &mut dyn FnMut(&'s Header, &str) = &mut emit;
        if self.enabled {
            number(
                emit,
                &self.limit,
                u64::from(limit.reported.requests_per_unit),
                buf,
            );
            number(emit, &self.remaining, u64::from(pick.limit_remaining), buf);
            number(emit, &self.reset, reset, buf);
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
            emit(&self.x_limit, buf);
            number(
                emit,
                &self.x_remaining,
                u64::from(pick.limit_remaining),
                buf,
            );
            number(emit, &self.x_reset, reset, buf);
        }
    }
}

fn number<'s>(emit: &mut dyn FnMut(&'s Header, &str), h: &'s Header, v: u64, buf: &mut String) {
    buf.clear();
    let _ = write!(buf, "{v}");
    emit(h, buf);
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
