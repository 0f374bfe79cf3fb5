//! The upstream connection pool: idle connections are closed after
//! `pool_idle_timeout`, concurrent requests open connections as needed and
//! keep at most `pool_max_idle` of them.

mod support;

use std::time::Duration;

use support::{ConfigFile, gateway, h1, upstream};

fn config(up: &str, extra: &str) -> String {
    format!("gateway:\n  upstream:\n    url: {up}\n{extra}server: {{reload_interval: 0}}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_expire() {
    let up = upstream().await;
    let url = format!("http://{}", up.addr);
    let file = ConfigFile::new(&config(&url, "    pool_idle_timeout: 200ms\n"));
    let gw = gateway(&file, &url).await;
    let c = h1();
    for _ in 0..3 {
        let r = c
            .get(format!("http://{}/", gw.addr()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
    }
    assert_eq!(up.connections(), 1, "reused while fresh");
    assert_eq!(gw.gateway().proxy().upstream().idle_connections(), 1);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        gw.gateway().proxy().upstream().idle_connections(),
        0,
        "closed once idle for the timeout"
    );
    let r = c
        .get(format!("http://{}/", gw.addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(up.connections(), 2);
    // Quickly, even with a client connection that never sent a request
    // (clients sometimes open one they do not use).
    let drained = tokio::time::timeout(Duration::from_secs(3), gw.shutdown()).await;
    assert_eq!(drained.ok(), Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_keep_at_most_max_idle() {
    let up = upstream().await;
    let url = format!("http://{}", up.addr);
    let file = ConfigFile::new(&config(&url, "    pool_max_idle: 2\n"));
    let gw = gateway(&file, &url).await;
    let addr = gw.addr();
    // Eight slow requests at once: eight connections.
    let calls: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(async move {
                let r = h1()
                    .get(format!("http://{addr}/slow?ms=300"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                r.bytes().await.unwrap();
            })
        })
        .collect();
    for c in calls {
        c.await.unwrap();
    }
    assert_eq!(up.connections(), 8);
    assert_eq!(gw.gateway().proxy().upstream().idle_connections(), 2);
    // Quickly, even with a client connection that never sent a request
    // (clients sometimes open one they do not use).
    let drained = tokio::time::timeout(Duration::from_secs(3), gw.shutdown()).await;
    assert_eq!(drained.ok(), Some(true));
}
