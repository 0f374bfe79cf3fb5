//! Hot reload under traffic and graceful shutdown.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::{ConfigFile, eventually, gateway, h1, upstream};

fn config(requests: u64, status: u16) -> String {
    format!(
        r#"
http:
  domain: gw
  descriptors:
    - [{{header: {{name: x-limit-key, key: key}}}}]
  responses: {{status: {status}}}
domains:
  - domain: gw
    descriptors:
      - key: key
        rate_limit: {{name: per-key, requests: {requests}, per: 1m}}
server: {{reload_interval: 50ms, shutdown_grace: 5s}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_traffic() {
    let up = upstream().await;
    let file = ConfigFile::new(&config(1_000_000, 429));
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let url = format!("http://{}/", gw.addr());
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let mut workers = Vec::new();
    for w in 0..4 {
        let (url, stop, counts) = (url.clone(), stop.clone(), counts.clone());
        workers.push(tokio::spawn(async move {
            let c = h1();
            while !stop.load(Ordering::Relaxed) {
                let r = c
                    .get(&url)
                    .header("x-limit-key", format!("k{w}"))
                    .send()
                    .await
                    .unwrap();
                let i = match r.status().as_u16() {
                    200 => 0,
                    503 => 1,
                    s => panic!("unexpected status {s}"),
                };
                counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    assert!(
        eventually(Duration::from_secs(10), || counts[0]
            .load(Ordering::Relaxed)
            > 0)
        .await,
        "no request passed"
    );
    // Every key has used its first 200 and more: a limit of 1 denies them
    // all, with the status the new `http:` section names.
    file.rewrite(&config(1, 503));
    let deadline = Instant::now() + Duration::from_secs(5);
    let before = counts[1].load(Ordering::Relaxed);
    while counts[1].load(Ordering::Relaxed) < before + 50 {
        assert!(Instant::now() < deadline, "the reload never took effect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // An invalid file is rejected; the running configuration stays.
    std::fs::write(
        &file.path,
        "domains: [{domain: gw, descriptors: [{key: key, rate_limit: {requests: -1}}]}]\n",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let denied = counts[1].load(Ordering::Relaxed);
    assert!(
        eventually(Duration::from_secs(10), || counts[1]
            .load(Ordering::Relaxed)
            > denied)
        .await,
        "still limiting"
    );
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_requests_in_flight() {
    let up = upstream().await;
    let file = ConfigFile::new(&config(100, 429));
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let addr = gw.addr();
    let c = h1();
    let slow = tokio::spawn({
        let c = c.clone();
        async move {
            c.get(format!("http://{addr}/slow?ms=800"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    });
    // The request is in flight: the upstream holds it.
    assert!(
        eventually(Duration::from_secs(10), || up.requests() >= 1).await,
        "the request never reached the upstream"
    );
    let started = Instant::now();
    let drained = gw.shutdown().await;
    assert!(drained, "every request finished within the grace period");
    assert_eq!(slow.await.unwrap(), "slow");
    assert!(started.elapsed() >= Duration::from_millis(400));
    // No longer listening.
    assert!(
        c.get(format!("http://{addr}/"))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_err()
    );
}

/// A rule the Redis store cannot decide exactly (a period of 1.5 µs) stops
/// the gateway at startup, naming it, before any connection is attempted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_redis_cannot_decide_stops_startup() {
    let file = ConfigFile::new(
        r#"gateway:
  listen: 127.0.0.1:0
  upstream: {url: "http://127.0.0.1:1"}
store:
  backend: redis
  url: 127.0.0.1:1
  timeout: 20ms
  connect_timeout: 20ms
domains:
  - domain: gw
    descriptors:
      - key: odd
        rate_limit: {name: too-fine, algorithm: token_bucket, requests: 1, per: 1500ns}
"#,
    );
    let flags =
        floodgate_runtime::settings::Flags::new().with("config", file.path.display().to_string());
    let loaded = floodgate_gateway::load(&flags, &floodgate_runtime::settings::Env::new(&|_| None))
        .unwrap_or_else(|e| panic!("{e}"));
    let err = match floodgate_gateway::start(loaded, None).await {
        Ok(_) => panic!("startup must fail"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("too-fine"), "{err}");
}
