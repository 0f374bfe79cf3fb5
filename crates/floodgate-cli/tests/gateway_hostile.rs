//! `floodgate gateway` under descriptor exhaustion, the real binary with
//! its open files limit lowered to 256 (soft and hard, so it cannot raise
//! it): `max_connections` is lowered to what 256 descriptors leave room
//! for, so a flood of connections never makes `accept` fail; the flood's
//! connections are closed to make room and a normal client keeps being
//! served within 100 ms. When requests in flight do exhaust the
//! descriptors (each holding an upstream connection), the accept loop
//! pauses (growing, up to 1 s) instead of retrying at once, logs the
//! episode once, and serves again as soon as descriptors are free.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use floodgate_testkit::attack::{Attack, Kind};
use floodgate_testkit::{Gateway, Probe, limit_open_files, metric, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::gateway_lifecycle::upstream;

/// The open files limit the gateway runs under.
const OPEN_FILES: u64 = 256;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// `floodgate gateway` on `config` in front of `upstream`, under
/// [`OPEN_FILES`]; ready.
fn start(config: &str, upstream: SocketAddr) -> Gateway {
    let upstream = format!("http://{upstream}");
    // Some configurations are plain proxies, without a domain.
    let args = ["--upstream", &upstream, "--allow-empty-config"];
    let mut gw = Gateway::spawn(bin(), config, &args, &[], |cmd| {
        limit_open_files(cmd, OPEN_FILES);
    });
    let admin = gw.admin;
    gw.wait_ready(admin);
    gw
}

/// A cap given beyond what the open files allow: lowered, with a warning.
const CONFIG: &str = "gateway:\n  upstream: http://127.0.0.1:1\n  limits: {header_read_timeout: 10s, max_connections: 10000}\nserver: {reload_interval: 0}\n";

#[test]
fn a_connection_flood_under_a_low_open_files_limit() {
    let up = upstream();
    let gw = start(CONFIG, up.addr);
    let (port, admin) = (gw.port, gw.admin);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // The listener's task logs it once it runs, which readiness does not
    // wait for.
    let lowered = |log: String| {
        log.contains("max_connections is more than the open files limit allows")
            && log.contains("lowered_to=96")
    };
    assert!(
        wait_until(Duration::from_secs(5), || lowered(gw.log())),
        "{}",
        gw.log()
    );
    // 350 connections against 96 places, each reopened when closed; the
    // header timeout (10 s) never comes into it.
    let attack = Attack::start(
        addr,
        &[(Kind::Silent, 300), (Kind::DribbleHead, 50)],
        Duration::from_millis(50),
    );
    std::thread::sleep(Duration::from_millis(500));
    let probe = Probe::start(addr, "/", Duration::from_millis(50));
    std::thread::sleep(Duration::from_secs(3));
    let probed = probe.stop();
    let open = metric(admin, "floodgate_gateway_connections ");
    let evicted = metric(admin, "floodgate_gateway_connections_evicted_total");
    let tally = attack.stop();
    probed.assert_served(Duration::from_millis(100), "during the flood");
    assert!(open <= 96.0, "{open} connections open");
    assert!(evicted > 100.0, "{evicted} connections closed to make room");
    for (kind, t) in tally {
        assert!(t.closed_by_server > 0, "{kind:?}: {t:?}");
    }
    let log = gw.log();
    assert!(!log.contains("accept failed"), "{log}");
}

/// An upstream that reads each request head and holds it until released
/// (then answers it, and every later one at once, and closes); counts
/// what it held.
fn holding_upstream(runtime: &tokio::runtime::Runtime) -> (SocketAddr, Arc<AtomicUsize>, Release) {
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let held = Arc::new(AtomicUsize::new(0));
    let release = Release(Arc::new(tokio::sync::watch::channel(false).0));
    let (h, r) = (held.clone(), release.clone());
    runtime.spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (h, r) = (h.clone(), r.clone());
            tokio::spawn(async move {
                let mut released = r.0.subscribe();
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                h.fetch_add(1, Ordering::SeqCst);
                let _ = released.wait_for(|r| *r).await;
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    (addr, held, release)
}

/// Lets the [`holding_upstream`] answer.
#[derive(Clone)]
struct Release(Arc<tokio::sync::watch::Sender<bool>>);

/// CPU time (user and system) the process has used, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which ends with the last `)`):
    // utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

#[test]
fn out_of_descriptors_the_accept_loop_pauses_and_recovers() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (up, held, release) = holding_upstream(&runtime);
    let gw = start(CONFIG, up);
    let (port, admin) = (gw.port, gw.admin);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // One HTTP/2 connection, 250 requests at once: each holds an upstream
    // connection, more than the descriptors left.
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .no_proxy()
        .build()
        .unwrap();
    let requests: Vec<_> = (0..250)
        .map(|_| {
            let c = client.clone();
            runtime.spawn(async move {
                c.get(format!("http://{addr}/held"))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            })
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(10), || held.load(Ordering::SeqCst)
            >= 150),
        "{} requests reached the upstream; log:\n{}",
        held.load(Ordering::SeqCst),
        gw.log()
    );
    std::thread::sleep(Duration::from_millis(500));
    // New clients now: `accept` fails for want of descriptors.
    let cpu_before = cpu_ticks(gw.pid());
    let clients: Vec<_> = (0..5)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
                s.write_all(b"GET / HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let mut out = Vec::new();
                let _ = s.read_to_end(&mut out);
                String::from_utf8_lossy(&out).into_owned()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let cpu = cpu_ticks(gw.pid()) - cpu_before;
    // The episode is logged once the listener meets it.
    wait_until(Duration::from_secs(10), || {
        gw.log().contains("accept failed")
    });
    let log = gw.log();
    let failures = log.matches("accept failed").count();
    assert_eq!(failures, 1, "one line for the episode:\n{log}");
    // Not spinning: a fraction of a core over those two seconds.
    assert!(cpu < 60, "{cpu} ticks of CPU in 2 s");
    // The upstream answers: the descriptors come back, and the waiting
    // clients are served (after at most the longest pause, 1 s).
    let released = Instant::now();
    release.0.send_replace(true);
    for c in clients {
        let text = c.join().unwrap();
        assert!(text.starts_with("HTTP/1.1 "), "{text:?}");
    }
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "served {:?} after the release",
        released.elapsed()
    );
    let statuses: Vec<u16> = requests
        .into_iter()
        .map(|r| runtime.block_on(r).unwrap())
        .collect();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 502),
        "{statuses:?}"
    );
    assert!(
        gw.log().contains("accepting connections again"),
        "{}",
        gw.log()
    );
    assert!(metric(admin, "floodgate_gateway_accept_errors_total") >= 1.0);
}
