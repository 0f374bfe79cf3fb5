//! The layer's release path as hostile clients drive it: connections to a
//! concurrency-limited route dropped at every point of the exchange (before
//! the response, after its head, mid-body, after the body). The permit a
//! request holds never leaves the process, and each response gives back
//! what its permit took, once: afterwards the limit is whole and exact (not
//! a unit freed twice), every release found its units, and a normal client
//! was served all along.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use floodgate::SystemClock;
use floodgate_http::layer::LayerStats;
use support::{app, client, engine_with, layer_for, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const RULES: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: route
        value: /slow
        rate_limit: {name: slow-inflight, algorithm: concurrency, max: 2}
      - key: route
        value: /
        rate_limit: {requests: 1000000, per: 1h}
http:
  domain: api
  routes: ["/slow", "/"]
  descriptors:
    - [route]
"#;

/// Sends `GET /slow` on a connection of its own and drops it after reading
/// `read` bytes of the response (0: before any); the status line read, if
/// any.
async fn hostile(addr: &str, read: usize) -> Option<String> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // (Closed by the server after a whole response.)
    s.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while got.len() < read {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    drop(s);
    let text = String::from_utf8_lossy(&got);
    text.lines().next().map(str::to_owned)
}

/// Opens `GET /slow` and keeps its body unread: the status.
async fn hold(c: &reqwest::Client, url: &str) -> (u16, reqwest::Response) {
    let r = c.get(format!("{url}/slow")).send().await.unwrap();
    (r.status().as_u16(), r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_give_back_what_they_took_once() {
    let engine = engine_with(RULES, SystemClock);
    let layer = layer_for(engine.clone(), RULES);
    let url = serve(app(layer.clone())).await;
    let addr = url.trim_start_matches("http://").to_owned();

    // A normal client on `/`, through the limiter too, all along.
    let stop = Arc::new(AtomicBool::new(false));
    let normal = tokio::spawn({
        let (url, stop) = (url.clone(), stop.clone());
        async move {
            let c = client();
            let mut took = Vec::new();
            while took.len() < 5 || !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let r = c.get(format!("{url}/")).send().await.unwrap();
                assert_eq!(r.status(), 200);
                assert_eq!(r.text().await.unwrap(), "ok");
                took.push(started.elapsed());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            took
        }
    });

    // Waves of hostile connections, each dropped at its own point: before
    // the response, in its head, after the head, mid-body, after the body
    // (5 chunks of 6 bytes after a head of about 250).
    let mut admitted = 0;
    for wave in 0..3 {
        let tasks: Vec<_> = [0usize, 10, 200, 300, 320, 10_000]
            .into_iter()
            .map(|read| {
                let addr = addr.clone();
                tokio::spawn(async move { hostile(&addr, read + wave).await })
            })
            .collect();
        for t in tasks {
            if let Some(line) = t.await.unwrap() {
                assert!(
                    line.starts_with("HTTP/1.1 200") || line.starts_with("HTTP/1.1 429"),
                    "{line}"
                );
                admitted += usize::from(line.starts_with("HTTP/1.1 200"));
            }
        }
    }
    assert!(admitted >= 3, "{admitted} admitted");

    // Every dropped request has given its unit back (the server notices
    // a closed connection at its next write).
    let start = Instant::now();
    while engine.backend().held_permits() > 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut took = normal.await.unwrap();
    took.sort_unstable();
    let median = took[took.len() / 2];
    assert!(
        median < Duration::from_millis(100),
        "normal client: median {median:?} of {}",
        took.len()
    );

    // The limit is whole and exact: two in flight, not a third.
    let c = client();
    let (first, _a) = hold(&c, &url).await;
    let (second, _b) = hold(&c, &url).await;
    let (third, _c) = hold(&c, &url).await;
    assert_eq!((first, second, third), (200, 200, 429));
    assert_eq!(engine.backend().held_permits(), 2);
    // Each release found the units its permit took.
    let stats = layer.stats();
    assert_eq!(LayerStats::get(&stats.release_not_held), 0);
    assert_eq!(LayerStats::get(&stats.release_failed), 0);
    assert_eq!(LayerStats::get(&stats.release_lost), 0);
}
