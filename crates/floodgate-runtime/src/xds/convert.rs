//! A `RateLimitConfig` resource written out as the envoyproxy/ratelimit
//! file it stands for (as that service converts it before loading: its
//! `src/config/config_xds.go`), so that the one reader of those files
//! reads it (JSON, which the YAML reader takes): same keys, same defaults,
//! same errors.

use prost_types::value::Kind;
use serde_json::{Map, Value, json};

use crate::proto::rls_config::{RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit};

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
