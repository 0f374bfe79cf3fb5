//! The Envoy header form, for decision services answering Envoy:
//! envoyproxy/ratelimit's `RateLimit-Limit/-Remaining/-Reset` (names
//! configurable) and Envoy's `DRAFT_VERSION_03` `X-RateLimit-*`, rendered
//! from an engine [`Response`]'s statuses (gRPC `response_headers_to_add`,
//! HTTP response headers) for the status [`most_restrictive`] picks — or,
//! where Floodgate chooses what to say (its own `/v1/check`), from a
//! contract [`Report`]: each limit in its own window, shadow-mode rules left
//! out, no reset for a limit that frees on release.

use std::fmt::Write;
use std::time::Duration;

use floodgate_policy::{Response, Status};
use http::HeaderName;

use super::headers::{delta, draft03_limit, draft03_value};
use super::primary::most_restrictive;
use super::report::Report;

/// A header name that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: `{name}` is not a valid header name")]
pub struct InvalidHeaderName {
    /// The setting naming it.
    pub what: &'static str,
    /// The name as given.
    pub name: String,
}

/// A header name as configured (kept for gRPC and JSON answers) and as
/// HTTP uses it.
#[derive(Clone, Debug)]
pub struct EnvoyHeader {
    /// The HTTP name (lower case).
    pub http: HeaderName,
    /// The name as configured.
    pub text: Box<str>,
}

impl EnvoyHeader {
    fn new(text: &str, what: &'static str) -> Result<Self, InvalidHeaderName> {
        let http = HeaderName::from_bytes(text.as_bytes()).map_err(|_| InvalidHeaderName {
            what,
            name: text.to_owned(),
        })?;
        Ok(EnvoyHeader {
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

/// The names of envoyproxy/ratelimit's three headers (its
/// `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`).
#[derive(Clone, Copy, Debug)]
pub struct EnvoyNames<'a> {
    /// The limit header (`RateLimit-Limit`).
    pub limit: &'a str,
    /// The remaining header (`RateLimit-Remaining`).
    pub remaining: &'a str,
    /// The reset header (`RateLimit-Reset`).
    pub reset: &'a str,
}

/// The Envoy form's headers to add, validated once at startup.
#[derive(Clone, Debug)]
pub struct EnvoyHeaders {
    /// In order: envoyproxy/ratelimit's (when enabled), then draft-03's
    /// (when enabled).
    headers: Vec<(EnvoyHeader, Value)>,
}

impl EnvoyHeaders {
    /// envoyproxy/ratelimit's headers named `names` when `ratelimit`, and
    /// draft-03's when `draft03` (every name is checked, enabled or not).
    pub fn new(
        names: EnvoyNames<'_>,
        ratelimit: bool,
        draft03: bool,
    ) -> Result<Self, InvalidHeaderName> {
        let header = |text: &str, what, value| Ok((EnvoyHeader::new(text, what)?, value));
        let ratelimit_form = [
            header(names.limit, "LIMIT_LIMIT_HEADER", Value::Limit)?,
            header(names.remaining, "LIMIT_REMAINING_HEADER", Value::Remaining)?,
            header(names.reset, "LIMIT_RESET_HEADER", Value::Reset)?,
        ];
        let draft03_form = [
            header("X-RateLimit-Limit", "x_ratelimit", Value::Draft03Limit)?,
            header("X-RateLimit-Remaining", "x_ratelimit", Value::Remaining)?,
            header("X-RateLimit-Reset", "x_ratelimit", Value::Reset)?,
        ];
        let headers = (ratelimit.then_some(ratelimit_form).into_iter())
            .chain(draft03.then_some(draft03_form))
            .flatten()
            .collect();
        Ok(EnvoyHeaders { headers })
    }

    /// Calls `emit` for each header of `response` (nothing when no
    /// descriptor has a limit). `buf` is scratch space.
    pub fn emit<'s>(
        &'s self,
        response: &Response,
        buf: &mut String,
        mut emit: impl FnMut(&'s EnvoyHeader, &str),
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
                    draft03_value(quota, policies(response), buf);
                    Ok(())
                }
            };
            emit(header, buf);
        }
    }
}

impl EnvoyHeaders {
    /// Calls `emit` for each header of `report` (nothing when it has no
    /// position), as the contract's single-valued forms render it: the
    /// position [`Report::primary`] picks, its policy's quota in its own
    /// window (a limit of 3 per 10 s is `3`, draft-03's `3, 3;w=10`), and
    /// no reset header for a position without a time (a concurrency limit,
    /// whose units come back on release). `buf` is scratch space.
    pub fn emit_report<'s>(
        &'s self,
        report: &Report,
        buf: &mut String,
        mut emit: impl FnMut(&'s EnvoyHeader, &str),
    ) {
        let Some(line) = report.primary() else {
            return;
        };
        let quota = report.policies().get(line.policy).map_or(0, |p| p.quota);
        for (header, value) in &self.headers {
            buf.clear();
            let _ = match value {
                Value::Limit => write!(buf, "{quota}"),
                Value::Remaining => write!(buf, "{}", line.remaining),
                Value::Reset if !line.timed => continue,
                Value::Reset => write!(buf, "{}", delta(line, Duration::ZERO)),
                Value::Draft03Limit => {
                    draft03_limit(report, quota, buf);
                    Ok(())
                }
            };
            emit(header, buf);
        }
    }
}

/// Every limited descriptor's policy, as draft-03 lists them: (quota,
/// window in seconds, name).
fn policies(response: &Response) -> impl Iterator<Item = (u64, u64, &str)> {
    (response.statuses.iter())
        .filter_map(|s| s.current_limit.as_ref())
        .map(|l| {
            let r = l.reported;
            let name = l.name.as_deref().unwrap_or_default();
            (u64::from(r.requests_per_unit), r.unit.seconds(), name)
        })
}

/// The reset header's value: delta-seconds until `status`'s limit resets,
/// rounded up (the status's own `duration_until_reset`; a reset 0.3 s away
/// is 1, so a client waiting that long finds the limit reset), and at least
/// 1 while nothing remains.
fn reset_seconds(status: &Status) -> u64 {
    match status.reset_seconds() {
        0 if status.limit_remaining == 0 => 1,
        secs => secs,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use floodgate_policy::{Response, Status};

    use super::*;
    use crate::contract::primary::tests::status;

    /// envoyproxy/ratelimit's default names.
    const NAMES: EnvoyNames<'static> = EnvoyNames {
        limit: "RateLimit-Limit",
        remaining: "RateLimit-Remaining",
        reset: "RateLimit-Reset",
    };

    /// The headers `emit` produces for `response`, as (name, value).
    fn emitted(h: &EnvoyHeaders, response: &Response) -> Vec<(String, String)> {
        let mut out = Vec::new();
        h.emit(response, &mut String::new(), |name, v| {
            out.push((name.text.to_string(), v.to_owned()));
        });
        out
    }

    fn reset_of(s: Status) -> Vec<String> {
        let h = EnvoyHeaders::new(NAMES, true, true).unwrap();
        let mut response = Response::default();
        response.overall = s.code;
        response.statuses.push(s);
        emitted(&h, &response)
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

    /// The draft-03 limit names every limited descriptor's limit, its name
    /// an escaped sf-string (a quote cannot end it early), as the
    /// contract's draft-03 form renders it for the gateway.
    #[test]
    fn draft03_names_are_escaped_as_the_gateway_escapes_them() {
        let mut named = status(2, Duration::from_secs(30));
        if let Some(l) = named.current_limit.as_mut() {
            l.name = Some(r#"per"user\x"#.into());
        }
        let mut response = Response::default();
        response.statuses.push(named);
        response.statuses.push(status(1, Duration::from_secs(30)));
        response.statuses.push(Status::default());
        let h = EnvoyHeaders::new(NAMES, false, true).unwrap();
        let out = emitted(&h, &response);
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

    /// The headers `emit_report` produces for `report`, as (name, value).
    fn from_report(report: &Report) -> Vec<(String, String)> {
        let h = EnvoyHeaders::new(NAMES, true, true).unwrap();
        let mut out = Vec::new();
        h.emit_report(report, &mut String::new(), |name, v| {
            out.push((name.text.to_string(), v.to_owned()));
        });
        out
    }

    /// Where Floodgate chooses the form, a limit is stated in its own
    /// window (3 per 10 s, not 18 per minute), and a position without a
    /// time (a concurrency limit) has no reset.
    #[test]
    fn a_report_is_rendered_in_its_own_windows() {
        use floodgate::{Decision, Outcome};

        use crate::contract::QuotaUnit;
        let decision = |outcome, remaining, retry_after| Decision {
            outcome,
            limit: 3,
            remaining,
            reset_after: Duration::from_millis(7_200),
            retry_after,
        };
        let mut report = Report::new();
        let p = report.add_policy("per-user", 3, Some(10), QuotaUnit::Requests);
        report.add_current(p, &decision(Outcome::Allowed, 2, None));
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            from_report(&report),
            pairs(&[
                ("RateLimit-Limit", "3"),
                ("RateLimit-Remaining", "2"),
                ("RateLimit-Reset", "8"),
                ("X-RateLimit-Limit", r#"3, 3;w=10;name="per-user""#),
                ("X-RateLimit-Remaining", "2"),
                ("X-RateLimit-Reset", "8"),
            ])
        );
        report.clear();
        let p = report.add_policy("jobs", 1, None, QuotaUnit::ConcurrentRequests);
        report.add_current(p, &decision(Outcome::Denied, 0, None));
        assert_eq!(
            from_report(&report),
            pairs(&[
                ("RateLimit-Limit", "1"),
                ("RateLimit-Remaining", "0"),
                ("X-RateLimit-Limit", "1"),
                ("X-RateLimit-Remaining", "0"),
            ])
        );
        // Nothing to describe, nothing sent.
        report.clear();
        assert!(from_report(&report).is_empty());
    }

    #[test]
    fn every_name_is_checked_enabled_or_not() {
        let bad = EnvoyNames {
            reset: "Rate Limit",
            ..NAMES
        };
        let e = EnvoyHeaders::new(bad, false, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "LIMIT_RESET_HEADER: `Rate Limit` is not a valid header name"
        );
    }
}
