//! gRPC callers that never read their answers (HTTP/2 connections whose
//! receive window stays shut, Python's `h2`): an answer not yet sent
//! counts against `server.limits.max_requests` like a call being decided,
//! so what they hold is bounded by it — beyond, calls are refused
//! (`RESOURCE_EXHAUSTED`) and the resident memory grows by what their
//! connections take, not by the answers they leave unread — and the send
//! timeout resets their streams, which gives the places back.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use floodgate_testkit::grpc::{RLS_PATH, grpc_status, rls_request};
use floodgate_testkit::{Floodgate, Stalled, ZeroWindow, h2_connect};
use http_body_util::Full;

use crate::serve_support::rls::user_frame;

const CONFIG: &str = "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {requests_per_unit: 1000000, unit: day}\n";

/// Calls in flight at most, in these tests.
const MAX_REQUESTS: usize = 20;

/// The service on `http2` (the gRPC listener's HTTP/2 server).
fn serve(send_timeout: &str, http2: &str) -> Floodgate {
    let bin = Path::new(env!("CARGO_BIN_EXE_floodgate"));
    let max = MAX_REQUESTS.to_string();
    // Two workers, whatever the machine: the resident size measured does
    // not depend on how many threads' heaps there are.
    let args = [
        "--max-requests",
        &max,
        "--send-timeout",
        send_timeout,
        "--workers",
        "2",
        "--grpc-http2",
        http2,
    ];
    Floodgate::start(bin, CONFIG, &args, &[])
}

/// `ShouldRateLimit` on every stream of zero-window connections to `s`.
fn unread_calls(s: &Floodgate, connections: usize, streams: usize) -> ZeroWindow {
    unread_calls_in_waves(s, 1, connections, streams)
}

/// [`unread_calls`] in `waves` waves (see [`ZeroWindow::in_waves`]).
fn unread_calls_in_waves(
    s: &Floodgate,
    waves: usize,
    connections: usize,
    streams: usize,
) -> ZeroWindow {
    let body = user_frame("d", "reader");
    let request = Stalled {
        headers: &[
            (":method", "POST"),
            (":scheme", "http"),
            (":authority", "floodgate"),
            (":path", RLS_PATH),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ],
        body: &body,
    };
    ZeroWindow::in_waves(s.grpc, waves, connections, streams, &request)
}

/// Of the answers' heads reported, how many began an answer (no
/// grpc-status yet: its message waits for the window) and how many
/// refused the call with `RESOURCE_EXHAUSTED` (8).
fn admitted_and_refused(z: &ZeroWindow) -> (usize, usize) {
    let grpc = |l: &String| l.rsplit(' ').next().unwrap_or("").to_owned();
    let heads = z.lines("headers");
    let admitted = heads.iter().filter(|l| grpc(l) == "-").count();
    let refused = heads.iter().filter(|l| grpc(l) == "8").count();
    (admitted, refused)
}

/// One complete `ShouldRateLimit` call on a new connection; its
/// grpc-status.
async fn normal_call(s: &Floodgate) -> String {
    let mut send = h2_connect::<Full<Bytes>>(s.grpc).await;
    let req = rls_request(s.grpc, Full::new(user_frame("d", "normal")));
    grpc_status(send.send_request(req).await.unwrap()).await
}

/// Each test on hyper's HTTP/2 server and on the service's own.
macro_rules! on_both_servers {
    ($test:ident, $hyper:ident, $direct:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $hyper() {
            $test("hyper").await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $direct() {
            $test("direct").await
        }
    };
}

on_both_servers!(
    unread_answers_are_held,
    unread_answers_count_against_max_requests,
    on_the_own_server_unread_answers_count_against_max_requests
);
on_both_servers!(
    unread_answers_are_reset,
    unread_answers_are_reset_after_the_send_timeout,
    on_the_own_server_unread_answers_are_reset_after_the_send_timeout
);

async fn unread_answers_are_held(http2: &str) {
    // Waves of zero-window connections, each answered (or refused) whole
    // before the next comes, all kept open: what the service holds for
    // them shows, not the peak of one burst.
    const WAVES: usize = 40;
    const CONNECTIONS: usize = 2;
    const STREAMS: usize = 250;
    let wave = CONNECTIONS * STREAMS;
    let s = serve("60s", http2);
    let mut first = unread_calls(&s, CONNECTIONS, STREAMS);
    assert!(first.wait_for("headers", wave, Duration::from_secs(60)));
    let before = s.resident_bytes();
    let mut rest = unread_calls_in_waves(&s, WAVES - 1, CONNECTIONS, STREAMS);
    let all = WAVES * wave;
    assert!(
        rest.wait_for("headers", all - wave, Duration::from_secs(120)),
        "every call answered or refused; heads: {}",
        rest.count("headers")
    );
    let grown = s.resident_bytes().saturating_sub(before);
    eprintln!("{all} unread calls: resident size grew by {grown} bytes");
    let (mut admitted, mut refused) = (0, 0);
    for z in [&first, &rest] {
        let (a, r) = admitted_and_refused(z);
        (admitted, refused) = (admitted + a, refused + r);
    }
    assert_eq!(admitted, MAX_REQUESTS, "unread answers held");
    assert_eq!(refused, all - MAX_REQUESTS);
    // A normal caller is refused too while they hold every place.
    assert_eq!(normal_call(&s).await, "8");
    // Loose: an HTTP/2 connection keeps what the streams it once had at
    // once took (250 here), about 1.5 KiB a stream, and the measure
    // moves by a few MB; an answer held adds about 2 KiB more (20 000
    // held: over 60 MB).
    assert!(
        grown / (all as u64) < 2560,
        "{all} unread calls grew the resident size by {grown} bytes"
    );
    // Their connections closed, the places are given back.
    drop((first, rest));
    assert!(admitted_within(&s, Duration::from_secs(20)).await);
}

/// Whether a normal call is admitted within `within` (asked every 50 ms).
async fn admitted_within(s: &Floodgate, within: Duration) -> bool {
    let end = std::time::Instant::now() + within;
    while std::time::Instant::now() < end {
        if normal_call(s).await == "0" {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

async fn unread_answers_are_reset(http2: &str) {
    let s = serve("1s", http2);
    let mut z = unread_calls(&s, 2, MAX_REQUESTS / 2);
    assert!(z.wait_for("headers", MAX_REQUESTS, Duration::from_secs(20)));
    assert_eq!(admitted_and_refused(&z), (MAX_REQUESTS, 0));
    assert!(
        z.wait_for("reset", MAX_REQUESTS, Duration::from_secs(20)),
        "every unread answer reset; seen: {:?}",
        z.lines("reset")
    );
    // Their places are free again.
    assert_eq!(normal_call(&s).await, "0");
    // And each reset is counted (the counter moves as the streams are
    // reset, read after the last one was seen).
    let resets = s.metric("floodgate_send_timeouts_total{kind=\"stream\"}");
    assert!(
        resets >= MAX_REQUESTS as f64,
        "{resets} stream resets counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_json_answers_count_against_max_requests() {
    const STREAMS: usize = 30;
    let s = serve("60s", "hyper");
    let body = br#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"reader"}]}]}"#;
    let request = Stalled {
        headers: &[
            (":method", "POST"),
            (":scheme", "http"),
            (":authority", "floodgate"),
            (":path", "/json"),
            ("content-type", "application/json"),
        ],
        body,
    };
    let mut z = ZeroWindow::open(s.http, 1, STREAMS, &request);
    assert!(z.wait_for("headers", STREAMS, Duration::from_secs(20)));
    let status = |l: &String| l.split(' ').nth(3).unwrap_or("").to_owned();
    let heads = z.lines("headers");
    let admitted = heads.iter().filter(|l| status(l) == "200").count();
    let refused = heads.iter().filter(|l| status(l) == "503").count();
    assert_eq!((admitted, refused), (MAX_REQUESTS, STREAMS - MAX_REQUESTS));
}
