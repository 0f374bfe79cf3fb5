//! Rate limit headers of the most restrictive descriptor: envoyproxy/ratelimit's
//! `RateLimit-Limit/Remaining/Reset` (names configurable) and Envoy's
//! `DRAFT_VERSION_03` `X-RateLimit-*` form (rendered by `floodgate-http`'s
//! contract, as the gateway renders it), for gRPC `response_headers_to_add`
//! and HTTP responses alike.

use std::fmt::Write;

use floodgate_http::contract::draft03_value;
use floodgate_policy::{Code, Response, Status};
use http::HeaderName;

use floodgate_runtime::settings::HeaderSettings;

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
    fn new(text: &str, what: &str) -> Result<Self, String> {
        let http = HeaderName::from_bytes(text.as_bytes())
            .map_err(|_| format!("{what}: `{text}` is not a valid header name"))?;
        Ok(Header {
            http,
            text: text.into(),
        })
    }
}

/// What a header says of the status it describes.
#[derive(Clone, Copy, Debug)]
enum Value {
    /// The limit's requests per unit.
    Limit,
    /// Draft-03's limit: the quota, then every limited descriptor's policy.
    Draft03Limit,
    /// What remains.
    Remaining,
    /// Seconds until the reset ([`reset_seconds`]).
    Reset,
}

/// The headers to add, validated once at startup.
#[derive(Clone, Debug)]
pub struct RateLimitHeaders {
    /// In order: envoyproxy/ratelimit's (when enabled), then draft-03's
    /// (when enabled).
    headers: Vec<(Header, Value)>,
}

impl RateLimitHeaders {
    /// From the settings (every name is checked, enabled or not).
    pub fn new(s: &HeaderSettings) -> Result<Self, String> {
        let header = |text: &str, what, value| Ok::<_, String>((Header::new(text, what)?, value));
        let ratelimit = [
            header(&s.limit, "LIMIT_LIMIT_HEADER", Value::Limit)?,
            header(&s.remaining, "LIMIT_REMAINING_HEADER", Value::Remaining)?,
            header(&s.reset, "LIMIT_RESET_HEADER", Value::Reset)?,
        ];
        let draft03 = [
            header("X-RateLimit-Limit", "x_ratelimit", Value::Draft03Limit)?,
            header("X-RateLimit-Remaining", "x_ratelimit", Value::Remaining)?,
            header("X-RateLimit-Reset", "x_ratelimit", Value::Reset)?,
        ];
        let headers = (s.enabled.then_some(ratelimit).into_iter())
            .chain(s.x_ratelimit.then_some(draft03))
            .flatten()
            .collect();
        Ok(RateLimitHeaders { headers })
    }

    /// Calls `emit` for each header of `response` (nothing when no
    /// descriptor has a limit). `buf` is scratch space.
    pub fn emit<'s>(
        &'s self,
        response: &Response,
        buf: &mut String,
        mut emit: impl FnMut(&'s Header, &str),
    ) {
        if self.headers.is_empty() {
            return;
        }
        let Some(pick) = most_restrictive(&response.statuses) else {
            return;
        };
        let Some(limit) = pick.current_limit.as_ref() else {
            return;
        };
        let quota = u64::from(limit.reported.requests_per_unit);
        for (header, value) in &self.headers {
            buf.clear();
            let _ = match value {
                Value::Limit => write!(buf, "{quota}"),
                Value::Remaining => write!(buf, "{}", pick.limit_remaining),
                Value::Reset => write!(buf, "{}", reset_seconds(pick)),
                Value::Draft03Limit => {
                    let policies = (response.statuses.iter())
                        .filter_map(|s| s.current_limit.as_ref())
                        .map(|l| {
                            let r = l.reported;
                            let name = l.name.as_deref().unwrap_or_default();
                            (u64::from(r.requests_per_unit), r.unit.seconds(), name)
                        });
                    draft03_value(quota, policies, buf);
                    Ok(())
                }
            };
            emit(header, buf);
        }
    }
}

/// The reset header's value: delta-seconds until `status`'s limit resets,
/// rounded up (the status's own `duration_until_reset`; a reset 0.3 s away
/// is 1, so a client waiting that long finds the limit reset), and at least
/// 1 while nothing remains.
pub fn reset_seconds(status: &Status) -> u64 {
    match status.reset_seconds() {
        0 if status.limit_remaining == 0 => 1,
        secs => secs,
    }
}

/// The status the headers describe, as envoyproxy/ratelimit picks it: the
/// one with the least remaining among those with a limit (the first on
/// ties), except that an over-limit status not in quota mode takes the
/// place (the last of them).
pub fn most_restrictive(statuses: &[Status]) -> Option<&Status> {
    let mut best: Option<&Status> = None;
    let mut least = u32::MAX;
    for s in statuses.iter().filter(|s| s.current_limit.is_some()) {
        if s.limit_remaining < least {
            best = Some(s);
            least = s.limit_remaining;
        }
        if s.code == Code::OverLimit && !s.quota {
            best = Some(s);
            least = 0;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use floodgate_policy::engine::CurrentLimit;
    use floodgate_policy::spec::Reported;
    use floodgate_policy::unit::Unit;
    use floodgate_policy::{Code, Response, Status};

    use super::*;

    fn status(remaining: u32, reset: Duration) -> Status {
        Status {
            code: if remaining == 0 {
                Code::OverLimit
            } else {
                Code::Ok
            },
            current_limit: Some(CurrentLimit {
                reported: Reported {
                    requests_per_unit: 3,
                    unit: Unit::Minute,
                },
                name: None,
            }),
            limit_remaining: remaining,
            duration_until_reset: reset,
            ..Status::default()
        }
    }

    /// The headers `emit` produces for one status, as (name, value).
    fn headers(s: Status, settings: HeaderSettings) -> Vec<(String, String)> {
        let h = RateLimitHeaders::new(&settings).unwrap();
        let mut response = Response::default();
        response.overall = s.code;
        response.statuses.push(s);
        let mut out = Vec::new();
        h.emit(&response, &mut String::new(), |name, v| {
            out.push((name.text.to_string(), v.to_owned()))
        });
        out
    }

    fn reset_of(s: Status) -> Vec<String> {
        let settings = HeaderSettings {
            enabled: true,
            x_ratelimit: true,
            ..floodgate_runtime::Settings::default().server.headers
        };
        headers(s, settings)
            .into_iter()
            .filter(|(n, _)| n.ends_with("Reset"))
            .map(|(_, v)| v)
            .collect()
    }

    #[test]
    fn reset_is_rounded_up() {
        let ms = Duration::from_millis;
        assert_eq!(reset_of(status(0, ms(300))), ["1", "1"]);
        assert_eq!(reset_of(status(0, ms(41_203))), ["42", "42"]);
        assert_eq!(reset_of(status(2, ms(59_001))), ["60", "60"]);
        assert_eq!(reset_of(status(2, ms(60_000))), ["60", "60"]);
        assert_eq!(reset_of(status(1, Duration::from_nanos(1))), ["1", "1"]);
        // The longest reset a status can carry: rounded up without
        // overflowing (found by the rls_response fuzz target).
        let max = u64::MAX.to_string();
        assert_eq!(reset_of(status(1, Duration::MAX)), [max.clone(), max]);
    }

    #[test]
    fn the_described_status_is_picked_as_envoyproxy_ratelimit_picks_it() {
        let ms = Duration::from_millis;
        let with = |remaining, reset, quota| Status {
            quota,
            ..status(remaining, ms(reset))
        };
        let pick = |statuses: Vec<Status>| {
            let at = most_restrictive(&statuses).map(|p| p.duration_until_reset);
            statuses
                .iter()
                .position(|s| Some(s.duration_until_reset) == at)
        };
        // The least remaining, the first on ties.
        assert_eq!(
            pick(vec![
                with(2, 1, false),
                with(1, 2, false),
                with(1, 3, false)
            ]),
            Some(1)
        );
        // Over the limit: the last over-limit status, not the first.
        assert_eq!(
            pick(vec![
                with(0, 1, false),
                with(2, 2, false),
                with(0, 3, false)
            ]),
            Some(2)
        );
        // A quota-mode status over its limit takes no precedence, but its
        // remaining 0 still counts as the least.
        assert_eq!(
            pick(vec![with(1, 1, false), with(0, 2, true), with(3, 3, false)]),
            Some(1)
        );
        // A shadow-mode status over its limit is OK: the least remaining.
        let mut shadow = with(0, 4, false);
        shadow.code = Code::Ok;
        assert_eq!(
            pick(vec![with(1, 1, false), shadow, with(0, 5, true)]),
            Some(1)
        );
        // No limit, no headers.
        assert_eq!(pick(vec![Status::default()]), None);
    }

    /// The draft-03 limit names every limited descriptor's limit, its name
    /// an escaped sf-string (a quote cannot end it early), as
    /// `floodgate-http`'s contract renders it for the gateway.
    #[test]
    fn draft03_names_are_escaped_as_the_gateway_escapes_them() {
        let settings = HeaderSettings {
            x_ratelimit: true,
            ..floodgate_runtime::Settings::default().server.headers
        };
        let mut named = status(2, Duration::from_secs(30));
        if let Some(l) = named.current_limit.as_mut() {
            l.name = Some(r#"per"user\x"#.into());
        }
        let mut response = Response::default();
        response.statuses.push(named);
        response.statuses.push(status(1, Duration::from_secs(30)));
        response.statuses.push(Status::default());
        let h = RateLimitHeaders::new(&settings).unwrap();
        let mut out = Vec::new();
        h.emit(&response, &mut String::new(), |name, v| {
            out.push((name.text.to_string(), v.to_owned()))
        });
        assert_eq!(
            out[0],
            (
                "X-RateLimit-Limit".to_owned(),
                r#"3, 3;w=60;name="per\"user\\x", 3;w=60"#.to_owned()
            )
        );
        assert!(http::HeaderValue::from_str(&out[0].1).is_ok());
    }

    #[test]
    fn reset_is_never_zero_while_exhausted() {
        assert_eq!(reset_of(status(0, Duration::ZERO)), ["1", "1"]);
        // With some left, a limit that resets now says so.
        assert_eq!(reset_of(status(2, Duration::ZERO)), ["0", "0"]);
    }
}
