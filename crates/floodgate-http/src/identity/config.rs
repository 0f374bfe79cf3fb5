//! The identity configuration as plain data: what the YAML `http:` section
//! reads into, and what code can build directly; its checks and errors.

use std::net::IpAddr;

use http::HeaderName;

use super::hash::MIN_VALUE_LEN;
use super::response_cost::ResponseCost;

/// Default longest value of an entry read from a request, in bytes.
pub const DEFAULT_MAX_VALUE_LEN: usize = 256;
/// Largest `max_value_len` (the engine's limit on an entry).
pub const MAX_VALUE_LEN: usize = 16 * 1024;
/// Most trusted hops.
pub const MAX_TRUSTED_HOPS: u8 = 16;
/// Most descriptors.
pub const MAX_DESCRIPTORS: usize = 64;
/// Most actions in one descriptor (the engine's limit on entries).
pub const MAX_ACTIONS: usize = floodgate_policy::compile::MAX_DEPTH;
/// Largest cost.
pub const MAX_COST: u32 = 1_000_000;

/// A problem in an [`IdentityConfig`] built in code (a YAML configuration
/// reports the same problems as [`floodgate_policy::ConfigErrors`], with
/// positions).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// A malformed or duplicate route template.
    #[error("invalid route template `{template}`: {reason}")]
    Route {
        /// The template.
        template: String,
        /// Why.
        reason: String,
    },
    /// A problem with the client address settings.
    #[error("client_ip: {0}")]
    ClientIp(String),
    /// A problem with the cost settings (the message names them).
    #[error("{0}")]
    Cost(String),
    /// A problem with descriptor `index` (from 0).
    #[error("descriptor {index}: {reason}")]
    Descriptor {
        /// Which descriptor.
        index: usize,
        /// Why.
        reason: String,
    },
    /// Any other problem.
    #[error("{0}")]
    Invalid(String),
}

/// How a request is turned into descriptors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityConfig {
    /// The policy domain the descriptors are evaluated in.
    pub domain: String,
    /// How the client address is found.
    pub client_ip: ClientIpConfig,
    /// Route templates for `route` actions, e.g. `/users/{id}`.
    pub routes: Vec<String>,
    /// Where a request's weighted cost comes from (none: every request
    /// costs 1).
    pub cost: Option<CostConfig>,
    /// Where the cost known only once the response is comes from (none:
    /// nothing is charged after the response). With it and no `cost`,
    /// a request is admitted by a check that charges nothing.
    pub response_cost: Option<ResponseCost>,
    /// Longest value taken from a request as it is, in bytes; longer values
    /// (and values that are not UTF-8) are shortened to a prefix, `~` and a
    /// hash of the whole value.
    pub max_value_len: usize,
    /// The descriptors, each a list of actions producing one entry each.
    pub descriptors: Vec<Vec<Action>>,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        IdentityConfig {
            domain: String::new(),
            client_ip: ClientIpConfig::default(),
            routes: Vec::new(),
            cost: None,
            response_cost: None,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            descriptors: Vec::new(),
        }
    }
}

/// `X-Real-IP`: one address, set by the proxy in front.
pub(crate) const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// How the client address is found. By default it is the socket peer and
/// no header is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIpConfig {
    /// The header proxies write (read only through trusted proxies):
    /// `x-forwarded-for` (the default: `client, proxy1, proxy2`),
    /// `forwarded` (RFC 7239: `for=192.0.2.1, for="[2001:db8::1]:4711"`),
    /// `x-real-ip` (one address, set by the proxy in front), or another
    /// header of comma-separated addresses, read like `X-Forwarded-For`
    /// (e.g. `x-envoy-external-address`).
    pub header: HeaderName,
    /// How many proxies in front of this server append to the header: the
    /// peer and the `trusted_hops - 1` rightmost entries are proxies.
    pub trusted_hops: u8,
    /// Networks of trusted proxies. When not empty, the header is read only
    /// when the peer is in one of them, and entries in them are skipped
    /// too.
    pub trusted_proxies: Vec<(IpAddr, u8)>,
    /// Group IPv4 clients by this prefix length (e.g. 24); none or 32: each
    /// address is its own key.
    pub ipv4_prefix: Option<u8>,
    /// Group IPv6 clients by this prefix length (64 is typical: one
    /// subscriber's network); none or 128: each address is its own key.
    pub ipv6_prefix: Option<u8>,
}

impl Default for ClientIpConfig {
    fn default() -> Self {
        ClientIpConfig {
            header: HeaderName::from_static("x-forwarded-for"),
            trusted_hops: 0,
            trusted_proxies: Vec::new(),
            ipv4_prefix: None,
            ipv6_prefix: None,
        }
    }
}

impl ClientIpConfig {
    /// Whether any proxy is trusted (else the header is never read).
    pub fn trusts_proxies(&self) -> bool {
        self.trusted_hops > 0 || !self.trusted_proxies.is_empty()
    }
}

/// Where a value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A request header (the first line when there are several); `host`
    /// reads the request's authority (`:authority` or `Host`) and keys on
    /// its host, lowercase, without a final dot or port.
    Header(HeaderName),
    /// A value the application knows, by name (see
    /// [`ExtensionSource`](super::ExtensionSource)).
    Extension(String),
    /// The token of `Authorization: Bearer <token>` (scheme in any case);
    /// nothing for another scheme or a malformed value.
    Bearer,
}

/// One action: produces one entry of a descriptor, its `key` and the
/// value `kind` reads, or nothing (and then the descriptor is not sent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action {
    /// Entry key.
    pub key: String,
    /// What the value is.
    pub kind: ActionKind,
}

/// What an [`Action`] reads from a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActionKind {
    /// The client address (or its network, when grouped).
    ClientIp,
    /// A value from a header or the application (`header`, `user`,
    /// `tenant`, `extension`), or an API key or bearer token; nothing when
    /// absent or empty.
    Value {
        /// Where from.
        source: Source,
        /// Send a hash of the value (see [`secret_hash`](super::secret_hash))
        /// instead of the value itself.
        hash: bool,
    },
    /// The request method (`GET`, ...).
    Method,
    /// The matched route template; otherwise `unmatched`, or nothing.
    Route {
        /// The value for paths matching no template (none: nothing).
        unmatched: Option<String>,
    },
    /// The raw request path, without the query.
    Path,
    /// A constant value.
    Generic(String),
    /// A value restricted to known tiers (matched ignoring ASCII case and
    /// sent as configured); unknown or absent values become `default`, or
    /// nothing without one.
    Tier {
        /// Where from.
        source: Source,
        /// The known tiers.
        values: Vec<String>,
        /// The tier of unknown or absent values.
        default: Option<String>,
    },
}

impl Action {
    /// `client_ip` with the key `remote_address`.
    pub fn client_ip() -> Action {
        Action {
            key: "remote_address".into(),
            kind: ActionKind::ClientIp,
        }
    }

    /// A constant entry.
    pub fn generic(key: &str, value: &str) -> Action {
        Action {
            key: key.into(),
            kind: ActionKind::Generic(value.into()),
        }
    }

    /// Why the action cannot be used, if it cannot: an empty key, a key or
    /// value over [`MAX_VALUE_LEN`], an empty value, or a `route` action
    /// without route templates (`has_routes`).
    pub(crate) fn validate(&self, has_routes: bool) -> Result<(), String> {
        if self.key.is_empty() {
            return Err("an entry key must not be empty".into());
        }
        let longest = match &self.kind {
            ActionKind::Generic(value)
            | ActionKind::Route {
                unmatched: Some(value),
            } => value.len(),
            ActionKind::Tier { values, .. } => values.iter().map(String::len).max().unwrap_or(0),
            _ => 0,
        };
        let longest = longest.max(self.key.len());
        if longest > MAX_VALUE_LEN {
            return Err(format!(
                "keys and values are at most {MAX_VALUE_LEN} bytes (found {longest})"
            ));
        }
        match &self.kind {
            ActionKind::Generic(value) if value.is_empty() => {
                Err("a generic value must not be empty".into())
            }
            ActionKind::Route { .. } if !has_routes => {
                Err("route needs route templates under 'routes'".into())
            }
            ActionKind::Route { unmatched: Some(u) } if u.is_empty() => {
                Err("unmatched must not be empty".into())
            }
            ActionKind::Tier {
                values, default, ..
            } => {
                if values.is_empty() || values.iter().any(String::is_empty) {
                    return Err("tier needs non-empty 'values'".into());
                }
                match default {
                    Some(d) if !values.iter().any(|v| v == d) => Err(format!(
                        "the default tier `{d}` is not one of the values ({})",
                        values.join(", ")
                    )),
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

/// Where a request's weighted cost (its hits addend) comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostConfig {
    /// The header (or application value) holding a decimal integer.
    pub source: Source,
    /// The largest cost; larger values count as this.
    pub max: u32,
    /// The cost of requests without a valid value (absent, not a number,
    /// or 0).
    pub default: u32,
}

/// The cost of a request whose cost source holds `value`: a decimal integer
/// from 1 to `max` as it is, larger ones as `max`, and anything else
/// (absent, empty, `0`, signs, not a number) as `default`.
///
/// ```
/// use floodgate_http::identity::{CostConfig, Source, cost_of};
///
/// let c = CostConfig {
///     source: Source::Header(http::HeaderName::from_static("x-request-cost")),
///     max: 100,
///     default: 1,
/// };
/// assert_eq!(cost_of(Some(b"7"), &c), 7);
/// assert_eq!(cost_of(Some(b"100000000000000000000000"), &c), 100);
/// assert_eq!(cost_of(Some(b"-3"), &c), 1);
/// assert_eq!(cost_of(None, &c), 1);
/// ```
pub fn cost_of(value: Option<&[u8]>, c: &CostConfig) -> u32 {
    let Some(digits) = value.map(<[u8]>::trim_ascii) else {
        return c.default;
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return c.default;
    }
    let mut n: u64 = 0;
    for &d in digits {
        n = n.saturating_mul(10).saturating_add(u64::from(d - b'0'));
    }
    match n {
        0 => c.default,
        n if n > u64::from(c.max) => c.max,
        n => n as u32,
    }
}

/// `v` when it is from `min` to `max`; else the message naming `what` (the
/// YAML reader's and [`IdentityConfig`]'s checks).
pub(crate) fn in_bounds(what: &str, v: u64, min: u64, max: u64) -> Result<u64, String> {
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{what} must be from {min} to {max} (got `{v}`)"))
    }
}

/// `n` `items` of `whole` are from 1 to `max` (descriptors of the
/// configuration, actions of a descriptor).
pub(crate) fn count(whole: &str, n: usize, max: usize, items: &str) -> Result<(), String> {
    match n {
        1.. if n <= max => Ok(()),
        n => Err(format!("{whole} needs 1 to {max} {items} (found {n})")),
    }
}

impl IdentityConfig {
    /// Checks everything [`HttpIdentity::new`](super::HttpIdentity::new)
    /// relies on, except the route templates (checked as they compile).
    pub(crate) fn validate(&self) -> Result<(), IdentityError> {
        use IdentityError::{ClientIp, Cost, Invalid};
        if self.domain.is_empty() {
            return Err(Invalid("domain must not be empty".into()));
        }
        let (min, max) = (MIN_VALUE_LEN as u64, MAX_VALUE_LEN as u64);
        in_bounds("max_value_len", self.max_value_len as u64, min, max).map_err(Invalid)?;
        let ip = &self.client_ip;
        let prefix =
            |what, v: Option<u8>, max| v.map_or(Ok(0), |v| in_bounds(what, u64::from(v), 1, max));
        in_bounds(
            "trusted_hops",
            u64::from(ip.trusted_hops),
            0,
            u64::from(MAX_TRUSTED_HOPS),
        )
        .and(prefix("ipv4_prefix", ip.ipv4_prefix, 32))
        .and(prefix("ipv6_prefix", ip.ipv6_prefix, 128))
        .map_err(ClientIp)?;
        for &(net, prefix) in &ip.trusted_proxies {
            if prefix > if net.is_ipv4() { 32 } else { 128 } {
                return Err(ClientIp(format!("invalid network {net}/{prefix}")));
            }
        }
        if let Some(c) = &self.cost {
            in_bounds("cost max", u64::from(c.max), 1, u64::from(MAX_COST))
                .and_then(|max| in_bounds("cost default", u64::from(c.default), 1, max))
                .map_err(Cost)?;
        }
        if let Some(c) = &self.response_cost {
            c.validate(&self.descriptors).map_err(Cost)?;
        }
        let n = self.descriptors.len();
        count("descriptors", n, MAX_DESCRIPTORS, "descriptors").map_err(Invalid)?;
        for (index, d) in self.descriptors.iter().enumerate() {
            let err = |reason: String| IdentityError::Descriptor { index, reason };
            count("a descriptor", d.len(), MAX_ACTIONS, "actions").map_err(err)?;
            for a in d {
                a.validate(!self.routes.is_empty()).map_err(err)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        let c = CostConfig {
            source: Source::Extension("cost".into()),
            max: 50,
            default: 2,
        };
        let cost = |s: &str| cost_of(Some(s.as_bytes()), &c);
        assert_eq!(cost("1"), 1);
        assert_eq!(cost(" 50 "), 50);
        assert_eq!(cost("51"), 50);
        assert_eq!(cost("0"), 2);
        assert_eq!(cost("000"), 2);
        assert_eq!(cost("007"), 7);
        assert_eq!(cost(""), 2);
        assert_eq!(cost("+5"), 2);
        assert_eq!(cost("5.0"), 2);
        assert_eq!(cost("1e3"), 2);
        assert_eq!(cost("５"), 2);
        assert_eq!(cost(&"9".repeat(1000)), 50);
    }
}
