//! The decision service's listeners under hostile clients: a flood of
//! connections that send nothing, dribble heads or idle, with the
//! process's open files limit lowered (`setrlimit` on the child); idle and
//! half-sent requests; stalled gRPC streams; a flood of calls in flight.
//! Each time, a normal client keeps being answered within 100 ms while the
//! attack runs, and what the attack holds is released by the listeners'
//! timeouts.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use floodgate_testkit::attack::{Attack, Kind};
use floodgate_testkit::grpc::{grpc_status, rls_request};
use floodgate_testkit::h2_connect;
use floodgate_testkit::{Floodgate, Probe, http_request, limit_open_files, median_time};
use http_body_util::{Full, StreamBody};
use hyper::body::Frame;
use hyper::client::conn::http2::SendRequest;

use crate::serve_support::rls::user_frame;

const CONFIG: &str = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 1000000, unit: day}\n";

/// `floodgate serve` with `args`, its open files limited to `nofile`,
/// polling its configuration at the default interval (1 s).
fn serve(args: &[&str], nofile: u64) -> Floodgate {
    let bin = Path::new(env!("CARGO_BIN_EXE_floodgate"));
    let mut s = Floodgate::spawn(bin, CONFIG, "1s", args, &[], |cmd| {
        limit_open_files(cmd, nofile);
    });
    let http = s.http;
    s.wait_ready(http);
    s
}

const FAST: Duration = Duration::from_millis(100);
/// Well below the 5 s deadline of `calls_in_flight_are_bounded`'s stalled
/// calls, at which a call queued behind them would be answered; well above
/// what a loaded machine adds to a call answered at once.
const QUEUED: Duration = Duration::from_secs(1);

fn json_body(user: &str) -> String {
    format!(r#"{{"domain":"d","descriptors":[{{"entries":[{{"key":"user","value":"{user}"}}]}}]}}"#)
}

/// One `/json` call on an open keep-alive connection; the status.
fn keep_alive_call(s: &mut TcpStream, user: &str) -> u16 {
    let body = json_body(user);
    write!(
        s,
        "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // Read the head, then the body its length says.
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut rest = vec![0u8; len];
    s.read_exact(&mut rest).unwrap();
    head.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Whether the server closes `s` within `within` (EOF or an error).
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 1024];
    let end = Instant::now() + within;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false;
            }
            Err(_) => return true,
        }
        if Instant::now() > end {
            return false;
        }
    }
}

fn rls_frame(value: &str) -> Bytes {
    user_frame("d", value)
}

/// One complete `ShouldRateLimit` call; its grpc-status.
async fn grpc_call(send: &mut SendRequest<Full<Bytes>>, port: u16) -> String {
    let res = send
        .send_request(rls_request(port, Full::new(rls_frame("normal"))))
        .await
        .unwrap();
    grpc_status(res).await
}

/// A call whose message never arrives whole (no `grpc-timeout`): the
/// sender half of its body, kept to hold the stream open.
type Stalled = tokio::sync::mpsc::Sender<Bytes>;

type Frames =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send>>;

fn stalled_body() -> (Stalled, StreamBody<Frames>) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    (tx, StreamBody::new(Box::pin(stream)))
}

/// A call sent on its own task: its answer.
type Call = tokio::task::JoinHandle<hyper::Result<http::Response<hyper::body::Incoming>>>;

/// `n` calls on `attacker` whose messages stop after 3 bytes: the senders
/// that hold them open, and the calls.
async fn stall(
    attacker: &mut SendRequest<StreamBody<Frames>>,
    port: u16,
    n: usize,
) -> (Vec<Stalled>, Vec<Call>) {
    let mut holds = Vec::new();
    let mut stalled = Vec::new();
    for _ in 0..n {
        let (tx, body) = stalled_body();
        tx.send(rls_frame("stalled").slice(..3)).await.unwrap();
        holds.push(tx);
        attacker.ready().await.unwrap();
        stalled.push(tokio::spawn(attacker.send_request(rls_request(port, body))));
    }
    (holds, stalled)
}

/// Hundreds of connections that send nothing, dribble a head, idle after
/// a response or after the HTTP/2 preface, on both public listeners of a
/// process allowed 256 open files: the listeners' places fit the
/// descriptors (so `accept` never fails), the flood's connections are
/// closed to make room, and normal clients — HTTP and gRPC on new
/// connections, the admin listener — keep being answered within 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_cannot_exhaust_the_descriptors() {
    let s = serve(&["--header-read-timeout", "5s"], 256);
    let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let tick = Duration::from_millis(200);
    let http_attack = Attack::start(
        at(s.http),
        &[
            (Kind::Silent, 150),
            (Kind::DribbleHead, 150),
            (Kind::IdleKeepAlive, 100),
            (Kind::Http2Idle, 100),
        ],
        tick,
    );
    let grpc_attack = Attack::start(
        at(s.grpc),
        &[(Kind::Silent, 100), (Kind::Http2Idle, 150)],
        tick,
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let http = Probe::start(at(s.http), "/healthcheck", Duration::from_millis(50));
    let admin = Probe::start(at(s.admin), "/ready", Duration::from_millis(50));
    let mut grpc_times = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        let mut grpc = h2_connect::<Full<Bytes>>(s.grpc).await;
        assert_eq!(grpc_call(&mut grpc, s.grpc).await, "0");
        grpc_times.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    http.stop()
        .assert_served(FAST, "HTTP under a connection flood");
    admin
        .stop()
        .assert_served(FAST, "admin under a connection flood");
    grpc_times.sort();
    assert!(
        grpc_times[grpc_times.len() * 9 / 10] < FAST,
        "gRPC under a connection flood: {grpc_times:?}"
    );
    let closed: u64 = http_attack
        .stop()
        .into_iter()
        .chain(grpc_attack.stop())
        .map(|(_, t)| t.closed_by_server)
        .sum();
    assert!(closed > 0, "no flood connection was closed to make room");
    let log = s.log();
    assert!(!log.contains("Too many open files"), "{log}");
    assert!(!log.contains("accept failed"), "{log}");
    let (_, metrics) = http_request(s.admin, "GET", "/metrics", None, b"").unwrap();
    assert!(
        metrics.contains("floodgate_connections_evicted_total{listener=\"http\"}"),
        "{metrics}"
    );
}

/// An idle keep-alive connection, a half-sent head and a half-sent body
/// are each closed or answered by the listener's timeouts.
#[test]
fn idle_and_half_sent_requests_are_released() {
    let s = serve(
        &["--header-read-timeout", "1s", "--request-timeout", "1s"],
        1024,
    );
    let mut idle = TcpStream::connect(("127.0.0.1", s.http)).unwrap();
    assert_eq!(keep_alive_call(&mut idle, "once"), 200);
    let mut head = TcpStream::connect(("127.0.0.1", s.http)).unwrap();
    head.write_all(b"GET /ready HTTP/1.1\r\n").unwrap();
    let mut body = TcpStream::connect(("127.0.0.1", s.http)).unwrap();
    body.write_all(b"POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"domain\"")
        .unwrap();
    // A normal client meanwhile.
    let took = median_time(5, || {
        assert_eq!(
            http_request(s.http, "POST", "/json", None, json_body("n").as_bytes()).map(|r| r.0),
            Some(200)
        );
    });
    assert!(took < FAST, "{took:?}");
    assert!(
        closed_within(&mut idle, Duration::from_secs(10)),
        "idle keep-alive held"
    );
    assert!(
        closed_within(&mut head, Duration::from_secs(10)),
        "half-sent head held"
    );
    body.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = Vec::new();
    let _ = body.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 504"),
        "half-sent body: {answer}"
    );
    assert!(answer.contains("DEADLINE_EXCEEDED"), "{answer}");
    // Counted as an error of its API.
    let errors = "floodgate_request_errors_total{class=\"deadline_exceeded\"}";
    assert_eq!(s.metric(errors), 1.0);
    assert_eq!(
        s.metric("floodgate_requests_total{api=\"json\",result=\"error\"}"),
        1.0
    );
}

/// gRPC calls whose message never arrives whole, with no `grpc-timeout`,
/// are answered `DEADLINE_EXCEEDED` at the server's deadline instead of
/// being held forever; a connection's streams are capped; calls on another
/// connection are answered at once meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_grpc_streams_meet_the_servers_deadline() {
    let s = serve(
        &["--request-timeout", "1s", "--max-concurrent-streams", "16"],
        1024,
    );
    let mut attacker = h2_connect(s.grpc).await;
    let started = Instant::now();
    let (holds, stalled) = stall(&mut attacker, s.grpc, 16).await;
    let mut normal = h2_connect::<Full<Bytes>>(s.grpc).await;
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(grpc_call(&mut normal, s.grpc).await, "0");
        times.push(t.elapsed());
    }
    times.sort();
    assert!(times[2] < FAST, "{times:?}");
    for call in stalled {
        let res = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("a stalled stream is held past the deadline")
            .unwrap()
            .unwrap();
        assert_eq!(grpc_status(res).await, "4", "DEADLINE_EXCEEDED");
    }
    assert!(started.elapsed() >= Duration::from_millis(900));
    drop(holds);
}

/// Calls in flight are bounded over every connection: beyond
/// `--max-requests`, a call is refused at once (`RESOURCE_EXHAUSTED`,
/// 503), never queued, so a flood of stalled calls holds bounded memory;
/// once their deadline frees them, calls are decided again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_are_bounded() {
    // A deadline long enough for the probes below to find the stalled
    // calls held on a loaded machine.
    let s = serve(&["--request-timeout", "5s", "--max-requests", "8"], 1024);
    let mut attacker = h2_connect(s.grpc).await;
    let (mut holds, mut stalled) = stall(&mut attacker, s.grpc, 8).await;
    // Refused once the server holds the stalled calls (on a loaded machine
    // their heads can take a while to be read; until then a call is
    // decided, at once too): at once, not queued until their deadline
    // frees a place.
    let mut normal = h2_connect::<Full<Bytes>>(s.grpc).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let end = Instant::now() + Duration::from_secs(10);
    let took = loop {
        let t = Instant::now();
        let status = grpc_call(&mut normal, s.grpc).await;
        let took = t.elapsed();
        if status == "8" {
            break took;
        }
        assert_eq!(status, "0", "neither decided nor RESOURCE_EXHAUSTED");
        assert!(took < QUEUED, "{took:?}: waited for a place");
        let ended = stalled.iter().filter(|c| c.is_finished()).count();
        assert!(
            Instant::now() < end && ended < stalled.len(),
            "never refused RESOURCE_EXHAUSTED ({ended} stalled calls ended)"
        );
        // A stalled call that arrived while a probe held a place was
        // refused: one more takes the place the probe left.
        let (hold, call) = stall(&mut attacker, s.grpc, 1).await;
        holds.extend(hold);
        stalled.extend(call);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(took < QUEUED, "{took:?}: refused at once");
    let (status, body) =
        http_request(s.http, "POST", "/json", None, json_body("x").as_bytes()).unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("RESOURCE_EXHAUSTED"), "{body}");
    // Counted as shed requests, of their APIs.
    assert!(s.metric("floodgate_requests_total{api=\"grpc\",result=\"shed\"}") >= 1.0);
    assert_eq!(
        s.metric("floodgate_requests_total{api=\"json\",result=\"shed\"}"),
        1.0
    );
    // Each stalled call held until its deadline or refused at once.
    let mut held = 0;
    for call in stalled {
        let res = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match grpc_status(res).await.as_str() {
            "4" => held += 1,
            status => assert_eq!(status, "8", "neither DEADLINE_EXCEEDED nor refused"),
        }
    }
    assert!(held >= 8, "{held} stalled calls held");
    assert_eq!(grpc_call(&mut normal, s.grpc).await, "0");
    drop(holds);
}
