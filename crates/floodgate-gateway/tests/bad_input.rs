//! Hostile clients over raw TCP: smuggling attempts, invalid bytes, huge
//! heads, slowloris, spoofed `X-Forwarded-For`. None reaches the upstream;
//! everyone else keeps being served.

use crate::support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::{ConfigFile, eventually, gateway, h1, raw, status_of, upstream};

const CONFIG: &str = r#"
http:
  domain: gw
  descriptors:
    - [client_ip]
domains:
  - domain: gw
    descriptors:
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: sliding_log, requests: 3, per: 1m}
gateway:
  upstream: http://127.0.0.1:1
  limits: {header_read_timeout: 1s, max_header_bytes: 16KiB}
server: {reload_interval: 0}
"#;

const TRUSTING: &str = r#"
http:
  domain: gw
  client_ip: {trusted_hops: 1}
  descriptors:
    - [client_ip]
domains:
  - domain: gw
    descriptors:
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: sliding_log, requests: 1, per: 1m}
server: {reload_interval: 0}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_and_invalid_heads_are_rejected_before_the_upstream() {
    let up = upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let addr = gw.addr();
    let cases: &[(&str, &[u8], u16)] = &[
        (
            "conflicting Content-Length",
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
            400,
        ),
        (
            "Content-Length list",
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!",
            400,
        ),
        (
            "non-numeric Content-Length",
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello",
            400,
        ),
        (
            "Transfer-Encoding not ending in chunked",
            b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nhello",
            400,
        ),
        (
            "NUL in a value",
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n",
            400,
        ),
        (
            "space in a field name",
            b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: x\r\n\r\n",
            400,
        ),
        (
            "space before the colon",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\nhello",
            400,
        ),
        (
            "bare LF inside a value",
            b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\rX-B: 2\r\n\r\n",
            400,
        ),
        ("garbage request line", b"HELLO\r\n\r\n", 400),
    ];
    for (what, bytes, want) in cases {
        let text = raw(addr, bytes, Duration::from_secs(3));
        assert_eq!(status_of(&text), Some(*want), "{what}: {text:?}");
    }
    assert_eq!(up.requests(), 0, "nothing reached the upstream");

    // Content-Length with Transfer-Encoding: hyper lets chunked framing win
    // (RFC 9112 §6.3), drops the length, and closes the connection after
    // the response, so nothing can be smuggled behind it; the upstream gets
    // one consistent request.
    let text = raw(
        addr,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(3),
    );
    let status = status_of(&text);
    assert!(matches!(status, Some(200 | 400)), "{text:?}");
    if status == Some(200) {
        assert!(text.contains("\r\n\r\n5\r\nhello\r\n0\r\n"), "{text:?}");
        assert!(
            text.to_ascii_lowercase().contains("connection: close"),
            "{text:?}"
        );
        assert_eq!(
            text.matches("HTTP/1.1").count(),
            1,
            "no second response: {text:?}"
        );
    }
    assert!(up.requests() <= 1);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_heads_get_431() {
    let up = upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let big = "a".repeat(64 * 1024);
    let req = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
    let text = raw(gw.addr(), req.as_bytes(), Duration::from_secs(3));
    assert_eq!(
        status_of(&text),
        Some(431),
        "{}",
        &text[..text.len().min(200)]
    );
    let many: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let req = format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    let text = raw(gw.addr(), req.as_bytes(), Duration::from_secs(3));
    assert_eq!(status_of(&text), Some(431), "{text}");
    // Over HTTP/2 too: the header list is bounded.
    let r = support::h2()
        .get(format!("http://{}/", gw.addr()))
        .header("x-big", &big)
        .send()
        .await;
    assert!(r.map(|r| r.status() == 431).unwrap_or(true));
    assert_eq!(up.requests(), 0);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_is_disconnected_while_others_are_served() {
    let up = upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let addr = gw.addr();
    // Dribblers: one byte every 100 ms, a head that never ends; and one
    // that never sends anything.
    let dribblers: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                let started = Instant::now();
                let line = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ";
                for &b in line.iter().chain(std::iter::repeat(&b'a')) {
                    if s.write_all(&[b]).is_err() {
                        return started.elapsed();
                    }
                    std::thread::sleep(Duration::from_millis(100));
                    if started.elapsed() > Duration::from_secs(6) {
                        break;
                    }
                }
                started.elapsed()
            })
        })
        .collect();
    let silent = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 64];
        let _ = std::io::Read::read(&mut s, &mut buf);
        started.elapsed()
    });
    // Meanwhile a normal client is served, several times.
    let c = h1();
    for _ in 0..3 {
        let r = c.get(format!("http://{addr}/")).send().await.unwrap();
        assert!(r.status() == 200 || r.status() == 429);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for d in dribblers {
        let took = d.join().unwrap();
        assert!(took < Duration::from_secs(4), "dribbler kept for {took:?}");
    }
    let took = silent.join().unwrap();
    assert!(
        took < Duration::from_secs(3),
        "silent client kept for {took:?}"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_forwarded_for_is_trusted_only_when_configured() {
    let up = upstream().await;
    // Not trusted: every spoofed address is the same client (the peer).
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let c = h1();
    let mut statuses = Vec::new();
    for xff in [
        "203.0.113.1",
        "203.0.113.2",
        "garbage,,,",
        "999.1.1.1, ::zz",
    ] {
        let r = c
            .get(format!("http://{}/", gw.addr()))
            .header("x-forwarded-for", xff)
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    gw.shutdown().await;

    // Trusted (one hop): the rightmost entry is the client; a malformed
    // one falls back to the peer, never to the client's leftmost claim.
    let file = ConfigFile::new(TRUSTING);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let send = |xff: &'static str| {
        let c = c.clone();
        let url = format!("http://{}/", gw.addr());
        async move {
            c.get(url)
                .header("x-forwarded-for", xff)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(send("198.51.100.1").await, 200);
    assert_eq!(send("10.0.0.1, 198.51.100.2").await, 200);
    assert_eq!(send("198.51.100.2").await, 429, "same client");
    assert_eq!(send("not-an-ip").await, 200, "the peer's first");
    assert_eq!(send("1.2.3.4, ###").await, 429, "the peer again");
    assert_eq!(up.requests(), 3 + 3);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_wait_for_a_free_slot() {
    let up = upstream().await;
    let text = CONFIG.replace(
        "limits: {header_read_timeout: 1s,",
        "limits: {max_connections: 2, header_read_timeout: 5s,",
    );
    let file = ConfigFile::new(&text);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let addr = gw.addr();
    // Two requests in flight take both places: a third connection waits
    // for one of them to end (nothing in flight is ever cut for it).
    let busy: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                raw(
                    addr,
                    b"GET /slow?ms=800 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    Duration::from_secs(5),
                )
            })
        })
        .collect();
    // Both in flight: the upstream holds them.
    assert!(
        eventually(Duration::from_secs(10), || up.requests() >= 2).await,
        "the busy requests never reached the upstream"
    );
    let started = Instant::now();
    let r = h1().get(format!("http://{addr}/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(4),
        "served after {waited:?}"
    );
    for b in busy {
        assert_eq!(status_of(&b.join().unwrap()), Some(200));
    }

    // Two connections that send nothing take both places: they are closed
    // to make room at once, long before their header timeout.
    let mut silent: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let r = h1().get(format!("http://{addr}/")).send().await.unwrap();
    // Answered (the fourth request of the minute: over the per-client
    // limit of three).
    assert_eq!(r.status(), 429);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let closed = silent
        .iter_mut()
        .filter_map(|s| {
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            matches!(std::io::Read::read(s, &mut [0u8; 8]), Ok(0) | Err(_)).then_some(())
        })
        .count();
    assert!(closed >= 1, "a silent connection made room");
    gw.shutdown().await;
}

/// The HTTP/2 preface and an empty `SETTINGS` frame: a connection that
/// then opens no stream.
const H2_PREFACE_AND_SETTINGS: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_are_closed_and_free_their_slots() {
    let up = upstream().await;
    let text = CONFIG.replace(
        "limits: {header_read_timeout: 1s,",
        "limits: {header_read_timeout: 1s, http2_idle_timeout: 300ms,",
    );
    let file = ConfigFile::new(&text);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let addr = gw.addr();
    // Two HTTP/2 connections that never open a stream (with places to
    // spare: closed by their idle timeout, not to make room).
    let idlers: Vec<_> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(H2_PREFACE_AND_SETTINGS).unwrap();
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
                let started = Instant::now();
                let mut out = Vec::new();
                let closed = std::io::Read::read_to_end(&mut s, &mut out).is_ok();
                (closed, started.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let r = h1()
        .get(format!("http://{addr}/"))
        .timeout(Duration::from_secs(3))
        .send()
        .await
        .expect("served");
    assert_eq!(r.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(2));
    for i in idlers {
        let (closed, took) = i.join().unwrap();
        assert!(closed, "closed by the gateway");
        assert!(took < Duration::from_secs(2), "idle for {took:?}");
    }
    // A stream in progress longer than the idle timeout is not cut.
    let r = support::h2()
        .get(format!("http://{addr}/slow?ms=700"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "slow");
    gw.shutdown().await;
}
