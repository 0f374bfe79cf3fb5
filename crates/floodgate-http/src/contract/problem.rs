//! Problem details (RFC 9457) and their plain-text twin, chosen by the
//! request's `Accept`.

use std::fmt::Write;

use http::{HeaderMap, StatusCode};

use super::report::{QuotaUnit, Report};
use super::sf::{MAX_NAME_LEN, push_printable};

/// The problem type of a request over its quota (429).
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/// The problem type of a request shed while capacity is reduced (503).
pub const TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/// `application/problem+json`.
pub const PROBLEM_JSON: &str = "application/problem+json";
/// `text/plain; charset=utf-8`.
pub const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

/// Which body a client gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// `application/problem+json`.
    Json,
    /// `text/plain`.
    Text,
}

/// The media ranges `Accept` is read for, with how specifically each
/// matches JSON and plain text (none: not at all).
const RANGES: [(&str, [Option<u8>; 2]); 6] = [
    ("application/problem+json", [Some(3), None]),
    ("application/json", [Some(3), None]),
    ("application/*", [Some(1), None]),
    ("text/plain", [None, Some(3)]),
    ("text/*", [None, Some(1)]),
    ("*/*", [Some(0), Some(0)]),
];

/// Chooses the body by `Accept` (RFC 9110 §12.5.1): problem+json unless
/// plain text is preferred (a higher `q`) or JSON is not acceptable at all.
/// No `Accept` means JSON; a malformed one is read as far as it makes sense.
///
/// ```
/// use floodgate_http::contract::{BodyKind, negotiate};
/// let mut h = http::HeaderMap::new();
/// assert_eq!(negotiate(&h), BodyKind::Json);
/// h.insert("accept", "text/plain".parse().unwrap());
/// assert_eq!(negotiate(&h), BodyKind::Text);
/// h.insert("accept", "text/plain;q=0.5, application/json".parse().unwrap());
/// assert_eq!(negotiate(&h), BodyKind::Json);
/// ```
pub fn negotiate(headers: &HeaderMap) -> BodyKind {
    // JSON's and text's (specificity, q) of the first of the most specific
    // ranges matching each.
    let mut best: [Option<(u8, u16)>; 2] = [None; 2];
    let mut any = false;
    let values = headers.get_all(http::header::ACCEPT).iter();
    for range in values
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
    {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim();
        if media.is_empty() {
            continue;
        }
        any = true;
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(parse_q)
            .unwrap_or(1000);
        let Some((_, specific)) = RANGES.iter().find(|(m, _)| media.eq_ignore_ascii_case(m)) else {
            continue;
        };
        for (best, s) in best.iter_mut().zip(specific) {
            if let Some(s) = *s
                && best.is_none_or(|(spec, _)| s > spec)
            {
                *best = Some((s, q));
            }
        }
    }
    let q = |kind: Option<(u8, u16)>| kind.map_or(0, |(_, q)| q);
    match (q(best[0]), q(best[1])) {
        _ if !any => BodyKind::Json,
        (j, t) if t > j => BodyKind::Text,
        (0, 0) => BodyKind::Text,
        _ => BodyKind::Json,
    }
}

/// A `q` value in thousandths (`0.5` → 500); malformed → none.
fn parse_q(s: &str) -> Option<u16> {
    let s = s.trim();
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let int: u16 = match int {
        "0" => 0,
        "1" => 1,
        _ => return None,
    };
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut f: u16 = frac.parse().unwrap_or(0);
    for _ in frac.len()..3 {
        f *= 10;
    }
    Some((int * 1000 + f).min(1000))
}

/// Appends `s` as a JSON string.
pub(crate) fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars().take(MAX_NAME_LEN * 4) {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// What a problem body says.
pub(crate) struct Problem<'a> {
    pub status: StatusCode,
    pub kind: &'a str,
    pub report: Option<&'a Report>,
    pub hidden: bool,
    pub retry_after: Option<u64>,
    pub detail: Option<&'a str>,
}

/// The sentence naming the limit.
fn detail(p: &Problem<'_>, out: &mut String) {
    let never = p.report.is_some_and(Report::is_never);
    // The denying line reported, unless hidden.
    let line = p.report.filter(|_| !p.hidden).and_then(|r| {
        let l = r.primary().filter(|l| l.denied)?;
        Some((r.name(l.policy), r.policies().get(l.policy)?))
    });
    if let Some(d) = p.detail {
        out.push_str(d);
    } else {
        match line {
            Some((name, policy)) if never => {
                out.push_str("The request can never be admitted under policy \"");
                push_printable(out, name);
                let _ = write!(out, "\": its cost exceeds the quota of {}.", policy.quota);
            }
            Some((name, policy)) => {
                out.push_str("Rate limit exceeded for policy \"");
                push_printable(out, name);
                let _ = match (policy.unit, policy.window) {
                    (QuotaUnit::ConcurrentRequests, _) => {
                        write!(out, "\": {} concurrent requests.", policy.quota)
                    }
                    (_, Some(1)) => write!(out, "\": {} requests per second.", policy.quota),
                    (_, Some(w)) => write!(out, "\": {} requests per {w} seconds.", policy.quota),
                    (_, None) => write!(out, "\": {} requests.", policy.quota),
                };
            }
            None if never => out.push_str("The request can never be admitted."),
            None => out.push_str("Rate limit exceeded."),
        }
    }
    match p.retry_after {
        Some(1) => out.push_str(" Retry after 1 second."),
        Some(s) => {
            let _ = write!(out, " Retry after {s} seconds.");
        }
        None => {}
    }
}

/// Writes the body of `p` as `kind` into `out`.
pub(crate) fn write_body(p: &Problem<'_>, kind: BodyKind, out: &mut String) {
    out.clear();
    let title = p.status.canonical_reason().unwrap_or("Error");
    match kind {
        BodyKind::Text => {
            let _ = writeln!(out, "{} {title}", p.status.as_u16());
            detail(p, out);
            out.push('\n');
        }
        BodyKind::Json => {
            out.push_str("{\"type\":");
            push_json_str(out, p.kind);
            out.push_str(",\"title\":");
            push_json_str(out, title);
            let _ = write!(out, ",\"status\":{}", p.status.as_u16());
            let mut d = String::new();
            detail(p, &mut d);
            out.push_str(",\"detail\":");
            push_json_str(out, &d);
            out.push_str(",\"violated-policies\":[");
            if let Some(report) = p.report.filter(|_| !p.hidden) {
                for (i, name) in report.violated().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    push_json_str(out, name);
                }
            }
            out.push(']');
            if let Some(s) = p.retry_after {
                let _ = write!(out, ",\"retry-after\":{s}");
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_specific_range_decides() {
        let kind = |accept: &str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::ACCEPT, accept.parse().unwrap());
            negotiate(&h)
        };
        assert_eq!(kind(",, ,"), BodyKind::Json);
        assert_eq!(kind("text/*"), BodyKind::Text);
        assert_eq!(kind("image/png"), BodyKind::Text);
        assert_eq!(kind("application/*;q=0.2, text/*;q=0.5"), BodyKind::Text);
        assert_eq!(
            kind("*/*;q=0.9, application/json;q=0.1, text/plain;q=0.5"),
            BodyKind::Text
        );
        assert_eq!(kind("application/json;q=0, */*"), BodyKind::Text);
        assert_eq!(
            kind("application/json;q=abc, text/plain;q=0.9"),
            BodyKind::Json
        );
        // Of equally specific ranges, the first counts.
        let first = "text/plain;q=0.3, application/json;q=0.5, application/problem+json;q=0.1";
        assert_eq!(kind(first), BodyKind::Json);
    }
}
