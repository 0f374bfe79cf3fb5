//! Raw gRPC over HTTP/2 (on a connection of [`h2_connect`](crate::h2_connect)),
//! where a test sets every header and frame itself: a length-prefixed
//! message, the `ShouldRateLimit` request and the `grpc-status` of its
//! answer.

use bytes::Bytes;
use http_body_util::BodyExt;

/// The path of Envoy's `ShouldRateLimit` (rate limit service v3).
pub const RLS_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `message` (an encoded protobuf) as one gRPC message: uncompressed,
/// with its 4-byte big-endian length.
pub fn grpc_frame(message: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(5 + message.len());
    frame.push(0);
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    Bytes::from(frame)
}

/// A `ShouldRateLimit` call to 127.0.0.1:`port` carrying `body` (POST,
/// `content-type: application/grpc`, `te: trailers`).
pub fn rls_request<B>(port: u16, body: B) -> http::Request<B> {
    http::Request::post(format!("http://127.0.0.1:{port}{RLS_PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .expect("a valid request")
}

/// The grpc-status of an answer: from its head (a trailers-only answer),
/// else from its trailers (the body is read to them).
pub async fn grpc_status(res: http::Response<hyper::body::Incoming>) -> String {
    if let Some(s) = res.headers().get("grpc-status") {
        return s.to_str().expect("an ASCII grpc-status").to_owned();
    }
    let collected = res.into_body().collect().await.expect("the answer's body");
    collected.trailers().expect("trailers")["grpc-status"]
        .to_str()
        .expect("an ASCII grpc-status")
        .to_owned()
}
