//! The closed-loop load generator: `concurrency` workers over
//! `connections` HTTP/2 connections, each sending its next request as soon
//! as the previous one is answered, a random descriptor value out of
//! `keys` each time; latency in an HDR histogram.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::Entry;
use floodgate_server::proto::rls::RateLimitRequest;
use floodgate_server::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use hdrhistogram::Histogram;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

use super::RlsArgs;
use super::cpu::{cpu_time, rss_bytes};

/// A request of one descriptor of one entry.
pub(super) fn request(domain: &str, key: &str, value: String) -> RateLimitRequest {
    let entries = vec![Entry {
        key: key.into(),
        value,
    }];
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries,
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// A latency histogram: 1 µs to 60 s, 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

/// An HTTP/2 connection to the RLS server at `addr`.
pub(super) async fn connect(addr: SocketAddr) -> anyhow::Result<Channel> {
    let ep = Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .initial_stream_window_size(Some(1 << 20))
        .initial_connection_window_size(Some(4 << 20));
    ep.connect()
        .await
        .with_context(|| format!("connecting to {addr}"))
}

/// What the workers saw while measuring.
pub(super) struct Seen {
    /// Round-trip times, µs.
    pub hist: Histogram<u64>,
    /// Answers `OK`.
    pub ok: u64,
    /// Answers `OVER_LIMIT`.
    pub over: u64,
    /// Failed calls.
    pub errors: u64,
    /// With windows counted: admissions per (key, window start in seconds
    /// since the epoch), of the decisions whose round trip began and ended
    /// in that window (the server decided in it).
    pub admitted: HashMap<(u64, u64), u64>,
    /// Admissions whose round trip spanned the end of a window.
    pub unplaced: u64,
}

impl Seen {
    fn new() -> Self {
        Seen {
            hist: histogram(),
            ok: 0,
            over: 0,
            errors: 0,
            admitted: HashMap::new(),
            unplaced: 0,
        }
    }

    /// Decisions measured.
    pub(super) fn decisions(&self) -> u64 {
        self.ok + self.over + self.errors
    }

    fn merge(&mut self, other: Seen) -> anyhow::Result<()> {
        self.hist.add(&other.hist)?;
        self.ok += other.ok;
        self.over += other.over;
        self.errors += other.errors;
        self.unplaced += other.unplaced;
        for (k, n) in other.admitted {
            *self.admitted.entry(k).or_default() += n;
        }
        Ok(())
    }
}

fn epoch_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The closed loop: workers each sending its next request as soon as the
/// previous one is answered, measured between [`start`](Self::start)'s
/// warm-up and [`finish`](Self::finish).
pub(super) struct ClosedLoop {
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Seen>>,
}

impl ClosedLoop {
    /// Starts `concurrency` workers over `channels` (in turn), each asking
    /// `pick` for its next request (a key number and the request); with
    /// `windows`, admissions are counted per key and window.
    pub(super) fn start<P>(channels: &[Channel], concurrency: usize, windows: bool, pick: P) -> Self
    where
        P: Fn(&mut fastrand::Rng) -> (u64, RateLimitRequest) + Clone + Send + 'static,
    {
        let measuring = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..concurrency.max(1))
            .map(|i| {
                let client = RateLimitServiceClient::new(channels[i % channels.len()].clone())
                    .max_decoding_message_size(1 << 20);
                let seed = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1);
                let (pick, measuring, stop) = (pick.clone(), measuring.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut client = client;
                    let mut seen = Seen::new();
                    let mut rng = fastrand::Rng::with_seed(seed);
                    while !stop.load(Ordering::Relaxed) {
                        let (n, req) = pick(&mut rng);
                        let sent = if windows { epoch_secs() } else { 0.0 };
                        let t = Instant::now();
                        let res = client.should_rate_limit(req).await;
                        let us = t.elapsed().as_micros() as u64;
                        if !measuring.load(Ordering::Relaxed) {
                            continue;
                        }
                        let _ = seen.hist.record(us.max(1));
                        match res.map(|r| r.get_ref().overall_code) {
                            Ok(2) => seen.over += 1,
                            Ok(code) => {
                                seen.ok += 1;
                                // Counted in the window (1 s, epoch-aligned)
                                // the server decided in: the one the round
                                // trip began and ended in (a round trip
                                // across a window's end is not placed).
                                if windows && code == 1 {
                                    let (from, to) = (sent.floor(), epoch_secs().floor());
                                    if from == to {
                                        *seen.admitted.entry((n, from as u64)).or_default() += 1;
                                    } else {
                                        seen.unplaced += 1;
                                    }
                                }
                            }
                            Err(_) => seen.errors += 1,
                        }
                    }
                    seen
                })
            })
            .collect();
        ClosedLoop {
            measuring,
            stop,
            tasks,
        }
    }

    /// Measures for `duration`: the time it took.
    pub(super) async fn measure(&self, duration: Duration) -> Duration {
        let t0 = Instant::now();
        self.measuring.store(true, Ordering::Relaxed);
        tokio::time::sleep(duration).await;
        self.measuring.store(false, Ordering::Relaxed);
        t0.elapsed()
    }

    /// Stops the workers: what they saw.
    pub(super) async fn finish(self) -> anyhow::Result<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        let mut seen = Seen::new();
        for t in self.tasks {
            seen.merge(t.await?)?;
        }
        Ok(seen)
    }
}

/// Runs the load and prints one report line.
pub(super) async fn run(args: RlsArgs) -> anyhow::Result<()> {
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections.max(1) {
        channels.push(connect(args.addr).await?);
    }
    let next = Arc::new(AtomicU64::new(0));
    let (domain, key, keys) = (args.domain.clone(), args.key.clone(), args.keys.max(1));
    let sequential = args.sequential;
    let rss0 = args.server_pid.and_then(rss_bytes);
    let load = ClosedLoop::start(&channels, args.concurrency, false, move |rng| {
        let n = if sequential {
            next.fetch_add(1, Ordering::Relaxed)
        } else {
            rng.u64(..)
        } % keys;
        (n, request(&domain, &key, format!("k{n}")))
    });
    tokio::time::sleep(args.warmup).await;
    let cpu0 = args.server_pid.and_then(cpu_time);
    let self0 = cpu_time(std::process::id());
    let elapsed = load.measure(args.duration).await;
    let cpu1 = args.server_pid.and_then(cpu_time);
    let rss1 = args.server_pid.and_then(rss_bytes);
    let self1 = cpu_time(std::process::id());
    let seen = load.finish().await?;
    let mut line = report(&args.label, &seen, elapsed);
    let total = seen.decisions();
    if let (Some(a), Some(b)) = (cpu0, cpu1) {
        let used = (b - a).as_secs_f64();
        line.push_str(&format!(
            "  server {:.2} cores  {:.1} µs CPU/request",
            used / elapsed.as_secs_f64(),
            used * 1e6 / total.max(1) as f64
        ));
    }
    if let (Some(a), Some(b)) = (rss0, rss1) {
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        line.push_str(&format!("  server RSS {:.1} → {:.1} MiB", mib(a), mib(b)));
    }
    if let (Some(a), Some(b)) = (self0, self1) {
        line.push_str(&format!(
            "  loadgen {:.2} cores",
            (b - a).as_secs_f64() / elapsed.as_secs_f64()
        ));
    }
    println!("{line}");
    Ok(())
}

/// The report line's start: the rate, the latencies and the answers seen
/// in `elapsed`, after the run's `label`.
fn report(label: &str, seen: &Seen, elapsed: Duration) -> String {
    let rps = seen.decisions() as f64 / elapsed.as_secs_f64();
    let ms = |q: f64| seen.hist.value_at_quantile(q) as f64 / 1000.0;
    format!(
        "{label}req/s {rps:.0}  p50 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  ok {}  over_limit {}  errors {}",
        ms(0.5),
        ms(0.99),
        ms(0.999),
        seen.ok,
        seen.over,
        seen.errors,
        label = if label.is_empty() {
            String::new()
        } else {
            format!("{label}: ")
        },
    )
}
