//! `ShouldRateLimit` over raw HTTP/2, where the test controls every frame
//! and header: a call in flight when SIGTERM arrives (its message half
//! sent) is answered before the process exits 0, and a call whose
//! `grpc-timeout` passes while the store cannot answer gets
//! `DEADLINE_EXCEEDED` at its deadline.

use std::convert::Infallible;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use floodgate_server::proto::rls::RateLimitResponse;
use floodgate_testkit::grpc::{grpc_frame, grpc_status, rls_request};
use floodgate_testkit::h2_connect;
use floodgate_testkit::{Floodgate, Redis};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use prost::Message;

use crate::serve_support::rls::user_frame;

#[tokio::test]
async fn an_rls_call_in_flight_is_answered_before_exit() {
    let config = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 5, unit: day}\n";
    let mut s = Floodgate::start(
        Path::new(env!("CARGO_BIN_EXE_floodgate")),
        config,
        &["--shutdown-grace", "5s"],
        &[],
    );
    let mut send = h2_connect(s.grpc).await;

    let frame = user_frame("d", "drain");

    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let body = StreamBody::new(Box::pin(futures_util::stream::unfold(
        rx,
        |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
        },
    )));
    let call = tokio::spawn(send.send_request(rls_request(s.grpc, body)));

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

/// One call with an optional `grpc-timeout`: the grpc-status (from the
/// trailers, or the headers of a trailers-only answer) and the time taken.
async fn timed_call(
    send: &mut hyper::client::conn::http2::SendRequest<http_body_util::Full<Bytes>>,
    port: u16,
    timeout: Option<&str>,
) -> (String, Duration) {
    let mut req = rls_request(port, http_body_util::Full::new(user_frame("d", "deadline")));
    if let Some(t) = timeout {
        req.headers_mut()
            .insert("grpc-timeout", http::HeaderValue::from_str(t).unwrap());
    }
    let started = std::time::Instant::now();
    let resp = send.send_request(req).await.unwrap();
    let status = grpc_status(resp).await;
    (status, started.elapsed())
}

#[tokio::test]
async fn a_call_past_its_grpc_timeout_gets_deadline_exceeded() {
    let redis = Redis::start();
    // The store waits up to 10 s for Redis: only the caller's deadline can
    // end a call sooner.
    let config = "store:\n  backend: redis\n  url: REDIS\n  timeout: 10s\n  failure_policy: fail_closed\ndomains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 100, unit: day}\n"
        .replace("REDIS", &redis.addr());
    let s = Floodgate::start(
        Path::new(env!("CARGO_BIN_EXE_floodgate")),
        &config,
        &[],
        &[],
    );
    let mut send = h2_connect(s.grpc).await;

    // Redis answering: the deadline is not in the way.
    let (status, _) = timed_call(&mut send, s.grpc, Some("5S")).await;
    assert_eq!(status, "0", "{}", s.log());

    redis.pause();
    let (status, took) = timed_call(&mut send, s.grpc, Some("300m")).await;
    assert_eq!(status, "4", "DEADLINE_EXCEEDED expected; log:\n{}", s.log());
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(3),
        "answered after {took:?}"
    );
    // A malformed header imposes no deadline; it is not an error either
    // (checked with Redis back, so the call completes).
    redis.resume();
    let (status, _) = timed_call(&mut send, s.grpc, Some("soon")).await;
    assert_eq!(status, "0", "{}", s.log());
    let (status, _) = timed_call(&mut send, s.grpc, Some("2S")).await;
    assert_eq!(status, "0", "{}", s.log());
}

/// The gRPC health status of the RLS service: 1 SERVING, 2 NOT_SERVING.
pub(crate) async fn health(port: u16) -> u8 {
    let mut send = h2_connect::<http_body_util::Full<Bytes>>(port).await;
    let name = b"envoy.service.ratelimit.v3.RateLimitService";
    let mut msg = vec![0x0a, name.len() as u8];
    msg.extend_from_slice(name);
    let req = http::Request::post(format!(
        "http://127.0.0.1:{port}/grpc.health.v1.Health/Check"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(http_body_util::Full::new(grpc_frame(&msg)))
    .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let data = resp.into_body().collect().await.unwrap().to_bytes();
    // One message: the frame header, then field 1 (status).
    assert_eq!(&data[5..6], b"\x08", "{data:?}");
    data[6]
}

// Multi-threaded: the client connections must see the server's GOAWAY
// (and close) while the test thread waits for the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_delay_keeps_serving_while_not_ready() {
    use floodgate_testkit::{http_request, wait_until};

    let config = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 100, unit: day}\n";
    let delay = Duration::from_secs(3);
    let mut s = Floodgate::start(
        Path::new(env!("CARGO_BIN_EXE_floodgate")),
        config,
        &["--shutdown-grace", "5s"],
        &[("FLOODGATE_SHUTDOWN_DELAY", "3s")],
    );
    assert_eq!(health(s.grpc).await, 1);
    let json = br#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"late"}]}]}"#;
    let signalled = std::time::Instant::now();
    s.signal("TERM");
    // Not ready at once, on HTTP and gRPC health alike...
    assert!(
        wait_until(Duration::from_secs(1), || {
            matches!(
                http_request(s.http, "GET", "/ready", None, b""),
                Some((503, _))
            )
        }),
        "{}",
        s.log()
    );
    // (gRPC health is flipped by its own task: allow it a moment too.)
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while health(s.grpc).await != 2 {
        assert!(std::time::Instant::now() < deadline, "{}", s.log());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // ... while both listeners still take new connections and decide.
    let (status, body) = http_request(s.http, "POST", "/json", None, json).unwrap();
    assert_eq!(status, 200, "{body}");
    let mut send = h2_connect(s.grpc).await;
    let (grpc_status, _) = timed_call(&mut send, s.grpc, None).await;
    assert_eq!(grpc_status, "0");
    drop(send);
    assert!(
        signalled.elapsed() < delay,
        "the checks took longer than the delay; log:\n{}",
        s.log()
    );
    assert!(
        s.wait_exit(Duration::from_millis(10)).is_none(),
        "exited during the shutdown delay"
    );
    // Then the drain, and a clean exit after the delay.
    let status = s
        .wait_exit(Duration::from_secs(10))
        .expect("exits after the delay");
    assert!(status.success(), "{status:?}\n{}", s.log());
    assert!(signalled.elapsed() >= delay, "exited before the delay");
    assert!(s.log().contains("shutdown delay"), "{}", s.log());
    assert!(!s.log().contains("grace period over"), "{}", s.log());
}
