//! What a hostile client gets the gateway to forward: an `h2c` upgrade
//! (a tunnel of requests the limiter never sees), paths spelled to dodge
//! a route's key or to leave the upstream's prefix, `Connection` naming
//! end-to-end fields, `CONNECT` and lower-case methods, two authorities
//! towards HTTP/2, and transfer codings lost on the way. Real clients
//! (raw sockets, the Python h2 library), real upstreams (nginx, and a raw
//! socket server that records what it receives and would accept `h2c`).

use crate::support;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate_testkit::Nginx;
use support::{ConfigFile, field, gateway, raw, status_of, upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(5);

/// The request heads a [`recording_upstream`] received, lower-cased.
type Heads = Arc<Mutex<Vec<String>>>;

/// A raw HTTP/1.1 server that records each request head (and body) it
/// receives and answers `101` to `Upgrade: h2c` (keeping the connection
/// open, as an h2c server would), `200 ok` to anything else.
async fn recording_upstream() -> (SocketAddr, Heads) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Heads::default();
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&buf).to_ascii_lowercase();
                // A chunked body, read to its last chunk.
                if text.contains("transfer-encoding:") {
                    let mut all = text.clone();
                    while !all.ends_with("0\r\n\r\n") {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => all.push_str(&String::from_utf8_lossy(&chunk[..n])),
                        }
                    }
                    seen.lock().unwrap().push(all);
                } else {
                    seen.lock().unwrap().push(text.clone());
                }
                if text.contains("\r\nupgrade: h2c") {
                    let _ = s
                        .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
                        .await;
                    let _ = s.read(&mut chunk).await;
                    return;
                }
                let answer: &[u8] = if text.starts_with("post /coded ") {
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                } else {
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                };
                let _ = s.write_all(answer).await;
            });
        }
    });
    (addr, heads)
}

/// `raw` on a blocking thread (the runtime keeps serving).
async fn send(addr: SocketAddr, request: &str) -> String {
    let request = request.to_owned();
    tokio::task::spawn_blocking(move || raw(addr, request.as_bytes(), WAIT))
        .await
        .unwrap()
}

fn body(text: &str) -> &str {
    text.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

const PLAIN: &str = "server: {reload_interval: 0}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_is_never_offered_to_the_upstream() {
    let (up, heads) = recording_upstream().await;
    let file = ConfigFile::new(PLAIN);
    let gw = gateway(&file, &format!("http://{up}")).await;
    // curl's `--http2` on an http:// URL, word for word.
    let h2c = "GET /x HTTP/1.1\r\nHost: a.example\r\nConnection: Upgrade, HTTP2-Settings, close\r\n\
               Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n";
    let text = send(gw.addr(), h2c).await;
    assert_eq!(status_of(&text), Some(200), "{text}");
    // Offered beside an allowed one: only the allowed one goes on.
    let both = "GET /y HTTP/1.1\r\nHost: a.example\r\nConnection: Upgrade, close\r\n\
                Upgrade: h2c, websocket\r\nSec-WebSocket-Version: 13\r\n\r\n";
    let text = send(gw.addr(), both).await;
    assert_eq!(status_of(&text), Some(200), "{text}");
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 2, "{heads:?}");
    assert!(!heads[0].contains("upgrade"), "{}", heads[0]);
    assert!(!heads[0].contains("http2-settings"), "{}", heads[0]);
    assert!(
        heads[1].contains("\r\nupgrade: websocket\r\n"),
        "{}",
        heads[1]
    );
    assert!(!heads[1].contains("h2c"), "{}", heads[1]);
    gw.shutdown().await;
}

#[test]
fn h2c_cannot_be_allowed() {
    use floodgate_gateway::GatewayConfig;
    use floodgate_policy::yaml::Document;
    let read = |text: &str| {
        let doc = Document::parse(&Arc::from("g.yaml"), text).unwrap();
        GatewayConfig::from_documents(&[doc])
    };
    let e = read("gateway:\n  upstream: http://a:1\n  upgrades: [websocket, H2C]\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("upgrades") && e.contains("`h2c` is never forwarded"),
        "{e}"
    );
    let c = read("gateway:\n  upstream: http://a:1\n  upgrades: [WebSocket, x-chat]\n").unwrap();
    assert_eq!(c.unwrap().forwarding.upgrades, ["websocket", "x-chat"]);
    let c = read("gateway:\n  upstream: http://a:1\n").unwrap().unwrap();
    assert_eq!(c.forwarding.upgrades, ["websocket"]);
}

const LOGIN_LIMIT: &str = r#"
http:
  domain: gw
  routes: ["/login"]
  descriptors:
    - [route]
domains:
  - domain: gw
    descriptors:
      - key: route
        value: /login
        rate_limit: {name: login, algorithm: sliding_log, requests: 3, per: 1m}
server: {reload_interval: 0}
"#;

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_limits_hold_whatever_the_spelling() {
    let up = upstream().await;
    let file = ConfigFile::new(LOGIN_LIMIT);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let g = gw.addr();
    // Three spellings spend the route's three requests, each forwarded
    // as the one path the limiter keyed.
    for path in ["/x/../login", "/a/%2e%2E/login", "/%6Cogin"] {
        let text = send(g, &get(path)).await;
        assert_eq!(status_of(&text), Some(200), "{path}: {text}");
        assert_eq!(field(&text, "x-seen-path"), Some("/login"), "{path}");
    }
    // Every other spelling finds the same counter spent.
    for path in [
        "/login",
        "//login",
        "/./login",
        "/login/.././login",
        "/login?a=1",
    ] {
        let text = send(g, &get(path)).await;
        assert_eq!(status_of(&text), Some(429), "{path}: {text}");
    }
    // Spellings with no one reading: refused before they are limited.
    let before = up.requests();
    for path in [
        "/%2Flogin",
        "/login%2f",
        "/login%5C",
        "/a\\..\\login",
        "/../login",
        "/login%",
    ] {
        let text = send(g, &get(path)).await;
        assert_eq!(status_of(&text), Some(400), "{path}: {text}");
        assert!(body(&text).contains("path"), "{path}: {text}");
    }
    assert_eq!(up.requests(), before);
    // The query goes on untouched behind a rewritten path.
    let text = send(g, &get("/other/../q?x=%2e%2e/../a")).await;
    assert_eq!(
        field(&text, "x-seen-path"),
        Some("/q?x=%2e%2e/../a"),
        "{text}"
    );
    gw.shutdown().await;
}

/// nginx serving a public and a private location.
fn nginx_with_private() -> Nginx {
    Nginx::start(64, 1, |port, _| {
        format!(
            r#"    server {{
        listen 127.0.0.1:{port};
        location /public/ {{ return 200 "public $uri"; }}
        location /private/ {{ return 200 "secret"; }}
    }}
"#
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_prefix_cannot_be_left() {
    let nginx = nginx_with_private();
    let url = format!("http://127.0.0.1:{}/public", nginx.port);
    for (slashes, attempts) in [
        (
            "refuse",
            &[
                "/../private/secret",
                "/a/../../private/secret",
                "/%2e%2e/private/secret",
                "/a%2F..%2F..%2Fprivate/secret",
            ][..],
        ),
        (
            "keep",
            &[
                "/a%2F..%2F..%2Fprivate/secret",
                "/a\\..\\..\\private/secret",
                "/..%5Cprivate/secret",
            ][..],
        ),
    ] {
        let file = ConfigFile::new(&format!("{PLAIN}gateway:\n  encoded_slashes: {slashes}\n"));
        let gw = gateway(&file, &url).await;
        for path in attempts {
            let text = send(gw.addr(), &get(path)).await;
            assert_eq!(status_of(&text), Some(400), "{slashes} {path}: {text}");
            assert!(
                !text.contains("secret\r\n") && !text.ends_with("secret"),
                "{text}"
            );
        }
        // What stays inside the prefix is served from it.
        let text = send(gw.addr(), &get("/a/../ok")).await;
        assert_eq!(body(&text), "public /public/ok", "{slashes}: {text}");
        if slashes == "keep" {
            // nginx reads `%2F` as a separator, inside the prefix still.
            let text = send(gw.addr(), &get("/a%2F..%2Fok")).await;
            assert_eq!(body(&text), "public /public/ok", "{text}");
        }
        gw.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cannot_drop_end_to_end_fields() {
    let up = upstream().await;
    let file = ConfigFile::new(PLAIN);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let text = send(
        gw.addr(),
        "GET /x HTTP/1.1\r\nHost: client.example\r\nConnection: host, x-forwarded-for, forwarded, close\r\n\
         X-Forwarded-For: 192.0.2.7\r\nForwarded: for=192.0.2.7\r\n\r\n",
    )
    .await;
    assert_eq!(status_of(&text), Some(200), "{text}");
    assert_eq!(
        field(&text, "x-seen-host"),
        Some("client.example"),
        "{text}"
    );
    assert_eq!(
        field(&text, "x-seen-xff"),
        Some("192.0.2.7, 127.0.0.1"),
        "{text}"
    );
    let forwarded = field(&text, "x-seen-forwarded").unwrap_or("");
    assert!(
        forwarded.starts_with("for=192.0.2.7, for=127.0.0.1;"),
        "{text}"
    );
    gw.shutdown().await;
}

/// Sends, over HTTP/2 with the Python h2 library, a `CONNECT` (stream 1)
/// and a `get` (stream 3) to `addr`; the two statuses.
fn h2_connect_and_lower_case(addr: SocketAddr) -> String {
    const SCRIPT: &str = r#"
import socket, sys
import h2.config, h2.connection, h2.events
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
c = h2.connection.H2Connection(h2.config.H2Configuration(
    client_side=True, header_encoding=None,
    validate_outbound_headers=False, normalize_outbound_headers=False))
c.initiate_connection()
c.send_headers(1, [(b":method", b"CONNECT"), (b":authority", b"a.example:443")], end_stream=True)
c.send_headers(3, [(b":method", b"get"), (b":scheme", b"http"), (b":authority", b"a.example"),
                   (b":path", b"/x")], end_stream=True)
s.sendall(c.data_to_send())
status, done = {}, set()
while len(done) < 2:
    data = s.recv(65535)
    if not data:
        break
    for e in c.receive_data(data):
        if isinstance(e, h2.events.ResponseReceived):
            status[e.stream_id] = dict(e.headers)[b":status"].decode()
        if isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
            done.add(e.stream_id)
    s.sendall(c.data_to_send())
print(status.get(1), status.get(3))
"#;
    let out = Command::new(floodgate_testkit::python())
        .args(["-c", SCRIPT, &addr.port().to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_and_lower_case_methods_are_refused() {
    let up = upstream().await;
    let file = ConfigFile::new(PLAIN);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let g = gw.addr();
    for (request, what) in [
        (
            "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n",
            "CONNECT",
        ),
        ("get /x HTTP/1.1\r\nHost: a.example\r\n\r\n", "method"),
        (
            "Post /x HTTP/1.1\r\nHost: a.example\r\nContent-Length: 0\r\n\r\n",
            "method",
        ),
    ] {
        let text = send(g, request).await;
        assert_eq!(status_of(&text), Some(400), "{request:?}: {text}");
        assert!(body(&text).contains(what), "{text}");
    }
    let statuses = tokio::task::spawn_blocking(move || h2_connect_and_lower_case(g))
        .await
        .unwrap();
    assert_eq!(statuses, "400 400");
    assert_eq!(up.requests(), 0);
    // Upper-case methods the gateway does not know go on, keyed as sent.
    let text = send(g, &get("/x").replacen("GET", "PURGE", 1)).await;
    assert_eq!(status_of(&text), Some(200), "{text}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_upstream_gets_one_authority() {
    // nginx over h2c (prior knowledge) answers 400 to a request whose
    // `Host` and `:authority` differ.
    let nginx = Nginx::start(64, 1, |port, _| {
        format!(
            "    server {{\n        listen 127.0.0.1:{port} http2;\n        location / {{ return 200 \"host=$host\"; }}\n    }}\n"
        )
    });
    let file = ConfigFile::new(&format!(
        "{PLAIN}gateway:\n  upstream: {{protocol: http2}}\n"
    ));
    let gw = gateway(&file, &format!("http://127.0.0.1:{}", nginx.port)).await;
    let text = send(gw.addr(), &get("/x").replace("a.example", "Client.example")).await;
    assert_eq!(status_of(&text), Some(200), "{text}");
    assert_eq!(body(&text), "host=client.example", "{text}");
    // An HTTP/2 client's `:authority` goes on as the only one.
    let r = support::h2()
        .get(format!("http://{}/x", gw.addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "host=127.0.0.1");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_codings_are_forwarded_as_sent() {
    let (up, heads) = recording_upstream().await;
    let file = ConfigFile::new(PLAIN);
    let gw = gateway(&file, &format!("http://{up}")).await;
    let upload = "POST /coded HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip, chunked\r\n\
                  Connection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    let text = send(gw.addr(), upload).await;
    assert_eq!(status_of(&text), Some(200), "{text}");
    // The response's codings reach the client as the upstream sent them.
    assert_eq!(
        field(&text, "transfer-encoding"),
        Some("gzip, chunked"),
        "{text}"
    );
    assert!(body(&text).starts_with("5\r\nhello\r\n0\r\n"), "{text}");
    let heads = heads.lock().unwrap().clone();
    assert!(
        heads[0].contains("\r\ntransfer-encoding: gzip, chunked\r\n"),
        "{}",
        heads[0]
    );
    assert!(
        heads[0].ends_with("\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        "{}",
        heads[0]
    );
    assert_eq!(
        heads[0].matches("transfer-encoding").count(),
        1,
        "{}",
        heads[0]
    );
    gw.shutdown().await;
    // HTTP/2 has no transfer codings: refused rather than sent without.
    let up = upstream().await;
    let file = ConfigFile::new(&format!(
        "{PLAIN}gateway:\n  upstream: {{protocol: http2}}\n"
    ));
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let text = send(gw.addr(), upload).await;
    assert_eq!(status_of(&text), Some(501), "{text}");
    assert_eq!(up.requests(), 0);
    gw.shutdown().await;
}
