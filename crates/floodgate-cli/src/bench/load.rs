//! The closed-loop load generator: `concurrency` workers over
//! `connections` HTTP/2 connections, each sending its next request as soon
//! as the previous one is answered, a random descriptor value out of
//! `keys` each time; latency in an HDR histogram.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context;
use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::Entry;
use floodgate_server::proto::rls::RateLimitRequest;
use floodgate_server::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use hdrhistogram::Histogram;
use tonic::transport::{Channel, Endpoint};

use super::RlsArgs;
use super::cpu::{cpu_time, rss_bytes};

#[derive(Default)]
struct Tally {
    ok: u64,
    over: u64,
    errors: u64,
}

/// xorshift64*: a fast, good-enough random source per worker.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

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
pub(super) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

async fn connect(args: &RlsArgs) -> anyhow::Result<Vec<Channel>> {
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections.max(1) {
        let ep = Endpoint::from_shared(format!("http://{}", args.addr))?
            .tcp_nodelay(true)
            .initial_stream_window_size(Some(1 << 20))
            .initial_connection_window_size(Some(4 << 20));
        channels.push(
            ep.connect()
                .await
                .with_context(|| format!("connecting to {}", args.addr))?,
        );
    }
    Ok(channels)
}

async fn worker(
    mut client: RateLimitServiceClient<Channel>,
    args: Arc<RlsArgs>,
    seed: u64,
    next: Arc<AtomicU64>,
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> (Histogram<u64>, Tally) {
    let mut hist = histogram();
    let mut tally = Tally::default();
    let mut rng = Rng(seed | 1);
    while !stop.load(Ordering::Relaxed) {
        let n = if args.sequential {
            next.fetch_add(1, Ordering::Relaxed)
        } else {
            rng.next()
        } % args.keys.max(1);
        let req = request(&args.domain, &args.key, format!("k{n}"));
        let t = Instant::now();
        let res = client.should_rate_limit(req).await;
        let us = t.elapsed().as_micros() as u64;
        if !measuring.load(Ordering::Relaxed) {
            continue;
        }
        let _ = hist.record(us.max(1));
        match res {
            Ok(r) if r.get_ref().overall_code == 2 => tally.over += 1,
            Ok(_) => tally.ok += 1,
            Err(_) => tally.errors += 1,
        }
    }
    (hist, tally)
}

/// Runs the load and prints one report line.
pub async fn run(args: RlsArgs) -> anyhow::Result<()> {
    let channels = connect(&args).await?;
    let args = Arc::new(args);
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    let rss0 = args.server_pid.and_then(rss_bytes);
    let mut tasks = Vec::new();
    for i in 0..args.concurrency.max(1) {
        let client = RateLimitServiceClient::new(channels[i % channels.len()].clone())
            .max_decoding_message_size(1 << 20);
        tasks.push(tokio::spawn(worker(
            client,
            args.clone(),
            0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1),
            next.clone(),
            measuring.clone(),
            stop.clone(),
        )));
    }
    tokio::time::sleep(args.warmup).await;
    let cpu0 = args.server_pid.and_then(cpu_time);
    let self0 = cpu_time(std::process::id());
    let t0 = Instant::now();
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(args.duration).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    let cpu1 = args.server_pid.and_then(cpu_time);
    let rss1 = args.server_pid.and_then(rss_bytes);
    let self1 = cpu_time(std::process::id());
    stop.store(true, Ordering::Relaxed);
    let mut hist = histogram();
    let mut tally = Tally::default();
    for t in tasks {
        let (h, c) = t.await?;
        hist.add(&h)?;
        tally.ok += c.ok;
        tally.over += c.over;
        tally.errors += c.errors;
    }
    let total = tally.ok + tally.over + tally.errors;
    let rps = total as f64 / elapsed.as_secs_f64();
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    let mut line = format!(
        "{label}req/s {rps:.0}  p50 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  ok {}  over_limit {}  errors {}",
        ms(0.5),
        ms(0.99),
        ms(0.999),
        tally.ok,
        tally.over,
        tally.errors,
        label = if args.label.is_empty() {
            String::new()
        } else {
            format!("{}: ", args.label)
        },
    );
    if let (Some(a), Some(b)) = (cpu0, cpu1) {
        let used = (b - a).as_secs_f64();
        line.push_str(&format!(
            "  server {:.2} cores  {:.1} µs CPU/request",
            used / elapsed.as_secs_f64(),
            used * 1e6 / total.max(1) as f64
        ));
    }
    if let (Some(a), Some(b)) = (rss0, rss1) {
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
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
