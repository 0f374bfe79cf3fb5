//! Clients that stop reading, against a real nginx upstream serving a
//! large file: an HTTP/2 client whose receive window stays shut (Python's
//! `h2`) must not stall the other clients sharing the gateway's HTTP/2
//! upstream connection, and has its streams reset after the send timeout;
//! HTTP/1.1 clients that never read their socket are closed after the
//! send timeout, and the upstream connections they held with them.

use crate::support;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use floodgate_testkit::{Nginx, Stalled, ZeroWindow};
use support::{ConfigFile, gateway, h1, h2, raw};

/// The file nginx serves: larger than any window or socket buffer between
/// it and a client.
const BIG: usize = 8 << 20;

/// nginx serving `/big` (`BIG` bytes) and its `stub_status` at `/status`,
/// over HTTP/2 with prior knowledge (`h2c`) or HTTP/1.1.
fn nginx(http2: bool, size: usize) -> Nginx {
    Nginx::start(256, 1, |port, dir| {
        std::fs::create_dir_all(dir.join("www")).unwrap();
        std::fs::write(dir.join("www/big"), vec![b'x'; size]).unwrap();
        let h2 = if http2 { " http2" } else { "" };
        format!(
            r#"    server {{
        listen 127.0.0.1:{port}{h2};
        location / {{ root {}/www; }}
        location = /status {{ stub_status; }}
    }}
"#,
            dir.display()
        )
    })
}

fn config(upstream: &str, limits: &str) -> String {
    format!(
        "gateway: {{upstream: {{url: http://127.0.0.1:1, host: upstream{upstream}}}, limits: {{{limits}}}}}\nserver: {{reload_interval: 0}}\n"
    )
}

/// A `GET /big` on every stream of a zero-window connection.
const GET_BIG: Stalled<'static> = Stalled {
    headers: &[
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", "gateway"),
        (":path", "/big"),
    ],
    body: &[],
};

/// nginx's `Active connections` and its count of requests.
fn nginx_status(port: u16) -> (u64, u64) {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let text = raw(
        addr,
        b"GET /status HTTP/1.0\r\n\r\n",
        Duration::from_secs(5),
    );
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    let numbers: Vec<u64> = body
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[3])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_a_shut_window_does_not_stall_the_others() {
    let upstream = nginx(true, BIG);
    // The default send timeout (60 s): the stalled streams stay while the
    // others are served.
    let file = ConfigFile::new(&config(", protocol: http2", ""));
    let gw = gateway(&file, &format!("http://127.0.0.1:{}", upstream.port)).await;
    let a = gw.addr();
    let mut stalled = ZeroWindow::open(a.port(), 1, 6, &GET_BIG);
    assert!(
        stalled.wait_for("headers", 6, Duration::from_secs(20)),
        "the stalled client's responses began"
    );
    let url = format!("http://{a}/big");
    let started = Instant::now();
    let clients = [h1(), h1(), h2(), h2()].map(|c| {
        let url = url.clone();
        tokio::spawn(async move {
            let r = c.get(url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap().len()
        })
    });
    for c in clients {
        let got = tokio::time::timeout(Duration::from_secs(30), c).await;
        let len = got.expect("served while the stalled client stays").unwrap();
        assert_eq!(len, BIG);
    }
    eprintln!("others served in {:?}", started.elapsed());
    stalled.drain();
    assert_eq!(stalled.count("reset"), 0, "{:?}", stalled.lines("reset"));
    assert_eq!(stalled.count("closed"), 0, "the stalled client stayed");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shut_window_is_reset_after_the_send_timeout() {
    let upstream = nginx(true, BIG);
    let limits = "send_timeout: 1s, http2_idle_timeout: 1s";
    let file = ConfigFile::new(&config(", protocol: http2", limits));
    let gw = gateway(&file, &format!("http://127.0.0.1:{}", upstream.port)).await;
    let a = gw.addr();
    let mut stalled = ZeroWindow::open(a.port(), 2, 4, &GET_BIG);
    assert!(stalled.wait_for("headers", 8, Duration::from_secs(20)));
    let began = Instant::now();
    assert!(
        stalled.wait_for("reset", 8, Duration::from_secs(20)),
        "every stalled stream reset; seen: {:?}",
        stalled.lines("reset")
    );
    assert!(
        began.elapsed() >= Duration::from_millis(900),
        "not before the timeout"
    );
    // Left without a stream, the connections are closed (their places
    // and descriptors given back).
    assert!(
        stalled.wait_for("closed", 2, Duration::from_secs(20)),
        "the stalled connections closed once idle"
    );
    // The gateway goes on serving, on the same upstream connection.
    let r = h2().get(format!("http://{a}/big")).send().await.unwrap();
    assert_eq!(r.bytes().await.unwrap().len(), BIG);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_clients_that_never_read_are_closed_after_the_send_timeout() {
    // Beyond what the socket buffers on both sides of the gateway hold.
    const HUGE: usize = 48 << 20;
    const CLIENTS: usize = 12;
    let upstream = nginx(false, HUGE);
    let file = ConfigFile::new(&config("", "send_timeout: 1s"));
    let gw = gateway(&file, &format!("http://127.0.0.1:{}", upstream.port)).await;
    let a = gw.addr();
    let (_, before) = nginx_status(upstream.port);
    let clients: Vec<TcpStream> = (0..CLIENTS)
        .map(|_| {
            let mut s = TcpStream::connect(a).unwrap();
            let req = b"GET /big HTTP/1.1\r\nHost: gateway\r\n\r\n";
            std::io::Write::write_all(&mut s, req).unwrap();
            s
        })
        .collect();
    // Each request reached nginx (one more request per status poll)...
    let mut polls = 0;
    let reached = support::eventually(Duration::from_secs(20), || {
        polls += 1;
        nginx_status(upstream.port).1 >= before + polls + CLIENTS as u64
    })
    .await;
    assert!(reached, "the requests reached the upstream");
    // ... and the upstream connections they held are closed once their
    // clients are (only the status poll's is left).
    let released = support::eventually(Duration::from_secs(20), || {
        nginx_status(upstream.port).0 <= 1
    })
    .await;
    assert!(
        released,
        "upstream connections still held: {:?}",
        nginx_status(upstream.port)
    );
    // The clients find their connections closed, their responses cut.
    for mut s in clients {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        let end = std::io::Read::read_to_end(&mut s, &mut got);
        assert!(
            end.is_ok()
                || end
                    .as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "closed by the gateway: {end:?} after {} bytes",
            got.len()
        );
        assert!(got.len() < HUGE, "the response was cut");
    }
    gw.shutdown().await;
}
