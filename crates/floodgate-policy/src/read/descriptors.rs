//! Reading descriptor trees, in both dialects: envoyproxy/ratelimit's (its
//! keys, its messages) and Floodgate's superset.

use crate::error::Errors;
use crate::failure::OnFailure;
use crate::spec::{Dialect, LimitSpec, NodeSpec, Penalty, RateLimitSpec, Reported};
use crate::unit::Unit;
use crate::yaml::{Map, Node, excerpt};

use super::limits::read_limits;

/// Keys envoyproxy/ratelimit accepts anywhere in a file.
pub(crate) const ENVOY_KEYS: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "sync",
];

/// Keys Floodgate reads inside the `rate_limit:` of an envoyproxy/ratelimit
/// file besides that service's own: Floodgate's limit definitions (any
/// algorithm, any period, several limits), so a rule can choose its
/// algorithm without converting the file. Any other key is refused there
/// as that service refuses it.
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
];

const NODE_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "enabled",
    "cost",
];

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
];

/// Reports keys the dialect does not allow. envoyproxy/ratelimit checks
/// every key of a file against one list and ignores misplaced known keys;
/// Floodgate rejects any key not allowed at its level.
pub(crate) fn check_keys(map: &Map<'_>, dialect: Dialect, allowed: &[&str], errors: &mut Errors) {
    check_keys_with(map, dialect, allowed, &[], errors);
}

/// [`check_keys`], with `extensions` also allowed in an envoyproxy/ratelimit
/// file.
fn check_keys_with(
    map: &Map<'_>,
    dialect: Dialect,
    allowed: &[&str],
    extensions: &[&str],
    errors: &mut Errors,
) {
    match dialect {
        Dialect::Envoy => {
            for (name, key) in map.unread() {
                if !ENVOY_KEYS.contains(&name) && !extensions.contains(&name) {
                    errors
                        .push(key.error(format!("config error, unknown key '{}'", excerpt(name))));
                }
            }
        }
        Dialect::Floodgate => {
            for e in map.deny_unknown(allowed) {
                errors.push(e);
            }
        }
    }
}

/// Reads a `descriptors` list.
pub(crate) fn read_nodes(list: Node<'_>, dialect: Dialect, errors: &mut Errors) -> Vec<NodeSpec> {
    let Some(items) = errors.take(list.list()) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let map = match item.map() {
            Ok(m) if !item.is_null() => m,
            _ => {
                errors.push(item.error(format!(
                    "config error, yaml file contains list of type other than map: {}",
                    item.describe()
                )));
                continue;
            }
        };
        if let Some(node) = read_node(&map, dialect, errors) {
            out.push(node);
        }
    }
    out
}

fn bool_key(map: &Map<'_>, key: &str, errors: &mut Errors) -> bool {
    map.get(key)
        .and_then(|n| errors.take(n.bool()))
        .unwrap_or(false)
}

fn read_node(map: &Map<'_>, dialect: Dialect, errors: &mut Errors) -> Option<NodeSpec> {
    let floodgate = dialect == Dialect::Floodgate;
    let key = match map.get("key") {
        Some(n) => errors.take(n.str()).unwrap_or_default().to_owned(),
        None => String::new(),
    };
    let value = map
        .get("value")
        .and_then(|n| errors.take(n.str()))
        .filter(|v| !v.is_empty())
        .map(str::to_owned);
    let mut node = NodeSpec {
        key,
        value,
        at: map.node().at(),
        rate_limit: None,
        shadow_mode: bool_key(map, "shadow_mode", errors),
        quota_mode: bool_key(map, "quota_mode", errors),
        detailed_metric: bool_key(map, "detailed_metric", errors),
        value_to_metric: bool_key(map, "value_to_metric", errors),
        share_threshold: bool_key(map, "share_threshold", errors),
        enabled: true,
        cost: 1,
        children: Vec::new(),
    };
    map.has("metadata");
    if floodgate {
        if let Some(n) = map.get("enabled") {
            node.enabled = errors.take(n.bool()).unwrap_or(true);
        }
        if let Some(n) = map.get("cost") {
            match errors.take(n.u64()) {
                Some(0) => errors.push(n.error("cost must be at least 1")),
                Some(c) if c > floodgate::MAX_COUNT => errors.push(n.error(format!(
                    "cost must be at most {} (got {c})",
                    floodgate::MAX_COUNT
                ))),
                Some(c) => node.cost = c,
                None => {}
            }
        }
    }
    if node.key.is_empty() {
        errors.push(map.node().error("descriptor has empty key"));
    }
    if node.share_threshold && !node.value.as_deref().is_some_and(|v| v.contains('*')) {
        let value = node.value.as_deref().map(excerpt).unwrap_or_default();
        errors.push(map.node().error(match dialect {
            // envoyproxy/ratelimit's message, naming the composite key.
            Dialect::Envoy => format!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{}{}{value}'",
                excerpt(&node.key),
                if value.is_empty() { "" } else { "_" },
            ),
            Dialect::Floodgate => format!(
                "share_threshold can only be set on a value with a wildcard '*' (value: '{value}')"
            ),
        }));
    }
    if let Some(rl) = map.get("rate_limit") {
        node.rate_limit = read_rate_limit(rl, dialect, errors);
    } else if map.has("rate_limit") {
        errors.push(
            map.node()
                .error("rate_limit must be a mapping, found nothing"),
        );
    }
    if let Some(children) = map.get("descriptors") {
        node.children = read_nodes(children, dialect, errors);
    }
    if floodgate && !node.key.is_empty() && !map.has("rate_limit") && node.children.is_empty() {
        // envoyproxy/ratelimit loads such a node (it then exempts what it
        // matches), and so do its files here; in Floodgate's own format an
        // exemption is said, so that a rule cut from its limit (a file
        // truncated mid-write) does not load as one.
        errors.push(map.node().error(format!(
            "descriptor '{}' has neither rate_limit nor descriptors; to exempt what it matches, write rate_limit: {{unlimited: true}}",
            excerpt(&node.key)
        )));
    }
    check_keys(map, dialect, NODE_KEYS, errors);
    Some(node)
}

fn read_rate_limit(n: Node<'_>, dialect: Dialect, errors: &mut Errors) -> Option<RateLimitSpec> {
    let map = errors.take(n.map())?;
    let name = map
        .get("name")
        .and_then(|n| errors.take(n.str()))
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let mut replaces = Vec::new();
    if let Some(list) = map.get("replaces") {
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
            } else if Some(replaced) == name.as_deref() {
                errors.push(item.error("replaces should not contain name of same descriptor"));
            } else {
                replaces.push(replaced.to_owned());
            }
            check_keys(&entry, dialect, &["name"], errors);
        }
    }
    let unlimited = map
        .get("unlimited")
        .and_then(|n| errors.take(n.bool()))
        .unwrap_or(false);
    let unit_node = map.get("unit");
    let unit_text = unit_node.and_then(|n| errors.take(n.str())).unwrap_or("");
    let unit = Unit::parse(unit_text);
    let mut spec = RateLimitSpec {
        at: n.at(),
        name,
        replaces,
        unlimited,
        limits: Vec::new(),
        penalty: match dialect {
            Dialect::Envoy => Penalty::OwnDenials,
            Dialect::Floodgate => Penalty::None,
        },
        block_for: None,
        on_failure: None,
        sync: None,
        reported: Reported {
            requests_per_unit: 0,
            unit: unit.unwrap_or(Unit::Second),
        },
    };
    if unlimited {
        if unit.is_some() {
            errors.push(
                unit_node
                    .unwrap_or(n)
                    .error("should not specify rate limit unit when unlimited"),
            );
        }
        map.has("requests_per_unit");
        check_keys(&map, dialect, RATE_LIMIT_KEYS, errors);
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
        // Floodgate's limit definitions in an envoyproxy/ratelimit file: a
        // unit that is given must be one, even beside a `per`.
        let per = map.keys().any(|(k, _)| k == "per");
        if per && unit.is_none() && !unit_text.is_empty() {
            errors.push(
                unit_node
                    .unwrap_or(n)
                    .error(format!("invalid rate limit unit '{}'", excerpt(unit_text))),
            );
        }
        if let Some((limits, reported)) = read_limits(&map, unit, errors) {
            spec.limits = limits;
            spec.reported = reported;
        }
        check_keys_with(
            &map,
            dialect,
            RATE_LIMIT_KEYS,
            ENVOY_RATE_LIMIT_EXTENSIONS,
            errors,
        );
        return (!spec.limits.is_empty()).then_some(spec);
    }
    match dialect {
        Dialect::Envoy => {
            let Some(unit) = unit else {
                errors.push(
                    unit_node
                        .unwrap_or(n)
                        .error(format!("invalid rate limit unit '{}'", excerpt(unit_text))),
                );
                check_keys(&map, dialect, RATE_LIMIT_KEYS, errors);
                return None;
            };
            let rpu = read_rpu(&map, errors);
            spec.reported = Reported {
                requests_per_unit: rpu,
                unit,
            };
            spec.limits.push(super::limits::envoy_limit(rpu, unit));
        }
        Dialect::Floodgate => {
            let (limits, reported) = read_limits(&map, unit, errors)?;
            spec.limits = limits;
            spec.reported = reported;
            // Neither applies to units in flight: a denied request holds
            // nothing to count, and a block would lose the held count.
            let in_flight = !spec.limits.is_empty()
                && spec
                    .limits
                    .iter()
                    .all(|l| matches!(l, LimitSpec::Concurrency { .. }));
            if let Some(p) = map.get("penalty") {
                if errors.take(p.bool()) == Some(true) {
                    if in_flight {
                        errors.push(p.error("penalty does not apply to a concurrency limit (a denied request holds nothing to count)"));
                    }
                    spec.penalty = Penalty::AllDenials;
                }
            }
            if let Some(b) = map.get("block_for") {
                if in_flight {
                    errors.push(b.error("block_for does not apply to a concurrency limit (permits are given back by releases, not by time)"));
                }
                spec.block_for = errors.take(b.duration(false));
            }
            if let Some(f) = map.get("on_failure") {
                spec.on_failure = read_on_failure(f, errors);
            }
        }
    }
    check_keys(&map, dialect, RATE_LIMIT_KEYS, errors);
    Some(spec)
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
