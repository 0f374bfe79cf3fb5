//! Protobuf's field number 0 does not exist: a `ShouldRateLimit` message
//! carrying one (at the top, in a descriptor, in an entry) is malformed,
//! `INVALID_ARGUMENT` over real gRPC as prost and envoyproxy/ratelimit's
//! Go server answer it, never decided.

use std::path::Path;

use bytes::Bytes;
use floodgate_server::proto::rls::RateLimitRequest;
use floodgate_testkit::grpc::{grpc_frame, grpc_status, rls_request};
use floodgate_testkit::{Floodgate, h2_connect};
use http_body_util::Full;
use prost::Message;

const CONFIG: &str = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 100, unit: day}\n";

/// `domain: "d"`, one descriptor of one entry `user=u`, with `extra`
/// appended inside the entry, the descriptor or the request.
fn request(in_entry: &[u8], in_descriptor: &[u8], in_request: &[u8]) -> Vec<u8> {
    let mut entry = vec![0x0a, 4];
    entry.extend_from_slice(b"user");
    entry.extend_from_slice(&[0x12, 1, b'u']);
    entry.extend_from_slice(in_entry);
    let mut descriptor = vec![0x0a, entry.len() as u8];
    descriptor.extend_from_slice(&entry);
    descriptor.extend_from_slice(in_descriptor);
    let mut req = vec![0x0a, 1, b'd', 0x12, descriptor.len() as u8];
    req.extend_from_slice(&descriptor);
    req.extend_from_slice(in_request);
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_number_zero_is_invalid_argument() {
    let s = Floodgate::start(Path::new(env!("CARGO_BIN_EXE_floodgate")), CONFIG, &[], &[]);
    let mut h2 = h2_connect::<Full<Bytes>>(s.grpc).await;
    // Well-formed, the message is decided (and prost reads it alike).
    let good = request(&[], &[], &[]);
    RateLimitRequest::decode(good.as_slice()).unwrap();
    let res = h2
        .send_request(rls_request(s.grpc, Full::new(grpc_frame(&good))))
        .await
        .unwrap();
    assert_eq!(grpc_status(res).await, "0");
    let zero_varint = [0x00, 0x01];
    let zero_bytes = [0x02, 0x01, b'x'];
    let cases: [(&str, Vec<u8>); 4] = [
        ("request", request(&[], &[], &zero_varint)),
        ("request, length-delimited", request(&[], &[], &zero_bytes)),
        ("descriptor", request(&[], &zero_varint, &[])),
        ("entry", request(&zero_bytes, &[], &[])),
    ];
    for (place, bytes) in &cases {
        let prost = RateLimitRequest::decode(bytes.as_slice());
        assert!(prost.is_err(), "prost refuses it too ({place})");
        let res = h2
            .send_request(rls_request(s.grpc, Full::new(grpc_frame(bytes))))
            .await
            .unwrap();
        assert_eq!(
            grpc_status(res).await,
            "3",
            "INVALID_ARGUMENT expected ({place})"
        );
    }
    assert_eq!(
        s.metric("floodgate_request_errors_total{class=\"invalid_argument\"}"),
        cases.len() as f64
    );
}
