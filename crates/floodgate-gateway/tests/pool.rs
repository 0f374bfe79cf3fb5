//! The upstream connection pool: idle connections are closed after
//! `pool_idle_timeout`, concurrent requests open connections as needed and
//! keep at most `pool_max_idle` of them.

use crate::support;

use std::time::Duration;

use support::{ConfigFile, eventually, gateway, get_ok, h1, upstream};

fn config(up: &str, extra: &str) -> String {
    format!("gateway:\n  upstream:\n    url: {up}\n{extra}server: {{reload_interval: 0}}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_expire() {
    let up = upstream().await;
    let url = format!("http://{}", up.addr);
    // Long enough that the three requests, one after the other, find the
    // connection fresh on a loaded machine.
    let file = ConfigFile::new(&config(&url, "    pool_idle_timeout: 1s\n"));
    let gw = gateway(&file, &url).await;
    let c = h1();
    for _ in 0..3 {
        get_ok(&c, gw.addr(), "/").await;
    }
    assert_eq!(up.connections(), 1, "reused while fresh");
    assert_eq!(gw.gateway().proxy().upstream().idle_connections(), 1);
    assert!(
        eventually(Duration::from_secs(10), || gw
            .gateway()
            .proxy()
            .upstream()
            .idle_connections()
            == 0)
        .await,
        "closed once idle for the timeout"
    );
    get_ok(&c, gw.addr(), "/").await;
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
                get_ok(&h1(), addr, "/slow?ms=300").await;
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

/// An upstream that answers each connection's first request, then closes
/// it — with `Connection: close`, or silently (as a server whose keep-alive
/// timeout fires right after a response). Returns its address and how many
/// connections it accepted.
async fn one_shot_upstream(
    say_close: bool,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let close = if say_close {
                    "Connection: close\r\n"
                } else {
                    ""
                };
                let res = format!("HTTP/1.1 200 OK\r\n{close}Content-Length: 2\r\n\r\nok");
                let _ = s.write_all(res.as_bytes()).await;
            });
        }
    });
    (addr, accepted)
}

/// Connections the upstream closes (announced or not) are never handed to
/// a request as if open: every request is answered, on a new connection,
/// and the pool does not keep the closed ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_upstream_closes_are_replaced() {
    for say_close in [true, false] {
        let (addr, accepted) = one_shot_upstream(say_close).await;
        let url = format!("http://{addr}");
        let file = ConfigFile::new(&config(&url, "    pool_idle_timeout: 10s\n"));
        let gw = gateway(&file, &url).await;
        let c = h1();
        for _ in 0..20 {
            let body = get_ok(&c, gw.addr(), "/").await;
            assert_eq!(body, "ok", "Connection: close {say_close}");
            if !say_close {
                // Let the close reach the gateway before the next request
                // (otherwise the request may be written before the close
                // arrives, and be retried: also fine, but not this case).
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 20);
        // The reaper (every 5 s at this timeout) or the next checkout drops
        // them: none is left once closed connections are noticed.
        if say_close {
            assert_eq!(gw.gateway().proxy().upstream().idle_connections(), 0);
        }
        gw.shutdown().await;
    }
}

/// Requests with and without a body share the pool: whichever client
/// carries an exchange (the gateway's own for a `GET`, hyper's for a
/// `POST`), the connection it leaves idle serves the next request, and
/// `pool_max_idle` bounds them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_with_and_without_a_body_share_connections() {
    let up = upstream().await;
    let url = format!("http://{}", up.addr);
    let file = ConfigFile::new(&config(&url, "    pool_max_idle: 1\n"));
    let gw = gateway(&file, &url).await;
    let c = h1();
    for i in 0..3 {
        get_ok(&c, gw.addr(), "/").await;
        let r = c
            .post(format!("http://{}/echo", gw.addr()))
            .body(format!("upload {i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), format!("upload {i}"));
        // Hyper's connection task marks the connection ready for another
        // request once it has seen the response end: given time, so that
        // the next request finds it ready rather than open another.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    get_ok(&c, gw.addr(), "/").await;
    assert_eq!(up.requests(), 7);
    assert_eq!(up.connections(), 1, "one connection carried every exchange");
    assert_eq!(gw.gateway().proxy().upstream().idle_connections(), 1);
}
