//! Upstreams that misbehave, played by small raw TCP servers: one that
//! never accepts (connect timeout), one that reads a slow upload whole
//! before answering, and one that stalls mid-body.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::{ConfigFile, gateway, h1, raw, status_of};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMITED: &str = r#"
http:
  domain: gw
  descriptors:
    - [{header: {name: x-limit-key, key: key}}]
  layer:
    shedding: {low_priority_above: 100}
    concurrency:
      global: {max: 1, queue: 1, timeout: 200ms}
domains:
  - domain: gw
    descriptors:
      - key: key
        rate_limit: {name: per-key, requests: 100, per: 1m}
server: {reload_interval: 0}
"#;

fn config(gateway: &str) -> ConfigFile {
    ConfigFile::new(&format!("{LIMITED}gateway: {gateway}\n"))
}

/// A raw upstream: every connection is handed to `serve`.
async fn raw_upstream<F, Fut>(serve: F) -> SocketAddr
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve(s));
        }
    });
    addr
}

/// A gateway in front of the raw upstream at `up`.
async fn proxy_to(up: SocketAddr) -> floodgate_gateway::Running {
    gateway(
        &config("{upstream: http://127.0.0.1:1}"),
        &format!("http://{up}"),
    )
    .await
}

/// Reads from `s` into `seen` until `done` holds (panics, saying `what`
/// was awaited, on a read error or the end of the stream).
fn read_until(s: &mut TcpStream, seen: &mut Vec<u8>, what: &str, done: impl Fn(&[u8]) -> bool) {
    let mut b = [0u8; 4096];
    while !done(seen) {
        let n = s.read(&mut b).expect(what);
        assert_ne!(
            n,
            0,
            "closed before {what}: {}",
            String::from_utf8_lossy(seen)
        );
        seen.extend_from_slice(&b[..n]);
    }
}

/// Reads a request head; returns its `Content-Length` (0 when absent).
async fn read_head(s: &mut tokio::net::TcpStream) -> Option<usize> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    Some(
        text.lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_timeout_is_504_and_refused_is_502() {
    // A listener whose accept queue is full and never drained: further
    // connection attempts get no answer at all.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..8 {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
            Ok(s) => fillers.push(s),
            Err(_) => break,
        }
    }
    let file = config(&format!(
        "{{upstream: {{url: http://{addr}, connect_timeout: 300ms}}}}"
    ));
    let gw = gateway(&file, &format!("http://{addr}")).await;
    let started = Instant::now();
    let r = h1()
        .get(format!("http://{}/", gw.addr()))
        .header("x-limit-key", "k")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504, "a connect timeout is a gateway timeout");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(r.headers().contains_key("ratelimit-policy"));
    let stats = gw.gateway().proxy().stats();
    assert_eq!(stats.timeouts.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(
        stats.bad_gateway.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    gw.shutdown().await;
    drop(fillers);
    drop(listener);

    // Refused: still a bad gateway.
    let dead = floodgate_testkit::free_port();
    let file = config(&format!(
        "{{upstream: {{url: http://127.0.0.1:{dead}, connect_timeout: 300ms}}}}"
    ));
    let gw = gateway(&file, &format!("http://127.0.0.1:{dead}")).await;
    let r = h1()
        .get(format!("http://{}/", gw.addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    gw.shutdown().await;
}

/// An upstream that reads the whole body, then answers with its length.
async fn counting_upstream() -> SocketAddr {
    raw_upstream(|mut s| async move {
        while let Some(len) = read_head(&mut s).await {
            let mut body = vec![0u8; len];
            if s.read_exact(&mut body).await.is_err() {
                return;
            }
            let text = format!("got {len}");
            let res = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{text}",
                text.len()
            );
            if s.write_all(res.as_bytes()).await.is_err() {
                return;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_live_upload_is_not_a_response_timeout() {
    let up = counting_upstream().await;
    let file = config(
        "{upstream: {url: http://127.0.0.1:1, response_timeout: 300ms}, limits: {body_read_timeout: 1s}}",
    );
    let gw = gateway(&file, &format!("http://{up}")).await;
    let addr = gw.addr();
    // 800 bytes over ~900 ms, 100 at a time: three times the response
    // timeout, but never a pause near the body timeout.
    let text = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
        s.write_all(
            b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 800\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        for _ in 0..8 {
            std::thread::sleep(Duration::from_millis(110));
            s.write_all(&[b'a'; 100]).unwrap();
        }
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .unwrap();
    assert_eq!(status_of(&text), Some(200), "{text}");
    assert!(text.ends_with("got 800"), "{text}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_upload_is_408() {
    let up = counting_upstream().await;
    let file = config(
        "{upstream: {url: http://127.0.0.1:1, response_timeout: 5s}, limits: {body_read_timeout: 300ms}}",
    );
    let gw = gateway(&file, &format!("http://{up}")).await;
    let started = Instant::now();
    let text = raw(
        gw.addr(),
        b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b",
        Duration::from_secs(3),
    );
    assert_eq!(status_of(&text), Some(408), "{text}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let stats = gw.gateway().proxy().stats();
    assert_eq!(
        stats
            .upload_timeouts
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_response_body_ends_with_an_error_and_frees_permits() {
    // The head and five of a thousand bytes, then nothing (the
    // connection stays open).
    let up = raw_upstream(|mut s| async move {
        if read_head(&mut s).await.is_none() {
            return;
        }
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nhello")
            .await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    })
    .await;
    let file = config("{upstream: {url: http://127.0.0.1:1, response_timeout: 300ms}}");
    let gw = gateway(&file, &format!("http://{up}")).await;
    let c = h1();
    for _ in 0..2 {
        let started = Instant::now();
        let r = c
            .get(format!("http://{}/", gw.addr()))
            .header("x-limit-key", "k")
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .unwrap();
        // The global concurrency limit (1) lets this one in: the previous
        // one's permit was released with its failed body.
        assert_eq!(r.status(), 200);
        let body = r.bytes().await;
        assert!(body.is_err(), "the body ends with an error");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let limiter = gw.gateway().limiter();
    let layer = limiter.as_ref().as_ref().unwrap().layer();
    assert_eq!(layer.in_flight(), 0, "released");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_stops_reading_the_upload_is_504() {
    // Reads the head, then neither the body nor answers.
    let up = raw_upstream(|mut s| async move {
        if read_head(&mut s).await.is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
    })
    .await;
    let file = config(
        "{upstream: {url: http://127.0.0.1:1, response_timeout: 300ms}, limits: {body_read_timeout: 5s}}",
    );
    let gw = gateway(&file, &format!("http://{up}")).await;
    let addr = gw.addr();
    let started = Instant::now();
    let text = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
        let mut w = s.try_clone().unwrap();
        // A client sending as fast as it can: the buffers fill up once
        // the upstream stops reading.
        std::thread::spawn(move || {
            let _ = w.set_write_timeout(Some(Duration::from_secs(4)));
            let _ =
                w.write_all(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n");
            let chunk = vec![b'a'; 64 * 1024];
            while w.write_all(&chunk).is_ok() {}
        });
        let mut out = vec![0u8; 1024];
        let n = s.read(&mut out).unwrap_or(0);
        String::from_utf8_lossy(&out[..n]).into_owned()
    })
    .await
    .unwrap();
    assert_eq!(status_of(&text), Some(504), "{text}");
    assert!(started.elapsed() < Duration::from_secs(3));
    gw.shutdown().await;
}

/// A chunked upload reaches an HTTP/1.1 upstream chunked, with the
/// trailer fields it announced in `Trailer` and none other, and none that
/// a trailer must not carry (`Host`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_upload_keeps_its_announced_trailers_only() {
    // Answers with what it read: the head, then the body up to the end of
    // its trailer section.
    let up = raw_upstream(|mut s| async move {
        let mut got = Vec::new();
        let mut b = [0u8; 1024];
        loop {
            let text = String::from_utf8_lossy(&got);
            let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
            if body.contains("0\r\n") && body.ends_with("\r\n\r\n") {
                break;
            }
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&b[..n]),
            }
        }
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", got.len());
        let _ = s.write_all(&[head.as_bytes(), &got].concat()).await;
    })
    .await;
    let gw = proxy_to(up).await;
    let text = raw(
        gw.addr(),
        b"POST /t HTTP/1.1\r\nHost: x\r\nTrailer: x-sum, host\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\nx-sum: 9\r\nx-other: 1\r\nhost: evil\r\n\r\n",
        Duration::from_secs(5),
    );
    assert_eq!(status_of(&text), Some(200), "{text}");
    let seen = text.split_once("\r\n\r\n").unwrap().1.to_ascii_lowercase();
    assert!(
        seen.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{seen}"
    );
    assert!(
        seen.ends_with("\r\n\r\n5\r\nhello\r\n0\r\nx-sum: 9\r\n\r\n"),
        "{seen}"
    );
    gw.shutdown().await;
}

/// An upstream that answers before it has read the upload: its response
/// head and first bytes reach the client while the client still holds the
/// rest of its body back, and the upload then goes on alongside the
/// response's body, to the end of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_goes_on_after_an_early_response() {
    let up = raw_upstream(|mut s| async move {
        let Some(len) = read_head(&mut s).await else {
            return;
        };
        let early = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\nearly\n\r\n";
        if s.write_all(early).await.is_err() {
            return;
        }
        let mut body = vec![0u8; len];
        if s.read_exact(&mut body).await.is_err() {
            return;
        }
        let last = format!("got {len}");
        let end = format!("{:x}\r\n{last}\r\n0\r\n\r\n", last.len());
        let _ = s.write_all(end.as_bytes()).await;
    })
    .await;
    let gw = proxy_to(up).await;
    let addr = gw.addr();
    let text = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(
            b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        // Nothing of the body is sent until the early answer is here.
        let mut seen = Vec::new();
        read_until(
            &mut s,
            &mut seen,
            "the early answer, before the body",
            |seen| String::from_utf8_lossy(seen).contains("early"),
        );
        s.write_all(&[b'a'; 100_000]).unwrap();
        let _ = s.read_to_end(&mut seen);
        String::from_utf8_lossy(&seen).into_owned()
    })
    .await
    .unwrap();
    assert_eq!(status_of(&text), Some(200), "{text}");
    assert!(text.contains("early\n"), "{text}");
    assert!(text.contains("got 100000"), "{text}");
    gw.shutdown().await;
}

/// A response that ends before its request body is written whole leaves
/// its upstream connection closed, not pooled: the upstream would read the
/// next request as the rest of the body. The next request goes on a new
/// connection, and both clients get whole, right answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_ending_before_its_upload_closes_the_connection() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let accepted = Arc::new(AtomicUsize::new(0));
    let (closed_tx, closed) = std::sync::mpsc::channel();
    let (count, closed_tx) = (accepted.clone(), std::sync::Mutex::new(closed_tx));
    // Keep-alive: an upload is answered at once, then read whole; any
    // other request gets the number of its connection.
    let up = raw_upstream(move |mut s| {
        let n = count.fetch_add(1, Ordering::SeqCst) + 1;
        let closed_tx = closed_tx.lock().unwrap().clone();
        async move {
            while let Some(len) = read_head(&mut s).await {
                if len == 0 {
                    let body = format!("connection {n}");
                    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                    if s.write_all(format!("{head}{body}").as_bytes())
                        .await
                        .is_err()
                    {
                        return;
                    }
                    continue;
                }
                let early = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nearly";
                if s.write_all(early).await.is_err() {
                    return;
                }
                let mut body = vec![0u8; len];
                if s.read_exact(&mut body).await.is_err() {
                    let _ = closed_tx.send(n);
                    return;
                }
            }
        }
    })
    .await;
    let gw = proxy_to(up).await;
    let addr = gw.addr();
    let early = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
            .unwrap();
        s.write_all(&[b'a'; 1000]).unwrap();
        // The whole response, while most of the body is still held back.
        let mut seen = Vec::new();
        read_until(&mut s, &mut seen, "the whole early answer", |seen| {
            seen.ends_with(b"early")
        });
        (String::from_utf8_lossy(&seen).into_owned(), s)
    })
    .await
    .unwrap();
    let (early, _held_open) = early;
    assert_eq!(status_of(&early), Some(200), "{early}");
    assert!(early.ends_with("\r\n\r\nearly"), "{early}");
    let next = tokio::task::spawn_blocking(move || {
        raw(
            addr,
            b"GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            Duration::from_secs(10),
        )
    })
    .await
    .unwrap();
    assert_eq!(status_of(&next), Some(200), "{next}");
    assert!(next.ends_with("\r\n\r\nconnection 2"), "{next}");
    let closed_first =
        tokio::task::spawn_blocking(move || closed.recv_timeout(Duration::from_secs(10)))
            .await
            .unwrap();
    assert_eq!(closed_first, Ok(1), "the upload's connection is closed");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    gw.shutdown().await;
}
