//! What an RLS caller is told, as it happens: gRPC health follows the
//! store's readiness the moment it changes (a `Watch` stream sees Redis's
//! outage and its end as `/ready` does), and a shaper's delay is never
//! dropped (see docs/service.md, "Shapers over RLS").

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use floodgate_testkit::grpc::grpc_frame;
use floodgate_testkit::{Floodgate, Redis, h2_connect, http_request};
use http_body_util::BodyExt;
use tokio::sync::mpsc;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

const SERVING: u8 = 1;
const NOT_SERVING: u8 = 2;

/// The statuses a `grpc.health.v1.Health/Watch` stream of the RLS service
/// sends, each with the instant it arrived.
async fn watch_health(port: u16) -> mpsc::UnboundedReceiver<(u8, Instant)> {
    let mut send = h2_connect::<http_body_util::Full<Bytes>>(port).await;
    let name = b"envoy.service.ratelimit.v3.RateLimitService";
    let mut msg = vec![0x0a, name.len() as u8];
    msg.extend_from_slice(name);
    let req = http::Request::post(format!(
        "http://127.0.0.1:{port}/grpc.health.v1.Health/Watch"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(http_body_util::Full::new(grpc_frame(&msg)))
    .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let _send = send;
        let mut body = resp.into_body();
        let mut buf = BytesMut::new();
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else {
                continue;
            };
            buf.extend_from_slice(&data);
            // Each message: the 5-byte prefix, then field 1 (the status).
            while buf.len() >= 5 {
                let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                if buf.len() < 5 + len {
                    break;
                }
                let status = if len >= 2 && buf[5] == 0x08 { buf[6] } else { 0 };
                buf.advance(5 + len);
                let _ = tx.send((status, Instant::now()));
            }
        }
    });
    rx
}

/// The next status of the stream (within 10 s).
async fn next(watch: &mut mpsc::UnboundedReceiver<(u8, Instant)>, s: &Floodgate) -> (u8, Instant) {
    tokio::time::timeout(Duration::from_secs(10), watch.recv())
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no health status came; log:\n{}", s.log()))
}

/// `/ready`'s status.
fn ready(s: &Floodgate) -> u16 {
    http_request(s.http, "GET", "/ready", None, b"").map_or(0, |r| r.0)
}

/// When `/ready` first answers `status`, polled every 2 ms (at most 10 s),
/// calling `meanwhile` between polls.
fn when_ready_is(s: &Floodgate, status: u16, mut meanwhile: impl FnMut()) -> Instant {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if ready(s) == status {
            return Instant::now();
        }
        meanwhile();
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("/ready never answered {status}; log:\n{}", s.log());
}

/// A Redis outage with `fail_closed` turns readiness off, and gRPC health
/// with it, at once; so does its end turn them on. The lag of the health
/// stream behind `/ready` is measured both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_follows_the_store_as_it_changes() {
    let redis = Redis::start();
    let config = "store:\n  backend: redis\n  url: REDIS\n  timeout: 50ms\n  connect_timeout: 100ms\n  failure_policy: fail_closed\n  breaker: {failures: 2, cool_down: 100ms}\ndomains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 100, unit: day}\n"
        .replace("REDIS", &redis.addr());
    let s = Floodgate::start(bin(), &config, &[], &[]);
    let mut watch = watch_health(s.grpc).await;
    assert_eq!(next(&mut watch, &s).await.0, SERVING);

    redis.pause();
    let json = br#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}"#;
    // Calls fail until the breaker opens: readiness is off from then on.
    let off = when_ready_is(&s, 503, || {
        http_request(s.http, "POST", "/json", None, json);
    });
    let (status, seen) = next(&mut watch, &s).await;
    assert_eq!(status, NOT_SERVING, "{}", s.log());
    let off_lag = seen.saturating_duration_since(off);

    // Redis back: the store's probe closes the breaker.
    redis.resume();
    let on = when_ready_is(&s, 200, || {});
    let (status, seen) = next(&mut watch, &s).await;
    assert_eq!(status, SERVING, "{}", s.log());
    let on_lag = seen.saturating_duration_since(on);

    eprintln!("gRPC health behind /ready: {off_lag:?} (outage), {on_lag:?} (recovery)");
    // Polling every 500 ms, health lagged by up to that much each way.
    for lag in [off_lag, on_lag] {
        assert!(
            lag < Duration::from_millis(100),
            "health lagged {lag:?} behind /ready; log:\n{}",
            s.log()
        );
    }
}
