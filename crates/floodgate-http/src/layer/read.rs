//! Reading the `http.layer` section of a Floodgate file.

use floodgate_policy::error::{ConfigErrors, Errors};
use floodgate_policy::yaml::{Map, Node, excerpt};

use super::adaptive::read::read_adaptive;
use super::config::{KeyedQueueLimit, LayerSettings, LowPriority, OnError, QueueLimit, Shedding};
use crate::read::{deny_unknown, each_string, header_name};

/// The key of the layer's section under `http:`.
pub const LAYER: &str = "layer";

const KEYS: &[&str] = &["on_error", "max_delayed", "shedding", "concurrency"];
const SHED_KEYS: &[&str] = &[
    "low_priority_above",
    "max_in_flight",
    "retry_after",
    "low_priority",
    "critical",
    "adaptive",
];
const LOW_KEYS: &[&str] = &["routes", "header"];
const HEADER_KEYS: &[&str] = &["name", "values"];
const CONC_KEYS: &[&str] = &["global", "per_key"];
const QUEUE_KEYS: &[&str] = &["max", "queue", "timeout", "key"];

fn count(map: &Map<'_>, key: &str, errors: &mut Errors) -> Option<usize> {
    let n = map.get(key)?;
    let v = errors.take(n.u64())?;
    match usize::try_from(v) {
        Ok(v) if v <= 1 << 32 => Some(v),
        _ => {
            errors.push(n.error(format!("{key} is too large (got {v})")));
            None
        }
    }
}

/// The count under `key`, which `map` must have.
fn required(map: &Map<'_>, key: &str, errors: &mut Errors) -> Option<usize> {
    let n = count(map, key, errors);
    if n.is_none() && !map.has(key) {
        errors.push(map.node().error(format!("missing required key '{key}'")));
    }
    n
}

/// A concurrency limit, and the node of its `key` if it has one.
fn read_queue<'a>(n: Node<'a>, errors: &mut Errors) -> Option<(QueueLimit, Option<Node<'a>>)> {
    let map = errors.take(n.map())?;
    let max = required(&map, "max", errors);
    if max == Some(0) {
        errors.push(n.error("max must be at least 1"));
    }
    let limit = QueueLimit {
        max: max.unwrap_or(1).max(1),
        queue: count(&map, "queue", errors).unwrap_or(0),
        timeout: map
            .get("timeout")
            .and_then(|t| errors.take(t.duration(true))),
    };
    let key = map.get("key");
    deny_unknown(&map, QUEUE_KEYS, errors);
    Some((limit, key))
}

/// A selection of requests (`low_priority`, `critical`).
fn read_low(n: Node<'_>, what: &str, errors: &mut Errors) -> LowPriority {
    let mut low = LowPriority::default();
    let Some(map) = errors.take(n.map()) else {
        return low;
    };
    if let Some(list) = map.get("routes") {
        each_string(list, errors, |t, _, _| low.routes.push(t.to_owned()));
    }
    if let Some(h) = map.get("header").and_then(|h| errors.take(h.map())) {
        let name = errors.take(h.required("name").and_then(header_name));
        let mut values = Vec::new();
        if let Some(list) = h.get("values") {
            each_string(list, errors, |t, _, _| values.push(t.to_owned()));
        }
        if values.is_empty() {
            errors.push(h.node().error(format!("the {what} header needs 'values'")));
        }
        deny_unknown(&h, HEADER_KEYS, errors);
        low.header = name.map(|n| (n, values));
    }
    deny_unknown(&map, LOW_KEYS, errors);
    low
}

/// A selection under `key`, if any.
fn selection(m: &Map<'_>, key: &str, what: &str, errors: &mut Errors) -> LowPriority {
    m.get(key)
        .map(|l| read_low(l, what, errors))
        .unwrap_or_default()
}

/// The `shedding` mapping: `low_priority_above` is required unless an
/// adaptive limit sheds instead.
fn read_shedding(m: &Map<'_>, errors: &mut Errors) -> Shedding {
    let adaptive = m.get("adaptive").and_then(|a| read_adaptive(a, errors));
    let low_priority_above = match adaptive {
        Some(_) => count(m, "low_priority_above", errors).unwrap_or(usize::MAX),
        None => required(m, "low_priority_above", errors).unwrap_or(0),
    };
    let shedding = Shedding {
        low_priority_above,
        max_in_flight: count(m, "max_in_flight", errors),
        retry_after: m
            .get("retry_after")
            .and_then(|t| errors.take(t.duration(true))),
        low_priority: selection(m, "low_priority", "low-priority", errors),
        critical: selection(m, "critical", "critical", errors),
        adaptive,
    };
    deny_unknown(m, SHED_KEYS, errors);
    shedding
}

impl LayerSettings {
    /// Reads an `http.layer` section (the node under the key).
    pub fn from_yaml(node: Node<'_>) -> Result<LayerSettings, ConfigErrors> {
        let mut errors = Errors::default();
        let mut s = LayerSettings::default();
        let map = node.map()?;
        if let Some(n) = map.get("on_error") {
            match errors.take(n.str()) {
                Some("allow") => s.on_error = OnError::Allow,
                Some("reject") => s.on_error = OnError::Reject,
                Some(other) => errors.push(n.error(format!(
                    "on_error must be allow or reject (got '{}')",
                    excerpt(other)
                ))),
                None => {}
            }
        }
        if let Some(m) = count(&map, "max_delayed", &mut errors) {
            s.max_delayed = m;
        }
        if let Some(n) = map.get("shedding")
            && let Some(m) = errors.take(n.map())
        {
            s.shedding = Some(read_shedding(&m, &mut errors));
        }
        if let Some(n) = map.get("concurrency")
            && let Some(m) = errors.take(n.map())
        {
            if let Some((limit, key)) = m.get("global").and_then(|g| read_queue(g, &mut errors)) {
                if let Some(k) = key {
                    errors.push(k.error("only per_key takes 'key'"));
                }
                s.global_concurrency = Some(limit);
            }
            if let Some(k) = m.get("per_key")
                && let Some((limit, key)) = read_queue(k, &mut errors)
            {
                match key.and_then(|key| errors.take(key.str())) {
                    Some(key) if !key.is_empty() => {
                        let key = key.to_owned();
                        s.keyed_concurrency = Some(KeyedQueueLimit { key, limit });
                    }
                    _ => errors
                        .push(k.error("per_key needs 'key': the descriptor entry key (e.g. user)")),
                }
            }
            deny_unknown(&m, CONC_KEYS, &mut errors);
        }
        deny_unknown(&map, KEYS, &mut errors);
        errors.finish(s)
    }
}
