//! Reading Floodgate limit definitions: any algorithm, any period, several
//! limits per rule.

use std::time::Duration;

use floodgate::algorithms::{NginxRate, ShaperDelay};

use crate::error::Errors;
use crate::spec::{LimitSpec, Reported};
use crate::unit::Unit;
use crate::yaml::{Map, excerpt};

/// Algorithm names accepted in `algorithm:`.
pub const ALGORITHMS: &[&str] = &[
    "fixed_window",
    "token_bucket",
    "gcra",
    "leaky_bucket",
    "sliding_window",
    "sliding_log",
    "shaper",
    "concurrency",
];

/// Keys of an entry of `limits:`.
const LIMIT_KEYS: &[&str] = &[
    "algorithm",
    "requests",
    "per",
    "unit",
    "requests_per_unit",
    "burst",
    "sub_windows",
    "rate",
    "nodelay",
    "delay",
    "max",
];

/// The limit an envoyproxy/ratelimit rule means: a fixed window of one unit
/// (with `requests_per_unit: 0`, one that admits nothing but still counts,
/// as that service's counter does).
pub(crate) fn envoy_limit(rpu: u32, unit: Unit) -> LimitSpec {
    LimitSpec::FixedWindow {
        limit: u64::from(rpu),
        window: unit.duration(),
    }
}

/// Reads the limits of a Floodgate `rate_limit` block: either its own keys
/// describe one limit, or `limits:` lists several.
pub(crate) fn read_limits(
    map: &Map<'_>,
    unit: Option<Unit>,
    errors: &mut Errors,
) -> Option<(Vec<LimitSpec>, Reported)> {
    if let Some(list) = map.get("limits") {
        let items = errors.take(list.list())?;
        if items.is_empty() {
            errors.push(list.error("limits must list at least one limit"));
            return None;
        }
        let mut limits = Vec::new();
        let mut reported = None;
        for item in items {
            let Some(m) = errors.take(item.map()) else {
                continue;
            };
            let unit = m
                .get("unit")
                .and_then(|n| errors.take(n.str()))
                .and_then(Unit::parse);
            if let Some((l, r)) = read_one(&m, unit, errors) {
                reported.get_or_insert(r);
                limits.push(l);
            }
            for e in m.deny_unknown(LIMIT_KEYS) {
                errors.push(e);
            }
        }
        return Some((limits, reported?));
    }
    let (l, r) = read_one(map, unit, errors)?;
    Some((vec![l], r))
}

/// One limit from `algorithm`, `requests`/`requests_per_unit`,
/// `per`/`unit`, and the algorithm's own keys.
fn read_one(
    map: &Map<'_>,
    unit: Option<Unit>,
    errors: &mut Errors,
) -> Option<(LimitSpec, Reported)> {
    let algorithm = read_algorithm(map, errors)?;
    let requests =
        u64_key(map, "requests", errors).or_else(|| u64_key(map, "requests_per_unit", errors));
    let per = read_per(map, unit, errors)?;
    let fields = Fields {
        map,
        algorithm,
        requests,
        per,
    };
    match algorithm {
        "fixed_window" | "sliding_log" | "sliding_window" => fields.window(errors),
        "token_bucket" | "gcra" | "leaky_bucket" => fields.bucket(errors),
        "shaper" => read_shaper(map, requests, per, errors),
        "concurrency" => fields.concurrency(errors),
        _ => unreachable!("algorithm names are checked by read_algorithm"),
    }
}

/// `algorithm`: one of [`ALGORITHMS`], `fixed_window` when missing.
fn read_algorithm(map: &Map<'_>, errors: &mut Errors) -> Option<&'static str> {
    let Some(n) = map.get("algorithm") else {
        return Some("fixed_window");
    };
    let name = errors.take(n.str())?;
    let found = ALGORITHMS.iter().find(|a| **a == name).copied();
    if found.is_none() {
        errors.push(n.error(format!(
            "unknown algorithm '{}' (expected one of: {})",
            excerpt(name),
            ALGORITHMS.join(", ")
        )));
    }
    found
}

/// An unsigned key of `map`, if present and valid.
fn u64_key(map: &Map<'_>, key: &str, errors: &mut Errors) -> Option<u64> {
    map.get(key).and_then(|n| errors.take(n.u64()))
}

/// The period: `per`, else the `unit` already read; `None` (an error) when
/// neither is given but a `unit` that names none is.
fn read_per(map: &Map<'_>, unit: Option<Unit>, errors: &mut Errors) -> Option<Option<Duration>> {
    match (map.get("per"), unit) {
        (Some(p), _) => Some(errors.take(p.duration(false))),
        (None, Some(u)) => Some(Some(u.duration())),
        (None, None) if map.has("unit") => {
            let text = map.get("unit").and_then(|n| n.scalar_text()).unwrap_or("");
            let message = format!("invalid rate limit unit '{}'", excerpt(text));
            errors.push(map.node().error(message));
            None
        }
        (None, None) => Some(None),
    }
}

/// The keys every algorithm shares, read from one limit's mapping.
struct Fields<'m, 'a> {
    /// The limit's mapping.
    map: &'m Map<'a>,
    /// Its algorithm.
    algorithm: &'static str,
    /// `requests` (or `requests_per_unit`).
    requests: Option<u64>,
    /// `per` (or the `unit`'s period).
    per: Option<Duration>,
}

impl Fields<'_, '_> {
    /// `v`, or an error that the algorithm needs `what`.
    fn need(&self, what: &str, v: Option<u64>, errors: &mut Errors) -> Option<u64> {
        if v.is_none() {
            let algorithm = self.algorithm;
            errors.push(
                self.map
                    .node()
                    .error(format!("the {algorithm} algorithm needs '{what}'")),
            );
        }
        v
    }

    /// The period, or an error that the algorithm needs one.
    fn need_per(&self, errors: &mut Errors) -> Option<Duration> {
        if self.per.is_none() {
            let algorithm = self.algorithm;
            let message = format!("the {algorithm} algorithm needs 'per' (or 'unit')");
            errors.push(self.map.node().error(message));
        }
        self.per
    }

    /// A window's limit (fixed, sliding log, sliding window): a block when
    /// it allows no request.
    fn window(&self, errors: &mut Errors) -> Option<(LimitSpec, Reported)> {
        let requests = self.need("requests", self.requests, errors)?;
        let window = self.need_per(errors)?;
        if requests == 0 {
            return Some((LimitSpec::Block { window }, Reported::of(0, window, 0)));
        }
        let l = match self.algorithm {
            "fixed_window" => LimitSpec::FixedWindow {
                limit: requests,
                window,
            },
            "sliding_log" => LimitSpec::SlidingLog {
                limit: requests,
                window,
            },
            _ => {
                let sub = u64_key(self.map, "sub_windows", errors).unwrap_or(1);
                LimitSpec::SlidingWindow {
                    limit: requests,
                    window,
                    sub_windows: u32::try_from(sub).unwrap_or(u32::MAX),
                }
            }
        };
        Some((l, Reported::of(requests, window, requests)))
    }

    /// A bucket's limit (token bucket, GCRA, leaky bucket): `requests` per
    /// period, `burst` at most at once (`requests` by default).
    fn bucket(&self, errors: &mut Errors) -> Option<(LimitSpec, Reported)> {
        let count = self.need("requests", self.requests, errors)?;
        let period = self.need_per(errors)?;
        let burst = u64_key(self.map, "burst", errors).unwrap_or(count);
        let spec = LimitSpec::Gcra {
            count,
            period,
            burst,
        };
        Some((spec, Reported::of(count, period, burst)))
    }

    /// A concurrency limit: `max` (or `requests`) units in flight.
    fn concurrency(&self, errors: &mut Errors) -> Option<(LimitSpec, Reported)> {
        let max = u64_key(self.map, "max", errors).or(self.requests);
        let max = self.need("max", max, errors)?;
        let reported = Reported {
            requests_per_unit: max.min(u64::from(u32::MAX)) as u32,
            unit: Unit::Second,
        };
        Some((LimitSpec::Concurrency { max }, reported))
    }
}

/// The shaper: `rate: 10r/s` (or `requests` + `per: 1s|1m`), `burst`,
/// `nodelay` or `delay`.
fn read_shaper(
    map: &Map<'_>,
    requests: Option<u64>,
    per: Option<Duration>,
    errors: &mut Errors,
) -> Option<(LimitSpec, Reported)> {
    let node = map.node();
    let rate = if let Some(r) = map.get("rate") {
        let text = errors.take(r.str())?;
        let Some(rate) = parse_nginx_rate(text) else {
            errors.push(r.error(format!(
                "invalid rate '{}' (expected N r/s or N r/m, e.g. 10r/s)",
                excerpt(text)
            )));
            return None;
        };
        rate
    } else {
        match (requests, per.map(|d| d.as_nanos())) {
            (Some(n), Some(1_000_000_000)) => NginxRate::PerSecond(n),
            (Some(n), Some(60_000_000_000)) => NginxRate::PerMinute(n),
            _ => {
                errors.push(node.error(
                    "the shaper algorithm needs 'rate' (e.g. 10r/s), or 'requests' with 'per' of 1s or 1m",
                ));
                return None;
            }
        }
    };
    let burst = map
        .get("burst")
        .and_then(|n| errors.take(n.u64()))
        .unwrap_or(0);
    let nodelay = map
        .get("nodelay")
        .and_then(|n| errors.take(n.bool()))
        .unwrap_or(false);
    let delay = match (nodelay, map.get("delay")) {
        (true, Some(d)) => {
            errors.push(d.error("set either nodelay or delay, not both"));
            return None;
        }
        (true, None) => ShaperDelay::NoDelay,
        (false, Some(d)) => ShaperDelay::After(errors.take(d.u64())?),
        (false, None) => ShaperDelay::Queue,
    };
    let (rpu, unit) = match rate {
        NginxRate::PerSecond(n) => (n, Unit::Second),
        NginxRate::PerMinute(n) => (n, Unit::Minute),
    };
    // What can pass at once: the burst and the request in hand.
    Some((
        LimitSpec::Shaper { rate, burst, delay },
        Reported::of(rpu, unit.duration(), burst.saturating_add(1)),
    ))
}

/// Parses nginx's `rate=` syntax: `10r/s`, `30r/m`, or a bare number (r/s).
///
/// ```
/// use floodgate_policy::read::parse_nginx_rate;
/// use floodgate::algorithms::NginxRate;
/// assert_eq!(parse_nginx_rate("10r/s"), Some(NginxRate::PerSecond(10)));
/// assert_eq!(parse_nginx_rate("1r/m"), Some(NginxRate::PerMinute(1)));
/// assert_eq!(parse_nginx_rate("0.5r/s"), None);
/// ```
pub fn parse_nginx_rate(text: &str) -> Option<NginxRate> {
    let text = text.trim();
    let (digits, per_minute) = if let Some(d) = text.strip_suffix("r/s") {
        (d, false)
    } else if let Some(d) = text.strip_suffix("r/m") {
        (d, true)
    } else {
        (text, false)
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok().filter(|&n| n > 0)?;
    Some(if per_minute {
        NginxRate::PerMinute(n)
    } else {
        NginxRate::PerSecond(n)
    })
}
