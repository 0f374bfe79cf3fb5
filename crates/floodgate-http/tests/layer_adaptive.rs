//! The layer's adaptive concurrency limit: classes admitted exactly below
//! their share of the limit, shed with the contract's 503 otherwise; the
//! upstream's 503 answers lower the limit, and it recovers when they stop.

use crate::support;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate::ManualClock;
use floodgate_http::FloodgateLayer;
use floodgate_policy::MemoryBackend;
use http_body_util::Full;
use support::{engine_with, layer_for, manual};

type Layer = FloodgateLayer<MemoryBackend, Arc<ManualClock>>;

const CONFIG: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: generic_key
        rate_limit: {requests: 1000000, per: 1s}
http:
  domain: api
  descriptors:
    - [{generic: {value: all}}]
  layer:
    shedding:
      retry_after: 1s
      low_priority: {header: {name: x-priority, values: [low]}}
      critical: {header: {name: x-priority, values: [critical]}}
      adaptive: {min: 1, max: 100, initial: 4, interval: 10ms, min_samples: 5, probe_every: 0}
"#;

fn layer() -> (Layer, Arc<ManualClock>) {
    let clock = manual();
    (layer_for(engine_with(CONFIG, clock.clone()), CONFIG), clock)
}

fn request(priority: &str) -> http::Request<()> {
    http::Request::get("/")
        .header("x-priority", priority)
        .body(())
        .unwrap()
}

/// Starts a request whose inner service answers `status` once polled; the
/// layer admits or sheds it at once.
fn start(
    layer: &Layer,
    priority: &str,
    status: u16,
) -> impl Future<Output = http::Response<floodgate_http::layer::FloodgateBody<Full<Bytes>>>> {
    let fut = layer.serve(None, request(priority), move |_req| async move {
        let mut res = http::Response::new(Full::new(Bytes::from_static(b"ok")));
        *res.status_mut() = http::StatusCode::from_u16(status).unwrap();
        Ok::<_, Infallible>(res)
    });
    async move { fut.await.unwrap() }
}

#[tokio::test]
async fn each_class_is_admitted_below_its_share_of_the_limit() {
    let (layer, _clock) = layer();
    // Limit 4: sheddable below 2 in flight, default below 3, critical 4.
    let held = [start(&layer, "default", 200), start(&layer, "default", 200)];
    assert_eq!(layer.in_flight(), 2);
    let shed = start(&layer, "low", 200).await;
    assert_eq!(shed.status(), 503);
    assert_eq!(shed.headers()["retry-after"], "1");
    let third = start(&layer, "default", 200);
    assert_eq!(start(&layer, "default", 200).await.status(), 503);
    let critical = start(&layer, "critical", 200);
    assert_eq!(layer.in_flight(), 4);
    assert_eq!(start(&layer, "critical", 200).await.status(), 503);
    drop((held, third, critical));
    assert_eq!(layer.in_flight(), 0);
    assert_eq!(start(&layer, "low", 200).await.status(), 200);
}

#[tokio::test]
async fn upstream_overload_answers_lower_the_limit_and_it_recovers() {
    let (layer, clock) = layer();
    let run = async |status: u16, n: usize| {
        for _ in 0..n {
            let res = start(&layer, "default", status);
            clock.advance(Duration::from_millis(5));
            drop(res.await);
        }
    };
    run(200, 40).await;
    let before = layer.adaptive_limit().unwrap();
    run(503, 200).await;
    assert_eq!(layer.adaptive_limit(), Some(1));
    // One request at a time uses a limit of 5 at most (it grows while
    // a quarter of it is in use).
    run(200, 400).await;
    assert_eq!((before, layer.adaptive_limit()), (5, Some(5)));
}
