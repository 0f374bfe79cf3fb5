//! A cost known only once the response is (the tokens an LLM used, the
//! bytes sent): where it is read — a response header or trailer — its cap,
//! and what is charged when it cannot be read. The layer admits a request
//! while its limits are not in debt, and charges this cost after, forced
//! (see the [layer](crate::layer) docs).

use floodgate_policy::error::Errors;
use floodgate_policy::yaml::Node;
use http::HeaderName;

use super::config::{Action, in_bounds};
use crate::read::{deny_unknown, each_string, header_name};

/// The largest `cap` of a response cost.
pub const MAX_RESPONSE_COST: u64 = 1_000_000_000_000;

const KEYS: &[&str] = &["header", "trailer", "cap", "default", "keys"];

/// Where a response's cost is read, its cap, and the cost of a response
/// without a valid value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseCost {
    /// The response header or trailer holding a decimal integer.
    pub field: CostField,
    /// The most one response is charged (1 to [`MAX_RESPONSE_COST`]): a
    /// larger value, or a body that never ends, is charged this.
    pub cap: u64,
    /// What a response is charged when its value is absent or malformed
    /// (from 0 to `cap`; by default `cap`).
    pub default: u64,
    /// The descriptors carrying the cost: those whose first entry's key is
    /// one of these (empty: every descriptor). The others are decided as
    /// any request's, and charged nothing after.
    pub keys: Vec<String>,
}

/// The response field holding the cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CostField {
    /// A header of the response, read when its head is seen.
    Header(HeaderName),
    /// A trailer, read when the body ends (HTTP/2 trailers, HTTP/1.1
    /// chunked trailers, gRPC's).
    Trailer(HeaderName),
}

/// How a response's cost was found; [`label`](Self::label) is the
/// `result` of `floodgate_http_response_costs_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostRead {
    /// A decimal integer from 0 to the cap.
    Read(u64),
    /// A decimal integer above the cap (however long).
    Capped,
    /// No such header or trailer.
    Missing,
    /// Not a decimal integer (empty, signed, fractional, not ASCII).
    Invalid,
    /// The body did not end (the client went away, the upstream failed):
    /// its trailers were never seen.
    Unfinished,
}

impl CostRead {
    /// What is charged for it under `c`.
    pub fn cost(self, c: &ResponseCost) -> u64 {
        match self {
            CostRead::Read(n) => n,
            CostRead::Capped | CostRead::Unfinished => c.cap,
            CostRead::Missing | CostRead::Invalid => c.default,
        }
    }

    /// The names of metrics, in the order of [`index`](Self::index).
    pub const LABELS: [&'static str; 5] = ["read", "capped", "missing", "invalid", "unfinished"];

    /// Its place in [`LABELS`](Self::LABELS).
    pub fn index(self) -> usize {
        match self {
            CostRead::Read(_) => 0,
            CostRead::Capped => 1,
            CostRead::Missing => 2,
            CostRead::Invalid => 3,
            CostRead::Unfinished => 4,
        }
    }

    /// Its name in metrics: `read`, `capped`, `missing`, `invalid` or
    /// `unfinished`.
    pub fn label(self) -> &'static str {
        Self::LABELS[self.index()]
    }
}

/// The cost a response's field holding `value` (none: absent) tells under
/// `c`.
///
/// ```
/// use floodgate_http::identity::{CostField, CostRead, ResponseCost, response_cost_of};
///
/// let c = ResponseCost {
///     field: CostField::Header(http::HeaderName::from_static("x-tokens-used")),
///     cap: 1000,
///     default: 0,
///     keys: Vec::new(),
/// };
/// assert_eq!(response_cost_of(Some(b" 250 "), &c), CostRead::Read(250));
/// assert_eq!(response_cost_of(Some(b"0"), &c), CostRead::Read(0));
/// assert_eq!(response_cost_of(Some(b"1001"), &c), CostRead::Capped);
/// assert_eq!(response_cost_of(Some(b"-5"), &c), CostRead::Invalid);
/// assert_eq!(response_cost_of(None, &c), CostRead::Missing);
/// ```
pub fn response_cost_of(value: Option<&[u8]>, c: &ResponseCost) -> CostRead {
    let Some(digits) = value.map(<[u8]>::trim_ascii) else {
        return CostRead::Missing;
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return CostRead::Invalid;
    }
    let mut n: u64 = 0;
    for &d in digits {
        n = n.saturating_mul(10).saturating_add(u64::from(d - b'0'));
    }
    if n > c.cap {
        CostRead::Capped
    } else {
        CostRead::Read(n)
    }
}

impl ResponseCost {
    /// Its field's name.
    pub fn name(&self) -> &HeaderName {
        match &self.field {
            CostField::Header(n) | CostField::Trailer(n) => n,
        }
    }

    /// Whether the cost is read from the trailers.
    pub fn in_trailers(&self) -> bool {
        matches!(self.field, CostField::Trailer(_))
    }

    /// Whether the descriptor of `actions` carries the cost.
    pub fn carried_by(&self, actions: &[Action]) -> bool {
        self.keys.is_empty() || actions.first().is_some_and(|a| self.keys.contains(&a.key))
    }

    /// Checks the bounds of `cap` and `default`, and that each of `keys`
    /// starts one of `descriptors`.
    pub(crate) fn validate(&self, descriptors: &[Vec<Action>]) -> Result<(), String> {
        in_bounds("response_cost cap", self.cap, 1, MAX_RESPONSE_COST)
            .and_then(|cap| in_bounds("response_cost default", self.default, 0, cap))?;
        match self.keys.iter().find(|k| !starts_one(k, descriptors)) {
            Some(k) => Err(no_descriptor(k)),
            None => Ok(()),
        }
    }
}

/// Whether a descriptor's first entry is of `key`.
fn starts_one(key: &str, descriptors: &[Vec<Action>]) -> bool {
    descriptors
        .iter()
        .any(|d| d.first().is_some_and(|a| a.key == key))
}

fn no_descriptor(key: &str) -> String {
    format!("response_cost keys: no descriptor starts with an entry of `{key}`")
}

/// Reports each of `keys` of `response_cost` (its node `n`) that starts
/// none of `descriptors`, where it is written.
pub(crate) fn check_keys(n: Node<'_>, descriptors: &[Vec<Action>], errors: &mut Errors) {
    let Some(list) = n.map().ok().and_then(|m| m.get("keys")) else {
        return;
    };
    for item in list.list().unwrap_or_default() {
        if let Ok(key) = item.str()
            && !starts_one(key, descriptors)
        {
            errors.push(item.error(no_descriptor(key)));
        }
    }
}

/// Reads `response_cost: {header | trailer: NAME, cap, default}`.
pub(crate) fn read_response_cost(n: Node<'_>, errors: &mut Errors) -> Option<ResponseCost> {
    let map = errors.take(n.map())?;
    let field = match (map.get("header"), map.get("trailer")) {
        (Some(h), None) => errors.take(header_name(h)).map(CostField::Header),
        (None, Some(t)) => errors.take(header_name(t)).map(CostField::Trailer),
        (Some(_), Some(t)) => {
            errors.push(t.error("response_cost takes either 'header' or 'trailer', not both"));
            None
        }
        (None, None) => {
            errors.push(n.error("response_cost needs 'header' or 'trailer'"));
            None
        }
    };
    let cap = errors.take(map.required("cap").and_then(|m| {
        let cap = m.u64()?;
        in_bounds("response_cost cap", cap, 1, MAX_RESPONSE_COST).map_err(|e| m.error(e))
    }));
    let mut default = cap;
    if let (Some(d), Some(cap)) = (map.get("default"), cap) {
        let value = d
            .u64()
            .and_then(|v| in_bounds("response_cost default", v, 0, cap).map_err(|e| d.error(e)));
        default = errors.take(value);
    }
    let mut keys = Vec::new();
    if let Some(list) = map.get("keys") {
        each_string(list, errors, |key, _, _| keys.push(key.to_owned()));
    }
    deny_unknown(&map, KEYS, errors);
    Some(ResponseCost {
        field: field?,
        cap: cap?,
        default: default?,
        keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        let c = ResponseCost {
            field: CostField::Trailer(HeaderName::from_static("x-tokens-used")),
            cap: 50,
            default: 7,
            keys: Vec::new(),
        };
        let read = |s: &str| response_cost_of(Some(s.as_bytes()), &c);
        assert_eq!(read("50"), CostRead::Read(50));
        assert_eq!(read("007"), CostRead::Read(7));
        assert_eq!(read("51"), CostRead::Capped);
        assert_eq!(read(&"9".repeat(1000)), CostRead::Capped);
        for bad in ["", " ", "+5", "-5", "5.0", "1e3", "５", "0x10"] {
            assert_eq!(read(bad), CostRead::Invalid, "{bad:?}");
        }
        assert_eq!(CostRead::Capped.cost(&c), 50);
        assert_eq!(CostRead::Unfinished.cost(&c), 50);
        assert_eq!(CostRead::Invalid.cost(&c), 7);
        assert_eq!(CostRead::Missing.cost(&c), 7);
    }
}
