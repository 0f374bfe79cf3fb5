//! Throughput and latency of the Redis backend, against the ceiling of the
//! same script driven by `redis-benchmark`.
//!
//! 1. Starts a `redis-server` (no persistence) on a free port.
//! 2. Ceiling: `redis-benchmark` runs the decision script with `EVALSHA` on
//!    random keys, 64 clients, pipelined 16 deep (the command is printed).
//! 3. The backend: 64 concurrent tokio callers deciding on random keys
//!    (fixed window; GCRA; a two-limit rule) for a few seconds: decisions/s.
//! 4. Latency: requests scheduled open loop at half the measured throughput
//!    (evenly spaced; a timer in the runtime's own event loop, firing when
//!    a decision is due but at most every 50 µs, hands them to the same 64
//!    callers), each timed from its
//!    *scheduled* start, so a caller or a client that falls behind shows up
//!    in the figures instead of delaying the schedule: p50/p99/max, where
//!    the slowest 1 % spent their time (waiting for a caller, on the way to
//!    Redis's clock, on the way back), the CPU time of both processes and
//!    the time they were runnable but not running.
//!
//! `cargo bench -p floodgate-redis --bench redis_throughput` (set
//! `BENCH_SECS` to change the measuring time, default 3). On a machine with
//! two or more cores, redis-server is pinned to core 0 and the benchmark
//! (its callers and the pacer) to core 1, so that neither time-slices with
//! the other (`BENCH_PIN=0` leaves placement to the scheduler). Other
//! settings: `BENCH_LOAD` (the latency phase's share of the throughput,
//! default 0.5), `BENCH_RATE` (a fixed rate for the latency phase instead,
//! skipping the ceiling and throughput phases), `BENCH_WINDOW` and
//! `BENCH_WINDOW_LIMIT` (the store's pipelining window in µs, and its
//! limit; no window by default), `BENCH_WORK` (e.g.
//! `fixed,gcra`: only these workloads), `BENCH_REDIS_ARGS` (extra
//! redis-server settings), `BENCH_DUMP` (a file to write every latency
//! sample to), `BENCH_PREFILL=1` (run the throughput and latency phases
//! on a database holding a stale fixed-window state for each of the 10⁶
//! keys instead of an empty one; see `prefill`). Run by `cargo test --all-targets` (without `--bench`), it
//! only makes a short smoke run.

#[path = "../../tests/common/mod.rs"]
mod common;
mod host;
mod latency;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Server, blank, item};
use floodgate::algorithms::{AnyLimit, FixedWindow, Gcra};
use floodgate::{Apply, Timestamp};
use floodgate_redis::{RedisBackend, RedisConfig};
use host::{cpu_and_wait, pin, pinned};
use latency::{breakdown, latency, pct};

const CALLERS: usize = 64;
const KEYS: u64 = 1_000_000;

/// `cargo bench` passes `--bench`; `cargo test` runs the binary without it.
fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

fn secs() -> Duration {
    if smoke() {
        return Duration::from_millis(200);
    }
    let s = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(s)
}

/// `redis-benchmark` running the script with the arguments the backend
/// sends for `work` (see `Work::args`) on random keys: returns the command
/// and its requests per second.
fn ceiling(server: &Server, sha: &str, work: Work) -> (String, f64) {
    let port = server.port().to_string();
    let requests = if smoke() { "20000" } else { "1000000" };
    let mut args: Vec<&str> = vec![
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-c",
        "64",
        "-P",
        "16",
        "-n",
        requests,
        "-r",
        "1000000",
        "--csv",
        "EVALSHA",
        sha,
    ];
    args.extend(work.args());
    let shown: Vec<String> = args
        .iter()
        .map(|a| {
            if a.is_empty() {
                "''".into()
            } else {
                a.to_string()
            }
        })
        .collect();
    let out = Command::new("redis-benchmark")
        .args(&args)
        .output()
        .expect("redis-benchmark is installed");
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = text
        .lines()
        .filter_map(|l| l.split(',').nth(1))
        .filter_map(|f| f.trim_matches('"').parse::<f64>().ok())
        .next_back()
        .unwrap_or_else(|| panic!("no result from redis-benchmark: {text}"));
    (format!("redis-benchmark {}", shown.join(" ")), rps)
}

#[derive(Clone, Copy, Debug)]
enum Work {
    /// One fixed window, 1000 per minute.
    Fixed,
    /// One GCRA bucket, 100 per second, bursts of 50.
    Gcra,
    /// A rule with both limits (one group: one slot, one script call).
    Rule,
}

impl Work {
    /// The script's keys and arguments for one decision of cost 1, as the
    /// backend encodes them (server time, absolute expiry, no lease).
    fn args(self) -> Vec<&'static str> {
        // kind, cost, penalty, block, then the kind's parameters.
        const FIXED: [&str; 6] = ["f", "1", "0", "0", "1000", "60000000"];
        const GCRA: [&str; 11] = [
            "g", "1", "0", "0", "10000", "1", "50", "500000", "0", "10000", "0",
        ];
        let head = ["1", "", "", "0"];
        match self {
            Work::Fixed => [&["1", "fg:{__rand_int__}:a"][..], &head, &FIXED].concat(),
            Work::Gcra => [&["1", "fg:{__rand_int__}:a"][..], &head, &GCRA].concat(),
            Work::Rule => [
                &["2", "fg:{__rand_int__}:a", "fg:{__rand_int__}:b"][..],
                &head,
                &FIXED,
                &GCRA,
            ]
            .concat(),
        }
    }
}

/// A cheap per-caller random key.
fn next_key(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state % KEYS
}

/// One decision on a random key; returns the Redis server's clock (µs since
/// the Unix epoch) when the script ran.
async fn decide_one(b: &RedisBackend, work: Work, limits: &[AnyLimit; 2], rng: &mut u64) -> i64 {
    let k = next_key(rng);
    let group = format!("u{k}");
    let a = format!("u{k}:a");
    let z = format!("u{k}:b");
    let mut out = [blank(), blank()];
    let items = match work {
        Work::Fixed => vec![item(group.as_bytes(), a.as_bytes(), &limits[0], 1)],
        Work::Gcra => vec![item(group.as_bytes(), a.as_bytes(), &limits[1], 1)],
        Work::Rule => vec![
            item(group.as_bytes(), a.as_bytes(), &limits[0], 1),
            item(group.as_bytes(), z.as_bytes(), &limits[1], 1),
        ],
    };
    let (_, at) = b
        .decide_timed(&items, Timestamp::ZERO, Apply::Commit, &mut out)
        .await
        .expect("decision");
    at.as_micros() as i64
}

fn limits() -> [AnyLimit; 2] {
    [
        FixedWindow::new(1000, Duration::from_secs(60))
            .unwrap()
            .into(),
        Gcra::new(100, Duration::from_secs(1), 50).unwrap().into(),
    ]
}

/// Decisions per second with `CALLERS` unpaced callers.
async fn throughput(b: &Arc<RedisBackend>, work: Work, dur: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (b, stop) = (b.clone(), stop.clone());
            tokio::spawn(async move {
                let limits = limits();
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ ((i as u64 + 1) * 0x1000_0001);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    decide_one(&b, work, &limits, &mut rng).await;
                    n += 1;
                }
                n
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("caller");
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// Writes a stale fixed-window state (a window long past: what a key left
/// over from an earlier window holds, decided exactly like a missing key)
/// under every fixed-window key `work` can touch, with an expiry beyond the
/// run: the phases then meet a database of steady size, as a long-running
/// deployment's is, instead of one growing from empty (whose hash tables
/// Redis rehashes in its cron, 1 ms at a time every 100 ms). The fixed
/// window's throughput came out the same either way on the benchmark
/// machine; the rule's about 30 % lower.
fn prefill(b: &RedisBackend, server: &Server, work: Work) -> u64 {
    if matches!(work, Work::Gcra) {
        return 0;
    }
    let limits = limits();
    let mut conn = server.conn();
    let mut n = 0;
    let batch = 10_000;
    for from in (0..KEYS).step_by(batch) {
        let mut pipe = redis::pipe();
        for k in from..(from + batch as u64).min(KEYS) {
            let group = format!("u{k}");
            let key = format!("u{k}:a");
            let name = b.state_key(&item(group.as_bytes(), key.as_bytes(), &limits[0], 1));
            pipe.cmd("SET")
                .arg(name)
                .arg("f0:0")
                .arg("PX")
                .arg(3_600_000)
                .ignore();
            n += 1;
        }
        pipe.exec(&mut conn).expect("prefill");
    }
    n
}

fn main() {
    if smoke() {
        println!("smoke run (numbers come from `cargo bench`)");
    }
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let pinned = pinned();
    if pinned {
        // Before any thread starts, so that all of them inherit it.
        pin(std::process::id(), 1);
    }
    // Extra redis-server settings, e.g. BENCH_REDIS_ARGS="--hz 100".
    let extra = std::env::var("BENCH_REDIS_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    if !extra.is_empty() {
        println!("redis-server {}", extra.join(" "));
    }
    let server = Server::start_with(&extra);
    if pinned {
        let pid = server.child.as_ref().expect("running server").id();
        pin(pid, 0);
        println!("redis-server on core 0, callers and pacer on core 1");
    }
    // Two cores: one for redis-server, one for the client (a second worker
    // thread would only time-slice with Redis and inflate tail latency).
    let workers = std::env::var("BENCH_WORKERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dur = secs();
    // The latency phase's load, as a share of the measured throughput.
    let share: f64 = std::env::var("BENCH_LOAD")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s| *s > 0.0 && *s <= 1.0)
        .unwrap_or(0.5);
    rt.block_on(async {
        // The store's pipelining window (µs; 0, the default, sends every
        // command at once) and its limit.
        let env_num = |name: &str| -> u64 {
            std::env::var(name)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
        };
        let config = RedisConfig {
            urls: vec![server.url()],
            timeout: Duration::from_secs(1),
            pipeline_window: Duration::from_micros(env_num("BENCH_WINDOW")),
            pipeline_limit: env_num("BENCH_WINDOW_LIMIT") as usize,
            ..RedisConfig::default()
        };
        if !config.pipeline_window.is_zero() {
            println!(
                "pipelining window {:?}, limit {}",
                config.pipeline_window, config.pipeline_limit
            );
        }
        let b = Arc::new(RedisBackend::connect(&config).await.expect("connect"));
        let (code, sha) = b.decide_script();
        let loaded = server.cli(&["script", "load", code]);
        assert_eq!(loaded.trim(), sha);
        println!("machine: {cores} cores");
        let only = std::env::var("BENCH_WORK").unwrap_or_default().to_lowercase();
        // A fixed rate for the latency phase, skipping the other two.
        let fixed_rate: Option<f64> = std::env::var("BENCH_RATE")
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|r: &f64| *r > 0.0);
        let redis_pid = server.child.as_ref().expect("running server").id();
        // A steady-size database for the throughput and latency phases.
        let prefilled = std::env::var("BENCH_PREFILL").is_ok_and(|v| v == "1");
        let fill = |b: &RedisBackend, server: &Server, work: Work| {
            let t = Instant::now();
            let n = tokio::task::block_in_place(|| prefill(b, server, work));
            if n > 0 {
                println!(
                    "  prefilled {n} stale fixed-window keys in {:.1} s",
                    t.elapsed().as_secs_f64()
                );
            }
        };
        for work in [Work::Fixed, Work::Gcra, Work::Rule] {
            let name = format!("{work:?}").to_lowercase();
            if !only.is_empty() && !only.split(',').any(|w| w.trim() == name) {
                continue;
            }
            let rate = if let Some(rate) = fixed_rate {
                println!("{work:?}: latency at a fixed {rate:.0}/s (ceiling and throughput not measured)");
                rate
            } else {
                server.cli(&["flushall"]);
                // The ceiling meets a database of the same size as the
                // backend does.
                if prefilled {
                    fill(&b, &server, work);
                }
                let (cmd, ceiling) = tokio::task::block_in_place(|| ceiling(&server, sha, work));
                println!("{work:?} ceiling: {cmd}");
                // Each phase starts empty: keys left by the previous phase
                // would all expire at their window's end and skew it.
                server.cli(&["flushall"]);
                if prefilled {
                    fill(&b, &server, work);
                }
                let calls = b.stats().calls.get();
                let decisions = b.stats().decisions.get();
                let rps = throughput(&b, work, dur).await;
                let trips = (b.stats().calls.get() - calls) as f64
                    / (b.stats().decisions.get() - decisions) as f64;
                println!(
                    "{work:?}: ceiling {ceiling:.0}/s; backend {rps:.0} decisions/s ({:.0}% of it), \
                     {trips:.2} round trips/decision",
                    100.0 * rps / ceiling,
                );
                rps * share
            };
            server.cli(&["flushall"]);
            if prefilled {
                fill(&b, &server, work);
            }
            // Redis's own stalls of 1 ms or more during the latency phase
            // (expiry cycles, rehashing, slow commands): LATENCY LATEST.
            server.cli(&["config", "set", "latency-monitor-threshold", "1"]);
            server.cli(&["latency", "reset"]);
            let (me, redis) = (cpu_and_wait(std::process::id()), cpu_and_wait(redis_pid));
            let (calls, pipes) = (b.stats().calls.get(), b.stats().pipelines.get());
            let lat = latency(&b, work, rate, dur).await;
            let pipes = b.stats().pipelines.get() - pipes;
            if pipes > 0 {
                println!(
                    "  {:.2} commands per pipeline",
                    (b.stats().calls.get() - calls) as f64 / pipes as f64
                );
            }
            let (me2, redis2) = (cpu_and_wait(std::process::id()), cpu_and_wait(redis_pid));
            let stalls = server.cli(&["latency", "latest"]);
            println!(
                "{work:?}: at {rate:.0}/s: p50 {:?} p99 {:?} max {:?} ({} samples, from the scheduled start)",
                pct(&lat, 0.50).total,
                pct(&lat, 0.99).total,
                lat[lat.len() - 1].total,
                lat.len(),
            );
            breakdown(&lat);
            println!(
                "  CPU: benchmark {:.0} ms, redis-server {:.0} ms in {:.0} ms; runnable but not \
                 running: benchmark {:.1} ms, redis-server {:.1} ms",
                me2.0 - me.0,
                redis2.0 - redis.0,
                dur.as_secs_f64() * 1e3,
                me2.1 - me.1,
                redis2.1 - redis.1,
            );
            let stalls: Vec<&str> = stalls.split_whitespace().collect();
            if !stalls.is_empty() {
                // event, time, latest ms, max ms (per event)
                let events: Vec<String> = stalls
                    .chunks(4)
                    .map(|c| format!("{} (latest {} ms, max {} ms)", c[0], c.get(2).unwrap_or(&"?"), c.get(3).unwrap_or(&"?")))
                    .collect();
                println!("  Redis stalls of 1 ms or more meanwhile: {}", events.join(", "));
            }
        }
    });
}
