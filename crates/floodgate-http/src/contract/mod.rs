//! The HTTP contract with clients: what every response says about rate
//! limits, and what a rejection looks like. See `docs/http-contract.md`.
//!
//! * **Headers** on every response (unless hidden): `RateLimit-Policy` and
//!   `RateLimit` of draft-ietf-httpapi-ratelimit-headers-11, or
//!   `X-RateLimit-Limit/Remaining/Reset` (reset in seconds, or as Unix epoch
//!   seconds like GitHub), or the draft-03 form Envoy emits.
//! * **The Envoy form**, for a decision service answering Envoy
//!   ([`EnvoyHeaders`]): envoyproxy/ratelimit's `RateLimit-Limit/-Remaining/-Reset`
//!   and Envoy's draft-03 `X-RateLimit-*`, over RLS from an engine
//!   response's statuses exactly as envoyproxy/ratelimit renders them (in
//!   the protocol's units, shadow-mode descriptors included), and where
//!   Floodgate chooses (its own API) from a [`Report`]. Single-valued
//!   headers describe one position, picked by one picker (see
//!   [`Report::primary`]).
//! * **Windows**: every form states a limit in its own window (3 per 10 s
//!   is `q=3;w=10`, draft-03's `3, 3;w=10`), except over RLS, where the
//!   protocol's `current_limit` counts per unit and the headers say what it
//!   says. A concurrency limit has no reset (its units come back on
//!   release); a request that can never pass gets no wait.
//! * **Rejections**: 429 (or a rule's status, e.g. 503), `Retry-After` in
//!   delay-seconds rounded up from the exact wait, `Cache-Control:
//!   no-store`, and an RFC 9457 problem (`application/problem+json`) or a
//!   plain-text body, by `Accept`.
//! * **Exact and stable**: relative values come from the decision's exact
//!   durations, rounded up; the epoch reset is `ceil(now + reset)` from the
//!   one instant the decision was taken at, so it does not wobble between
//!   responses of one window state.
//!
//! # Configuration
//!
//! ```yaml
//! http:
//!   responses:
//!     headers: [ietf]              # ietf | x-ratelimit | x-ratelimit-epoch | draft-03 | none
//!     hide_headers: false          # hide every rate-limit header
//!     on_success: true             # headers on admitted responses too
//!     status: 429                  # the status of a denial
//!     error_status: 503            # limiter failure, when failing closed
//!     retry_after_unknown: 1s      # Retry-After when no wait is known (default: none)
//!     rules:                       # by rule name (or path)
//!       shed-batch: {status: 503}
//!       internal-abuse: {hide: true}
//!       per-ip: {policy_name: ip}
//! ```

mod config;
mod envoy;
mod header_buf;
mod headers;
mod http_contract;
mod names;
mod primary;
mod problem;
mod read;
mod report;
mod sf;

pub use config::{Contract, HeaderForm, RuleResponse};
pub use envoy::{EnvoyHeader, EnvoyHeaders, EnvoyNames, InvalidHeaderName};
pub use header_buf::HeaderBuf;
pub(crate) use headers::push_position;
pub use headers::{draft03_limit, draft03_value, epoch_reset, ietf_current, ietf_policy};
#[cfg(feature = "axum")]
pub use http_contract::Rejected;
pub use http_contract::{Rejection, grpc_message};
pub use names::*;
pub use problem::{
    BodyKind, PROBLEM_JSON, QUOTA_EXCEEDED, TEMPORARY_REDUCED_CAPACITY, TEXT_PLAIN, negotiate,
};
pub use read::RESPONSES;
pub use report::{CurrentLine, PolicyLine, QuotaUnit, Report, Verdict, shape};
pub use sf::MAX_NAME_LEN;
pub(crate) use sf::{ceil_secs, push_string};
