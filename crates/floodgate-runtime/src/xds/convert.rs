//! A `RateLimitConfig` resource written out as the envoyproxy/ratelimit
//! file it stands for (as that service converts it before loading: its
//! `src/config/config_xds.go`), so that the one reader of those files
//! reads it (JSON, which the YAML reader takes): same keys, same defaults,
//! same errors.

use prost_types::value::Kind;
use serde_json::{Map, Value, json};

use crate::host::proto::rls_config::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};

/// `config` as the text of an envoyproxy/ratelimit file.
pub(super) fn to_text(config: &RateLimitConfig) -> String {
    let file = json!({
        "domain": config.domain,
        "descriptors": config.descriptors.iter().map(descriptor).collect::<Vec<_>>(),
    });
    file.to_string()
}

/// One descriptor: its fields that are set (a field at its protobuf
/// default is the file's key left out, which reads the same).
fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut out = Map::new();
    out.insert("key".into(), d.key.clone().into());
    if !d.value.is_empty() {
        out.insert("value".into(), d.value.clone().into());
    }
    if let Some(policy) = &d.rate_limit {
        out.insert("rate_limit".into(), rate_limit(policy));
    }
    if !d.descriptors.is_empty() {
        let nested = d.descriptors.iter().map(descriptor).collect();
        out.insert("descriptors".into(), Value::Array(nested));
    }
    for (key, set) in [
        ("shadow_mode", d.shadow_mode),
        ("detailed_metric", d.detailed_metric),
        ("quota_mode", d.quota_mode),
    ] {
        if set {
            out.insert(key.into(), true.into());
        }
    }
    if let Some(metadata) = &d.metadata {
        out.insert("metadata".into(), structure(metadata));
    }
    Value::Object(out)
}

/// A `rate_limit:`; the unit by its protobuf name (`UNKNOWN`, or the
/// number of a unit that has none, is refused by the reader as the
/// service refuses it).
fn rate_limit(p: &RateLimitPolicy) -> Value {
    let unit = RateLimitUnit::try_from(p.unit)
        .map_or_else(|_| p.unit.to_string(), |u| u.as_str_name().to_owned());
    let mut out = Map::new();
    out.insert("unit".into(), unit.into());
    out.insert("requests_per_unit".into(), p.requests_per_unit.into());
    if p.unlimited {
        out.insert("unlimited".into(), true.into());
    }
    if !p.name.is_empty() {
        out.insert("name".into(), p.name.clone().into());
    }
    if !p.replaces.is_empty() {
        let replaces = p.replaces.iter().map(|r| json!({"name": r.name})).collect();
        out.insert("replaces".into(), Value::Array(replaces));
    }
    Value::Object(out)
}

/// A `google.protobuf.Struct` as JSON.
fn structure(s: &prost_types::Struct) -> Value {
    let fields = s.fields.iter().map(|(k, v)| (k.clone(), value(v)));
    Value::Object(fields.collect())
}

fn value(v: &prost_types::Value) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => s.clone().into(),
        Some(Kind::BoolValue(b)) => (*b).into(),
        Some(Kind::StructValue(s)) => structure(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value).collect()),
    }
}

#[cfg(test)]
mod tests {
    use floodgate_policy::read::{LoadOptions, load_envoy_texts, load_str};

    use super::*;
    use crate::host::proto::rls_config::{RateLimitReplace, RateLimitUnit};

    /// `{:?}` of `v` without its locations (`at: Location { … }`).
    fn without_locations(v: &impl std::fmt::Debug) -> String {
        let text = format!("{v:?}");
        let mut out = String::new();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("at: Location {") {
            out.push_str(&rest[..i]);
            let mut depth = 0;
            let end = rest[i..].char_indices().find_map(|(j, c)| {
                depth += i32::from(c == '{') - i32::from(c == '}');
                (c == '}' && depth == 0).then_some(i + j + 1)
            });
            rest = &rest[end.unwrap()..];
        }
        out + rest
    }

    fn node(key: &str, value: &str) -> RateLimitDescriptor {
        RateLimitDescriptor {
            key: key.into(),
            value: value.into(),
            ..Default::default()
        }
    }

    fn policy(unit: RateLimitUnit, n: u32, name: &str) -> Option<RateLimitPolicy> {
        Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit: n,
            name: name.into(),
            ..Default::default()
        })
    }

    /// A resource reads as the envoyproxy/ratelimit file it stands for:
    /// nested descriptors, values, units, names, `replaces`, shadow and
    /// quota modes, `unlimited`, metadata.
    #[test]
    fn a_resource_reads_as_its_file() {
        let mut user = node("user", "");
        user.rate_limit = policy(RateLimitUnit::Minute, 10, "per-user");
        user.shadow_mode = true;
        let mut vip = node("user", "vip");
        vip.rate_limit = policy(RateLimitUnit::Hour, 100, "vip");
        if let Some(p) = vip.rate_limit.as_mut() {
            p.replaces = vec![RateLimitReplace {
                name: "per-user".into(),
            }];
        }
        vip.quota_mode = true;
        let mut open = node("path", "/health");
        open.rate_limit = Some(RateLimitPolicy {
            unlimited: true,
            ..Default::default()
        });
        open.metadata = Some(prost_types::Struct::default());
        let mut tenant = node("tenant", "");
        tenant.descriptors = vec![user, vip];
        let config = RateLimitConfig {
            name: "r".into(),
            domain: "api".into(),
            descriptors: vec![tenant, open],
        };
        let file = "
domain: api
descriptors:
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10, name: per-user}
        shadow_mode: true
      - key: user
        value: vip
        rate_limit: {unit: hour, requests_per_unit: 100, name: vip, replaces: [{name: per-user}]}
        quota_mode: true
  - key: path
    value: /health
    rate_limit: {unlimited: true}
    metadata: {}
";
        let options = LoadOptions::default();
        let from_file = load_str("api.yaml", file, &options).unwrap();
        let texts = [("xds:r".to_owned(), to_text(&config))];
        let from_resource = load_envoy_texts(&texts, &options).unwrap().spec;
        assert_eq!(
            without_locations(&from_resource.domains),
            without_locations(&from_file.domains)
        );
    }

    /// A rate limit without a unit is refused with envoyproxy/ratelimit's
    /// message, as in a file.
    #[test]
    fn a_unit_left_unknown_is_refused() {
        let mut user = node("user", "");
        user.rate_limit = policy(RateLimitUnit::Unknown, 1, "");
        let config = RateLimitConfig {
            name: "r".into(),
            domain: "api".into(),
            descriptors: vec![user],
        };
        let texts = [("xds:r".to_owned(), to_text(&config))];
        let err = load_envoy_texts(&texts, &LoadOptions::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("invalid rate limit unit 'UNKNOWN'"),
            "{err}"
        );
    }
}
