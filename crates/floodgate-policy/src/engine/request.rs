//! The request side: a domain and descriptors, borrowed from whatever the
//! caller decoded (gRPC messages, JSON, HTTP requests) — never copied.

use crate::unit::Unit;

/// A limit sent with a descriptor, replacing the configured one (Envoy's
/// `RateLimitDescriptor.limit`), as the caller sent it: the unit is the
/// protocol's number, which the engine checks (an unknown unit makes the
/// request an invalid argument, whatever carried it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitOverride {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit's protocol number ([`Unit`]'s discriminant; `0`, Envoy's
    /// `UNKNOWN`, and numbers of no unit are refused).
    pub unit_number: i32,
}

impl LimitOverride {
    /// `requests_per_unit` per `unit`.
    pub fn new(requests_per_unit: u32, unit: Unit) -> Self {
        LimitOverride {
            requests_per_unit,
            unit_number: unit as i32,
        }
    }

    /// The unit, when the number is one.
    pub fn unit(&self) -> Option<Unit> {
        Unit::from_number(self.unit_number)
    }
}

/// One descriptor: ordered entries, an optional limit override, an optional
/// hits addend.
pub trait Descriptor {
    /// Number of entries.
    fn len(&self) -> usize;
    /// Entry `i`: (key, value).
    fn entry(&self, i: usize) -> (&str, &str);
    /// The limit override, if any.
    fn limit_override(&self) -> Option<LimitOverride> {
        None
    }
    /// The descriptor's own hits addend; `Some(0)` checks without charging.
    fn hits_addend(&self) -> Option<u64> {
        None
    }
    /// Whether the hits are given back instead of charged (Envoy's
    /// `is_negative_hits`): the counters fall by them, never below none,
    /// and the descriptor is answered OK.
    fn is_negative_hits(&self) -> bool {
        false
    }
    /// True when there are no entries.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A descriptor owning its entries (for tests, the JSON API and callers
/// that build descriptors themselves).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnedDescriptor {
    /// (key, value) entries.
    pub entries: Vec<(String, String)>,
    /// Limit override.
    pub limit: Option<LimitOverride>,
    /// Hits addend.
    pub hits_addend: Option<u64>,
    /// Whether the hits are given back (Envoy's `is_negative_hits`).
    pub negative_hits: bool,
}

impl OwnedDescriptor {
    /// A descriptor of `entries`.
    pub fn new<K: Into<String>, V: Into<String>>(
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        OwnedDescriptor {
            entries: entries
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            ..Default::default()
        }
    }

    /// With a hits addend.
    pub fn hits(mut self, hits: u64) -> Self {
        self.hits_addend = Some(hits);
        self
    }

    /// With its hits given back instead of charged (negative hits).
    pub fn negative(mut self) -> Self {
        self.negative_hits = true;
        self
    }

    /// With a limit override.
    pub fn limit(mut self, requests_per_unit: u32, unit: Unit) -> Self {
        self.limit = Some(LimitOverride::new(requests_per_unit, unit));
        self
    }
}

impl Descriptor for OwnedDescriptor {
    fn len(&self) -> usize {
        self.entries.len()
    }
    fn entry(&self, i: usize) -> (&str, &str) {
        let (k, v) = &self.entries[i];
        (k, v)
    }
    fn limit_override(&self) -> Option<LimitOverride> {
        self.limit
    }
    fn hits_addend(&self) -> Option<u64> {
        self.hits_addend
    }
    fn is_negative_hits(&self) -> bool {
        self.negative_hits
    }
}

impl<D: Descriptor + ?Sized> Descriptor for &D {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn entry(&self, i: usize) -> (&str, &str) {
        (**self).entry(i)
    }
    fn limit_override(&self) -> Option<LimitOverride> {
        (**self).limit_override()
    }
    fn hits_addend(&self) -> Option<u64> {
        (**self).hits_addend()
    }
    fn is_negative_hits(&self) -> bool {
        (**self).is_negative_hits()
    }
}
