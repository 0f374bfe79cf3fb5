//! What an RLS caller is told, as it happens: gRPC health follows the
//! store's readiness the moment it changes (a `Watch` stream sees Redis's
//! outage and its end as `/ready` does), and a shaper's delay is never
//! dropped (see docs/service.md, "Shapers over RLS").

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use floodgate_server::proto::rls::RateLimitResponse;
use floodgate_testkit::grpc::{grpc_frame, rls_request};
use floodgate_testkit::{Floodgate, Redis, h2_connect, http_request};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use prost::Message;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::serve_support::rls::user_frame;

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
                let status = if len >= 2 && buf[5] == 0x08 {
                    buf[6]
                } else {
                    0
                };
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
/// stream behind `/ready` is measured both ways, over three outages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_follows_the_store_as_it_changes() {
    let redis = Redis::start();
    let config = "store:\n  backend: redis\n  url: REDIS\n  timeout: 50ms\n  connect_timeout: 100ms\n  failure_policy: fail_closed\n  breaker: {failures: 2, cool_down: 100ms}\ndomains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 100, unit: day}\n"
        .replace("REDIS", &redis.addr());
    let s = Floodgate::start(bin(), &config, &[], &[]);
    let mut watch = watch_health(s.grpc).await;
    assert_eq!(next(&mut watch, &s).await.0, SERVING);

    let json = br#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}"#;
    let mut lags = Vec::new();
    // Three outages: health lagging by chance would not pass them all.
    for _ in 0..3 {
        redis.pause();
        // Calls fail until the breaker opens: readiness is off from then on.
        let off = when_ready_is(&s, 503, || {
            http_request(s.http, "POST", "/json", None, json);
        });
        let (status, seen) = next(&mut watch, &s).await;
        assert_eq!(status, NOT_SERVING, "{}", s.log());
        lags.push(seen.saturating_duration_since(off));

        // Redis back: the store's probe closes the breaker.
        redis.resume();
        let on = when_ready_is(&s, 200, || {});
        let (status, seen) = next(&mut watch, &s).await;
        assert_eq!(status, SERVING, "{}", s.log());
        lags.push(seen.saturating_duration_since(on));
    }
    eprintln!("gRPC health behind /ready (outage, recovery, ...): {lags:?}");
    // Polling every 500 ms, health lagged by up to that much each way;
    // it now follows within a loaded machine's scheduling delays.
    for lag in lags {
        assert!(
            lag < Duration::from_millis(200),
            "health lagged {lag:?} behind /ready; log:\n{}",
            s.log()
        );
    }
}

/// A shaper of 30 r/m (one every 2 s), a burst of 5.
const SHAPER: &str = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {algorithm: shaper, rate: 30r/m, burst: 5}\n";

const OK: i32 = 1;
const OVER_LIMIT: i32 = 2;

/// One `ShouldRateLimit` call for `user`.
async fn rls(send: &mut SendRequest<Full<Bytes>>, port: u16, user: &str) -> RateLimitResponse {
    let req = rls_request(port, Full::new(user_frame("d", user)));
    let resp = send.send_request(req).await.unwrap();
    let data = resp.into_body().collect().await.unwrap().to_bytes();
    RateLimitResponse::decode(&data[5..]).unwrap()
}

/// One `/json` call for `user`: the status and the body.
fn json(s: &Floodgate, user: &str) -> (u16, Value) {
    let body = format!(
        r#"{{"domain":"d","descriptors":[{{"entries":[{{"key":"user","value":"{user}"}}]}}]}}"#
    );
    let (status, text) = http_request(s.http, "POST", "/json", None, body.as_bytes()).unwrap();
    (status, serde_json::from_str(&text).unwrap())
}

/// The delay an RLS answer carries (`dynamic_metadata.delay_ms`).
fn carried(r: &RateLimitResponse) -> Option<f64> {
    let field = r.dynamic_metadata.as_ref()?.fields.get("delay_ms")?;
    match field.kind {
        Some(prost_types::value::Kind::NumberValue(ms)) => Some(ms),
        _ => None,
    }
}

/// By default a call the shaper would delay is refused, over gRPC and
/// `/json` alike: `OVER_LIMIT` with the delay as its reset (2 s), charged
/// nothing — however many are refused, a call sent once the delay is over
/// passes, without a delay. In memory and on Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shapers_delay_is_refused_over_rls_and_charges_nothing() {
    refused_and_uncharged(SHAPER).await;
    let redis = Redis::start();
    let store = format!("store:\n  backend: redis\n  url: {}\n", redis.addr());
    refused_and_uncharged(&(store + SHAPER)).await;
}

/// [`a_shapers_delay_is_refused_over_rls_and_charges_nothing`] on the
/// service `config` starts.
async fn refused_and_uncharged(config: &str) {
    let s = Floodgate::start(bin(), config, &[], &[]);
    let mut send = h2_connect(s.grpc).await;
    let first = Instant::now();
    assert_eq!(rls(&mut send, s.grpc, "g").await.overall_code, OK);
    assert_eq!(json(&s, "j").0, 200);
    for _ in 0..5 {
        let r = rls(&mut send, s.grpc, "g").await;
        assert_eq!(r.overall_code, OVER_LIMIT, "{r:?}");
        let status = &r.statuses[0];
        assert_eq!((status.code, status.limit_remaining), (OVER_LIMIT, 0));
        assert_eq!(status.duration_until_reset.unwrap().seconds, 2, "{r:?}");
        assert_eq!(carried(&r), None);
        let (code, body) = json(&s, "j");
        assert_eq!(code, 429, "{body}");
        assert_eq!(body["statuses"][0]["durationUntilReset"], "2s", "{body}");
        assert!(body.get("dynamicMetadata").is_none(), "{body}");
    }
    // The refused calls took nothing: once the 2 s are over, a call
    // passes at once (charged, each refused one would have added 2 s).
    let mut grpc_passed = None;
    let mut json_passed = None;
    while grpc_passed.is_none() || json_passed.is_none() {
        assert!(
            first.elapsed() < Duration::from_secs(6),
            "still refused; log:\n{}",
            s.log()
        );
        if grpc_passed.is_none() {
            let r = rls(&mut send, s.grpc, "g").await;
            if r.overall_code == OK {
                assert_eq!(carried(&r), None, "{r:?}");
                grpc_passed = Some(first.elapsed());
            }
        }
        if json_passed.is_none() && json(&s, "j").0 == 200 {
            json_passed = Some(first.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for passed in [grpc_passed, json_passed] {
        assert!(
            passed.unwrap() >= Duration::from_millis(1_900),
            "{passed:?}"
        );
    }
}

/// With `server.rls_delayed: ok`, a call the shaper delays is admitted at
/// once and charged (as `nodelay` would), its delay carried in
/// `dynamic_metadata`: 2 s more for each call of the burst, and the burst
/// spent, the next call is over the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_rls_delayed_ok_a_delay_is_admitted_charged_and_carried() {
    let s = Floodgate::start(bin(), SHAPER, &["--rls-delayed", "ok"], &[]);
    let mut send = h2_connect(s.grpc).await;
    let r = rls(&mut send, s.grpc, "g").await;
    assert_eq!((r.overall_code, carried(&r)), (OK, None));
    let (code, body) = json(&s, "j");
    assert_eq!(code, 200);
    assert!(body.get("dynamicMetadata").is_none(), "{body}");
    for k in 1..=5 {
        // 2 s per call ahead of the rate, less what drained since (1 ms
        // of delay per ms: up to 1.5 s on a slow machine).
        let expected = 2_000.0 * f64::from(k);
        let r = rls(&mut send, s.grpc, "g").await;
        assert_eq!(r.overall_code, OK, "{r:?}");
        let delay = carried(&r).expect("a delay carried");
        assert!(
            delay <= expected && delay > expected - 1_500.0,
            "{delay} for call {k}"
        );
        let (code, body) = json(&s, "j");
        assert_eq!(code, 200, "{body}");
        let delay = body["dynamicMetadata"]["delay_ms"].as_f64().unwrap();
        assert!(delay <= expected && delay > expected - 1_500.0, "{body}");
    }
    let r = rls(&mut send, s.grpc, "g").await;
    assert_eq!((r.overall_code, carried(&r)), (OVER_LIMIT, None), "{r:?}");
    assert_eq!(json(&s, "j").0, 429);
}
