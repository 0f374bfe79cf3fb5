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
) -> impl Future<Output = http::Response<floodgate_http::layer::FloodgateBody<Full<Bytes>>>> + use<>
{
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

/// A layer whose adaptive limit is pinned at 1, with a queue `queue`.
fn queued_layer(queue: &str) -> (Layer, Arc<ManualClock>) {
    let config = CONFIG.replace(
        "adaptive: {min: 1, max: 100, initial: 4,",
        &format!("adaptive: {{queue: {queue}, min: 1, max: 1, initial: 1,"),
    );
    let clock = manual();
    (
        layer_for(engine_with(&config, clock.clone()), &config),
        clock,
    )
}

/// Starts a request whose inner service answers 200 once `go` is told
/// (or dropped).
fn held(
    layer: &Layer,
    priority: &str,
) -> (
    impl Future<Output = http::Response<floodgate_http::layer::FloodgateBody<Full<Bytes>>>> + use<>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let fut = layer.serve(None, request(priority), move |_req| async move {
        let _ = wait.await;
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    (async move { fut.await.unwrap() }, go)
}

#[tokio::test]
async fn a_queued_request_is_admitted_when_a_slot_frees() {
    let (layer, _clock) = queued_layer("{order: fifo, timeout: 60s}");
    let (first, go) = held(&layer, "default");
    let first = tokio::spawn(first);
    let second = tokio::spawn(start(&layer, "default", 200));
    assert_eq!(layer.adaptive_waiting(), Some(1));
    assert_eq!(layer.in_flight(), 2);
    go.send(()).unwrap();
    drop(first.await.unwrap());
    assert_eq!(second.await.unwrap().status(), 200);
    assert_eq!((layer.adaptive_waiting(), layer.in_flight()), (Some(0), 0));
}

#[tokio::test]
async fn the_highest_class_waiting_gets_the_slot() {
    let (layer, _clock) = queued_layer("{order: fifo, timeout: 60s}");
    let (first, go) = held(&layer, "critical");
    let first = tokio::spawn(first);
    let (low, low_go) = held(&layer, "low");
    let (critical, critical_go) = held(&layer, "critical");
    let (low, critical) = (tokio::spawn(low), tokio::spawn(critical));
    assert_eq!(layer.adaptive_waiting(), Some(2));
    go.send(()).unwrap();
    drop(first.await.unwrap());
    // The critical request has the slot; the sheddable one waits on.
    critical_go.send(()).unwrap();
    assert_eq!(critical.await.unwrap().status(), 200);
    assert!(!low.is_finished());
    low_go.send(()).unwrap();
    assert_eq!(low.await.unwrap().status(), 200);
}

#[tokio::test(start_paused = true)]
async fn a_request_waits_no_longer_than_its_bound() {
    let (layer, _clock) = queued_layer("{order: lifo, timeout: 50ms}");
    let (first, _go) = held(&layer, "default");
    let first = tokio::spawn(first);
    let waited = tokio::time::Instant::now();
    let shed = start(&layer, "default", 200).await;
    assert_eq!(shed.status(), 503);
    assert_eq!(shed.headers()["retry-after"], "1");
    assert_eq!(waited.elapsed(), std::time::Duration::from_millis(50));
    assert_eq!((layer.adaptive_waiting(), layer.in_flight()), (Some(0), 1));
    first.abort();
}

#[tokio::test]
async fn a_waiter_whose_client_goes_away_leaves_the_queue_and_no_slot() {
    let (layer, _clock) = queued_layer("{order: fifo, timeout: 60s}");
    let (first, go) = held(&layer, "default");
    let first = tokio::spawn(first);
    drop(start(&layer, "default", 200));
    assert_eq!((layer.adaptive_waiting(), layer.in_flight()), (Some(0), 1));
    go.send(()).unwrap();
    drop(first.await.unwrap());
    assert_eq!(layer.in_flight(), 0);
    assert_eq!(start(&layer, "default", 200).await.status(), 200);
}

#[tokio::test]
async fn a_standing_queue_sheds_a_request_that_would_wait_past_its_target_at_once() {
    let (layer, clock) = queued_layer("{order: codel, timeout: 60s, target: 5ms, interval: 100ms}");
    // Requests of 50 ms one after the other: a slot frees every 50 ms.
    for _ in 0..20 {
        let res = start(&layer, "default", 200);
        clock.advance(Duration::from_millis(50));
        drop(res.await);
    }
    let (first, go) = held(&layer, "default");
    let first = tokio::spawn(first);
    // The queue empties now and then: a wait of 50 ms is within 60 s.
    let second = tokio::spawn(start(&layer, "default", 200));
    assert_eq!(layer.adaptive_waiting(), Some(1));
    // It has stood for 100 ms: 50 ms is past the 5 ms target.
    clock.advance(Duration::from_millis(100));
    let shed = start(&layer, "default", 200).await;
    assert_eq!(shed.status(), 503);
    assert_eq!(layer.adaptive_waiting(), Some(1));
    go.send(()).unwrap();
    drop(first.await.unwrap());
    assert_eq!(second.await.unwrap().status(), 200);
}

#[tokio::test]
async fn a_higher_class_pushes_a_lower_one_out_of_a_full_queue_which_is_shed_then() {
    let (layer, _clock) = queued_layer("{max_waiting: 1, order: fifo, timeout: 60s}");
    let (first, go) = held(&layer, "critical");
    let first = tokio::spawn(first);
    let low = tokio::spawn(start(&layer, "low", 200));
    let critical = tokio::spawn(start(&layer, "critical", 200));
    let low = low.await.unwrap();
    assert_eq!(low.status(), 503);
    assert_eq!(low.headers()["retry-after"], "1");
    assert_eq!(layer.adaptive_waiting(), Some(1));
    go.send(()).unwrap();
    drop(first.await.unwrap());
    assert_eq!(critical.await.unwrap().status(), 200);
}
