//! ns per keyed decision, every algorithm, 1 / 10 000 / 1 000 000 keys, one
//! and two threads, with governor's keyed limiter measured in the same run.
//!
//! `cargo bench -p floodgate --bench decisions`
//!
//! Every limiter uses its default clock (floodgate: `SystemClock`; governor:
//! its quanta clock) and a quota large enough that every request passes, so
//! the figures are the cost of the always-admit path; the sliding log runs at
//! limit 100 (its per-key log is full, so it mostly denies). Keys are `u64`,
//! drawn from a fixed pseudo-random stream; every key is touched once before
//! measuring, so the tables are at their steady size. With two threads, both
//! take chunks of the stream from a shared counter until the sample's
//! decisions are done: the figure is their aggregate throughput, and a thread
//! the machine's other load delays leaves its share to the other instead of
//! holding the sample up.

mod keys;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use floodgate::algorithms::{
    Concurrency, FixedWindow, Gcra, NginxRate, Shaper, ShaperDelay, SlidingLog, SlidingWindow,
    SubWindowCounter,
};
use floodgate::{Algorithm, MAX_COUNT, RateLimiter, StoreConfig};
use keys::{STREAM, stream};

const KEY_COUNTS: [u64; 3] = [1, 10_000, 1_000_000];

/// Something that decides on a key.
trait Decide: Sync {
    fn decide(&self, key: u64) -> bool;
}

impl<A: Algorithm> Decide for RateLimiter<u64, A> {
    #[inline]
    fn decide(&self, key: u64) -> bool {
        self.check(&key).is_allowed()
    }
}

struct ConcurrencyPermit(RateLimiter<u64, Concurrency>);

impl Decide for ConcurrencyPermit {
    #[inline]
    fn decide(&self, key: u64) -> bool {
        self.0.acquire(&key, 1).is_ok()
    }
}

struct Governor(governor::DefaultKeyedRateLimiter<u64>);

impl Decide for Governor {
    #[inline]
    fn decide(&self, key: u64) -> bool {
        self.0.check_key(&key).is_ok()
    }
}

fn floodgate<A: Algorithm>(limit: A) -> RateLimiter<u64, A> {
    RateLimiter::with_config(
        limit,
        StoreConfig::with_capacity(2_000_000),
        floodgate::SystemClock,
    )
    .unwrap()
}

/// A named way to build a limiter.
type Make = (&'static str, Box<dyn Fn() -> Box<dyn Decide>>);

fn limiters() -> Vec<Make> {
    let sec = Duration::from_secs(1);
    vec![
        (
            "governor",
            Box::new(|| {
                let quota = governor::Quota::per_second(NonZeroU32::MAX);
                Box::new(Governor(governor::RateLimiter::keyed(quota)))
            }),
        ),
        (
            "gcra",
            // governor's per_second(u32::MAX) computes a 1 ns interval and a
            // burst of u32::MAX: the same quota.
            Box::new(|| {
                let one_ns = Duration::from_nanos(1);
                Box::new(floodgate(
                    Gcra::new(1, one_ns, u64::from(u32::MAX)).unwrap(),
                ))
            }),
        ),
        (
            "fixed_window",
            Box::new(move || Box::new(floodgate(FixedWindow::new(MAX_COUNT, sec).unwrap()))),
        ),
        (
            "sliding_window",
            Box::new(move || {
                Box::new(floodgate(
                    SlidingWindow::new(u64::from(u32::MAX), sec).unwrap(),
                ))
            }),
        ),
        (
            "sub_windows_6",
            Box::new(move || {
                Box::new(floodgate(
                    SubWindowCounter::new(MAX_COUNT, Duration::from_secs(60), 6).unwrap(),
                ))
            }),
        ),
        (
            "shaper",
            Box::new(|| {
                Box::new(floodgate(
                    Shaper::new(NginxRate::PerSecond(1 << 30), 1 << 30, ShaperDelay::NoDelay)
                        .unwrap(),
                ))
            }),
        ),
        (
            "sliding_log_100",
            Box::new(move || Box::new(floodgate(SlidingLog::new(100, sec).unwrap()))),
        ),
        (
            "concurrency",
            Box::new(|| {
                Box::new(ConcurrencyPermit(floodgate(
                    Concurrency::new(MAX_COUNT).unwrap(),
                )))
            }),
        ),
    ]
}

fn run(limiter: &dyn Decide, keys: &[u64], start: usize, iters: u64) -> u64 {
    let mask = STREAM - 1;
    let mut admitted = 0u64;
    for i in 0..iters as usize {
        admitted += u64::from(limiter.decide(black_box(keys[(start + i) & mask])));
    }
    admitted
}

/// Decisions taken from a shared counter, `CHUNK` at a time, until `iters`.
fn run_shared(
    limiter: &dyn Decide,
    keys: &[u64],
    start: usize,
    iters: u64,
    next: &AtomicU64,
) -> u64 {
    const CHUNK: u64 = 1024;
    let mut admitted = 0u64;
    loop {
        let at = next.fetch_add(CHUNK, Ordering::Relaxed);
        if at >= iters {
            return admitted;
        }
        admitted += run(limiter, keys, start + at as usize, CHUNK.min(iters - at));
    }
}

fn bench(c: &mut Criterion) {
    // Under `cargo test` criterion runs each benchmark once: skip the
    // million-key setup there.
    let bench_mode = std::env::args().any(|a| a == "--bench");
    for keys in KEY_COUNTS
        .into_iter()
        .filter(|&k| bench_mode || k <= 10_000)
    {
        let stream = stream(keys);
        let mut group = c.benchmark_group(format!("keys_{keys}"));
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for (name, make) in limiters() {
            let limiter = make();
            // Touch every key once so the table is at its steady size.
            for k in 0..keys {
                limiter.decide(k);
            }
            group.bench_function(BenchmarkId::new(name, "1_thread"), |b| {
                let mut start = 0;
                b.iter_custom(|iters| {
                    let t = Instant::now();
                    black_box(run(&*limiter, &stream, start, iters));
                    start = start.wrapping_add(iters as usize);
                    t.elapsed()
                });
            });
            group.bench_function(BenchmarkId::new(name, "2_threads"), |b| {
                let mut start = 0;
                b.iter_custom(|iters| {
                    let next = AtomicU64::new(0);
                    let t = Instant::now();
                    std::thread::scope(|s| {
                        let (l, st, n) = (&*limiter, &stream, &next);
                        let a = s.spawn(move || run_shared(l, st, start, iters, n));
                        black_box(run_shared(l, st, start, iters, n));
                        black_box(a.join().unwrap());
                    });
                    start = start.wrapping_add(iters as usize);
                    t.elapsed()
                });
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
