//! Reading one action of a descriptor: a bare name (`client_ip`) or a
//! one-key mapping of a name to its options
//! (`{header: {name: x-plan, key: plan}}`).

use floodgate_policy::error::{ConfigError, Errors};
use floodgate_policy::yaml::{Map, Node, excerpt};
use http::HeaderName;

use super::config::{Action, ActionKind, Source};
use crate::read::{each_string, header_name};

/// Each action: its name, its options, and the key of its entry unless
/// one is given (`header` and `extension`: the name they read).
const ACTIONS: &[(&str, &[&str], &str)] = &[
    ("client_ip", &["key"], "remote_address"),
    ("header", &["name", "key"], ""),
    ("api_key", &["header", "key", "hash"], "api_key"),
    ("bearer", &["key", "hash"], "bearer"),
    ("user", &["header", "extension", "key"], "user"),
    ("tenant", &["header", "extension", "key"], "tenant"),
    ("extension", &["name", "key"], ""),
    ("method", &["key"], "method"),
    ("route", &["key", "unmatched"], "route"),
    ("path", &["key"], "path"),
    ("generic", &["key", "value"], "generic_key"),
    (
        "tier",
        &["header", "extension", "key", "values", "default"],
        "tier",
    ),
];

/// An action's options: a mapping, or nothing for a bare name.
struct Opts<'a> {
    name: &'a str,
    at: Node<'a>,
    map: Option<Map<'a>>,
}

impl<'a> Opts<'a> {
    fn get(&self, key: &str) -> Option<Node<'a>> {
        self.map.as_ref()?.get(key)
    }

    fn required(&self, key: &str) -> Result<Node<'a>, ConfigError> {
        self.get(key)
            .ok_or_else(|| self.at.error(format!("{} needs '{key}'", self.name)))
    }

    fn string(&self, key: &str, default: &str, errors: &mut Errors) -> String {
        self.get(key)
            .and_then(|n| errors.take(n.str()))
            .unwrap_or(default)
            .to_owned()
    }

    /// Reports the options not in `allowed` (whether read or not).
    fn finish(&self, allowed: &[&str], errors: &mut Errors) {
        let Some(m) = &self.map else { return };
        for (key, node) in m.keys() {
            if !allowed.contains(&key) {
                errors.push(node.error(format!(
                    "unknown key '{}' for {} (expected one of: {})",
                    excerpt(key),
                    self.name,
                    allowed.join(", ")
                )));
            }
        }
    }
}

/// `header: NAME` or `extension: NAME` (exactly one).
pub(crate) fn read_source(map: &Map<'_>, what: &str, errors: &mut Errors) -> Option<Source> {
    match (map.get("header"), map.get("extension")) {
        (Some(h), None) => errors.take(header_name(h)).map(Source::Header),
        (None, Some(e)) => errors
            .take(e.str())
            .map(|s| Source::Extension(s.to_owned())),
        (Some(_), Some(e)) => {
            let both = format!("{what} takes either 'header' or 'extension', not both");
            errors.push(e.error(both));
            None
        }
        (None, None) => {
            let neither = format!("{what} needs 'header' or 'extension'");
            errors.push(map.node().error(neither));
            None
        }
    }
}

fn opts<'a>(n: Node<'a>, errors: &mut Errors) -> Option<Opts<'a>> {
    if let Some(name) = n.scalar_text() {
        return Some(Opts {
            name,
            at: n,
            map: None,
        });
    }
    let outer = errors.take(n.map())?;
    let mut keys = outer.entries();
    let (Some((name, value)), None) = (keys.next(), keys.next()) else {
        let found: Vec<&str> = outer.keys().map(|(k, _)| k).collect();
        errors.push(n.error(format!(
            "an action is one name (optionally with options), found {} keys: {}",
            found.len(),
            excerpt(&found.join(", "))
        )));
        return None;
    };
    let map = errors.take(value.map())?;
    Some(Opts {
        name,
        at: n,
        map: Some(map),
    })
}

/// Reads one action; errors go to `errors`.
pub(crate) fn read_action(n: Node<'_>, errors: &mut Errors) -> Option<Action> {
    let o = opts(n, errors)?;
    let Some(&(_, allowed, default_key)) = ACTIONS.iter().find(|a| a.0 == o.name) else {
        let names: Vec<&str> = ACTIONS.iter().map(|a| a.0).collect();
        errors.push(n.error(format!(
            "unknown action `{}` (expected one of: {})",
            excerpt(o.name),
            names.join(", ")
        )));
        return None;
    };
    o.finish(allowed, errors);
    let mut named = None;
    let kind = match o.name {
        "client_ip" => ActionKind::ClientIp,
        "method" => ActionKind::Method,
        "path" => ActionKind::Path,
        "route" => ActionKind::Route {
            unmatched: o
                .get("unmatched")
                .and_then(|u| errors.take(u.str()))
                .map(str::to_owned),
        },
        "generic" => {
            let value = errors.take(o.required("value").and_then(|v| v.str()))?;
            ActionKind::Generic(value.to_owned())
        }
        "header" | "extension" => {
            let name_node = errors.take(o.required("name"))?;
            let name = errors.take(name_node.str())?;
            let source = match o.name {
                "header" => Source::Header(errors.take(header_name(name_node))?),
                _ => Source::Extension(name.to_owned()),
            };
            // The key defaults to the (lowercase) header or extension name.
            named = Some(match &source {
                Source::Header(h) => h.as_str().to_owned(),
                _ => name.to_owned(),
            });
            ActionKind::Value {
                source,
                hash: false,
            }
        }
        "user" | "tenant" => {
            let Some(map) = &o.map else {
                errors.push(n.error(format!(
                    "{} needs 'header' or 'extension', e.g. {{{}: {{header: x-{}-id}}}}",
                    o.name, o.name, o.name
                )));
                return None;
            };
            ActionKind::Value {
                source: read_source(map, o.name, errors)?,
                hash: false,
            }
        }
        "api_key" | "bearer" => {
            let source = match o.get("header").filter(|_| o.name == "api_key") {
                Some(h) => Source::Header(errors.take(header_name(h))?),
                None if o.name == "bearer" => Source::Bearer,
                None => Source::Header(HeaderName::from_static("x-api-key")),
            };
            ActionKind::Value {
                source,
                hash: o
                    .get("hash")
                    .is_some_and(|h| errors.take(h.bool()) == Some(true)),
            }
        }
        _ => read_tier(&o, errors)?,
    };
    Some(Action {
        key: o.string("key", named.as_deref().unwrap_or(default_key), errors),
        kind,
    })
}

fn read_tier(o: &Opts<'_>, errors: &mut Errors) -> Option<ActionKind> {
    let Some(map) = &o.map else {
        errors.push(o.at.error(
            "tier needs 'header' (or 'extension') and 'values', e.g. {tier: {header: x-plan, values: [free, pro]}}",
        ));
        return None;
    };
    let source = read_source(map, "tier", errors);
    let values_node = errors.take(o.required("values"));
    let mut values: Vec<String> = Vec::new();
    if let Some(list) = values_node {
        each_string(list, errors, |text, v, errors| {
            if values.iter().any(|t| t.eq_ignore_ascii_case(text)) {
                errors.push(v.error(format!("duplicate tier `{}`", excerpt(text))));
            } else {
                values.push(text.to_owned());
            }
        });
    }
    if values_node.is_some() && values.is_empty() {
        errors.push(o.at.error("tier needs at least one value"));
    }
    if values.is_empty() {
        return None;
    }
    let mut default = None;
    if let Some(d) = o.get("default") {
        if let Some(text) = errors.take(d.str()) {
            match values.iter().find(|v| v.eq_ignore_ascii_case(text)) {
                Some(v) => default = Some(v.clone()),
                None => errors.push(d.error(format!(
                    "the default tier `{}` is not one of the values ({})",
                    excerpt(text),
                    values.join(", ")
                ))),
            }
        }
    }
    Some(ActionKind::Tier {
        source: source?,
        values,
        default,
    })
}
