//! Floodgate files: settings, domains (the envoyproxy/ratelimit descriptor
//! schema extended with algorithms, several limits, costs, penalties, kill
//! switches), allow/deny lists, and references to envoyproxy/ratelimit
//! files.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::error::Errors;
use crate::spec::{Dialect, DomainSpec, ListSpec, Settings};
use crate::yaml::{Map, Node, excerpt};

use super::descriptors::read_nodes;

/// Top-level keys of a Floodgate file that this crate reads.
pub const POLICY_SECTIONS: &[&str] = &["settings", "domains", "envoy_configs"];

/// Keys of `settings:`.
const SETTINGS_KEYS: &[&str] = &[
    "shadow_mode",
    "enforce",
    "near_limit_ratio",
    "envoy_increment_all",
];
/// Keys of a domain of `domains:`.
const DOMAIN_KEYS: &[&str] = &["domain", "descriptors", "allow", "deny"];
/// Keys of an entry of an `allow:` or `deny:` list.
const LIST_KEYS: &[&str] = &["key", "values", "cidrs"];

/// What a Floodgate file holds for policies.
pub(crate) struct FloodgateFile {
    /// `settings:`, if given.
    pub settings: Option<Settings>,
    /// The domains it defines.
    pub domains: Vec<DomainSpec>,
    /// `envoy_configs:`: envoyproxy/ratelimit files or directories to load
    /// too (relative paths resolved against the file's directory).
    pub envoy_configs: Vec<PathBuf>,
}

/// Reads a Floodgate file's top level: `settings`, `domains`,
/// `envoy_configs`; the `other_sections` other components read are
/// accepted, any other key is an error.
pub(crate) fn read_floodgate_file(
    root: &Map<'_>,
    dir: &Path,
    other_sections: &[&str],
    errors: &mut Errors,
) -> FloodgateFile {
    let settings = root.get("settings").and_then(|n| read_settings(n, errors));
    let mut domains = Vec::new();
    if let Some(list) = root.get("domains") {
        for item in errors.take(list.list()).unwrap_or_default() {
            if let Some(d) = read_domain(item, errors) {
                domains.push(d);
            }
        }
    }
    let mut envoy_configs = Vec::new();
    if let Some(list) = root.get("envoy_configs") {
        for item in errors.take(list.list()).unwrap_or_default() {
            if let Some(p) = errors.take(item.str()) {
                envoy_configs.push(dir.join(p));
            }
        }
    }
    for s in other_sections {
        root.has(s);
    }
    let mut allowed: Vec<&str> = POLICY_SECTIONS.to_vec();
    allowed.extend_from_slice(other_sections);
    for e in root.deny_unknown(&allowed) {
        errors.push(e);
    }
    FloodgateFile {
        settings,
        domains,
        envoy_configs,
    }
}

/// `settings:`: the flags, and `near_limit_ratio` (0 to 1).
fn read_settings(n: Node<'_>, errors: &mut Errors) -> Option<Settings> {
    let map = errors.take(n.map())?;
    let mut s = Settings::default();
    let flag = |key: &str, default: bool, errors: &mut Errors| {
        map.get(key)
            .and_then(|n| errors.take(n.bool()))
            .unwrap_or(default)
    };
    s.shadow_mode = flag("shadow_mode", false, errors);
    s.enforce = flag("enforce", true, errors);
    s.envoy_increment_all = flag("envoy_increment_all", false, errors);
    if let Some(r) = map.get("near_limit_ratio") {
        let text = r.scalar_text().unwrap_or("");
        match text.parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => s.near_limit_ratio = v,
            _ => errors.push(r.error(format!(
                "near_limit_ratio must be a number between 0 and 1 (got {})",
                r.describe()
            ))),
        }
    }
    for e in map.deny_unknown(SETTINGS_KEYS) {
        errors.push(e);
    }
    Some(s)
}

/// A domain of `domains:`; `None` without a name.
fn read_domain(n: Node<'_>, errors: &mut Errors) -> Option<DomainSpec> {
    let map = errors.take(n.map())?;
    let name = map
        .get("domain")
        .and_then(|n| errors.take(n.str()))
        .unwrap_or("");
    if name.is_empty() {
        errors.push(n.error("config file cannot have empty domain"));
    }
    let descriptors = map
        .get("descriptors")
        .map(|n| read_nodes(n, Dialect::Floodgate, errors))
        .unwrap_or_default();
    let allow = read_lists(&map, "allow", errors);
    let deny = read_lists(&map, "deny", errors);
    for e in map.deny_unknown(DOMAIN_KEYS) {
        errors.push(e);
    }
    (!name.is_empty()).then(|| DomainSpec {
        name: name.to_owned(),
        at: n.at(),
        dialect: Dialect::Floodgate,
        descriptors,
        allow,
        deny,
    })
}

/// The `allow:` or `deny:` list (`section`): per key, values and
/// networks (CIDRs).
fn read_lists(map: &Map<'_>, section: &str, errors: &mut Errors) -> Vec<ListSpec> {
    let mut out = Vec::new();
    let Some(list) = map.get(section) else {
        return out;
    };
    for item in errors.take(list.list()).unwrap_or_default() {
        let Some(m) = errors.take(item.map()) else {
            continue;
        };
        let key = m.required("key").and_then(|k| k.str()).map(str::to_owned);
        let Some(key) = errors.take(key) else {
            continue;
        };
        let mut spec = ListSpec {
            at: item.at(),
            key,
            values: Vec::new(),
            networks: Vec::new(),
        };
        if let Some(values) = m.get("values") {
            for v in errors.take(values.list()).unwrap_or_default() {
                if let Some(s) = errors.take(v.str()) {
                    spec.values.push(s.to_owned());
                }
            }
        }
        if let Some(cidrs) = m.get("cidrs") {
            for c in errors.take(cidrs.list()).unwrap_or_default() {
                let Some(text) = errors.take(c.str()) else {
                    continue;
                };
                match parse_cidr(text) {
                    Some(net) => spec.networks.push(net),
                    None => errors.push(c.error(format!(
                        "invalid network '{}' (expected an address or address/prefix, e.g. 10.0.0.0/8 or 2001:db8::/32)",
                        excerpt(text)
                    ))),
                }
            }
        }
        if spec.values.is_empty() && spec.networks.is_empty() {
            errors.push(item.error(format!(
                "the {section} list entry for '{}' needs 'values' or 'cidrs'",
                excerpt(&spec.key)
            )));
        }
        for e in m.deny_unknown(LIST_KEYS) {
            errors.push(e);
        }
        out.push(spec);
    }
    out
}

/// `10.0.0.0/8`, `2001:db8::/32`, or a bare address (a /32 or /128).
pub fn parse_cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (addr, prefix) = match text.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (text, None),
    };
    let addr: IpAddr = addr.trim().parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok()?,
        Some(_) => return None,
        None => max,
    };
    (prefix <= max).then_some((addr, prefix))
}
