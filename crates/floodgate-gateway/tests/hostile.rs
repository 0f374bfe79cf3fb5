//! Attacks on the gateway's listener, each kept up while a probe — a
//! normal client on a new connection every 50 ms — must keep being served
//! within 100 ms: floods of connections that send nothing, dribble a head,
//! open an HTTP/2 connection and no stream, or idle after one request,
//! beyond `max_connections`; slow and stalled uploads; and a stream of
//! requests the client breaks (bodies, `Host`). Descriptor exhaustion is
//! tested on the real binary under a lowered open files limit
//! (crates/floodgate-cli/tests/gateway_hostile.rs).

use crate::support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use floodgate_testkit::Probe;
use floodgate_testkit::attack::{Attack, Kind};
use support::{ConfigFile, gateway, upstream};

/// How long each attack lasts, and the probe's pace and bound.
const ATTACK: Duration = Duration::from_millis(2500);
const EVERY: Duration = Duration::from_millis(50);
const WITHIN: Duration = Duration::from_millis(100);

fn config(limits: &str) -> String {
    format!(
        r#"
http:
  domain: gw
  descriptors:
    - [{{header: {{name: x-limit-key, key: key}}}}]
domains:
  - domain: gw
    descriptors:
      - key: key
        rate_limit: {{name: per-key, requests: 1000000, per: 1s}}
gateway:
  upstream: http://127.0.0.1:1
  limits: {{{limits}}}
server: {{reload_interval: 0}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_floods_beyond_max_connections() {
    let up = upstream().await;
    let file = ConfigFile::new(&config(
        "max_connections: 48, header_read_timeout: 2s, http2_idle_timeout: 2s",
    ));
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let a = gw.addr();
    // 120 connections that wait without a request against 48 places; the
    // silent and the dribbling ones reopened as soon as they are closed.
    let attack = Attack::start(
        a,
        &[
            (Kind::Silent, 40),
            (Kind::DribbleHead, 20),
            (Kind::Http2Idle, 30),
            (Kind::IdleKeepAlive, 30),
        ],
        Duration::from_millis(50),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let probe = Probe::start(a, "/probe", EVERY);
    tokio::time::sleep(ATTACK).await;
    let probed = probe.stop();
    let tally = attack.stop();
    probed.assert_served(WITHIN, "during a connection flood");
    // Room was made by closing the attackers' connections, well before
    // their timeouts.
    for (kind, t) in &tally {
        assert!(t.closed_by_server > 0, "{kind:?}: {t:?}");
    }
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_stalled_uploads() {
    let up = upstream().await;
    let file = ConfigFile::new(&config("body_read_timeout: 500ms"));
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let a = gw.addr();
    let attack = Attack::start(
        a,
        &[(Kind::SlowBody, 40), (Kind::StalledBody, 40)],
        Duration::from_millis(50),
    );
    let probe = Probe::start(a, "/probe", EVERY);
    tokio::time::sleep(ATTACK).await;
    let probed = probe.stop();
    let tally = attack.stop();
    probed.assert_served(WITHIN, "during slow and stalled uploads");
    for (kind, t) in tally {
        match kind {
            // A live upload, however slow, is never cut.
            Kind::SlowBody => assert_eq!(t.closed_by_server, 0, "{t:?}"),
            // A stalled one is answered 408 and closed after 500 ms.
            _ => assert!(t.closed_by_server >= 40, "{kind:?}: {t:?}"),
        }
    }
    let stats = gw.gateway().proxy().stats();
    assert!(stats.upload_timeouts.load(Ordering::Relaxed) >= 40);
    gw.shutdown().await;
}

/// Requests the client breaks, with the status each must get.
const BROKEN: &[(&[u8], &str)] = &[
    (
        b"POST /slow?ms=300 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "400",
    ),
    (
        b"POST /slow?ms=300 HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhalf",
        "400",
    ),
    (
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n",
        "413",
    ),
    (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "400"),
    (b"GET / HTTP/1.1\r\n\r\n", "400"),
    (b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", "400"),
    (
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "400",
    ),
];

/// Sends broken requests in turn until stopped; returns how many got the
/// status they must, and what the others got.
fn break_requests(addr: SocketAddr, stop: &AtomicBool) -> (u64, Vec<String>) {
    let mut right = 0;
    let mut wrong = Vec::new();
    for (bytes, want) in BROKEN.iter().cycle() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let Ok(mut s) = TcpStream::connect(addr) else {
            continue;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
        let _ = s.write_all(bytes);
        // The truncated upload: the client says it is done sending.
        if bytes.ends_with(b"half") {
            let _ = s.shutdown(Shutdown::Write);
        }
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out);
        if text.starts_with(&format!("HTTP/1.1 {want} ")) {
            right += 1;
        } else {
            wrong.push(format!("{:?} → {:?}", String::from_utf8_lossy(bytes), text));
        }
    }
    (right, wrong)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_broken_requests() {
    let up = upstream().await;
    let file = ConfigFile::new(&config("max_body_bytes: 1KiB"));
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let a = gw.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let breakers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || break_requests(a, &stop))
        })
        .collect();
    let probe = Probe::start(a, "/probe", EVERY);
    tokio::time::sleep(ATTACK).await;
    let probed = probe.stop();
    stop.store(true, Ordering::Relaxed);
    let mut right = 0;
    for b in breakers {
        let (r, wrong) = b.join().unwrap();
        assert!(wrong.is_empty(), "{wrong:?}");
        right += r;
    }
    probed.assert_served(WITHIN, "during a stream of broken requests");
    assert!(
        right >= BROKEN.len() as u64,
        "{right} broken requests answered"
    );
    let stats = gw.gateway().proxy().stats();
    assert_eq!(stats.bad_gateway.load(Ordering::Relaxed), 0);
    assert_eq!(stats.timeouts.load(Ordering::Relaxed), 0);
    gw.shutdown().await;
}
