//! Graceful shutdown of the gRPC listener: a `ShouldRateLimit` call in
//! flight when SIGTERM arrives (its message half sent) is answered, then the
//! process exits 0.

use std::convert::Infallible;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::Entry;
use floodgate_server::proto::rls::{RateLimitRequest, RateLimitResponse};
use floodgate_testkit::Floodgate;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;

#[tokio::test]
async fn an_rls_call_in_flight_is_answered_before_exit() {
    let config = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 5, unit: day}\n";
    let mut s = Floodgate::start(
        Path::new(env!("CARGO_BIN_EXE_floodgate")),
        config,
        &["--shutdown-grace", "5s"],
        &[],
    );
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", s.grpc))
        .await
        .unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);

    let msg = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: "drain".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
    .encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    frame.extend_from_slice(&msg);

    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let body = StreamBody::new(Box::pin(futures_util::stream::unfold(
        rx,
        |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
        },
    )));
    let req = http::Request::post(format!(
        "http://127.0.0.1:{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        s.grpc
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(body)
    .unwrap();
    let call = tokio::spawn(send.send_request(req));

    tx.send(Bytes::copy_from_slice(&frame[..7])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.signal("TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        s.wait_exit(Duration::from_millis(10)).is_none(),
        "exited with a call in flight"
    );
    tx.send(Bytes::copy_from_slice(&frame[7..])).await.unwrap();
    drop(tx);

    let resp = call.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    let collected = resp.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().expect("trailers");
    assert_eq!(trailers["grpc-status"], "0");
    let data = collected.to_bytes();
    let answer = RateLimitResponse::decode(&data[5..]).unwrap();
    assert_eq!(answer.overall_code, 1);
    assert_eq!(answer.statuses[0].limit_remaining, 4);

    let status = s
        .wait_exit(Duration::from_secs(5))
        .expect("exits after draining");
    assert!(status.success(), "{status:?}\n{}", s.log());
}
