//! envoyproxy/ratelimit's configuration: the YAML files (`YamlRoot`,
//! `YamlDescriptor`, `YamlRateLimit` of `src/config/config_impl.go`), and
//! the tree `loadDescriptors` builds from them, looked up as `GetLimit`
//! does.

use std::collections::HashMap;
use std::fmt::Write;

/// One file: a domain and its descriptors.
#[derive(Clone, Debug, PartialEq)]
pub struct File {
    /// `domain`.
    pub domain: String,
    /// `descriptors`.
    pub descriptors: Vec<Node>,
}

/// One `YamlDescriptor`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    /// `key`.
    pub key: String,
    /// `value` (empty: none).
    pub value: String,
    /// `rate_limit`.
    pub rate_limit: Option<RateLimit>,
    /// `descriptors`.
    pub descriptors: Vec<Node>,
    /// `shadow_mode`.
    pub shadow_mode: bool,
    /// `quota_mode`.
    pub quota_mode: bool,
    /// `detailed_metric`.
    pub detailed_metric: bool,
    /// `value_to_metric`.
    pub value_to_metric: bool,
    /// `share_threshold`.
    pub share_threshold: bool,
    /// `metadata`: written as `{tag: <this>}` when set.
    pub metadata: Option<String>,
}

/// One `YamlRateLimit`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RateLimit {
    /// `requests_per_unit` (absent: 0).
    pub requests_per_unit: Option<u32>,
    /// `unit`, as written (any case; absent: empty).
    pub unit: Option<String>,
    /// `unlimited`.
    pub unlimited: bool,
    /// `name` (empty: none).
    pub name: String,
    /// `replaces`: the names.
    pub replaces: Vec<String>,
}

/// A unit's number in the protocol (`RateLimitResponse.RateLimit.Unit`),
/// from its name in any case; `None` for `UNKNOWN` and anything else.
pub fn unit_number(name: &str) -> Option<i32> {
    Some(match name.to_ascii_uppercase().as_str() {
        "SECOND" => 1,
        "MINUTE" => 2,
        "HOUR" => 3,
        "DAY" => 4,
        "MONTH" => 5,
        "YEAR" => 6,
        "WEEK" => 7,
        _ => return None,
    })
}

/// `UnitToDivider`: a unit's seconds; `None` where that function panics.
pub fn unit_seconds(unit: i32) -> Option<i64> {
    Some(match unit {
        1 => 1,
        2 => 60,
        3 => 3600,
        4 => 86_400,
        7 => 604_800,
        5 => 2_592_000,
        6 => 31_536_000,
        _ => return None,
    })
}

fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl File {
    /// The file as YAML.
    pub fn to_yaml(&self) -> String {
        let mut out = format!("domain: {}\ndescriptors:\n", quoted(&self.domain));
        if self.descriptors.is_empty() {
            out = format!("domain: {}\ndescriptors: []\n", quoted(&self.domain));
        }
        for n in &self.descriptors {
            n.write(&mut out, 1);
        }
        out
    }
}

impl Node {
    fn write(&self, out: &mut String, depth: usize) {
        let pad = "  ".repeat(depth);
        let _ = writeln!(out, "{pad}- key: {}", quoted(&self.key));
        let field = |out: &mut String, k: &str, v: &str| {
            let _ = writeln!(out, "{pad}  {k}: {v}");
        };
        if !self.value.is_empty() {
            field(out, "value", &quoted(&self.value));
        }
        for (k, on) in [
            ("shadow_mode", self.shadow_mode),
            ("quota_mode", self.quota_mode),
            ("detailed_metric", self.detailed_metric),
            ("value_to_metric", self.value_to_metric),
            ("share_threshold", self.share_threshold),
        ] {
            if on {
                field(out, k, "true");
            }
        }
        if let Some(m) = &self.metadata {
            field(out, "metadata", &format!("{{tag: {}}}", quoted(m)));
        }
        if let Some(rl) = &self.rate_limit {
            field(out, "rate_limit", "");
            let pad = format!("{pad}    ");
            if let Some(u) = &rl.unit {
                let _ = writeln!(out, "{pad}unit: {}", quoted(u));
            }
            if let Some(n) = rl.requests_per_unit {
                let _ = writeln!(out, "{pad}requests_per_unit: {n}");
            }
            if rl.unlimited {
                let _ = writeln!(out, "{pad}unlimited: true");
            }
            if !rl.name.is_empty() {
                let _ = writeln!(out, "{pad}name: {}", quoted(&rl.name));
            }
            if !rl.replaces.is_empty() {
                let _ = writeln!(out, "{pad}replaces:");
                for r in &rl.replaces {
                    let _ = writeln!(out, "{pad}  - name: {}", quoted(r));
                }
            }
        }
        if !self.descriptors.is_empty() {
            field(out, "descriptors", "");
            for n in &self.descriptors {
                n.write(out, depth + 2);
            }
        }
    }
}

/// A loaded limit (`config.RateLimit`).
#[derive(Clone, Debug, PartialEq)]
pub struct Limit {
    /// `FullKey`: the stats key (`domain.key_value.key...`).
    pub full_key: String,
    /// `Limit.RequestsPerUnit`.
    pub requests_per_unit: u32,
    /// `Limit.Unit` (0 when unlimited without a unit).
    pub unit: i32,
    /// `Limit.Name`.
    pub name: String,
    /// `Unlimited`.
    pub unlimited: bool,
    /// `ShadowMode`.
    pub shadow_mode: bool,
    /// `QuotaMode`.
    pub quota_mode: bool,
    /// `Replaces`.
    pub replaces: Vec<String>,
    /// `ShareThresholdKeyPattern`: per entry index, the pattern (without
    /// its `key_` prefix) replacing the value in the cache key.
    pub share_threshold: Vec<Option<String>>,
}

/// A node of the loaded tree (`rateLimitDescriptor`).
#[derive(Clone, Debug, Default)]
struct Tree {
    descriptors: HashMap<String, Tree>,
    limit: Option<Limit>,
    /// Every wildcard `finalKey` of this level, in file order, split on `*`.
    wildcards: Vec<(String, Vec<String>)>,
    share_threshold: bool,
    wildcard_pattern: String,
}

/// The loaded configuration (`rateLimitConfigImpl`).
#[derive(Clone, Debug, Default)]
pub struct Config {
    domains: HashMap<String, Tree>,
}

/// A configuration error (`RateLimitConfigError`), as its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl Config {
    /// `NewRateLimitConfigImpl` of `files` (merging files of one domain
    /// when `merge`).
    pub fn load(files: &[File], merge: bool) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        for f in files {
            if f.domain.is_empty() {
                return Err(ConfigError("config file cannot have empty domain".into()));
            }
            if c.domains.contains_key(&f.domain) && !merge {
                return Err(ConfigError(format!(
                    "duplicate domain '{}' in config file",
                    f.domain
                )));
            }
            let tree = c.domains.entry(f.domain.clone()).or_default();
            load(tree, &format!("{}.", f.domain), &f.descriptors)?;
        }
        Ok(c)
    }

    /// Whether `domain` is configured.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// `GetLimit` for a descriptor without a limit override, in a known
    /// domain (the caller handles overrides and unknown domains).
    pub fn get_limit(&self, domain: &str, entries: &[(String, String)]) -> Option<Limit> {
        let root = self.domains.get(domain)?;
        let mut map = &root.descriptors;
        let mut prev = root;
        let mut found: Option<Limit> = None;
        let mut share: HashMap<usize, String> = HashMap::new();
        for (i, (key, value)) in entries.iter().enumerate() {
            let mut final_key = format!("{key}_{value}");
            let mut next = map.get(&final_key);
            let mut matched_wildcard = String::new();
            if next.is_none() && !prev.wildcards.is_empty() {
                for (pattern, parts) in &prev.wildcards {
                    if wildcard_match(parts, &final_key) {
                        next = map.get(pattern);
                        matched_wildcard = pattern.clone();
                        break;
                    }
                }
            }
            if next.is_none() {
                final_key = key.clone();
                next = map.get(&final_key);
            }
            if let Some(n) = next
                && !matched_wildcard.is_empty()
                && n.share_threshold
                && !n.wildcard_pattern.is_empty()
            {
                let v = n
                    .wildcard_pattern
                    .strip_prefix(&format!("{key}_"))
                    .unwrap_or(&n.wildcard_pattern);
                share.insert(i, v.to_owned());
            }
            if let Some(n) = next
                && let Some(l) = &n.limit
                && i == entries.len() - 1
            {
                let mut l = l.clone();
                if !share.is_empty() {
                    l.share_threshold = vec![None; entries.len()];
                    for (&idx, p) in &share {
                        l.share_threshold[idx] = Some(p.clone());
                    }
                }
                found = Some(l);
            }
            match next {
                Some(n) if !n.descriptors.is_empty() => {
                    map = &n.descriptors;
                    prev = n;
                }
                _ => break,
            }
        }
        found
    }
}

/// `wildcardMatch`: `value` against a pattern split on `*`.
fn wildcard_match(parts: &[String], value: &str) -> bool {
    if parts.len() == 1 {
        return parts[0] == value;
    }
    let first = &parts[0];
    let last = &parts[parts.len() - 1];
    if !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
        return false;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed {
        return false;
    }
    let mut remaining = &value[first.len()..];
    if !last.is_empty() {
        remaining = &remaining[..remaining.len() - last.len()];
    }
    for part in &parts[1..parts.len() - 1] {
        match remaining.find(part.as_str()) {
            Some(i) => remaining = &remaining[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// `loadDescriptors`.
fn load(tree: &mut Tree, parent: &str, nodes: &[Node]) -> Result<(), ConfigError> {
    for n in nodes {
        if n.key.is_empty() {
            return Err(ConfigError("descriptor has empty key".into()));
        }
        let mut final_key = n.key.clone();
        if !n.value.is_empty() {
            final_key = format!("{}_{}", n.key, n.value);
        }
        let new_parent = format!("{parent}{final_key}");
        if tree.descriptors.contains_key(&final_key) {
            return Err(ConfigError(format!(
                "duplicate descriptor composite key '{new_parent}'"
            )));
        }
        let limit = match &n.rate_limit {
            Some(rl) => Some(load_limit(n, rl, &new_parent)?),
            None => None,
        };
        if n.share_threshold && !final_key.contains('*') {
            return Err(ConfigError(format!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}'"
            )));
        }
        if final_key.contains('*') {
            tree.wildcards.push((
                final_key.clone(),
                final_key.split('*').map(str::to_owned).collect(),
            ));
        }
        let mut child = Tree {
            limit,
            share_threshold: n.share_threshold,
            wildcard_pattern: if n.share_threshold {
                final_key.clone()
            } else {
                String::new()
            },
            ..Tree::default()
        };
        load(&mut child, &format!("{new_parent}."), &n.descriptors)?;
        tree.descriptors.insert(final_key, child);
    }
    Ok(())
}

/// The limit of node `n` (at `full_key`), its `rate_limit` checked as
/// `loadDescriptors` checks it.
fn load_limit(n: &Node, rl: &RateLimit, full_key: &str) -> Result<Limit, ConfigError> {
    let unit = rl.unit.as_deref().and_then(unit_number);
    if rl.unlimited {
        if unit.is_some() {
            return Err(ConfigError(
                "should not specify rate limit unit when unlimited".into(),
            ));
        }
    } else if unit.is_none() {
        return Err(ConfigError(format!(
            "invalid rate limit unit '{}'",
            rl.unit.as_deref().unwrap_or("")
        )));
    }
    for r in &rl.replaces {
        if r.is_empty() {
            return Err(ConfigError(
                "should not have an empty replaces entry".into(),
            ));
        }
        if *r == rl.name {
            return Err(ConfigError(
                "replaces should not contain name of same descriptor".into(),
            ));
        }
    }
    Ok(Limit {
        full_key: full_key.to_owned(),
        requests_per_unit: rl.requests_per_unit.unwrap_or(0),
        unit: unit.unwrap_or(0),
        name: rl.name.clone(),
        unlimited: rl.unlimited,
        shadow_mode: n.shadow_mode,
        quota_mode: n.quota_mode,
        replaces: rl.replaces.clone(),
        share_threshold: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_the_reference_splits_them() {
        let parts = |p: &str| p.split('*').map(str::to_owned).collect::<Vec<_>>();
        for (p, v, want) in [
            ("k_foo*", "k_foo", true),
            ("k_foo*", "k_foobar", true),
            ("k_foo*", "k_fo", false),
            ("k_*bar", "k_bar", true),
            ("k_a*b*b", "k_abb", true),
            ("k_a*b*b", "k_ab", false),
            ("k_*", "k_", true),
            ("k_a*c", "k_ab", false),
        ] {
            assert_eq!(wildcard_match(&parts(p), v), want, "{p} ~ {v}");
        }
    }
}
