//! The open-loop load generator: requests sent at a fixed arrival rate
//! (Poisson or evenly spaced), each at its time whatever the answers to
//! the others — unlike a closed loop, it does not slow down with the
//! server. HTTP/2 (prior knowledge) over a few connections, the requests
//! spread over them in turn: a request not answered within the client
//! timeout is given up (its stream reset) without closing a connection —
//! HTTP/1.1 would close one per timeout and open another, a storm of
//! connections when the gateway falls behind.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use clap::ValueEnum;
use floodgate_gateway::demo::ANSWERED_BY;
use hdrhistogram::Histogram;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How arrivals are spaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Arrivals {
    /// Exponential gaps (a Poisson process): bursts as real traffic has.
    Poisson,
    /// Even gaps.
    Uniform,
}

/// One open-loop run.
pub(super) struct Load {
    /// Where requests go (`GET /`).
    pub target: SocketAddr,
    /// Requests a second.
    pub rate: f64,
    pub arrivals: Arrivals,
    /// Sent but not counted, first.
    pub warmup: Duration,
    /// Counted: the requests sent in this span after the warm-up.
    pub duration: Duration,
    /// The client timeout.
    pub timeout: Duration,
    /// HTTP/2 connections.
    pub connections: usize,
}

/// What became of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// 200 from the upstream.
    Ok,
    /// 503 from the gateway itself (not the upstream): shed.
    Shed,
    /// No answer within the timeout.
    TimedOut,
    /// Anything else: the upstream's failures, the gateway's 502 and 504,
    /// connection errors.
    Error,
}

/// The counted requests' outcomes.
pub(super) struct Tally {
    /// Every request sent, the warm-up's included.
    pub all: u64,
    /// The counted ones, and what became of them.
    pub sent: u64,
    pub ok: u64,
    pub shed: u64,
    pub timeouts: u64,
    pub errors: u64,
    /// Latencies (µs) of the admitted requests (all but the shed ones),
    /// one that timed out counted at the timeout.
    pub admitted: Histogram<u64>,
}

impl Tally {
    fn new() -> Self {
        Tally {
            all: 0,
            sent: 0,
            ok: 0,
            shed: 0,
            timeouts: 0,
            errors: 0,
            admitted: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds"),
        }
    }

    fn add(&mut self, outcome: Outcome, latency: Duration) {
        self.sent += 1;
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::Shed => self.shed += 1,
            Outcome::TimedOut => self.timeouts += 1,
            Outcome::Error => self.errors += 1,
        }
        if outcome != Outcome::Shed {
            let _ = self.admitted.record((latency.as_micros() as u64).max(1));
        }
    }

    /// The `q` quantile of admitted latencies.
    pub(super) fn admitted_quantile(&self, q: f64) -> Duration {
        Duration::from_micros(self.admitted.value_at_quantile(q))
    }
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// Sends the load and waits for the last counted answer (or its
/// timeout): what became of the counted requests.
pub(super) async fn run(load: &Load) -> Tally {
    let clients: Vec<HttpClient> = (0..load.connections.max(1)).map(|_| client()).collect();
    let uri: http::Uri = format!("http://{}/", load.target)
        .parse()
        .expect("an address is a URI");
    let start = Instant::now();
    let (counted_from, end) = (start + load.warmup, start + load.warmup + load.duration);
    let mut rng = fastrand::Rng::new();
    let mut requests = JoinSet::new();
    let mut tally = Tally::new();
    let mut at = start;
    let mut sent = 0;
    while at < end {
        if at > Instant::now() {
            tokio::time::sleep_until(at).await;
        }
        let client = clients[sent as usize % clients.len()].clone();
        sent += 1;
        let (uri, timeout) = (uri.clone(), load.timeout);
        let counted = at >= counted_from;
        requests.spawn(async move { (counted, send(&client, uri, at, timeout).await) });
        while let Some(Ok((counted, (outcome, latency)))) = requests.try_join_next() {
            if counted {
                tally.add(outcome, latency);
            }
        }
        at += gap(load, &mut rng);
    }
    while let Some(Ok((counted, (outcome, latency)))) = requests.join_next().await {
        if counted {
            tally.add(outcome, latency);
        }
    }
    tally.all = sent;
    tally
}

/// The time to the next arrival.
fn gap(load: &Load, rng: &mut fastrand::Rng) -> Duration {
    let mean = 1.0 / load.rate;
    Duration::from_secs_f64(match load.arrivals {
        Arrivals::Uniform => mean,
        Arrivals::Poisson => -(1.0 - rng.f64()).ln() * mean,
    })
}

/// An HTTP/2 client: one connection, its requests multiplexed on it.
fn client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(connector)
}

/// Sends one request due `at`: its outcome and latency, both from `at`
/// (a request the generator sends late waits the longer, as one queued
/// at the client would).
async fn send(
    client: &HttpClient,
    uri: http::Uri,
    at: Instant,
    timeout: Duration,
) -> (Outcome, Duration) {
    let request = Request::get(uri)
        .body(Empty::new())
        .expect("a GET without fields is a request");
    let answer = async {
        let response = client.request(request).await?;
        let (head, body) = response.into_parts();
        body.collect().await?;
        let from_upstream = head.headers.contains_key(ANSWERED_BY);
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(classify(head.status, from_upstream))
    };
    match tokio::time::timeout_at(at + timeout, answer).await {
        Ok(Ok(outcome)) => (outcome, at.elapsed().min(timeout)),
        Ok(Err(_)) => (Outcome::Error, at.elapsed().min(timeout)),
        Err(_) => (Outcome::TimedOut, timeout),
    }
}

/// A response's outcome: the upstream's 200, the gateway's own 503, or
/// an error.
fn classify(status: StatusCode, from_upstream: bool) -> Outcome {
    match (status, from_upstream) {
        (StatusCode::OK, true) => Outcome::Ok,
        (StatusCode::SERVICE_UNAVAILABLE, false) => Outcome::Shed,
        _ => Outcome::Error,
    }
}
