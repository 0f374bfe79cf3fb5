//! The rate limit headers the service adds (gRPC `response_headers_to_add`,
//! HTTP response headers): `floodgate-http`'s Envoy form, as the settings
//! (`server.response_headers.*`) configure it.

use crate::settings::HeaderSettings;
use floodgate_http::contract::{EnvoyHeaders, EnvoyNames, InvalidHeaderName};

/// The Envoy form of `s`: envoyproxy/ratelimit's headers when enabled,
/// draft-03's when enabled (every name is checked, enabled or not).
pub fn envoy_headers(s: &HeaderSettings) -> Result<EnvoyHeaders, InvalidHeaderName> {
    let names = EnvoyNames {
        limit: &s.limit,
        remaining: &s.remaining,
        reset: &s.reset,
    };
    EnvoyHeaders::new(names, s.enabled, s.x_ratelimit)
}
