//! What a response says about waiting: `Retry-After` (delay-seconds or an
//! HTTP-date), and the remaining quota with its reset from `RateLimit`
//! (draft -08 to -11), `RateLimit-Remaining/Reset` (older drafts) or
//! `X-RateLimit-Remaining/Reset` (seconds, or Unix epoch seconds).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use sfv::{Item, List, ListEntry, Parser};

/// The waiting signals of one response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signals {
    /// `Retry-After`, as a wait from now.
    pub retry_after: Option<Duration>,
    /// The remaining quota of the policy closest to exhaustion.
    pub remaining: Option<u64>,
    /// When that quota resets, as a wait from now.
    pub reset: Option<Duration>,
}

/// Resets larger than this are Unix timestamps, not delays (GitHub,
/// Discord).
const EPOCH_THRESHOLD: u64 = 1_000_000_000;

fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok().map(str::trim)
}

/// `Retry-After`: delay-seconds or an HTTP-date (relative to `now`; a date
/// in the past means no wait).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let v = text(headers, "retry-after")?;
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn reset_value(v: u64, now: SystemTime) -> Duration {
    if v >= EPOCH_THRESHOLD {
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        Duration::from_secs(v).saturating_sub(now)
    } else {
        Duration::from_secs(v)
    }
}

impl Signals {
    /// Reads `headers` at `now`.
    pub fn from_headers(headers: &HeaderMap, now: SystemTime) -> Signals {
        let mut s = Signals {
            retry_after: retry_after(headers, now),
            ..Signals::default()
        };
        // IETF: the item with the least available quota. Field lines are
        // one List (RFC 9651); a malformed one is ignored, as the draft
        // requires.
        let joined: Vec<&str> = headers
            .get_all("ratelimit")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if !joined.is_empty()
            && let Ok(list) = Parser::new(&joined.join(", ")).parse_list::<List>()
        {
            let best = (list.iter())
                .filter_map(|e| match e {
                    ListEntry::Item(item) => Some((int(item, "r")?, int(item, "t"))),
                    ListEntry::InnerList(_) => None,
                })
                .filter(|(r, t)| *r >= 0 && t.is_none_or(|t| t >= 0))
                .min_by_key(|(r, _)| *r);
            if let Some((r, t)) = best {
                s.remaining = Some(r as u64);
                s.reset = t.map(|t| Duration::from_secs(t as u64));
                return s;
            }
        }
        for (rem, reset) in [
            ("ratelimit-remaining", "ratelimit-reset"),
            ("x-ratelimit-remaining", "x-ratelimit-reset"),
        ] {
            let r = text(headers, rem).and_then(|v| v.parse::<u64>().ok());
            if r.is_some() {
                s.remaining = r;
                s.reset = text(headers, reset)
                    .and_then(|v| {
                        // Discord sends decimals: round up.
                        let (int, frac) = v.split_once('.').unwrap_or((v, ""));
                        let n = int.parse::<u64>().ok()?;
                        Some(n + u64::from(frac.bytes().any(|b| b != b'0')))
                    })
                    .map(|v| reset_value(v, now));
                return s;
            }
        }
        s
    }
}

/// The Integer parameter `key` of `item`.
fn int(item: &Item, key: &str) -> Option<i64> {
    (item.params.iter())
        .find(|(k, _)| k.as_str() == key)
        .and_then(|(_, v)| v.as_integer())
        .map(i64::from)
}
