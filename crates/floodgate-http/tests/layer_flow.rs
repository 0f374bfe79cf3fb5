//! The layer's flow control on a real socket: shaper delays and their
//! bounded queue, concurrency permits held until the body ends, priority
//! shedding, concurrency queues, and limiter failures.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::SystemClock;
use floodgate_http::layer::LayerStats;
use floodgate_policy::engine::RequestLimits;
use support::{app, client, engine_with, header, layer_for, serve, wait_until};

const SHAPER: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: generic_key
        rate_limit: {name: smooth, algorithm: shaper, rate: 10r/s, burst: 10}
http:
  domain: api
  descriptors:
    - [{generic: {value: all}}]
  layer: {max_delayed: MAX}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shaper_delays_are_slept_and_bounded() {
    let text = SHAPER.replace("MAX", "2");
    let layer = layer_for(engine_with(&text, SystemClock), &text);
    let url = serve(app(layer.clone())).await;
    let c = client();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let r = c.get(format!("{url}/")).send().await.unwrap();
            (
                r.status().as_u16(),
                start.elapsed(),
                header(&r, "retry-after").map(str::to_owned),
            )
        }));
        // Arrive in order, well within the first millisecond steps.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let ok: Vec<_> = results.iter().filter(|r| r.0 == 200).collect();
    let rejected: Vec<_> = results.iter().filter(|r| r.0 == 429).collect();
    // The first passes at once; two wait (the bound), the rest are rejected.
    assert_eq!(ok.len(), 3, "{results:?}");
    assert_eq!(rejected.len(), 2, "{results:?}");
    assert!(
        rejected.iter().all(|r| r.2.as_deref() == Some("1")),
        "{results:?}"
    );
    let mut times: Vec<_> = ok.iter().map(|r| r.1).collect();
    times.sort();
    assert!(times[0] < Duration::from_millis(90), "{times:?}");
    assert!(times[1] >= Duration::from_millis(90), "{times:?}");
    assert!(times[2] >= Duration::from_millis(180), "{times:?}");
    assert!(times[2] < Duration::from_millis(1000), "{times:?}");
    assert_eq!(LayerStats::get(&layer.stats().delay_queue_full), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_delay_frees_its_slot() {
    let text = SHAPER.replace("MAX", "1").replace("10r/s", "2r/s");
    let layer = layer_for(engine_with(&text, SystemClock), &text);
    let url = serve(app(layer.clone())).await;
    let c = client();
    assert_eq!(c.get(format!("{url}/")).send().await.unwrap().status(), 200);
    // The next one waits ~500 ms: give up after 100 ms.
    let gone = c
        .get(format!("{url}/"))
        .timeout(Duration::from_millis(100))
        .send()
        .await;
    assert!(gone.is_err(), "{gone:?}");
    // The server notices the closed connection and drops the request.
    wait_until("the delay slot to be freed", || layer.delayed() == 0).await;
    // The slot is available again: the next request is delayed, not rejected.
    let start = Instant::now();
    let r = c.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "{:?}",
        start.elapsed()
    );
}

const INFLIGHT: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: route
        value: /slow
        rate_limit: {name: slow-inflight, algorithm: concurrency, max: 1}
http:
  domain: api
  routes: ["/slow"]
  descriptors:
    - [route]
  responses: {retry_after_unknown: 1s}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_units_are_held_until_the_body_ends() {
    let layer = layer_for(engine_with(INFLIGHT, SystemClock), INFLIGHT);
    let url = serve(app(layer)).await;
    let c = client();
    let first = c.get(format!("{url}/slow")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(
        header(&first, "ratelimit-policy"),
        Some(r#""slow-inflight";q=1;qu="concurrent-requests""#)
    );
    assert_eq!(header(&first, "ratelimit"), Some(r#""slow-inflight";r=0"#));
    // Headers are in, the body is still streaming: the unit is held.
    let busy = c.get(format!("{url}/slow")).send().await.unwrap();
    assert_eq!(busy.status(), 429);
    assert_eq!(
        header(&busy, "retry-after"),
        Some("1"),
        "the configured default"
    );
    assert_eq!(header(&busy, "ratelimit"), Some(r#""slow-inflight";r=0"#));
    assert_eq!(first.text().await.unwrap(), "chunk\n".repeat(5));
    // Body done: released.
    let again = c.get(format!("{url}/slow")).send().await.unwrap();
    assert_eq!(again.status(), 200);
    // Cancelled mid-body: dropping the response closes the connection; the
    // server drops the body and releases the unit.
    drop(again);
    let start = Instant::now();
    loop {
        let r = c.get(format!("{url}/slow")).send().await.unwrap();
        if r.status() == 200 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(2), "never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // (Its body would end a second after it began.)
    assert!(
        start.elapsed() < Duration::from_millis(600),
        "released on cancel, not at body end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn low_priority_is_shed_first() {
    let text = r#"
domains:
  - domain: api
    descriptors:
      - key: generic_key
        rate_limit: {requests: 1000, per: 1s}
http:
  domain: api
  routes: ["/reports/{id}", "/charges", "/wait"]
  descriptors:
    - [{generic: {value: all}}]
  layer:
    shedding:
      low_priority_above: 1
      max_in_flight: 3
      retry_after: 2s
      low_priority:
        routes: ["/reports/{id}"]
        header: {name: x-priority, values: [low]}
"#;
    let layer = layer_for(engine_with(text, SystemClock), text);
    let url = serve(app(layer.clone())).await;
    let c = client();
    // Idle: low priority passes.
    assert_eq!(
        c.get(format!("{url}/reports/1"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // One critical request in flight.
    let busy = tokio::spawn({
        let (c, url) = (c.clone(), url.clone());
        async move { c.get(format!("{url}/wait")).send().await.unwrap().status() }
    });
    wait_until("a request in flight", || layer.in_flight() == 1).await;
    let shed = c.get(format!("{url}/reports/7")).send().await.unwrap();
    assert_eq!(shed.status(), 503);
    assert_eq!(header(&shed, "retry-after"), Some("2"));
    let body: serde_json::Value = serde_json::from_str(&shed.text().await.unwrap()).unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    );
    let by_header = c
        .get(format!("{url}/charges"))
        .header("x-priority", "LOW")
        .send()
        .await
        .unwrap();
    assert_eq!(by_header.status(), 503);
    // Critical traffic keeps its capacity.
    assert_eq!(
        c.get(format!("{url}/charges"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(busy.await.unwrap(), 200);
    wait_until("nothing in flight", || layer.in_flight() == 0).await;
    assert_eq!(
        c.get(format!("{url}/reports/7"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(LayerStats::get(&layer.stats().shed), 2);
}

const QUEUE: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: generic_key
        rate_limit: {requests: 1000, per: 1s}
http:
  domain: api
  descriptors:
    - [{generic: {value: all}}]
  layer:
    concurrency:
      global: {max: 1, queue: QUEUE, timeout: TIMEOUT}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_concurrency_queue_serves_in_order_and_times_out() {
    let text = QUEUE.replace("QUEUE", "2").replace("TIMEOUT", "2s");
    let layer = layer_for(engine_with(&text, SystemClock), &text);
    let url = serve(app(layer)).await;
    let c = client();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for path in ["wait", "wait", "", ""] {
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let r = c.get(format!("{url}/{path}")).send().await.unwrap();
            let status = r.status().as_u16();
            let body = r.text().await.unwrap();
            (status, start.elapsed(), body)
        }));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    // One in flight, two queued, the fourth over the queue: rejected at
    // once (sent at 90 ms; queued, it would wait for the two `/wait`s, to
    // 600 ms).
    assert_eq!(out[3].0, 429, "{out:?}");
    assert!(out[3].1 < Duration::from_millis(500), "{out:?}");
    assert!(out[3].2.contains("concurrency"), "{out:?}");
    assert_eq!((out[0].0, out[1].0, out[2].0), (200, 200, 200), "{out:?}");
    // Served in arrival order, each after the one before it.
    assert!(out[1].1 >= Duration::from_millis(600), "{out:?}");
    assert!(out[2].1 >= Duration::from_millis(600), "{out:?}");

    let text = QUEUE.replace("QUEUE", "4").replace("TIMEOUT", "150ms");
    let layer = layer_for(engine_with(&text, SystemClock), &text);
    let url = serve(app(layer)).await;
    let holder = tokio::spawn({
        let (c, url) = (c.clone(), url.clone());
        async move { c.get(format!("{url}/wait")).send().await.unwrap().status() }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t = Instant::now();
    let r = c.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
    // Rejected at its timeout, not served when the holder ends (250 ms
    // after it was sent: a 200); the bound leaves a loaded machine room.
    assert!(
        t.elapsed() < Duration::from_millis(600),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(header(&r, "ratelimit"), Some(r#""concurrency";r=0"#));
    assert_eq!(holder.await.unwrap(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_concurrency_queues_are_per_value() {
    let text = r#"
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {requests: 1000, per: 1s}
http:
  domain: api
  descriptors:
    - [{user: {extension: user}}]
  layer:
    concurrency:
      per_key: {key: user, max: 1, queue: 0}
"#;
    let layer = layer_for(engine_with(text, SystemClock), text);
    let url = serve(app(layer.clone())).await;
    let c = client();
    let alice = tokio::spawn({
        let (c, url) = (c.clone(), url.clone());
        async move {
            c.get(format!("{url}/wait"))
                .header("authorization", "User alice")
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    wait_until("alice in flight", || layer.keyed_queues() == 1).await;
    let r = c
        .get(format!("{url}/"))
        .header("authorization", "User alice")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some(r#""concurrency:user";q=1;qu="concurrent-requests""#)
    );
    let r = c
        .get(format!("{url}/"))
        .header("authorization", "User bob")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(alice.await.unwrap(), 200);
    wait_until("idle queues to be dropped", || layer.keyed_queues() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiter_errors_fail_open_or_closed() {
    // An engine that rejects long values: a real error path.
    let text = r#"
domains:
  - domain: api
    descriptors:
      - key: remote_address
        rate_limit: {algorithm: sliding_log, requests: 1, per: 1m}
http:
  domain: api
  descriptors:
    - [client_ip]
"#;
    let limits = RequestLimits {
        max_entry_bytes: 4,
        ..RequestLimits::default()
    };
    let engine = |text: &str| {
        let e = engine_with(text, SystemClock);
        let e = Arc::try_unwrap(e).ok().unwrap().with_request_limits(limits);
        Arc::new(e)
    };
    let layer = layer_for(engine(text), text);
    let url = serve(app(layer.clone())).await;
    let c = client();
    for _ in 0..3 {
        let r = c.get(format!("{url}/")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(header(&r, "ratelimit").is_none());
    }
    assert_eq!(LayerStats::get(&layer.stats().fail_open), 3);

    let text = format!("{text}  layer: {{on_error: reject}}\n");
    let layer = layer_for(engine(&text), &text);
    let url = serve(app(layer.clone())).await;
    let r = c.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(header(&r, "cache-control"), Some("no-store"));
    assert_eq!(LayerStats::get(&layer.stats().fail_closed), 1);
}

const DELAYED_AND_LIMITED: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: shaped
        rate_limit: {name: smooth, algorithm: shaper, rate: 10r/s, burst: 5}
http:
  domain: api
  routes: ["/reports/{id}"]
  descriptors:
    - [{header: {name: x-shaped, key: shaped}}]
  layer:
    shedding:
      low_priority_above: 1
      low_priority: {routes: ["/reports/{id}"]}
    concurrency:
      global: {max: 1, queue: 0, timeout: 100ms}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_requests_hold_no_permit_nor_place_in_flight() {
    let text = DELAYED_AND_LIMITED;
    // A fixed clock: the shaper's delays are exactly 100 and 200 ms.
    let layer = layer_for(engine_with(text, support::manual()), text);
    let url = serve(app(layer.clone())).await;
    let c = client();
    let shaped = |c: &reqwest::Client| {
        let (c, url) = (c.clone(), url.clone());
        async move {
            let start = Instant::now();
            let r = c
                .get(format!("{url}/"))
                .header("x-shaped", "a")
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), start.elapsed())
        }
    };
    assert_eq!(shaped(&c).await.0, 200);
    let first = tokio::spawn(shaped(&c));
    wait_until("one delayed", || layer.delayed() == 1).await;
    let second = tokio::spawn(shaped(&c));
    wait_until("two delayed", || layer.delayed() == 2).await;
    // Two requests are merely waiting out their delays: nothing is in
    // flight, the global permit is free, low priority is not shed.
    assert_eq!(layer.in_flight(), 0);
    let r = c.get(format!("{url}/reports/1")).send().await.unwrap();
    assert_eq!(r.status(), 200, "not shed, not queued out");
    assert_eq!(LayerStats::get(&layer.stats().shed), 0);
    assert_eq!(LayerStats::get(&layer.stats().concurrency_rejected), 0);
    // The delayed ones are served after their delays, with their permits.
    let (s1, t1) = first.await.unwrap();
    let (s2, t2) = second.await.unwrap();
    assert_eq!((s1, s2), (200, 200));
    assert!(t1 >= Duration::from_millis(100), "{t1:?}");
    assert!(t2 >= Duration::from_millis(150), "{t2:?}");
    wait_until("nothing in flight", || layer.in_flight() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_delay_queue_rejects_without_charging_and_names_the_shaper() {
    let text = SHAPER.replace("MAX", "1").replace("10r/s", "2r/s");
    // A fixed clock: the shaper's delays are exactly 500 ms per request
    // ahead in line.
    let layer = layer_for(engine_with(&text, support::manual()), &text);
    let url = serve(app(layer.clone())).await;
    let c = client();
    assert_eq!(c.get(format!("{url}/")).send().await.unwrap().status(), 200);
    // The next one waits 500 ms, in the only delay slot.
    let waiting = tokio::spawn({
        let (c, url) = (c.clone(), url.clone());
        async move { c.get(format!("{url}/")).send().await.unwrap().status() }
    });
    wait_until("the slot taken", || layer.delayed() == 1).await;
    // Two more would wait 1 s each: rejected, and not charged (else the
    // second would have to wait 1.5 s).
    for _ in 0..2 {
        let r = c.get(format!("{url}/")).send().await.unwrap();
        assert_eq!(r.status(), 429);
        assert_eq!(header(&r, "retry-after"), Some("1"));
        let current = header(&r, "ratelimit").unwrap().to_owned();
        assert_eq!(current, r#""smooth";r=0;t=1"#, "t equals Retry-After");
        let body: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        assert_eq!(body["violated-policies"], serde_json::json!(["smooth"]));
        assert_eq!(body["retry-after"], 1);
        assert!(
            body["detail"].as_str().unwrap().contains("smooth"),
            "{body}"
        );
    }
    assert_eq!(LayerStats::get(&layer.stats().delay_queue_full), 2);
    assert_eq!(waiting.await.unwrap(), 200);
    // The slot is free again: the next request waits its 1 s (nothing
    // was charged for the two rejections).
    let start = Instant::now();
    assert_eq!(c.get(format!("{url}/")).send().await.unwrap().status(), 200);
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(1000) && waited < Duration::from_millis(1400),
        "{waited:?}"
    );
}
