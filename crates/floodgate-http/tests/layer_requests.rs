//! `floodgate_requests_total{api="http"}`: the layer counts each request
//! once, by the outcome its client saw — allowed, delayed (once its delay
//! is over), denied (by a rule, a concurrency queue, or for want of a
//! delay slot), shed, failed open, failed closed.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use floodgate::SystemClock;
use floodgate_http::layer::RequestResult;
use floodgate_policy::engine::RequestLimits;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::{app, client, engine_with, layer_for, serve, wait_until};

/// The counts of every result, in [`RequestResult::ALL`]'s order.
fn counts(snapshotter: &Snapshotter) -> [u64; 7] {
    let mut out = [0; 7];
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if key.name() != "floodgate_requests_total" {
            continue;
        }
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
        };
        assert_eq!(label("api").as_deref(), Some("http"));
        let result = label("result").unwrap();
        let i = RequestResult::ALL
            .iter()
            .position(|r| r.label() == result)
            .unwrap();
        if let DebugValue::Counter(n) = value {
            out[i] = n;
        }
    }
    out
}

/// `[allowed, delayed, denied, shed, failed_open, failed_closed, error]`.
fn expect(allowed: u64, delayed: u64, denied: u64, shed: u64, open: u64, closed: u64) -> [u64; 7] {
    [allowed, delayed, denied, shed, open, closed, 0]
}

const SHAPER: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: generic_key
        rate_limit: {name: smooth, algorithm: shaper, rate: 20r/m, burst: 10}
http:
  domain: api
  descriptors:
    - [{generic: {value: all}}]
  layer: {max_delayed: 2}
"#;

/// Five against a shaper with two delay slots: the first passes, the next
/// two wait their turn (three and six seconds), and the last two, sent
/// once both slots are seen taken, are rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_requests_are_counted_once_they_pass() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let layer = metrics::with_local_recorder(&recorder, || {
        layer_for(engine_with(SHAPER, SystemClock), SHAPER)
    });
    let url = serve(app(layer.clone())).await;
    let c = client();
    let send = |n: usize| {
        (0..n)
            .map(|_| {
                let (c, url) = (c.clone(), url.clone());
                tokio::spawn(async move {
                    c.get(format!("{url}/"))
                        .send()
                        .await
                        .unwrap()
                        .status()
                        .as_u16()
                })
            })
            .collect::<Vec<_>>()
    };
    let mut statuses = Vec::new();
    for t in send(1) {
        statuses.push(t.await.unwrap());
    }
    let waiting = send(2);
    wait_until("two requests waiting", || layer.delayed() == 2).await;
    for t in send(2).into_iter().chain(waiting) {
        statuses.push(t.await.unwrap());
    }
    statuses.sort();
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert_eq!(counts(&snapshotter), expect(1, 2, 2, 0, 0, 0));
}

const SHEDDING: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: generic_key
        rate_limit: {requests: 1000, per: 1s}
http:
  domain: api
  routes: ["/reports/{id}", "/wait"]
  descriptors:
    - [{generic: {value: all}}]
  layer:
    shedding:
      low_priority_above: 1
      low_priority: {routes: ["/reports/{id}"]}
"#;

/// A low-priority request while another is in flight is shed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shed_requests_are_counted_shed() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let layer = metrics::with_local_recorder(&recorder, || {
        layer_for(engine_with(SHEDDING, SystemClock), SHEDDING)
    });
    let url = serve(app(layer.clone())).await;
    let c = client();
    let busy = tokio::spawn({
        let (c, url) = (c.clone(), url.clone());
        async move { c.get(format!("{url}/wait")).send().await.unwrap().status() }
    });
    while layer.in_flight() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let shed = c.get(format!("{url}/reports/1")).send().await.unwrap();
    assert_eq!(shed.status(), 503);
    assert_eq!(busy.await.unwrap(), 200);
    assert_eq!(counts(&snapshotter), expect(1, 0, 0, 1, 0, 0));
}

const FAILING: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: remote_address
        rate_limit: {requests: 1, per: 1m}
http:
  domain: api
  descriptors:
    - [client_ip]
"#;

/// An engine that cannot decide (an entry over its size limit): failed
/// open by default, failed closed with `on_error: reject`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiter_failures_are_counted_failed_open_or_closed() {
    for (extra, status, expected) in [
        ("", 200, expect(0, 0, 0, 0, 2, 0)),
        (
            "  layer: {on_error: reject}\n",
            503,
            expect(0, 0, 0, 0, 0, 2),
        ),
    ] {
        let text = format!("{FAILING}{extra}");
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let layer = metrics::with_local_recorder(&recorder, || {
            let limits = RequestLimits {
                max_entry_bytes: 4,
                ..RequestLimits::default()
            };
            let engine = engine_with(&text, SystemClock);
            let engine = Arc::try_unwrap(engine)
                .ok()
                .unwrap()
                .with_request_limits(limits);
            layer_for(Arc::new(engine), &text)
        });
        let url = serve(app(layer)).await;
        let c = client();
        for _ in 0..2 {
            assert_eq!(
                c.get(format!("{url}/")).send().await.unwrap().status(),
                status
            );
        }
        assert_eq!(counts(&snapshotter), expected, "{extra}");
    }
}

/// One request allowed, the next denied by the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_and_denied() {
    let text = FAILING;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let layer = metrics::with_local_recorder(&recorder, || {
        layer_for(engine_with(text, SystemClock), text)
    });
    let url = serve(app(layer)).await;
    let c = client();
    assert_eq!(c.get(format!("{url}/")).send().await.unwrap().status(), 200);
    assert_eq!(c.get(format!("{url}/")).send().await.unwrap().status(), 429);
    assert_eq!(counts(&snapshotter), expect(1, 0, 1, 0, 0, 0));
}
