//! Reading descriptor trees, in both dialects: envoyproxy/ratelimit's (its
//! keys, its messages) and Floodgate's superset.

use crate::error::Errors;
use crate::spec::{Dialect, NodeSpec};
use crate::yaml::{Map, Node, excerpt};

use super::rate_limit::read_rate_limit;

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

/// Keys a descriptor node may have (Floodgate's format).
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

/// Reports keys the dialect does not allow. envoyproxy/ratelimit checks
/// every key of a file against one list and ignores misplaced known keys;
/// Floodgate rejects any key not allowed at its level.
pub(crate) fn check_keys(map: &Map<'_>, dialect: Dialect, allowed: &[&str], errors: &mut Errors) {
    check_keys_with(map, dialect, allowed, &[], errors);
}

/// [`check_keys`], with `extensions` also allowed in an envoyproxy/ratelimit
/// file.
pub(super) fn check_keys_with(
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

/// A boolean key of `map`, `false` when missing.
fn bool_key(map: &Map<'_>, key: &str, errors: &mut Errors) -> bool {
    map.get(key)
        .and_then(|n| errors.take(n.bool()))
        .unwrap_or(false)
}

/// Reads one node of a descriptor tree (its children too); its errors go to
/// `errors`.
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
        read_floodgate_keys(map, &mut node, errors);
    }
    if node.key.is_empty() {
        errors.push(map.node().error("descriptor has empty key"));
    }
    if node.share_threshold && !node.value.as_deref().is_some_and(|v| v.contains('*')) {
        errors.push(map.node().error(share_threshold_error(&node, dialect)));
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

/// Floodgate's own keys of a node: `enabled` and `cost` (1 to
/// [`floodgate::MAX_COUNT`]).
fn read_floodgate_keys(map: &Map<'_>, node: &mut NodeSpec, errors: &mut Errors) {
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

/// The error of a `share_threshold` on a node whose value has no wildcard,
/// in the dialect's words.
fn share_threshold_error(node: &NodeSpec, dialect: Dialect) -> String {
    let value = node.value.as_deref().map(excerpt).unwrap_or_default();
    match dialect {
        // envoyproxy/ratelimit's message, naming the composite key.
        Dialect::Envoy => format!(
            "share_threshold can only be used with wildcard values (containing '*'), but found key '{}{}{value}'",
            excerpt(&node.key),
            if value.is_empty() { "" } else { "_" },
        ),
        Dialect::Floodgate => format!(
            "share_threshold can only be set on a value with a wildcard '*' (value: '{value}')"
        ),
    }
}
