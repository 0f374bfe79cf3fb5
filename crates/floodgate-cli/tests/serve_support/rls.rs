//! `ShouldRateLimit` messages for the raw HTTP/2 tests of the gRPC
//! listener.

use bytes::Bytes;
use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::Entry;
use floodgate_server::proto::rls::RateLimitRequest;
use floodgate_testkit::grpc::grpc_frame;
use prost::Message;

/// One `RateLimitRequest` of `domain` with one descriptor `user: value`,
/// as a gRPC message.
pub(crate) fn user_frame(domain: &str, value: &str) -> Bytes {
    let request = RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: value.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    grpc_frame(&request.encode_to_vec())
}
