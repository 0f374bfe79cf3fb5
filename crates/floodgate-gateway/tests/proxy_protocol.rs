//! The gateway behind an L4 load balancer: PROXY protocol v1 and v2
//! headers from a trusted source give the client address the limits key
//! on and the upstream sees (`X-Forwarded-For`, `Forwarded`), before TLS
//! too; a header from any other peer, a missing, malformed, oversized or
//! endless one closes its connection with a log line, and the listener
//! goes on serving. Against nginx (`listen … proxy_protocol`,
//! `set_real_ip_from`, `real_ip_header proxy_protocol`): the same headers
//! give the same client address.

use crate::support;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floodgate_gateway::Running;
use floodgate_testkit::Nginx;
use support::{ConfigFile, field, gateway, status_of, upstream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// One request a client address an hour.
const LIMITED: &str = r#"
http: {domain: gw, descriptors: [[client_ip]]}
domains:
  - domain: gw
    descriptors:
      - key: remote_address
        rate_limit: {name: per-client, algorithm: sliding_log, requests: 1, per: 1h}
server: {reload_interval: 0}
"#;

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n";

/// A gateway whose PROXY protocol sources are `trusted`, header timeout
/// `timeout`, with its access log.
async fn start(trusted: &str, timeout: &str) -> (Running, ConfigFile) {
    let up = upstream().await;
    let text = format!(
        "{LIMITED}gateway:\n  proxy_protocol: [{trusted}]\n  access_log: true\n  limits: {{header_read_timeout: {timeout}}}\n"
    );
    let file = ConfigFile::new(&text);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    (gw, file)
}

/// A v1 header from `source`.
fn v1(source: &str) -> Vec<u8> {
    let s: SocketAddr = source.parse().unwrap();
    let (family, to) = if s.is_ipv4() {
        ("TCP4", "192.0.2.200")
    } else {
        ("TCP6", "2001:db8::200")
    };
    format!("PROXY {family} {} {to} {} 443\r\n", s.ip(), s.port()).into_bytes()
}

/// A v2 `PROXY` header over TCP from `source` (a TLV after the addresses,
/// as AWS's NLB sends).
fn v2(source: &str) -> Vec<u8> {
    let s: SocketAddr = source.parse().unwrap();
    let mut body = Vec::new();
    let family = match s {
        SocketAddr::V4(a) => {
            body.extend(a.ip().octets());
            body.extend([192, 0, 2, 200]);
            0x11
        }
        SocketAddr::V6(a) => {
            body.extend(a.ip().octets());
            body.extend(
                "2001:db8::200"
                    .parse::<std::net::Ipv6Addr>()
                    .unwrap()
                    .octets(),
            );
            0x21
        }
    };
    body.extend(s.port().to_be_bytes());
    body.extend(443u16.to_be_bytes());
    body.extend([0xEA, 0, 4, 1, b'v', b'p', b'c']);
    v2_raw(0x21, family, &body)
}

/// A v2 header of `command` and `family` bytes, then `body`.
fn v2_raw(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend([command, family]);
    h.extend(u16::try_from(body.len()).unwrap().to_be_bytes());
    h.extend(body);
    h
}

/// Writes `header` then `rest` on `io`, and reads until the server closes
/// (`None`: it had not within 10 s).
async fn over<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, rest: &[u8]) -> Option<String> {
    // A write refused (the server closed first) reads as closed.
    let _ = io.write_all(rest).await;
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), io.read_to_end(&mut out)).await;
    let _reset_counts_as_closed = read.ok()?;
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// One request on a new connection to `addr` (from `from`, a local
/// address), after `header`: what came back before the server closed.
async fn send_from(from: &str, addr: SocketAddr, header: &[u8], request: &[u8]) -> Option<String> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream.write_all(header).await.ok()?;
    over(stream, request).await
}

async fn send(addr: SocketAddr, header: &[u8]) -> Option<String> {
    send_from("127.0.0.1", addr, header, REQUEST).await
}

/// A header from a source address.
type Header = fn(&str) -> Vec<u8>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_give_the_client_address_for_keys_and_upstream() {
    let (gw, _file) = start("127.0.0.1", "5s").await;
    let a = gw.addr();
    let cases: [(&str, Header, &str, &str); 4] = [
        ("v1", v1, "198.51.100.1:4711", "198.51.100.2:4711"),
        ("v1", v1, "[2001:db8::1]:4711", "[2001:db8::2]:4711"),
        ("v2", v2, "198.51.100.3:4711", "198.51.100.4:4711"),
        ("v2", v2, "[2001:db8::3]:4711", "[2001:db8::4]:4711"),
    ];
    for (version, header, one, other) in cases {
        // Two clients behind one peer: a bucket each.
        for client in [one, other] {
            let ip = client.parse::<SocketAddr>().unwrap().ip().to_string();
            let text = send(a, &header(client)).await.expect("answered");
            assert_eq!(status_of(&text), Some(200), "{version} {client}: {text}");
            assert_eq!(field(&text, "x-seen-xff"), Some(ip.as_str()), "{text}");
            let quoted = if ip.contains(':') {
                format!("\"[{ip}]\"")
            } else {
                ip.clone()
            };
            let forwarded = format!("for={quoted};proto=http");
            assert!(
                field(&text, "x-seen-forwarded")
                    .unwrap()
                    .starts_with(&forwarded)
            );
        }
        let again = send(a, &header(one)).await.expect("answered");
        assert_eq!(
            status_of(&again),
            Some(429),
            "{version} {one} again: {again}"
        );
    }
    // `LOCAL` (v2) and `UNKNOWN` (v1): the peer is the client.
    let local = v2_raw(0x20, 0x00, &[]);
    let text = send(a, &local).await.expect("answered");
    assert_eq!(field(&text, "x-seen-xff"), Some("127.0.0.1"), "{text}");
    let text = send(a, b"PROXY UNKNOWN\r\n").await.expect("answered");
    assert_eq!(
        status_of(&text),
        Some(429),
        "the peer's bucket, spent: {text}"
    );
    gw.shutdown().await;
}

/// What the gateway logs, captured for one test on its own thread (every
/// task of a current-thread runtime runs on it).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let logs = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || logs.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Waits until a line holds `text`.
    async fn wait_for(&self, text: &str) -> bool {
        let logs = &self.0;
        let found = || String::from_utf8_lossy(&logs.lock().unwrap()).contains(text);
        support::eventually(Duration::from_secs(5), found).await
    }
}

#[tokio::test]
async fn a_header_from_a_peer_not_trusted_closes_its_connection() {
    let logs = Logs::default();
    let _guard = logs.capture();
    // 127.0.0.1 is not a trusted source.
    let (gw, _file) = start("192.0.2.1, 10.0.0.0/8", "5s").await;
    let a = gw.addr();
    for header in [v1("198.51.100.1:1"), v2("198.51.100.1:1")] {
        let text = send(a, &header).await;
        assert_eq!(text.as_deref(), Some(""), "closed without an answer");
        assert!(logs.wait_for("not trusted").await);
    }
    // Its requests without a header are served, keyed on the peer.
    let text = send(a, b"").await.expect("answered");
    assert_eq!(status_of(&text), Some(200), "{text}");
    assert_eq!(field(&text, "x-seen-xff"), Some("127.0.0.1"), "{text}");
    gw.shutdown().await;
}

#[tokio::test]
async fn malformed_headers_close_their_connection_with_a_reason() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let (gw, _file) = start("127.0.0.1", "1s").await;
    let a = gw.addr();
    let mut oversized = v2_raw(0x21, 0x11, &[0; 12]);
    oversized[14..16].copy_from_slice(&5000u16.to_be_bytes());
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("no header", Vec::new(), "no PROXY protocol header"),
        (
            "wrong signature",
            b"PROXZ TCP4 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(),
            "no PROXY",
        ),
        (
            "bad v1 address",
            b"PROXY TCP4 1.2.3.400 5.6.7.8 1 2\r\n".to_vec(),
            "v1",
        ),
        (
            "v1 too long",
            [&b"PROXY TCP4 "[..], &[b'1'; 120]].concat(),
            "v1",
        ),
        ("bad v2 family", v2_raw(0x21, 0x51, &[0; 12]), "v2"),
        ("bad v2 version", v2_raw(0x31, 0x11, &[0; 12]), "v2"),
        (
            "v2 shorter than its addresses",
            v2_raw(0x21, 0x21, &[0; 12]),
            "v2",
        ),
        ("oversized v2", oversized, "longer than 4096"),
    ];
    for (what, header, reason) in cases {
        let text = send(a, &header).await;
        assert_eq!(
            text.as_deref(),
            Some(""),
            "{what}: closed without an answer"
        );
        assert!(logs.wait_for(reason).await, "{what}: logs {reason}");
    }
    // Truncated: the peer stops within the header and closes its side.
    let mut stream = TcpStream::connect(a).await.unwrap();
    stream
        .write_all(b"PROXY TCP4 198.51.100.1 19")
        .await
        .unwrap();
    stream.shutdown().await.unwrap();
    assert_eq!(over(stream, b"").await.as_deref(), Some(""));
    assert!(
        logs.wait_for("closed within the PROXY protocol header")
            .await
    );
    // Slow: a header that never ends is closed at the header timeout.
    let began = Instant::now();
    let mut stream = TcpStream::connect(a).await.unwrap();
    stream.write_all(b"PROXY TCP4 198.51.100.1 ").await.unwrap();
    assert_eq!(over(stream, b"").await.as_deref(), Some(""), "closed");
    assert!(
        began.elapsed() >= Duration::from_millis(900),
        "{:?}",
        began.elapsed()
    );
    assert!(logs.wait_for("within the header timeout").await);
    // A balancer's TCP health check (connect, close) is not worth a line.
    drop(TcpStream::connect(a).await.unwrap());
    // The listener goes on serving.
    let text = send(a, &v1("198.51.100.9:1")).await.expect("answered");
    assert_eq!(status_of(&text), Some(200), "{text}");
    assert_eq!(field(&text, "x-seen-xff"), Some("198.51.100.9"));
    // The access log's client is the header's.
    assert!(logs.wait_for("client=198.51.100.9").await);
    let truncated = logs.text().matches("closed within the PROXY").count();
    assert_eq!(truncated, 1, "the truncated header's line, not the check's");
    assert!(!logs.text().contains("before its first byte"));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_split_across_writes_is_read_whole() {
    let (gw, _file) = start("127.0.0.1", "5s").await;
    let header = v2("[2001:db8::5]:1");
    let mut stream = TcpStream::connect(gw.addr()).await.unwrap();
    stream.set_nodelay(true).unwrap();
    for piece in header.chunks(5) {
        stream.write_all(piece).await.unwrap();
        stream.flush().await.unwrap();
        tokio::task::yield_now().await;
    }
    let text = over(stream, REQUEST).await.expect("answered");
    assert_eq!(field(&text, "x-seen-xff"), Some("2001:db8::5"), "{text}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_comes_before_the_tls_handshake() {
    use support::tls::Pki;
    let pki = Pki::new("edge");
    let leaf = pki.leaf("gateway");
    let up = upstream().await;
    let text = format!(
        "{LIMITED}gateway:\n  proxy_protocol: [127.0.0.1]\n  tls: {{cert: {}, key: {}}}\n",
        leaf.cert.display(),
        leaf.key.display()
    );
    let file = ConfigFile::new(&text);
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(pki.roots())
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    for header in [v1("198.51.100.7:1"), v2("[2001:db8::7]:1")] {
        let mut tcp = TcpStream::connect(gw.addr()).await.unwrap();
        tcp.write_all(&header).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = connector.connect(name, tcp).await.unwrap();
        let text = over(tls, REQUEST).await.expect("answered");
        assert_eq!(status_of(&text), Some(200), "{text}");
        let seen = field(&text, "x-seen-xff").unwrap();
        assert!(seen == "198.51.100.7" || seen == "2001:db8::7", "{text}");
        assert!(
            field(&text, "x-seen-forwarded")
                .unwrap()
                .contains(";proto=https")
        );
    }
    gw.shutdown().await;
}

/// nginx with the PROXY protocol on its listener, trusting 127.0.0.1's
/// headers (`real_ip_header proxy_protocol`), answering `$remote_addr`.
fn nginx() -> Nginx {
    Nginx::start(64, 1, |port, _| {
        format!(
            r#"    server {{
        listen 127.0.0.1:{port} proxy_protocol;
        set_real_ip_from 127.0.0.1;
        real_ip_header proxy_protocol;
        location / {{ return 200 "$remote_addr"; }}
    }}
"#
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_address_is_nginx_s() {
    let ngx = nginx();
    let ngx_addr: SocketAddr = format!("127.0.0.1:{}", ngx.port).parse().unwrap();
    let up = upstream().await;
    let file = ConfigFile::new("gateway: {proxy_protocol: [127.0.0.1]}\n");
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let headers: Vec<(&str, Vec<u8>)> = vec![
        ("v1 TCP4", v1("198.51.100.1:4711")),
        ("v1 TCP6", v1("[2001:db8::1]:4711")),
        ("v1 TCP6 mapped", v1("[::ffff:198.51.100.2]:1")),
        ("v1 UNKNOWN", b"PROXY UNKNOWN\r\n".to_vec()),
        ("v2 IPv4", v2("198.51.100.3:4711")),
        ("v2 IPv6", v2("[2001:db8::3]:4711")),
        (
            "v2 LOCAL",
            v2_raw(0x20, 0x11, &[192, 0, 2, 1, 192, 0, 2, 2, 0, 1, 0, 2]),
        ),
        (
            "v2 UDP",
            v2_raw(0x21, 0x12, &[192, 0, 2, 1, 192, 0, 2, 2, 0, 1, 0, 2]),
        ),
        ("v2 unspecified", v2_raw(0x21, 0x00, &[])),
        ("v2 Unix", v2_raw(0x21, 0x31, &[0; 216])),
        ("no header", Vec::new()),
        (
            "bad v1 address",
            b"PROXY TCP4 1.2.3.400 5.6.7.8 1 2\r\n".to_vec(),
        ),
        (
            "bad v1 protocol",
            b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(),
        ),
        (
            "v1 without \\r",
            b"PROXY TCP4 198.51.100.1 192.0.2.1 1 2 \n".to_vec(),
        ),
        ("v2 shorter than its addresses", v2_raw(0x21, 0x11, &[0; 8])),
        ("bad v2 version", v2_raw(0x11, 0x11, &[0; 12])),
    ];
    let mut differ: Vec<String> = Vec::new();
    for (what, header) in headers {
        let theirs = send(ngx_addr, &header)
            .await
            .expect("nginx answers or closes");
        let ours = send(gw.addr(), &header)
            .await
            .expect("the gateway answers or closes");
        let nginx_client = (status_of(&theirs) == Some(200))
            .then(|| theirs.split("\r\n\r\n").nth(1).unwrap_or("").to_owned());
        let gateway_client = (status_of(&ours) == Some(200))
            .then(|| field(&ours, "x-seen-xff").unwrap_or("").to_owned());
        if what == "bad v1 address" {
            // The one deliberate difference (docs/gateway.md): nginx keeps
            // the balancer as the client (every such client then shares its
            // bucket); the gateway closes the connection and says why.
            assert_eq!(nginx_client.as_deref(), Some("127.0.0.1"), "{what}");
            assert_eq!(gateway_client, None, "{what}");
            continue;
        }
        if gateway_client != nginx_client {
            differ.push(format!(
                "{what}: nginx {nginx_client:?}, gateway {gateway_client:?}"
            ));
        }
    }
    assert!(differ.is_empty(), "{differ:#?}");
    gw.shutdown().await;
}
