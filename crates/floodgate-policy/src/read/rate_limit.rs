//! Reading a rule's `rate_limit:`, in both dialects: envoyproxy/ratelimit's
//! `unit` and `requests_per_unit` (with Floodgate's limit definitions and
//! their `penalty` as an extension), and Floodgate's limits with their
//! penalty, block and failure policy.

use crate::error::{ConfigError, Errors};
use crate::failure::OnFailure;
use crate::spec::{Dialect, LimitSpec, Penalty, RateLimitSpec, Reported};
use crate::unit::Unit;
use crate::yaml::{Map, Node, excerpt};

use super::descriptors::{check_keys, check_keys_with};
use super::limits::read_limits;

/// Keys Floodgate reads inside the `rate_limit:` of an envoyproxy/ratelimit
/// file besides that service's own: Floodgate's limit definitions (any
/// algorithm, any period, several limits), so a rule can choose its
/// algorithm without converting the file. A rule with any of them may also
/// say `penalty`; any other key is refused there as that service refuses
/// it.
pub(crate) const ENVOY_RATE_LIMIT_EXTENSIONS: &[&str] = &[
    "algorithm",
    "requests",
    "per",
    "burst",
    "sub_windows",
    "rate",
    "nodelay",
    "delay",
    "max",
    "limits",
    "lease",
    "holder",
];

/// Keys a `rate_limit:` may have.
const RATE_LIMIT_KEYS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "requests",
    "per",
    "burst",
    "sub_windows",
    "rate",
    "nodelay",
    "delay",
    "max",
    "limits",
    "penalty",
    "block_for",
    "on_failure",
    "sync",
    "lease",
    "holder",
];

/// Reads a `rate_limit:` mapping; `None` when it defines no limit.
pub(super) fn read_rate_limit(
    n: Node<'_>,
    dialect: Dialect,
    errors: &mut Errors,
) -> Option<RateLimitSpec> {
    let map = errors.take(n.map())?;
    let name = map
        .get("name")
        .and_then(|n| errors.take(n.str()))
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let replaces = read_replaces(&map, name.as_deref(), dialect, errors);
    let unlimited = map
        .get("unlimited")
        .and_then(|n| errors.take(n.bool()))
        .unwrap_or(false);
    let unit = UnitField::read(&map, errors);
    let mut spec = RateLimitSpec {
        at: n.at(),
        name,
        replaces,
        unlimited,
        limits: Vec::new(),
        penalty: None,
        block_for: None,
        on_failure: None,
        sync: None,
        lease: None,
        holder: false,
        reported: Reported {
            requests_per_unit: 0,
            unit: unit.unit.unwrap_or(Unit::Second),
        },
    };
    if unlimited {
        check_unlimited(n, &map, &unit, dialect, errors);
        return Some(spec);
    }
    // Both dialects: how a shared store shares the rule's counters.
    if let Some(s) = map.get("sync") {
        spec.sync = super::read_sync_mode(s, errors);
    }
    let extended = dialect == Dialect::Envoy
        && map
            .keys()
            .any(|(k, _)| ENVOY_RATE_LIMIT_EXTENSIONS.contains(&k));
    if extended {
        return read_extended(n, &map, &unit, spec, errors);
    }
    match dialect {
        Dialect::Envoy => read_envoy_limit(n, &map, &unit, &mut spec, errors)?,
        Dialect::Floodgate => read_floodgate_limits(&map, &unit, &mut spec, errors)?,
    }
    check_keys(&map, dialect, RATE_LIMIT_KEYS, errors);
    Some(spec)
}

/// A `rate_limit:`'s `unit` as written: its node, its text, and the unit it
/// names, if any.
struct UnitField<'a> {
    /// Where it is written, if it is.
    node: Option<Node<'a>>,
    /// Its text (empty when missing).
    text: &'a str,
    /// The unit it names.
    unit: Option<Unit>,
}

impl<'a> UnitField<'a> {
    /// Reads `map`'s `unit` (an empty text when missing).
    fn read(map: &Map<'a>, errors: &mut Errors) -> Self {
        let node = map.get("unit");
        let text = node.and_then(|n| errors.take(n.str())).unwrap_or("");
        UnitField {
            node,
            text,
            unit: Unit::parse(text),
        }
    }

    /// The error of a unit that names none, at the unit (at the
    /// `rate_limit:` `n` when it has none).
    fn invalid(&self, n: Node<'_>) -> ConfigError {
        self.node
            .unwrap_or(n)
            .error(format!("invalid rate limit unit '{}'", excerpt(self.text)))
    }
}

/// An `unlimited: true` limit: no unit beside it, and its keys checked.
fn check_unlimited(
    n: Node<'_>,
    map: &Map<'_>,
    unit: &UnitField<'_>,
    dialect: Dialect,
    errors: &mut Errors,
) {
    if unit.unit.is_some() {
        errors.push(
            unit.node
                .unwrap_or(n)
                .error("should not specify rate limit unit when unlimited"),
        );
    }
    map.has("requests_per_unit");
    check_keys(map, dialect, RATE_LIMIT_KEYS, errors);
}

/// `replaces`: the names of the rules this one replaces (none empty, not
/// its own `name`).
fn read_replaces(
    map: &Map<'_>,
    name: Option<&str>,
    dialect: Dialect,
    errors: &mut Errors,
) -> Vec<String> {
    let mut replaces = Vec::new();
    let Some(list) = map.get("replaces") else {
        return replaces;
    };
    for item in errors.take(list.list()).unwrap_or_default() {
        let Some(entry) = errors.take(item.map()) else {
            continue;
        };
        let replaced = entry
            .get("name")
            .and_then(|n| errors.take(n.str()))
            .unwrap_or_default();
        if replaced.is_empty() {
            errors.push(item.error("should not have an empty replaces entry"));
        } else if Some(replaced) == name {
            errors.push(item.error("replaces should not contain name of same descriptor"));
        } else {
            replaces.push(replaced.to_owned());
        }
        check_keys(&entry, dialect, &["name"], errors);
    }
    replaces
}

/// Floodgate's limit definitions in an envoyproxy/ratelimit file, with
/// their `penalty`: a unit that is given must be one, even beside a `per`.
/// `None` when they define no limit.
fn read_extended(
    n: Node<'_>,
    map: &Map<'_>,
    unit: &UnitField<'_>,
    mut spec: RateLimitSpec,
    errors: &mut Errors,
) -> Option<RateLimitSpec> {
    let per = map.keys().any(|(k, _)| k == "per");
    if per && unit.unit.is_none() && !unit.text.is_empty() {
        errors.push(unit.invalid(n));
    }
    if let Some((limits, reported)) = read_limits(map, unit.unit, errors) {
        spec.limits = limits;
        spec.reported = reported;
    }
    spec.penalty = read_penalty(map, &spec.limits, errors);
    read_lease(map, &mut spec, errors);
    check_keys_with(
        map,
        Dialect::Envoy,
        RATE_LIMIT_KEYS,
        ENVOY_RATE_LIMIT_EXTENSIONS,
        errors,
    );
    (!spec.limits.is_empty()).then_some(spec)
}

/// envoyproxy/ratelimit's one limit: `requests_per_unit` per `unit`. `None`
/// (its keys checked) when the unit names none.
fn read_envoy_limit(
    n: Node<'_>,
    map: &Map<'_>,
    unit: &UnitField<'_>,
    spec: &mut RateLimitSpec,
    errors: &mut Errors,
) -> Option<()> {
    let Some(u) = unit.unit else {
        errors.push(unit.invalid(n));
        check_keys(map, Dialect::Envoy, RATE_LIMIT_KEYS, errors);
        return None;
    };
    let rpu = read_rpu(map, errors);
    spec.reported = Reported {
        requests_per_unit: rpu,
        unit: u,
    };
    spec.limits.push(super::limits::envoy_limit(rpu, u));
    Some(())
}

/// Floodgate's limits, with their `penalty`, `block_for` and
/// `on_failure`; `None` when the limits cannot be read.
fn read_floodgate_limits(
    map: &Map<'_>,
    unit: &UnitField<'_>,
    spec: &mut RateLimitSpec,
    errors: &mut Errors,
) -> Option<()> {
    let (limits, reported) = read_limits(map, unit.unit, errors)?;
    spec.limits = limits;
    spec.reported = reported;
    spec.penalty = read_penalty(map, &spec.limits, errors);
    if let Some(b) = map.get("block_for") {
        // A block would lose the count of units in flight.
        if in_flight(&spec.limits) {
            errors.push(b.error("block_for does not apply to a concurrency limit (permits are given back by releases, not by time)"));
        }
        spec.block_for = errors.take(b.duration(false));
    }
    if let Some(f) = map.get("on_failure") {
        spec.on_failure = read_on_failure(f, errors);
    }
    read_lease(map, spec, errors);
    Some(())
}

/// `lease` and `holder`, which only a rule of concurrency limits takes; a
/// holder needs a lease (its units would be held forever otherwise).
fn read_lease(map: &Map<'_>, spec: &mut RateLimitSpec, errors: &mut Errors) {
    if let Some(l) = map.get("lease") {
        if !in_flight(&spec.limits) {
            errors.push(l.error("lease applies to a concurrency limit only"));
        }
        spec.lease = errors.take(l.duration(false));
    }
    if let Some(h) = map.get("holder") {
        spec.holder = errors.take(h.bool()).unwrap_or(false);
        if spec.holder && spec.lease.is_none() {
            errors.push(h.error("holder needs a lease (units of a holder that never gives them back would be held forever)"));
        }
    }
}

/// `penalty`, the same in both dialects: `true` charges every denied
/// request to the rule's limits, whichever limit or rule denied it; `false`
/// charges none. `None` when not given (each limit's default applies).
fn read_penalty(map: &Map<'_>, limits: &[LimitSpec], errors: &mut Errors) -> Option<Penalty> {
    let p = map.get("penalty")?;
    let penalty = errors.take(p.bool())?;
    if penalty && in_flight(limits) {
        errors.push(p.error("penalty does not apply to a concurrency limit (a denied request holds nothing to count)"));
    }
    Some(if penalty {
        Penalty::AllDenials
    } else {
        Penalty::None
    })
}

/// Whether `limits` only count units in flight, to which neither a penalty
/// nor a block applies: a denied request holds nothing to count.
fn in_flight(limits: &[LimitSpec]) -> bool {
    !limits.is_empty()
        && limits
            .iter()
            .all(|l| matches!(l, LimitSpec::Concurrency { .. }))
}

/// `on_failure`: `fail_open`, `fail_closed` or `local`.
fn read_on_failure(n: Node<'_>, errors: &mut Errors) -> Option<OnFailure> {
    let text = errors.take(n.str())?;
    let policy = OnFailure::parse(text);
    if policy.is_none() {
        errors.push(n.error(format!(
            "unknown on_failure '{}' (expected one of: {})",
            excerpt(text),
            OnFailure::NAMES.join(", ")
        )));
    }
    policy
}

/// `requests_per_unit`: a uint32; missing means 0 (every request denied),
/// as envoyproxy/ratelimit reads it.
pub(crate) fn read_rpu(map: &Map<'_>, errors: &mut Errors) -> u32 {
    let Some(n) = map.get("requests_per_unit") else {
        return 0;
    };
    match n.u64().ok().and_then(|v| u32::try_from(v).ok()) {
        Some(v) => v,
        None => {
            errors.push(n.error(format!(
                "error loading config file: yaml: unmarshal errors: line {}: cannot unmarshal {} into uint32",
                n.at().line,
                n.describe()
            )));
            0
        }
    }
}
