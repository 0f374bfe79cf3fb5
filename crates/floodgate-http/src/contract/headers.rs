//! Writing a [`Report`] as rate-limit headers, in every selected form.

use std::time::Duration;

use floodgate::Timestamp;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::config::{Contract, HeaderForm};
use super::header_buf::HeaderBuf;
use super::names::{
    RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
use super::report::{CurrentLine, QuotaUnit, Report, Verdict};
use super::sf::{ceil_secs, clamp, push_int, push_string};

/// Seconds until `line` resets, `elapsed` after the decision, rounded up.
pub(super) fn delta(line: &CurrentLine, elapsed: Duration) -> u64 {
    clamp(ceil_secs(line.reset.saturating_sub(elapsed)))
}

/// The Unix time (seconds, rounded up) at which `line` resets, from the
/// decision's instant `now`: one clock reading, so the value is the same
/// for every response of one window state.
pub fn epoch_reset(now: Timestamp, reset: Duration) -> u64 {
    let at = u128::from(now.as_nanos()) + reset.as_nanos();
    clamp(at.div_ceil(1_000_000_000).min(u128::from(u64::MAX)) as u64)
}

fn put(headers: &mut HeaderMap, name: HeaderName, out: &mut HeaderBuf) {
    if let Some(v) = out.value() {
        headers.insert(name, v);
    }
}

fn put_int(headers: &mut HeaderMap, name: HeaderName, n: u64, out: &mut HeaderBuf) {
    let text = out.text();
    text.clear();
    push_int(text, n);
    put(headers, name, out);
}

impl Contract {
    /// `RateLimit-Policy` of `report`, rendered (for caching).
    pub fn policy_value(&self, report: &Report) -> Option<HeaderValue> {
        let mut text = String::new();
        ietf_policy(report, &mut text);
        HeaderValue::from_str(&text).ok()
    }

    /// Writes the rate-limit headers of `report` into `headers` (and
    /// `Retry-After` on a denial), in every configured form, unless hidden.
    ///
    /// `now` is the instant the decision was made at (for epoch resets),
    /// `elapsed` the time since (a shaper's delay: relative values shrink by
    /// it). Values are split off `out`'s shared buffer (no allocation per
    /// value); `RateLimit-Policy` is `policy` when given (the rendering of
    /// the report's policies, cached: see [`Report::single_rule`]).
    pub fn write_headers(
        &self,
        report: &Report,
        now: Timestamp,
        elapsed: Duration,
        headers: &mut HeaderMap,
        out: &mut HeaderBuf,
        policy: Option<&HeaderValue>,
    ) {
        if report.verdict() == Verdict::Denied {
            if let Some(secs) = self.retry_after_secs(report) {
                put_int(headers, http::header::RETRY_AFTER, secs, out);
            }
        } else if !self.on_success {
            return;
        }
        if self.hide_headers || report.current().is_empty() {
            return;
        }
        for form in &self.forms {
            match form {
                HeaderForm::Ietf => {
                    match policy {
                        Some(v) => {
                            headers.insert(RATELIMIT_POLICY, v.clone());
                        }
                        None => {
                            ietf_policy(report, out.text());
                            put(headers, RATELIMIT_POLICY, out);
                        }
                    }
                    ietf_current(report, elapsed, out.text());
                    put(headers, RATELIMIT, out);
                }
                HeaderForm::XRateLimit | HeaderForm::XRateLimitEpoch | HeaderForm::Draft03 => {
                    let Some(line) = report.primary() else {
                        continue;
                    };
                    let quota = report.policies().get(line.policy).map_or(0, |p| p.quota);
                    if *form == HeaderForm::Draft03 {
                        draft03_limit(report, quota, out.text());
                        put(headers, X_RATELIMIT_LIMIT, out);
                    } else {
                        put_int(headers, X_RATELIMIT_LIMIT, quota, out);
                    }
                    put_int(headers, X_RATELIMIT_REMAINING, line.remaining, out);
                    if line.timed {
                        let reset = match form {
                            HeaderForm::XRateLimitEpoch => epoch_reset(now, line.reset),
                            _ => delta(line, elapsed),
                        };
                        put_int(headers, X_RATELIMIT_RESET, reset, out);
                    }
                }
            }
        }
    }

    /// `Retry-After` of a denial, in delay-seconds: the exact wait rounded
    /// up, or the configured default when no wait is known; none when the
    /// request can never pass.
    pub fn retry_after_secs(&self, report: &Report) -> Option<u64> {
        if report.is_never() {
            return None;
        }
        let wait = report.retry_after().or(self.retry_after_unknown);
        wait.map(|d| clamp(ceil_secs(d)))
    }
}

/// `"name";q=Q[;qu="concurrent-requests"][;w=W], ...`
pub fn ietf_policy(report: &Report, buf: &mut String) {
    buf.clear();
    for (i, p) in report.policies().iter().enumerate() {
        if i > 0 {
            buf.push_str(", ");
        }
        push_string(buf, report.name(i));
        buf.push_str(";q=");
        push_int(buf, p.quota);
        if p.unit == QuotaUnit::ConcurrentRequests {
            buf.push_str(";qu=\"concurrent-requests\"");
        }
        if let Some(w) = p.window {
            buf.push_str(";w=");
            push_int(buf, w.max(1));
        }
    }
}

/// `"name";r=R[;t=T], ...`
pub fn ietf_current(report: &Report, elapsed: Duration, buf: &mut String) {
    buf.clear();
    for (i, c) in report.current().iter().enumerate() {
        if i > 0 {
            buf.push_str(", ");
        }
        push_string(buf, report.name(c.policy));
        push_position(buf, c.remaining, c.timed.then(|| delta(c, elapsed)));
    }
}

/// `;r=R[;t=T]`: the parameters of one position in `RateLimit`, after its
/// policy's name (`reset_secs`: whole seconds until the quota is whole, if
/// known).
pub(crate) fn push_position(buf: &mut String, remaining: u64, reset_secs: Option<u64>) {
    buf.push_str(";r=");
    push_int(buf, remaining);
    if let Some(t) = reset_secs {
        buf.push_str(";t=");
        push_int(buf, t);
    }
}

/// Envoy's `DRAFT_VERSION_03` limit of `report`: `Q, q;w=W;name="n", ...`
/// (policies without a window are left out, as Envoy does); see
/// [`draft03_value`].
pub fn draft03_limit(report: &Report, quota: u64, buf: &mut String) {
    let policies = (report.policies().iter().enumerate())
        .filter_map(|(i, p)| Some((p.quota, p.window?, report.name(i))));
    draft03_value(quota, policies, buf);
}

/// Envoy's `DRAFT_VERSION_03` `X-RateLimit-Limit` value, the one rendering
/// of it: the reported `quota`, then each policy as `q;w=W`, with its name
/// as an sf-string when it has one (escaped: a quote in a name cannot end
/// the string early).
///
/// ```
/// use floodgate_http::contract::draft03_value;
/// let mut buf = String::new();
/// draft03_value(3, [(3, 60, "per\"user"), (100, 3600, "")], &mut buf);
/// assert_eq!(buf, r#"3, 3;w=60;name="per\"user", 100;w=3600"#);
/// ```
pub fn draft03_value<'a>(
    quota: u64,
    policies: impl IntoIterator<Item = (u64, u64, &'a str)>,
    buf: &mut String,
) {
    buf.clear();
    push_int(buf, quota);
    for (quota, window, name) in policies {
        buf.push_str(", ");
        push_int(buf, quota);
        buf.push_str(";w=");
        push_int(buf, window.max(1));
        if !name.is_empty() {
            buf.push_str(";name=");
            push_string(buf, name);
        }
    }
}
