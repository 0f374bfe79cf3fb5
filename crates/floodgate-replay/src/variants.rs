//! One policy with each algorithm swapped in at the same nominal rate:
//! every rate limit of every rule becomes, say, a sliding log of the same
//! requests per window, so that replaying the variants side by side shows
//! what the choice of algorithm alone changes.
//!
//! A limit's nominal rate is `N` requests per window `W`, and its capacity
//! `B` the requests it admits at once from idle: a window's `N` for the
//! window algorithms, the burst for a token bucket, `burst + 1` for the
//! shaper. The variants keep both:
//!
//! | variant | limit |
//! | --- | --- |
//! | `fixed_window` | `N` per `W`, epoch-aligned windows |
//! | `sliding_window` | `N` per `W`, the two-window estimate |
//! | `sliding_log` | `N` in any `W` (exact) |
//! | `token_bucket` | `N` per `W`, burst `B` |
//! | `shaper` | nginx `limit_req` at `N` per `W` (r/s or r/m), burst `B - 1`, delaying (nginx's default) |
//!
//! Concurrency limits and blocks have no rate and are kept. A limit whose
//! rate nginx cannot express (not a whole number of requests per second or
//! minute) is kept as it is in the `shaper` variant, with a note.

use std::time::Duration;

use floodgate::algorithms::{NginxRate, ShaperDelay};
use floodgate_policy::spec::{LimitSpec, NodeSpec, PolicySpec};

/// An algorithm swapped in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Fixed window.
    FixedWindow,
    /// Sliding window counter (two windows).
    SlidingWindow,
    /// Exact sliding log.
    SlidingLog,
    /// Token bucket (GCRA).
    TokenBucket,
    /// nginx's shaper, delaying.
    Shaper,
}

impl Variant {
    /// Every variant, in report order.
    pub const ALL: [Variant; 5] = [
        Variant::FixedWindow,
        Variant::SlidingWindow,
        Variant::SlidingLog,
        Variant::TokenBucket,
        Variant::Shaper,
    ];

    /// Its name (as in a policy's `algorithm:`).
    pub fn name(self) -> &'static str {
        match self {
            Variant::FixedWindow => "fixed_window",
            Variant::SlidingWindow => "sliding_window",
            Variant::SlidingLog => "sliding_log",
            Variant::TokenBucket => "token_bucket",
            Variant::Shaper => "shaper",
        }
    }

    /// Reads a name (`gcra` is the token bucket).
    pub fn parse(s: &str) -> Result<Variant, String> {
        match s {
            "gcra" => Ok(Variant::TokenBucket),
            _ => Variant::ALL.into_iter().find(|v| v.name() == s).ok_or_else(|| {
                format!(
                    "unknown algorithm `{s}` (expected fixed_window, sliding_window, sliding_log, token_bucket or shaper)"
                )
            }),
        }
    }

    /// `spec` with this algorithm in every rate limit; notes on the limits
    /// left as they were.
    pub(crate) fn apply(self, spec: &PolicySpec) -> (PolicySpec, Vec<String>) {
        let mut out = spec.clone();
        let mut notes = Vec::new();
        for d in &mut out.domains {
            for n in &mut d.descriptors {
                self.node(n, &mut notes);
            }
        }
        (out, notes)
    }

    fn node(self, n: &mut NodeSpec, notes: &mut Vec<String>) {
        if let Some(r) = &mut n.rate_limit {
            for l in &mut r.limits {
                match self.limit(l) {
                    Some(new) => *l = new,
                    None if nominal(l).is_some() => notes.push(format!(
                        "{}: rule `{}` keeps its limit (nginx rates are whole requests per second or minute)",
                        self.name(),
                        r.name.clone().unwrap_or_else(|| n.key.clone())
                    )),
                    None => {}
                }
            }
        }
        for c in &mut n.children {
            self.node(c, notes);
        }
    }

    /// The limit swapped, or none to keep it.
    fn limit(self, l: &LimitSpec) -> Option<LimitSpec> {
        let (n, window, capacity) = nominal(l)?;
        Some(match self {
            Variant::FixedWindow => LimitSpec::FixedWindow { limit: n, window },
            Variant::SlidingWindow => LimitSpec::SlidingWindow {
                limit: n,
                window,
                sub_windows: 1,
            },
            Variant::SlidingLog => LimitSpec::SlidingLog { limit: n, window },
            Variant::TokenBucket => LimitSpec::Gcra {
                count: n,
                period: window,
                burst: capacity.max(1),
            },
            Variant::Shaper => {
                let secs = window.as_secs();
                let exact = window.subsec_nanos() == 0 && secs > 0;
                let rate = if exact && n % secs == 0 {
                    NginxRate::PerSecond(n / secs)
                } else if exact && (n * 60) % secs == 0 {
                    NginxRate::PerMinute(n * 60 / secs)
                } else {
                    return None;
                };
                LimitSpec::Shaper {
                    rate,
                    burst: capacity.saturating_sub(1),
                    delay: ShaperDelay::Queue,
                }
            }
        })
    }
}

/// A limit's requests per window and capacity; none without a rate.
fn nominal(l: &LimitSpec) -> Option<(u64, Duration, u64)> {
    match *l {
        LimitSpec::FixedWindow { limit, window }
        | LimitSpec::SlidingWindow { limit, window, .. }
        | LimitSpec::SlidingLog { limit, window } => Some((limit, window, limit)),
        LimitSpec::Gcra {
            count,
            period,
            burst,
        } => Some((count, period, burst)),
        LimitSpec::Shaper { rate, burst, .. } => {
            let (n, w) = match rate {
                NginxRate::PerSecond(n) => (n, Duration::from_secs(1)),
                NginxRate::PerMinute(n) => (n, Duration::from_secs(60)),
            };
            Some((n, w, burst + 1))
        }
        LimitSpec::Block { .. } | LimitSpec::Concurrency { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_rate_and_capacity() {
        let w = Duration::from_secs(60);
        let src = LimitSpec::FixedWindow {
            limit: 120,
            window: w,
        };
        assert_eq!(
            Variant::SlidingLog.limit(&src),
            Some(LimitSpec::SlidingLog {
                limit: 120,
                window: w
            })
        );
        assert_eq!(
            Variant::TokenBucket.limit(&src),
            Some(LimitSpec::Gcra {
                count: 120,
                period: w,
                burst: 120
            })
        );
        assert_eq!(
            Variant::Shaper.limit(&src),
            Some(LimitSpec::Shaper {
                rate: NginxRate::PerSecond(2),
                burst: 119,
                delay: ShaperDelay::Queue
            })
        );
        let odd = LimitSpec::FixedWindow {
            limit: 7,
            window: Duration::from_secs(3600),
        };
        assert_eq!(Variant::Shaper.limit(&odd), None);
        let shaper = LimitSpec::Shaper {
            rate: NginxRate::PerMinute(30),
            burst: 4,
            delay: ShaperDelay::NoDelay,
        };
        assert_eq!(
            Variant::FixedWindow.limit(&shaper),
            Some(LimitSpec::FixedWindow {
                limit: 30,
                window: w
            })
        );
        assert_eq!(
            Variant::TokenBucket.limit(&shaper),
            Some(LimitSpec::Gcra {
                count: 30,
                period: w,
                burst: 5
            })
        );
        assert_eq!(
            Variant::FixedWindow.limit(&LimitSpec::Concurrency { max: 3 }),
            None
        );
        assert_eq!(Variant::parse("gcra"), Ok(Variant::TokenBucket));
        assert!(Variant::parse("magic").is_err());
    }
}
