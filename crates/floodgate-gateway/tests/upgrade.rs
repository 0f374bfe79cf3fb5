//! Protocol upgrades through the gateway: a WebSocket-style handshake is
//! limited like any request; admitted, the upstream's `101 Switching
//! Protocols` is passed on and the two connections carry bytes both ways;
//! denied, it is the normal 429 and the upstream never sees it.

use crate::support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use support::{ConfigFile, gateway};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An upstream answering upgrade requests with 101 and echoing every byte
/// of the upgraded connection; other requests get 400.
async fn echo_upstream() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let seen = s.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |mut req: Request<Incoming>| {
                    seen.fetch_add(1, Ordering::SeqCst);
                    let asked = req.headers().get("upgrade").cloned();
                    let connection = req.headers().get("connection").cloned();
                    let on = hyper::upgrade::on(&mut req);
                    async move {
                        let mut res = Response::new(Empty::<Bytes>::new());
                        let ok = asked.as_ref().is_some_and(|v| v == "websocket")
                            && connection.is_some_and(|v| v == "upgrade");
                        if !ok {
                            *res.status_mut() = StatusCode::BAD_REQUEST;
                            return Ok::<_, Infallible>(res);
                        }
                        tokio::spawn(async move {
                            let Ok(up) = on.await else { return };
                            let mut io = TokioIo::new(up);
                            let mut buf = vec![0u8; 8192];
                            loop {
                                match io.read(&mut buf).await {
                                    Ok(0) | Err(_) => break,
                                    Ok(n) => {
                                        if io.write_all(&buf[..n]).await.is_err() {
                                            break;
                                        }
                                    }
                                }
                            }
                        });
                        *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                        res.headers_mut()
                            .insert("upgrade", "websocket".parse().unwrap());
                        res.headers_mut()
                            .insert("connection", "upgrade".parse().unwrap());
                        res.headers_mut().insert(
                            "sec-websocket-accept",
                            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".parse().unwrap(),
                        );
                        Ok(res)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    (addr, seen)
}

const CONFIG: &str = r#"
http:
  domain: gw
  descriptors:
    - [{header: {name: x-limit-key, key: key}}]
domains:
  - domain: gw
    descriptors:
      - key: key
        rate_limit: {name: per-key, algorithm: sliding_log, requests: 2, per: 1m}
server: {reload_interval: 0}
"#;

/// Sends a WebSocket handshake; returns the stream and the response head.
async fn handshake(gw: SocketAddr, key: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(gw).await.unwrap();
    let req = format!(
        "GET /chat HTTP/1.1\r\nHost: example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         X-Limit-Key: {key}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut byte))
            .await
            .expect("response head")
            .unwrap();
        assert_eq!(n, 1, "closed after {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    (s, String::from_utf8(head).unwrap().to_ascii_lowercase())
}

async fn echo(s: &mut TcpStream, data: &[u8]) {
    let (mut r, mut w) = s.split();
    let write = async {
        w.write_all(data).await.unwrap();
    };
    let read = async {
        let mut back = vec![0u8; data.len()];
        r.read_exact(&mut back).await.unwrap();
        back
    };
    let ((), back) =
        tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(write, read) })
            .await
            .expect("echo");
    assert!(back == data, "echoed bytes differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrades_are_limited_then_tunnelled() {
    let (up, seen) = echo_upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{up}")).await;
    let mut tunnels = Vec::new();
    for i in 0..2 {
        let (mut s, head) = handshake(gw.addr(), "alice").await;
        assert!(head.starts_with("http/1.1 101"), "#{i}: {head}");
        assert!(head.contains("\r\nupgrade: websocket\r\n"), "{head}");
        assert!(head.contains("\r\nconnection: upgrade\r\n"), "{head}");
        assert!(head.contains("\r\nsec-websocket-accept: "), "{head}");
        assert!(head.contains("\r\nratelimit: \"per-key\";r="), "{head}");
        echo(&mut s, b"hello over the tunnel").await;
        // A larger message, both directions at once.
        let big: Vec<u8> = (0..512 * 1024).map(|i| (i * 7 % 251) as u8).collect();
        echo(&mut s, &big).await;
        tunnels.push(s);
    }
    // Over the limit: the normal 429, never forwarded.
    let (_s, head) = handshake(gw.addr(), "alice").await;
    assert!(head.starts_with("http/1.1 429"), "{head}");
    assert!(head.contains("\r\nretry-after: "), "{head}");
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    // Another key still upgrades; the first tunnels still work.
    let (mut s, head) = handshake(gw.addr(), "bob").await;
    assert!(head.starts_with("http/1.1 101"), "{head}");
    echo(&mut s, b"bob").await;
    echo(&mut tunnels[0], b"still open").await;
    // Closing the client side closes the tunnel.
    drop(tunnels);
    // Shutdown does not wait for open tunnels.
    let drained = tokio::time::timeout(Duration::from_secs(5), gw.shutdown())
        .await
        .unwrap();
    assert!(drained);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_upgrade_is_an_ordinary_response() {
    let up = support::upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    // The plain upstream answers 200 without switching: the connection
    // stays HTTP and the next request on it is served.
    let mut s = TcpStream::connect(gw.addr()).await.unwrap();
    let one = "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nX-Limit-Key: c\r\n\r\n";
    let two = "GET / HTTP/1.1\r\nHost: x\r\nX-Limit-Key: c\r\nConnection: close\r\n\r\n";
    s.write_all(one.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    let first = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(first.starts_with("http/1.1 200"), "{first}");
    assert!(first.contains("x-seen-connection: upgrade"), "{first}");
    s.write_all(two.as_bytes()).await.unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    let second = String::from_utf8_lossy(&rest).to_ascii_lowercase();
    assert!(second.starts_with("http/1.1 200"), "{second}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_keeps_its_connection_slot() {
    let (up, _) = echo_upstream().await;
    let file = ConfigFile::new(&format!(
        "{CONFIG}gateway:\n  upstream: http://{up}\n  limits: {{max_connections: 1}}\n"
    ));
    let gw = gateway(&file, &format!("http://{up}")).await;
    let (mut tunnel, head) = handshake(gw.addr(), "slot").await;
    assert!(head.starts_with("http/1.1 101"), "{head}");
    // The only slot is the tunnel's: a new connection waits.
    let addr = gw.addr();
    let next = tokio::spawn(async move { handshake(addr, "other").await.1 });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!next.is_finished(), "served while the tunnel held the slot");
    echo(&mut tunnel, b"x").await;
    drop(tunnel);
    let head = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("served once the tunnel closed")
        .unwrap();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    gw.shutdown().await;
}
