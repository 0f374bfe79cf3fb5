//! Reading the `http:` section of a Floodgate file, reporting every problem
//! with its file, line and column. An action of a descriptor is a bare name
//! (`client_ip`) or a one-key mapping of a name to its options
//! (`{header: {name: x-plan, key: plan}}`).

use std::sync::Arc;

use floodgate_policy::error::{ConfigError, ConfigErrors, Errors};
use floodgate_policy::read::parse_cidr;
use floodgate_policy::yaml::{Document, Map, Node, excerpt};
use http::HeaderName;

use super::config::{
    Action, ActionKind, ClientIpConfig, CostConfig, IdentityConfig, MAX_ACTIONS, MAX_COST,
    MAX_DESCRIPTORS, MAX_TRUSTED_HOPS, MAX_VALUE_LEN, Source, count, in_bounds,
};
use super::hash::MIN_VALUE_LEN;
use super::http_identity::HttpIdentity;
use super::response_cost::{check_keys, read_response_cost};
use super::route::Routes;
use crate::read::{deny_unknown, each_string, header_name};

/// The top-level key of a Floodgate file this module reads.
pub const SECTION: &str = "http";

const HTTP_KEYS: &[&str] = &[
    "domain",
    "client_ip",
    "routes",
    "cost",
    "response_cost",
    "max_value_len",
    "descriptors",
    // Read by the contract and the layer.
    "responses",
    "layer",
];
const CLIENT_IP_KEYS: &[&str] = &[
    "header",
    "trusted_hops",
    "trusted_proxies",
    "ipv4_prefix",
    "ipv6_prefix",
];
const COST_KEYS: &[&str] = &["header", "extension", "max", "default"];

/// An integer from `min` to `max`.
fn int_in(n: Node<'_>, what: &str, min: u64, max: u64) -> Result<u64, ConfigError> {
    in_bounds(what, n.u64()?, min, max).map_err(|m| n.error(m))
}

impl HttpIdentity {
    /// Reads the identity of the `http:` section of the Floodgate file
    /// `text` (named `file` in messages); its `responses` and `layer` are
    /// not read (see [`HttpSection`](crate::HttpSection)).
    pub fn from_yaml_str(file: &str, text: &str) -> Result<HttpIdentity, ConfigErrors> {
        let doc = Document::parse(&Arc::from(file), text)?;
        HttpIdentity::from_yaml(doc.root().map()?.required(SECTION)?)
    }

    /// Reads an `http:` section (the node under the key).
    pub(crate) fn from_yaml(node: Node<'_>) -> Result<HttpIdentity, ConfigErrors> {
        let map = node.map()?;
        let mut errors = Errors::default();
        let mut c = IdentityConfig::default();
        match map.get("domain").and_then(|d| errors.take(d.str())) {
            Some(d) if !d.is_empty() => c.domain = d.to_owned(),
            None if !map.has("domain") => errors.push(node.error("missing required key 'domain'")),
            _ => errors.push(node.error("domain must not be empty")),
        }
        if let Some(n) = map.get("client_ip") {
            c.client_ip = read_client_ip(n, &mut errors);
        }
        if let Some(list) = map.get("routes") {
            let mut routes = Routes::default();
            each_string(list, &mut errors, |text, t, errors| {
                match routes.insert(text) {
                    Ok(()) => c.routes.push(text.to_owned()),
                    Err(e) => errors.push(t.error(e.to_string())),
                }
            });
        }
        if let Some(n) = map.get("cost") {
            c.cost = read_cost(n, &mut errors);
        }
        if let Some(n) = map.get("response_cost") {
            c.response_cost = read_response_cost(n, &mut errors);
        }
        if let Some(n) = map.get("max_value_len") {
            let max = MAX_VALUE_LEN as u64;
            if let Some(v) = errors.take(int_in(n, "max_value_len", MIN_VALUE_LEN as u64, max)) {
                c.max_value_len = v as usize;
            }
        }
        match map.get("descriptors") {
            Some(n) => read_descriptors(n, &mut c, &mut errors),
            None => errors.push(node.error("missing required key 'descriptors'")),
        }
        if let Some(n) = map.get("response_cost") {
            check_keys(n, &c.descriptors, &mut errors);
        }
        // Read by the contract and the layer.
        let _ = (map.get("responses"), map.get("layer"));
        deny_unknown(&map, HTTP_KEYS, &mut errors);
        let c = errors.finish(c)?;
        HttpIdentity::new(c).map_err(|e| ConfigErrors::from(node.error(e.to_string())))
    }
}

fn read_descriptors(n: Node<'_>, c: &mut IdentityConfig, errors: &mut Errors) {
    let items = errors.take(n.list()).unwrap_or_default();
    if let Err(m) = count("descriptors", items.len(), MAX_DESCRIPTORS, "descriptors") {
        errors.push(n.error(m));
    }
    for item in items.into_iter().take(MAX_DESCRIPTORS) {
        let nodes = match item.list() {
            Ok(list) => list,
            Err(_) => vec![item],
        };
        if let Err(m) = count("a descriptor", nodes.len(), MAX_ACTIONS, "actions") {
            errors.push(item.error(m));
            continue;
        }
        let mut actions = Vec::with_capacity(nodes.len());
        for a in nodes {
            let Some(action) = read_action(a, errors) else {
                continue;
            };
            match action.validate(!c.routes.is_empty()) {
                Ok(()) => actions.push(action),
                Err(m) => errors.push(a.error(m)),
            }
        }
        c.descriptors.push(actions);
    }
}

fn read_client_ip(n: Node<'_>, errors: &mut Errors) -> ClientIpConfig {
    let mut c = ClientIpConfig::default();
    let Some(map) = errors.take(n.map()) else {
        return c;
    };
    if let Some(h) = map.get("trusted_hops") {
        let max = u64::from(MAX_TRUSTED_HOPS);
        c.trusted_hops = errors.take(int_in(h, "trusted_hops", 0, max)).unwrap_or(0) as u8;
    }
    if let Some(list) = map.get("trusted_proxies") {
        each_string(list, errors, |text, item, errors| match parse_cidr(text) {
            Some(net) => c.trusted_proxies.push(net),
            None => {
                let expected = "an address or address/prefix, e.g. 10.0.0.0/8 or 2001:db8::/32";
                let text = excerpt(text);
                errors.push(item.error(format!("invalid network '{text}' (expected {expected})")));
            }
        });
    }
    if let Some(h) = map.get("header") {
        if let Some(text) = errors.take(h.str()) {
            if let Some(name) = errors.take(header_name(h)) {
                c.header = name;
            }
            if !c.trusts_proxies() {
                errors.push(h.error(format!(
                    "the header `{}` is read only through trusted proxies: set trusted_hops or trusted_proxies",
                    excerpt(text)
                )));
            }
        }
    }
    if let Some(p) = map.get("ipv4_prefix") {
        c.ipv4_prefix = errors
            .take(int_in(p, "ipv4_prefix", 1, 32))
            .map(|v| v as u8);
    }
    if let Some(p) = map.get("ipv6_prefix") {
        c.ipv6_prefix = match p.bool() {
            Ok(true) => Some(64),
            Ok(false) => None,
            Err(_) => errors
                .take(int_in(p, "ipv6_prefix", 1, 128))
                .map(|v| v as u8),
        };
    }
    deny_unknown(&map, CLIENT_IP_KEYS, errors);
    c
}

fn read_cost(n: Node<'_>, errors: &mut Errors) -> Option<CostConfig> {
    let map = errors.take(n.map())?;
    let source = read_source(&map, "cost", errors);
    let max = map
        .required("max")
        .and_then(|m| int_in(m, "cost max", 1, u64::from(MAX_COST)));
    let max = errors.take(max).map(|v| v as u32);
    let mut default = 1;
    if let Some(d) = map.get("default") {
        let upper = u64::from(max.unwrap_or(MAX_COST));
        default = errors
            .take(int_in(d, "cost default", 1, upper))
            .unwrap_or(1) as u32;
    }
    deny_unknown(&map, COST_KEYS, errors);
    Some(CostConfig {
        source: source?,
        max: max?,
        default,
    })
}

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
                let message = floodgate_policy::yaml::unknown_key(key, Some(self.name), allowed);
                errors.push(node.error(message));
            }
        }
    }
}

/// `header: NAME` or `extension: NAME` (exactly one).
fn read_source(map: &Map<'_>, what: &str, errors: &mut Errors) -> Option<Source> {
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

/// An action's name and options: `name` alone, or `{name: {options}}`.
fn opts<'a>(at: Node<'a>, errors: &mut Errors) -> Option<Opts<'a>> {
    if let Some(name) = at.scalar_text() {
        let map = None;
        return Some(Opts { name, at, map });
    }
    let outer = errors.take(at.map())?;
    let mut keys = outer.entries();
    let (Some((name, value)), None) = (keys.next(), keys.next()) else {
        let found: Vec<&str> = outer.keys().map(|(k, _)| k).collect();
        errors.push(at.error(format!(
            "an action is one name (optionally with options), found {} keys: {}",
            found.len(),
            excerpt(&found.join(", "))
        )));
        return None;
    };
    let map = Some(errors.take(value.map())?);
    Some(Opts { name, at, map })
}

/// Reads one action; errors go to `errors`.
fn read_action(n: Node<'_>, errors: &mut Errors) -> Option<Action> {
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
            let (kind, name) = read_named(&o, errors)?;
            named = Some(name);
            kind
        }
        "user" | "tenant" => read_owner(&o, errors)?,
        "api_key" | "bearer" => read_credential(&o, errors)?,
        _ => read_tier(&o, errors)?,
    };
    Some(Action {
        key: o.string("key", named.as_deref().unwrap_or(default_key), errors),
        kind,
    })
}

/// `header` or `extension`: its value, and the key it names by default
/// (the lowercase header name, or the extension's).
fn read_named(o: &Opts<'_>, errors: &mut Errors) -> Option<(ActionKind, String)> {
    let name_node = errors.take(o.required("name"))?;
    let name = errors.take(name_node.str())?;
    let source = match o.name {
        "header" => Source::Header(errors.take(header_name(name_node))?),
        _ => Source::Extension(name.to_owned()),
    };
    let named = match &source {
        Source::Header(h) => h.as_str().to_owned(),
        _ => name.to_owned(),
    };
    let kind = ActionKind::Value {
        source,
        hash: false,
    };
    Some((kind, named))
}

/// `user` or `tenant`: the value of the header or extension it names.
fn read_owner(o: &Opts<'_>, errors: &mut Errors) -> Option<ActionKind> {
    let Some(map) = &o.map else {
        errors.push(o.at.error(format!(
            "{} needs 'header' or 'extension', e.g. {{{}: {{header: x-{}-id}}}}",
            o.name, o.name, o.name
        )));
        return None;
    };
    Some(ActionKind::Value {
        source: read_source(map, o.name, errors)?,
        hash: false,
    })
}

/// `api_key` (a header, `x-api-key` by default) or `bearer` (the token of
/// `Authorization: Bearer`), hashed when `hash: true`.
fn read_credential(o: &Opts<'_>, errors: &mut Errors) -> Option<ActionKind> {
    let source = match o.get("header").filter(|_| o.name == "api_key") {
        Some(h) => Source::Header(errors.take(header_name(h))?),
        None if o.name == "bearer" => Source::Bearer,
        None => Source::Header(HeaderName::from_static("x-api-key")),
    };
    Some(ActionKind::Value {
        source,
        hash: o
            .get("hash")
            .is_some_and(|h| errors.take(h.bool()) == Some(true)),
    })
}

/// `tier`: the value of a header or extension, one of `values` (in any
/// case) or `default`.
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
