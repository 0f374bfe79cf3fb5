//! Responses to requests without a body, read by the gateway's own
//! HTTP/1.1 client (`h1`), from a raw upstream that frames them every way
//! RFC 9112 allows (and some ways it does not): what reaches the client,
//! and which upstream connections are used again.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate_gateway::Running;
use support::{ConfigFile, gateway, h1};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the upstream answers to `GET path` (and whether it closes after).
fn answer(method: &str, path: &str) -> (&'static [u8], bool) {
    match (method, path) {
        ("HEAD", _) => (b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n", false),
        (_, "/chunked") => (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n6\r\n world\r\n0\r\nx-sum: 11\r\n\r\n",
            false,
        ),
        (_, "/until-close") => (b"HTTP/1.0 200 OK\r\n\r\nuntil the end", true),
        (_, "/conflict") => (
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd",
            false,
        ),
        (_, "/hints") => (
            b"HTTP/1.1 103 Early Hints\r\nlink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            false,
        ),
        (_, "/extra") => (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokJUNK", false),
        (_, "/truncated") => (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello", true),
        (_, "/bye") => (b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nbye", true),
        (_, "/says-close") => (
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
            false,
        ),
        (_, "/both") => (
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
            false,
        ),
        (_, "/broken-from-the-start") => (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n",
            true,
        ),
        _ => (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", false),
    }
}

/// A raw upstream answering by [`answer`]; counts its connections.
async fn scripted_upstream() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicU64::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let mut line = head.split_whitespace();
                    let (method, path) = (line.next().unwrap_or(""), line.next().unwrap_or(""));
                    let (bytes, close) = answer(method, path);
                    if s.write_all(bytes).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (addr, connections)
}

const CONFIG: &str = "server: {reload_interval: 0}\n";

/// A gateway in front of a scripted upstream.
struct Setup {
    gw: Running,
    /// The gateway's address.
    a: SocketAddr,
    /// An HTTP/1.1 client.
    c: reqwest::Client,
    /// Connections the upstream accepted.
    connections: Arc<AtomicU64>,
    _file: ConfigFile,
}

async fn setup() -> Setup {
    let (up, connections) = scripted_upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{up}")).await;
    Setup {
        a: gw.addr(),
        gw,
        c: h1(),
        connections,
        _file: file,
    }
}

async fn get(c: &reqwest::Client, gw: SocketAddr, path: &str) -> (u16, String) {
    let r = c.get(format!("http://{gw}{path}")).send().await.unwrap();
    let status = r.status().as_u16();
    (
        status,
        r.text().await.unwrap_or_else(|e| format!("error: {e}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_framing_reaches_the_client_whole() {
    let Setup {
        gw,
        a,
        c,
        connections: _,
        _file,
    } = setup().await;
    assert_eq!(get(&c, a, "/chunked").await, (200, "hello world".into()));
    assert_eq!(
        get(&c, a, "/until-close").await,
        (200, "until the end".into())
    );
    assert_eq!(get(&c, a, "/hints").await, (200, "ok".into()));
    assert_eq!(get(&c, a, "/extra").await, (200, "ok".into()));
    assert_eq!(get(&c, a, "/both").await, (200, "ok".into()));
    let head = c.head(format!("http://{a}/")).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-length"], "7");
    // Malformed framing is the upstream's fault: 502, never its bytes.
    let (status, body) = get(&c, a, "/conflict").await;
    assert_eq!(status, 502);
    assert!(!body.contains("abc"), "{body}");
    // A body cut short ends the client's response with an error, not with
    // a short body presented as whole (the head itself may not have left
    // the gateway yet).
    if let Ok(r) = c.get(format!("http://{a}/truncated")).send().await {
        assert_eq!(r.status(), 200);
        assert!(
            r.bytes().await.is_err(),
            "a truncated body must not end cleanly"
        );
    }
    // And the gateway serves on.
    assert_eq!(get(&c, a, "/").await, (200, "ok".into()));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_reused_only_when_the_framing_allows() {
    let Setup {
        gw,
        a,
        c,
        connections,
        _file,
    } = setup().await;
    let opened = || connections.load(Ordering::SeqCst);
    for _ in 0..20 {
        assert_eq!(get(&c, a, "/").await.0, 200);
        assert_eq!(get(&c, a, "/chunked").await.0, 200);
    }
    let head = c.head(format!("http://{a}/")).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(opened(), 1, "keep-alive responses share one connection");
    // Each of these leaves its connection unfit for another exchange: the
    // next request needs a new one.
    for path in ["/says-close", "/extra", "/both", "/until-close", "/bye"] {
        let before = opened();
        assert_eq!(get(&c, a, path).await.0, 200, "{path}");
        assert_eq!(get(&c, a, "/").await, (200, "ok".into()), "after {path}");
        assert_eq!(opened(), before + 1, "after {path}");
    }
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_the_upstream_closed_is_not_used() {
    let Setup {
        gw,
        a,
        c,
        connections,
        _file,
    } = setup().await;
    for _ in 0..50 {
        // The upstream answers, then closes; the gateway has already put
        // the connection back (the response said nothing of closing).
        assert_eq!(get(&c, a, "/bye").await, (200, "bye".into()));
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(get(&c, a, "/").await, (200, "ok".into()));
    }
    // One for the first request, then one after each close.
    assert_eq!(connections.load(Ordering::SeqCst), 51);
    assert_eq!(
        gw.gateway()
            .proxy()
            .stats()
            .bad_gateway
            .load(Ordering::Relaxed),
        0
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_broken_from_its_first_byte_is_502() {
    let Setup {
        gw,
        a,
        c,
        connections: _,
        _file,
    } = setup().await;
    // By the gateway's own client (no request body) and by hyper's (a
    // request body), to HTTP/1.1 and HTTP/2 clients: a 502, not a head
    // with nothing behind it.
    for client in [c.clone(), support::h2()] {
        let r = client
            .get(format!("http://{a}/broken-from-the-start"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 502);
        let r = client
            .post(format!("http://{a}/broken-from-the-start"))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 502);
    }
    let stats = gw.gateway().proxy().stats();
    assert_eq!(stats.bad_gateway.load(Ordering::Relaxed), 4);
    assert_eq!(get(&c, a, "/").await, (200, "ok".into()));
    gw.shutdown().await;
}
