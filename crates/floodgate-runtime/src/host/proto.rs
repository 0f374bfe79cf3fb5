//! The generated protocol types, in their proto packages: Envoy's RLS v3
//! and RLQS v3 (served by `floodgate serve`), and the xDS discovery service with
//! envoyproxy/ratelimit's `RateLimitConfig` (the configuration source
//! over xDS).
#![allow(missing_docs, clippy::all, rustdoc::all)]

#[allow(unreachable_pub)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/_includes.rs"));
}

pub use generated::{envoy, google};

/// The encoded `FileDescriptorSet` of the RLS and RLQS protocols, for
/// server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/rls_descriptor.bin"));

pub use envoy::extensions::common::ratelimit::v3 as ratelimit;
pub use envoy::service::discovery::v3 as discovery;
pub use envoy::service::rate_limit_quota::v3 as rlqs;
pub use envoy::service::ratelimit::v3 as rls;
/// envoyproxy/ratelimit's configuration as xDS resources.
pub use generated::ratelimit::config::ratelimit::v3 as rls_config;
