//! What the gRPC listener answers to calls it cannot decide, over raw
//! HTTP/2 where the test sets every header: a message over the size limit
//! is `RESOURCE_EXHAUSTED` (and counted under that name); a request that is
//! not a gRPC call at all (wrong method, wrong content type) gets the HTTP
//! status the gRPC-over-HTTP/2 protocol prescribes, and is never decoded.

use std::path::Path;

use bytes::Bytes;
use floodgate_testkit::Floodgate;
use floodgate_testkit::grpc::RLS_PATH;
use floodgate_testkit::h2_connect;
use http_body_util::{BodyExt, Full};

use crate::serve_support::rls::user_frame;

const CONFIG: &str = "server:\n  body_limit: 64KiB\ndomains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 100, unit: day}\n";

type Send = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

fn rls_frame(value: &str) -> Bytes {
    user_frame("d", value)
}

/// The answer to one request: HTTP status, grpc-status (headers or
/// trailers) if any, content type.
async fn send(
    send: &mut Send,
    port: u16,
    method: &str,
    content_type: Option<&str>,
    body: Bytes,
) -> (u16, Option<String>, Option<String>) {
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("http://127.0.0.1:{port}{RLS_PATH}"))
        .header("te", "trailers");
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let resp = send
        .send_request(req.body(Full::new(body)).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = |v: &http::HeaderValue| v.to_str().unwrap().to_owned();
    let ct = resp.headers().get("content-type").map(text);
    let in_headers = resp.headers().get("grpc-status").map(text);
    let collected = resp.into_body().collect().await.unwrap();
    let grpc = in_headers.or_else(|| {
        collected
            .trailers()
            .and_then(|t| t.get("grpc-status"))
            .map(text)
    });
    (status, grpc, ct)
}

#[tokio::test]
async fn an_oversized_message_is_resource_exhausted() {
    let s = Floodgate::start(Path::new(env!("CARGO_BIN_EXE_floodgate")), CONFIG, &[], &[]);
    let mut h2 = h2_connect(s.grpc).await;
    let big = rls_frame(&"y".repeat(100 << 10));
    let (status, grpc, _) = send(&mut h2, s.grpc, "POST", Some("application/grpc"), big).await;
    assert_eq!(status, 200);
    assert_eq!(grpc.as_deref(), Some("8"), "RESOURCE_EXHAUSTED expected");
    assert_eq!(
        s.metric("floodgate_request_errors_total{class=\"resource_exhausted\"}"),
        1.0
    );
    assert_eq!(
        s.metric("floodgate_request_errors_total{class=\"invalid_argument\"}"),
        0.0
    );
    // A message within the limit is still decided.
    let (_, grpc, _) = send(
        &mut h2,
        s.grpc,
        "POST",
        Some("application/grpc"),
        rls_frame("small"),
    )
    .await;
    assert_eq!(grpc.as_deref(), Some("0"));
}

#[tokio::test]
async fn the_fast_path_refuses_what_is_not_a_grpc_call() {
    let s = Floodgate::start(Path::new(env!("CARGO_BIN_EXE_floodgate")), CONFIG, &[], &[]);
    let mut h2 = h2_connect(s.grpc).await;
    let frame = rls_frame("checked");
    let decided =
        |s: &Floodgate| s.metric("floodgate_requests_total{api=\"grpc\",result=\"allowed\"}");

    // Wrong content types: 415, no gRPC status, nothing decoded or decided.
    for ct in [
        None,
        Some("application/json"),
        Some("application/grpc+json"),
        Some("application/grpcx"),
        Some("text/plain"),
    ] {
        let (status, grpc, _) = send(&mut h2, s.grpc, "POST", ct, frame.clone()).await;
        assert_eq!(status, 415, "content type {ct:?}");
        assert_eq!(grpc, None, "content type {ct:?}");
    }
    // Wrong methods: 405.
    for method in ["GET", "PUT"] {
        let (status, grpc, _) = send(
            &mut h2,
            s.grpc,
            method,
            Some("application/grpc"),
            frame.clone(),
        )
        .await;
        assert_eq!(status, 405, "{method}");
        assert_eq!(grpc, None, "{method}");
    }
    assert_eq!(decided(&s), 0.0, "a refused request was decided");
    assert_eq!(
        s.metric("floodgate_request_errors_total{class=\"invalid_argument\"}"),
        0.0
    );

    // Every spelling of the gRPC content type is a call.
    for ct in [
        "application/grpc",
        "application/grpc+proto",
        "application/grpc; charset=utf-8",
        "application/grpc+proto;q=1",
        "Application/GRPC",
    ] {
        let (status, grpc, rct) = send(&mut h2, s.grpc, "POST", Some(ct), frame.clone()).await;
        assert_eq!((status, grpc.as_deref()), (200, Some("0")), "{ct}");
        assert_eq!(rct.as_deref(), Some("application/grpc"), "{ct}");
    }
    assert_eq!(decided(&s), 5.0);
}
