//! A request body the client breaks is the client's error, never the
//! upstream's: a malformed chunked coding and a body cut short are 400, a
//! body over `max_body_bytes` is 413 (at once when its length says so),
//! each counted as a client error and none as an upstream error; the
//! connection is closed after the answer, and everyone else is served.

use crate::support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;

use floodgate_gateway::ProxyStats;
use support::{ConfigFile, gateway, h1, h2, header, status_of, upstream};

const CONFIG: &str = r#"
http:
  domain: gw
  descriptors:
    - [{header: {name: x-limit-key, key: key}}]
domains:
  - domain: gw
    descriptors:
      - key: key
        rate_limit: {name: per-key, algorithm: sliding_log, requests: 3, per: 1m}
gateway:
  upstream: http://127.0.0.1:1
  limits: {max_body_bytes: 1KiB, body_read_timeout: 5s}
server: {reload_interval: 0}
"#;

/// Sends `bytes`, then closes the sending side when `half_close`; reads
/// the answer until the gateway closes.
fn exchange(addr: SocketAddr, bytes: &[u8], half_close: bool) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
    s.write_all(bytes).unwrap();
    if half_close {
        s.shutdown(Shutdown::Write).unwrap();
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn count(c: &std::sync::atomic::AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

fn closes(text: &str) -> bool {
    text.split("\r\n\r\n")
        .next()
        .unwrap_or("")
        .to_ascii_lowercase()
        .contains("connection: close")
}

/// The upstream errors counted so far (502 and 504).
fn upstream_errors(s: &ProxyStats) -> u64 {
    count(&s.bad_gateway) + count(&s.timeouts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_chunked_upload_is_the_clients_400() {
    let up = upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let a = gw.addr();
    // The upstream answers only after 300 ms: the gateway has long seen
    // the broken body by then.
    let head = "POST /slow?ms=300 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    let bodies = [
        "zz\r\nhello\r\n0\r\n\r\n",
        "5\r\nhello\r\nzz\r\n",
        "3\r\nhello\r\n0\r\n\r\n",
        "5\r\nhelloXX0\r\n\r\n",
        "fffffffffffffffffffff\r\nhello\r\n",
        "-1\r\nhello\r\n",
    ];
    for body in bodies {
        let text = exchange(a, format!("{head}{body}").as_bytes(), false);
        assert_eq!(status_of(&text), Some(400), "{body:?}: {text}");
        assert!(text.contains("malformed request body"), "{body:?}: {text}");
        assert!(closes(&text), "{text}");
    }
    let stats = gw.gateway().proxy().stats();
    assert_eq!(count(&stats.malformed_bodies), bodies.len() as u64);
    assert_eq!(upstream_errors(stats), 0, "not the upstream's fault");
    // A well-formed one passes.
    let text = exchange(
        a,
        format!(
            "{}5\r\nhello\r\n0\r\n\r\n",
            head.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
        )
        .as_bytes(),
        false,
    );
    assert_eq!(status_of(&text), Some(200), "{text}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_cut_short_is_the_clients_400() {
    let up = upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let a = gw.addr();
    for req in [
        "POST /slow?ms=300 HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello",
        "POST /slow?ms=300 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    ] {
        // The client stops sending (and says so) but still reads.
        let text = exchange(a, req.as_bytes(), true);
        assert_eq!(status_of(&text), Some(400), "{req:?}: {text}");
        assert!(text.contains("incomplete request body"), "{text}");
    }
    let stats = gw.gateway().proxy().stats();
    assert_eq!(count(&stats.incomplete_bodies), 2);
    assert_eq!(upstream_errors(stats), 0);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_max_body_bytes_are_413() {
    let up = upstream().await;
    let file = ConfigFile::new(CONFIG);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let a = gw.addr();
    let stats = gw.gateway().proxy().stats();
    // A length over the limit: 413 before anything else, the upstream
    // never asked and nothing charged to the key.
    let big = "a".repeat(1025);
    let text = exchange(
        a,
        format!(
            "POST /echo HTTP/1.1\r\nHost: x\r\nx-limit-key: k\r\nContent-Length: 1025\r\n\r\n{big}"
        )
        .as_bytes(),
        false,
    );
    assert_eq!(status_of(&text), Some(413), "{text}");
    assert!(closes(&text), "{text}");
    assert!(!text.contains("ratelimit"), "not limited: {text}");
    assert_eq!(up.requests(), 0);
    // Announced with `Expect: 100-continue`, the body is never asked for.
    let text = exchange(
        a,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n",
        false,
    );
    assert_eq!(status_of(&text), Some(413), "{text}");
    assert!(!text.contains("100 Continue"), "{text}");
    // Chunked, growing past the limit: 413, the upload aborted.
    let chunk = format!("258\r\n{}\r\n", "b".repeat(600));
    let text = exchange(
        a,
        format!("POST /slow?ms=300 HTTP/1.1\r\nHost: x\r\nx-limit-key: k\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}{chunk}0\r\n\r\n").as_bytes(),
        false,
    );
    assert_eq!(status_of(&text), Some(413), "{text}");
    assert_eq!(count(&stats.bodies_too_large), 3);
    // At the limit: through.
    let c = h1();
    let r = c
        .post(format!("http://{a}/echo"))
        .header("x-limit-key", "k")
        .body("c".repeat(1024))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The key's second charge (the chunked one was the first): the 413
    // announced by its length cost nothing.
    assert!(
        header(&r, "ratelimit")
            .unwrap()
            .starts_with("\"per-key\";r=1"),
        "{:?}",
        header(&r, "ratelimit")
    );
    assert_eq!(r.text().await.unwrap().len(), 1024);
    // HTTP/2: by its content-length, and by its DATA frames.
    let r = h2()
        .post(format!("http://{a}/echo"))
        .body(vec![b'd'; 2000])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        vec![Ok(vec![b'e'; 700]), Ok(vec![b'e'; 700])];
    let r = h2()
        .post(format!("http://{a}/slow?ms=300"))
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(count(&stats.bodies_too_large), 5);
    assert_eq!(upstream_errors(stats), 0);
    gw.shutdown().await;
}
