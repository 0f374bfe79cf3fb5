//! Floodgate for HTTP.
//!
//! * [`identity`] turns an HTTP request into the descriptors a Floodgate
//!   policy matches on: the client address (behind trusted proxies), API
//!   keys, bearer tokens, users, tenants, tiers, methods, route templates
//!   and constants, plus the request's weighted cost.
//! * [`contract`] is what responses tell clients: `RateLimit` headers
//!   (IETF draft -11 and the older forms), `Retry-After`, 429/503 with
//!   RFC 9457 problem details.
//! * [`layer`] is a tower layer (axum, hyper, tonic) deciding every request
//!   with a policy engine and answering per the contract, with shaper
//!   delays, concurrency permits and queues, and priority load shedding.
//! * [`client`] helps programs that call rate-limited APIs: backoff with
//!   jitter, `Retry-After`, proactive pacing and a retry budget.
//!
//! See `docs/http-contract.md`.

pub mod authority;
pub mod client;
pub mod contract;
pub mod identity;
pub mod layer;
mod read;
mod section;

pub use contract::{Contract, HeaderForm};
pub use identity::{HttpDescriptor, HttpIdentity, RequestDescriptors};
pub use layer::FloodgateLayer;
pub use section::HttpSection;
