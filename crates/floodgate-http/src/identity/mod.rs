//! Request identity: turning an HTTP request into the descriptors a
//! Floodgate policy matches on.
//!
//! A configuration lists descriptors, each a list of *actions*; each action
//! produces one `(key, value)` entry from the request. As in Envoy's route
//! `rate_limits`, a descriptor is sent only when every one of its actions
//! produces an entry. Building is allocation-free once the reused
//! [`RequestDescriptors`] buffers have grown (from the first request with
//! [`HttpIdentity::new_output`]).
//!
//! # Configuration
//!
//! The `http:` section of a Floodgate file (unknown keys are errors; every
//! error names its file, line and column and the offending value):
//!
//! ```yaml
//! http:
//!   domain: api                  # the policy domain (required)
//!   client_ip:
//!     trusted_hops: 1            # proxies in front that append to the header
//!     trusted_proxies: [10.0.0.0/8, "::1"]
//!     header: x-forwarded-for    # or forwarded (RFC 7239), x-real-ip, another name
//!     ipv6_prefix: 64            # group IPv6 clients by /64 (`true` = 64)
//!     ipv4_prefix: 32            # group IPv4 clients by /N (default: none)
//!   routes: ["/users/{id}", "/orders/{id}/items/{item}", "/static/{*rest}"]
//!   cost: {header: x-request-cost, max: 100, default: 1}
//!   response_cost: {header: x-tokens-used, cap: 100000, default: 0, keys: [user]}  # or trailer:
//!   max_value_len: 256           # longer values: prefix + "~" + hash
//!   descriptors:
//!     - [{generic: {key: scope, value: global}}]
//!     - [client_ip]
//!     - [{api_key: {header: x-api-key, hash: true}}]
//!     - [{tier: {header: x-plan, values: [free, pro, enterprise], default: free}},
//!        {api_key: {header: x-api-key, hash: true}}]
//!     - [{user: {extension: user}}, route]
//! ```
//!
//! ## `client_ip`
//!
//! By default the client is the socket peer and no header is read.
//! `trusted_hops: N` trusts the peer and the `N - 1` rightmost header
//! entries as proxies; `trusted_proxies` reads the header only when the
//! peer is in those networks, and skips entries in them too. The client is
//! the rightmost address that is not a trusted proxy — never the leftmost,
//! which the client writes. Several header lines count as one list, in
//! order. An unreadable entry on the way (garbage, `unknown`, obfuscated
//! identifiers, bad ports) or a trusted walk of more than 32 entries falls
//! back to the peer. IPv4-mapped IPv6 addresses count as IPv4. `header` is
//! only accepted with trusted proxies (it would be ignored otherwise).
//!
//! ## Actions
//!
//! | action | entry | yields nothing when |
//! | --- | --- | --- |
//! | `client_ip` / `{client_ip: {key}}` | `remote_address`: the address, or its network (`2001:db8:1:2::/64`) when grouped | never |
//! | `{header: {name, key}}` | the header's value (key defaults to the name) | absent or empty |
//! | `{extension: {name, key}}` | a value the application knows ([`ExtensionSource`]) | absent or empty |
//! | `{user: {header \| extension, key}}`, `{tenant: ...}` | `user` / `tenant` | absent or empty |
//! | `api_key` / `{api_key: {header, key, hash}}` | `api_key` from `x-api-key` | absent or empty |
//! | `bearer` / `{bearer: {key, hash}}` | `bearer`: the token of `Authorization: Bearer <token>` | absent, another scheme, malformed |
//! | `method` / `{method: {key}}` | `method`: `GET`, ... | never |
//! | `route` / `{route: {key, unmatched}}` | `route`: the matching template (see `routes`) | no template matches and no `unmatched` constant |
//! | `path` / `{path: {key}}` | `path`: the raw path, without the query | no path (authority-form `CONNECT`) |
//! | `{generic: {key, value}}` | a constant (key defaults to `generic_key`) | never |
//! | `{tier: {header \| extension, key, values, default}}` | `tier`: a known value (any case; sent as configured), else `default` | unknown and no `default` |
//!
//! `hash: true` sends the first 32 hex digits of the SHA-256 of a secret
//! instead of the secret ([`secret_hash`]), so secrets never reach counters
//! or Redis keys. Values read from a request longer than `max_value_len`
//! bytes, or not UTF-8, are sent as their longest UTF-8 prefix that fits,
//! `~`, and 16 hex digits of the SHA-256 of the whole value: still counted,
//! bounded, and distinct. Several lines of a header: the first is read.
//!
//! `header: host` (in any action reading a header) reads the request's
//! authority — HTTP/2's `:authority` (or an absolute-form target's), else
//! `Host` — and keys on its host normalised as nginx's `$host` is:
//! lowercase, without a name's final dot, without the port (a listener
//! has one port; the one a client writes is its own choice, and upstreams
//! route by name), IPv6 literals in brackets. `APP.example`,
//! `app.example.`, `app.example:80` and `app.example:8080` are one key,
//! `app.example`. An authority that is no valid `host[:port]` is keyed as
//! sent (the gateway refuses it first, with 400). A `tier` reading `host`
//! compares that host with its values.
//!
//! ## `cost`
//!
//! `{header: NAME | extension: NAME, max, default: 1}`: a decimal integer
//! from 1 to `max` is the request's cost; larger ones count as `max`;
//! absent, `0` or malformed values count as `default`. It is
//! [`RequestDescriptors::hits_addend`] and every descriptor's hits addend.
//!
//! ## `response_cost`
//!
//! `{header: NAME | trailer: NAME, cap, default, keys}`: the cost known only
//! once the response is, charged after it by the [layer](crate::layer) (see
//! its docs: *Costs known after the response*) to the descriptors whose
//! first entry's key is in `keys` (each must start one; without `keys`,
//! every descriptor). The other descriptors are decided as any request's
//! and charged nothing after; a descriptor decided by a concurrency limit
//! is never charged after (its units would never come back). A decimal integer from 0 to
//! `cap` is charged as it is; a larger one (however long) as `cap`; an
//! absent or malformed one (empty, signed, fractional) as `default` (from 0
//! to `cap`; by default `cap`); a `trailer` never seen because the body did
//! not end (the client went away, the upstream failed mid-body) as `cap`.
//! Without `cost`, a descriptor carrying the response's cost is admitted
//! by a check that charges nothing; with it, admission charges the
//! request's cost and the response is charged the rest (nothing when its
//! cost is not larger).

mod client_ip;
mod config;
mod forwarded;
mod hash;
mod http_identity;
mod output;
mod path;
mod read;
mod request;
mod response_cost;
mod route;

pub use config::{
    Action, ActionKind, ClientIpConfig, CostConfig, DEFAULT_MAX_VALUE_LEN, IdentityConfig,
    IdentityError, MAX_ACTIONS, MAX_COST, MAX_DESCRIPTORS, MAX_TRUSTED_HOPS, MAX_VALUE_LEN, Source,
    cost_of,
};
pub use hash::{MIN_VALUE_LEN, SECRET_HASH_LEN, secret_hash};
pub use http_identity::HttpIdentity;
pub use output::{HttpDescriptor, RequestDescriptors};
pub use path::{EncodedSlashes, PathError, escapes_root, normalize_path};
pub use read::SECTION;
pub use request::{Attributes, ExtensionSource, NoExtensions, RequestHead};
pub use response_cost::{CostField, CostRead, MAX_RESPONSE_COST, ResponseCost, response_cost_of};
pub use route::MAX_TEMPLATE_SEGMENTS;
