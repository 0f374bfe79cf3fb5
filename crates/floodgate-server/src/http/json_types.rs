//! Descriptors as JSON: proto3-JSON field names (`hitsAddend` or
//! `hits_addend`, `isNegativeHits` or `is_negative_hits`), 64-bit numbers as numbers or strings, units by name or
//! number; strings are borrowed from the request body.

use std::borrow::Cow;
use std::fmt;

use floodgate_policy::Descriptor;
use floodgate_policy::engine::LimitOverride;
use floodgate_policy::unit::Unit;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// One entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Entry<'a> {
    /// The key.
    #[serde(borrow)]
    pub key: Cow<'a, str>,
    /// The value.
    #[serde(borrow, default)]
    pub value: Cow<'a, str>,
}

/// A limit override.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Override {
    /// Requests per unit.
    #[serde(
        rename = "requestsPerUnit",
        alias = "requests_per_unit",
        default,
        deserialize_with = "u32_num"
    )]
    pub requests_per_unit: u32,
    /// The unit's protocol number (checked by the engine).
    #[serde(deserialize_with = "unit")]
    pub unit: i32,
}

/// One descriptor.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JsonDescriptor<'a> {
    /// The entries: a list of `{key, value}`, or (in the check API) an
    /// object whose members are the entries in order.
    #[serde(borrow, deserialize_with = "entries")]
    pub entries: Vec<Entry<'a>>,
    /// A limit override.
    #[serde(default)]
    pub limit: Option<Override>,
    /// The descriptor's own hits addend (0: check without charging).
    #[serde(
        rename = "hitsAddend",
        alias = "hits_addend",
        alias = "hits",
        default,
        deserialize_with = "opt_u64_num"
    )]
    pub hits_addend: Option<u64>,
    /// The hits are given back instead of charged (negative hits).
    #[serde(rename = "isNegativeHits", alias = "is_negative_hits", default)]
    pub is_negative_hits: bool,
}

impl Descriptor for JsonDescriptor<'_> {
    fn len(&self) -> usize {
        self.entries.len()
    }
    fn entry(&self, i: usize) -> (&str, &str) {
        let e = &self.entries[i];
        (&e.key, &e.value)
    }
    fn limit_override(&self) -> Option<LimitOverride> {
        self.limit.as_ref().map(|l| LimitOverride {
            requests_per_unit: l.requests_per_unit,
            unit_number: l.unit,
        })
    }
    fn hits_addend(&self) -> Option<u64> {
        self.hits_addend
    }
    fn is_negative_hits(&self) -> bool {
        self.is_negative_hits
    }
}

struct NumVisitor;

impl<'de> Visitor<'de> for NumVisitor {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a non-negative integer (as a number or a string)")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v)
            .map_err(|_| E::custom(format!("expected a non-negative integer, found {v}")))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        if v.fract() == 0.0 && (0.0..1.8e19).contains(&v) {
            Ok(v as u64)
        } else {
            Err(E::custom(format!(
                "expected a non-negative integer, found {v}"
            )))
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        v.trim().parse().map_err(|_| {
            E::custom(format!(
                "expected a non-negative integer, found \"{}\"",
                excerpt(v)
            ))
        })
    }
}

fn excerpt(s: &str) -> String {
    s.chars().take(40).collect()
}

/// A u64 as a number or a string (proto3 JSON).
struct Num(u64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumVisitor).map(Num)
    }
}

/// A u32 as a number or a string.
pub(super) fn u32_num<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    to_u32(Num::deserialize(d)?.0)
}

fn to_u32<E: de::Error>(v: u64) -> Result<u32, E> {
    u32::try_from(v).map_err(|_| E::custom(format!("{v} is larger than 4294967295")))
}

/// An optional u64 (null: absent).
pub(super) fn opt_u64_num<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Option::<Num>::deserialize(d)?.map(|n| n.0))
}

/// An optional u32 (null: absent).
pub(super) fn opt_u32_num<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    opt_u64_num(d)?.map(to_u32).transpose()
}

/// A unit by name (`MINUTE`, any case) or protocol number (an unknown
/// number is the engine's to refuse, as over gRPC).
pub(super) fn unit<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = i32;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a unit: SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR, or its number")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<i32, E> {
            i32::try_from(v).map_err(|_| E::custom(format!("unknown unit {v}")))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<i32, E> {
            i32::try_from(v).map_err(|_| E::custom(format!("unknown unit {v}")))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<i32, E> {
            Unit::parse(v)
                .map(|u| u as i32)
                .ok_or_else(|| E::custom(format!("unknown unit \"{}\"", excerpt(v))))
        }
    }
    d.deserialize_any(V)
}

/// Entries as a list of `{key, value}` or an object (members in order).
fn entries<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Vec<Entry<'a>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<Entry<'de>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of {\"key\": ..., \"value\": ...} entries")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(2).min(64));
            while let Some(e) = seq.next_element::<Entry<'de>>()? {
                out.push(e);
            }
            Ok(out)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some((k, v)) = map.next_entry::<Cow<'de, str>, Cow<'de, str>>()? {
                out.push(Entry { key: k, value: v });
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}

#[cfg(test)]
mod tests {
    use super::JsonDescriptor;
    use floodgate_policy::Descriptor;

    #[test]
    fn negative_hits_by_either_name() {
        for text in [
            r#"{"entries":[{"key":"k","value":"v"}],"hitsAddend":"3","isNegativeHits":true}"#,
            r#"{"entries":[{"key":"k","value":"v"}],"hits_addend":3,"is_negative_hits":true}"#,
        ] {
            let d: JsonDescriptor<'_> = serde_json::from_str(text).unwrap();
            assert_eq!((d.hits_addend(), d.is_negative_hits()), (Some(3), true));
        }
        let d: JsonDescriptor<'_> = serde_json::from_str(r#"{"entries":[]}"#).unwrap();
        assert!(!d.is_negative_hits());
    }
}
