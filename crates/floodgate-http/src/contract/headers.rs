//! Writing a [`Report`] as rate-limit headers, in every selected form.

use std::time::Duration;

use floodgate::Timestamp;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::config::HeaderForm;
use super::http_contract::Contract;
use super::names::{
    RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
use super::report::{CurrentLine, QuotaUnit, Report, Verdict};
use super::sf::{ceil_secs, clamp, push_int, push_string};

/// Seconds until `line` resets, `elapsed` after the decision, rounded up.
fn delta(line: &CurrentLine, elapsed: Duration) -> u64 {
    clamp(ceil_secs(line.reset.saturating_sub(elapsed)))
}

/// The Unix time (seconds, rounded up) at which `line` resets, from the
/// decision's instant `now`: one clock reading, so the value is the same
/// for every response of one window state.
pub fn epoch_reset(now: Timestamp, reset: Duration) -> u64 {
    let at = now.as_nanos() as u128 + reset.as_nanos();
    clamp(at.div_ceil(1_000_000_000).min(u64::MAX as u128) as u64)
}

fn put(headers: &mut HeaderMap, name: HeaderName, buf: &str) {
    if let Ok(v) = HeaderValue::from_str(buf) {
        headers.insert(name, v);
    }
}

fn put_int(headers: &mut HeaderMap, name: HeaderName, n: u64) {
    headers.insert(name, HeaderValue::from(clamp(n)));
}

impl Contract {
    /// Writes the rate-limit headers of `report` into `headers` (and
    /// `Retry-After` on a denial), in every configured form, unless hidden.
    ///
    /// `now` is the instant the decision was made at (for epoch resets),
    /// `elapsed` the time since (a shaper's delay: relative values shrink by
    /// it). `buf` is a reusable buffer.
    pub fn write_headers(
        &self,
        report: &Report,
        now: Timestamp,
        elapsed: Duration,
        headers: &mut HeaderMap,
        buf: &mut String,
    ) {
        if report.verdict() == Verdict::Denied {
            if let Some(secs) = self.retry_after_secs(report) {
                put_int(headers, http::header::RETRY_AFTER, secs);
            }
        } else if !self.config().on_success {
            return;
        }
        if self.config().hide_headers || report.current().is_empty() {
            return;
        }
        for form in &self.config().forms {
            match form {
                HeaderForm::Ietf => {
                    ietf_policy(report, buf);
                    put(headers, RATELIMIT_POLICY, buf);
                    ietf_current(report, elapsed, buf);
                    put(headers, RATELIMIT, buf);
                }
                HeaderForm::XRateLimit | HeaderForm::XRateLimitEpoch | HeaderForm::Draft03 => {
                    let Some(line) = report.primary() else {
                        continue;
                    };
                    let quota = report.policies().get(line.policy).map_or(0, |p| p.quota);
                    if *form == HeaderForm::Draft03 {
                        draft03_limit(report, quota, buf);
                        put(headers, X_RATELIMIT_LIMIT, buf);
                    } else {
                        put_int(headers, X_RATELIMIT_LIMIT, quota);
                    }
                    put_int(headers, X_RATELIMIT_REMAINING, line.remaining);
                    if line.timed {
                        let reset = match form {
                            HeaderForm::XRateLimitEpoch => epoch_reset(now, line.reset),
                            _ => delta(line, elapsed),
                        };
                        put_int(headers, X_RATELIMIT_RESET, reset);
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
        report
            .retry_after_secs()
            .or_else(|| self.config().retry_after_unknown.map(ceil_secs))
            .map(clamp)
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
        buf.push_str(";r=");
        push_int(buf, c.remaining);
        if c.timed {
            buf.push_str(";t=");
            push_int(buf, delta(c, elapsed));
        }
    }
}

/// Envoy's `DRAFT_VERSION_03` limit: `Q, q;w=W;name="n", ...` (policies
/// without a window are left out, as Envoy does).
pub fn draft03_limit(report: &Report, quota: u64, buf: &mut String) {
    buf.clear();
    push_int(buf, quota);
    for (i, p) in report.policies().iter().enumerate() {
        let Some(w) = p.window else { continue };
        buf.push_str(", ");
        push_int(buf, p.quota);
        buf.push_str(";w=");
        push_int(buf, w.max(1));
        buf.push_str(";name=");
        push_string(buf, report.name(i));
    }
}
