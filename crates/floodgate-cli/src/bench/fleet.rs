//! `floodgate bench fleet`: several `floodgate serve` processes on one
//! `redis-server`, RLS load spread over them, for each synchronisation mode
//! and for one instance on the in-memory store; one hot key, then 10 000
//! keys. One table: decisions per second, server and Redis CPU per
//! decision (`/proc/<pid>/stat`, `INFO cpu`), Redis commands per decision
//! (`INFO commandstats`), the most a key admitted in one window against its
//! limit, the decisions the failure policy made, and latency.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;
use floodgate_server::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use hdrhistogram::Histogram;
use tonic::transport::{Channel, Endpoint};

use super::cpu::cpu_time;
use super::load::{Rng, histogram, request};

/// Settings of `floodgate bench fleet`.
#[derive(Args, Debug, Clone)]
pub struct FleetArgs {
    /// `floodgate serve` processes sharing one Redis.
    #[arg(long, default_value_t = 4)]
    pub instances: usize,
    /// The modes to measure, comma-separated (`memory` is one instance on
    /// the in-memory store; `local`, `--instances` instances each on its
    /// own in-memory store, sharing nothing: the fleet's own cost).
    #[arg(
        long,
        default_value = "memory,local,exact,lease,sync",
        value_delimiter = ','
    )]
    pub modes: Vec<String>,
    /// The workloads, comma-separated: `hot` (one key) and `keys` (10 000
    /// keys, or `--keys`).
    #[arg(long, default_value = "hot,keys", value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// Keys of the `keys` workload.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Requests per second the hot key admits.
    #[arg(long, default_value_t = 100_000)]
    pub hot_limit: u64,
    /// Requests per second each key of the `keys` workload admits.
    #[arg(long, default_value_t = 10)]
    pub key_limit: u64,
    /// `sync`: the interval.
    #[arg(long, default_value = "100ms")]
    pub sync_interval: String,
    /// `lease`: the lease duration.
    #[arg(long, default_value = "1s")]
    pub lease_duration: String,
    /// Requests in flight in all (closed loop).
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// HTTP/2 connections to each instance.
    #[arg(long, default_value_t = 2)]
    pub connections: usize,
    /// Measured time of each case.
    #[arg(long, default_value = "10s", value_parser = crate::flags::duration)]
    pub duration: Duration,
    /// Unmeasured time before each case.
    #[arg(long, default_value = "2s", value_parser = crate::flags::duration)]
    pub warmup: Duration,
    /// The failure policy of the instances on Redis (`fail_closed`: every
    /// admission is the mode's own, which the window columns check; `local`
    /// is the default of `floodgate serve`).
    #[arg(long, default_value = "fail_closed")]
    pub failure_policy: String,
    /// Worker threads of each `floodgate serve` (`server.workers`; none:
    /// one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// The `redis-server` to start.
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// The `floodgate` binary to start (this one by default).
    #[arg(long)]
    pub floodgate: Option<PathBuf>,
}

/// Picks a free port on the loopback interface.
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct RedisServer {
    _proc: Proc,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    fn start(bin: &Path) -> anyhow::Result<RedisServer> {
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let child = Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let server = RedisServer {
            _proc: Proc(child),
            port,
            _dir: dir,
        };
        let end = Instant::now() + Duration::from_secs(10);
        while server.command(&["PING"]).is_err() {
            if Instant::now() > end {
                bail!("redis-server did not answer on port {port}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    /// Sends one command; its reply (a status or a bulk string) as text.
    fn command(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(req.as_bytes())?;
        let mut r = BufReader::new(s);
        let mut first = String::new();
        r.read_line(&mut first)?;
        match first.as_bytes().first() {
            Some(b'+') => Ok(first[1..].trim_end().to_owned()),
            Some(b'$') => {
                let n: usize = first[1..].trim_end().parse()?;
                let mut body = vec![0u8; n + 2];
                r.read_exact(&mut body)?;
                body.truncate(n);
                Ok(String::from_utf8(body)?)
            }
            _ => bail!("redis: {}", first.trim_end()),
        }
    }

    /// Redis's usage so far, `INFO` itself left out.
    fn usage(&self) -> anyhow::Result<Usage> {
        let cpu = self.command(&["INFO", "cpu"])?;
        let field = |name: &str| -> f64 {
            cpu.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.0)
        };
        let seconds = field("used_cpu_sys") + field("used_cpu_user");
        let stats = self.command(&["INFO", "commandstats"])?;
        let calls = |scripts: bool| -> u64 {
            stats
                .lines()
                .filter_map(|l| {
                    let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                    let script = name.starts_with("eval") || name.starts_with("fcall");
                    if name == "info" || (scripts && !script) {
                        return None;
                    }
                    rest.split("calls=")
                        .nth(1)?
                        .split(',')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum()
        };
        Ok(Usage {
            cpu: seconds,
            scripts: calls(true),
            commands: calls(false),
        })
    }
}

/// What Redis has used.
#[derive(Clone, Copy)]
struct Usage {
    /// CPU seconds (`used_cpu_sys` + `used_cpu_user` of `INFO cpu`).
    cpu: f64,
    /// Script calls (`EVAL`, `EVALSHA`: each a round trip from an instance).
    scripts: u64,
    /// Every command run, the scripts' own included (`INFO commandstats`).
    commands: u64,
}

/// A `floodgate serve` process.
struct Server {
    proc: Proc,
    grpc: SocketAddr,
    admin: SocketAddr,
}

impl Server {
    /// Decisions the failure policy made so far (`/metrics`: admitted,
    /// denied or decided in process because Redis did not answer).
    fn fallbacks(&self) -> anyhow::Result<u64> {
        let mut s = TcpStream::connect(self.admin)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        let mut total = 0u64;
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(name), Some(value)) = (parts.next(), parts.next()) else {
                continue;
            };
            if matches!(
                name,
                "floodgate_redis_fail_open_total"
                    | "floodgate_redis_fail_closed_total"
                    | "floodgate_redis_local_fallbacks_total"
            ) {
                total += value.parse::<f64>().unwrap_or(0.0) as u64;
            }
        }
        Ok(total)
    }
}

fn config(redis: Option<u16>, mode: &str, args: &FleetArgs) -> String {
    let store = match redis {
        None => "store:\n  backend: memory\n".to_owned(),
        Some(port) => {
            let sync = match mode {
                "lease" => format!("mode: lease, duration: {}", args.lease_duration),
                "sync" => format!("mode: sync, interval: {}", args.sync_interval),
                _ => "mode: exact".to_owned(),
            };
            format!(
                "store:\n  backend: redis\n  url: 127.0.0.1:{port}\n  failure_policy: {}\n  sync: {{{sync}, instances: {}}}\n",
                args.failure_policy, args.instances
            )
        }
    };
    format!(
        "{store}domains:
  - domain: bench
    descriptors:
      - key: hot
        rate_limit: {{name: hot, requests: {}, per: 1s}}
      - key: key
        rate_limit: {{name: key, requests: {}, per: 1s}}
",
        args.hot_limit, args.key_limit
    )
}

async fn start_server(bin: &Path, config: &Path, workers: Option<usize>) -> anyhow::Result<Server> {
    let (grpc, http, admin) = (free_port()?, free_port()?, free_port()?);
    let child = Command::new(bin)
        .arg("serve")
        .arg("--config")
        .arg(config)
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
        .args(["--log-level", "error"])
        .args(workers.map(|w| format!("--workers={w}")))
        .env_remove("REDIS_URL")
        .env_remove("FLOODGATE_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut server = Server {
        proc: Proc(child),
        grpc: SocketAddr::from(([127, 0, 0, 1], grpc)),
        admin: SocketAddr::from(([127, 0, 0, 1], admin)),
    };
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = server.proc.0.try_wait()? {
            bail!("floodgate serve exited ({status})");
        }
        if let Ok(ch) = channel(server.grpc).await {
            let mut c = RateLimitServiceClient::new(ch);
            if c.should_rate_limit(request("bench", "hot", "probe".into()))
                .await
                .is_ok()
            {
                return Ok(server);
            }
        }
        if Instant::now() > end {
            bail!("floodgate serve on {} did not answer", server.grpc);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn channel(addr: SocketAddr) -> anyhow::Result<Channel> {
    Ok(Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .connect()
        .await?)
}

/// What one worker saw while measuring.
struct Seen {
    hist: Histogram<u64>,
    decisions: u64,
    errors: u64,
    /// Admissions per (key, window start in seconds since the epoch), of
    /// the decisions whose round trip began and ended in that window (the
    /// server decided in it).
    admitted: HashMap<(u64, u64), u64>,
    /// Admissions whose round trip spanned the end of a window.
    unplaced: u64,
}

fn epoch_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

async fn worker(
    mut client: RateLimitServiceClient<Channel>,
    hot: bool,
    keys: u64,
    seed: u64,
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> Seen {
    let mut seen = Seen {
        hist: histogram(),
        decisions: 0,
        errors: 0,
        admitted: HashMap::new(),
        unplaced: 0,
    };
    let mut rng = Rng(seed | 1);
    while !stop.load(Ordering::Relaxed) {
        let n = if hot { 0 } else { rng.next() % keys.max(1) };
        let req = if hot {
            request("bench", "hot", "x".into())
        } else {
            request("bench", "key", format!("k{n}"))
        };
        let sent = epoch_secs();
        let t = Instant::now();
        let res = client.should_rate_limit(req).await;
        let us = t.elapsed().as_micros() as u64;
        if !measuring.load(Ordering::Relaxed) {
            continue;
        }
        let _ = seen.hist.record(us.max(1));
        seen.decisions += 1;
        match res {
            Ok(r) if r.get_ref().overall_code == 1 => {
                // Counted in the window (1 s, epoch-aligned) the server
                // decided in: the one the round trip began and ended in
                // (a round trip across a window's end is not placed).
                let (from, to) = (sent.floor() as u64, epoch_secs().floor() as u64);
                if from == to {
                    *seen.admitted.entry((n, from)).or_default() += 1;
                } else {
                    seen.unplaced += 1;
                }
            }
            Ok(_) => {}
            Err(_) => seen.errors += 1,
        }
    }
    seen
}

/// One measured case.
struct Row {
    case: String,
    decisions: f64,
    server_us: f64,
    redis_us: Option<f64>,
    redis_calls: Option<f64>,
    redis_cmds: Option<f64>,
    worst: u64,
    limit: u64,
    windows_over: u64,
    unplaced: u64,
    fallbacks: Option<u64>,
    errors: u64,
    p50: f64,
    p99: f64,
}

async fn measure(args: &FleetArgs, bin: &Path, mode: &str, hot: bool) -> anyhow::Result<Row> {
    let redis = match mode {
        "memory" | "local" => None,
        "exact" | "lease" | "sync" => Some(RedisServer::start(&args.redis_server)?),
        other => bail!("unknown mode `{other}` (expected memory, local, exact, lease or sync)"),
    };
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("floodgate.yaml");
    std::fs::write(&path, config(redis.as_ref().map(|r| r.port), mode, args))?;
    let count = if mode != "memory" {
        args.instances.max(1)
    } else {
        1
    };
    let mut servers = Vec::new();
    for _ in 0..count {
        servers.push(start_server(bin, &path, args.workers).await?);
    }
    let mut clients = Vec::new();
    for s in &servers {
        for _ in 0..args.connections.max(1) {
            clients.push(RateLimitServiceClient::new(channel(s.grpc).await?));
        }
    }
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..args.concurrency.max(1) {
        tasks.push(tokio::spawn(worker(
            clients[i % clients.len()].clone(),
            hot,
            args.keys,
            0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1),
            measuring.clone(),
            stop.clone(),
        )));
    }
    tokio::time::sleep(args.warmup).await;
    let pids: Vec<u32> = servers.iter().map(|s| s.proc.0.id()).collect();
    let server_cpu = || -> f64 {
        pids.iter()
            .filter_map(|&p| cpu_time(p))
            .map(|d| d.as_secs_f64())
            .sum()
    };
    let fallbacks = || -> anyhow::Result<u64> { servers.iter().map(|s| s.fallbacks()).sum() };
    let fallbacks0 = fallbacks()?;
    let redis0 = redis.as_ref().map(|r| r.usage()).transpose()?;
    let cpu0 = server_cpu();
    let t0 = Instant::now();
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(args.duration).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu1 = server_cpu();
    let redis1 = redis.as_ref().map(|r| r.usage()).transpose()?;
    let fallbacks1 = fallbacks()?;
    stop.store(true, Ordering::Relaxed);
    let mut hist = histogram();
    let (mut decisions, mut errors, mut unplaced) = (0u64, 0u64, 0u64);
    let mut admitted: HashMap<(u64, u64), u64> = HashMap::new();
    for t in tasks {
        let seen = t.await?;
        hist.add(&seen.hist)?;
        decisions += seen.decisions;
        errors += seen.errors;
        unplaced += seen.unplaced;
        for (k, n) in seen.admitted {
            *admitted.entry(k).or_default() += n;
        }
    }
    let limit = if hot { args.hot_limit } else { args.key_limit };
    let per = |x: f64| x * 1e6 / decisions.max(1) as f64;
    let usage = redis0.zip(redis1);
    Ok(Row {
        case: format!(
            "{mode}{}, {}",
            if mode != "memory" {
                format!(" ×{count}")
            } else {
                String::new()
            },
            if hot {
                "hot key".to_owned()
            } else {
                format!("{} keys", args.keys)
            }
        ),
        decisions: decisions as f64 / elapsed,
        server_us: per(cpu1 - cpu0),
        redis_us: usage.map(|(a, b)| per(b.cpu - a.cpu)),
        redis_calls: usage.map(|(a, b)| (b.scripts - a.scripts) as f64 / decisions.max(1) as f64),
        redis_cmds: usage.map(|(a, b)| (b.commands - a.commands) as f64 / decisions.max(1) as f64),
        worst: admitted.values().copied().max().unwrap_or(0),
        limit,
        windows_over: admitted.values().filter(|&&n| n > limit).count() as u64,
        unplaced,
        fallbacks: redis
            .is_some()
            .then(|| fallbacks1.saturating_sub(fallbacks0)),
        errors,
        p50: hist.value_at_quantile(0.5) as f64 / 1000.0,
        p99: hist.value_at_quantile(0.99) as f64 / 1000.0,
    })
}

/// Runs every case and prints the table.
pub async fn run(args: FleetArgs) -> anyhow::Result<()> {
    let bin = match &args.floodgate {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating the floodgate binary")?,
    };
    println!(
        "{:<22} {:>11} {:>11} {:>9} {:>10} {:>10} {:>10} {:>13} {:>7} {:>8} {:>9} {:>6} {:>8} {:>8}",
        "case",
        "decisions/s",
        "server µs/d",
        "vs memory",
        "Redis µs/d",
        "calls/d",
        "cmds/d",
        "worst window",
        "w. over",
        "unplaced",
        "fallbacks",
        "errors",
        "p50 ms",
        "p99 ms"
    );
    let mut memory_rate = HashMap::new();
    for workload in &args.workloads {
        let hot = match workload.as_str() {
            "hot" => true,
            "keys" => false,
            other => bail!("unknown workload `{other}` (expected hot or keys)"),
        };
        for mode in &args.modes {
            let row = measure(&args, &bin, mode, hot).await?;
            let dash = |v: Option<f64>, p: usize| v.map_or("-".to_owned(), |v| format!("{v:.p$}"));
            // Decisions per server CPU second, against the in-memory store's.
            let per_cpu = 1e6 / row.server_us.max(f64::MIN_POSITIVE);
            if mode == "memory" {
                memory_rate.insert(hot, per_cpu);
            }
            let ratio = memory_rate.get(&hot).map(|m| per_cpu / m);
            println!(
                "{:<22} {:>11.0} {:>11.1} {:>9} {:>10} {:>10} {:>10} {:>13} {:>7} {:>8} {:>9} {:>6} {:>8.2} {:>8.2}",
                row.case,
                row.decisions,
                row.server_us,
                dash(ratio, 2),
                dash(row.redis_us, 1),
                dash(row.redis_calls, 4),
                dash(row.redis_cmds, 4),
                format!("{}/{}", row.worst, row.limit),
                row.windows_over,
                row.unplaced,
                row.fallbacks.map_or("-".to_owned(), |f| f.to_string()),
                row.errors,
                row.p50,
                row.p99,
            );
        }
    }
    Ok(())
}
