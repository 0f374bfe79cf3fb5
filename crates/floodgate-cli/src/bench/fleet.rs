//! `floodgate bench fleet`: several `floodgate serve` processes on one
//! `redis-server`, RLS load spread over them, for each synchronisation mode
//! and for one instance on the in-memory store; one hot key, then 10 000
//! keys. One table: decisions per second, server and Redis CPU per
//! decision (`/proc/<pid>/stat`, `INFO cpu`), Redis commands per decision
//! (`INFO commandstats`), the most a key admitted in one window against its
//! limit, the decisions the failure policy made, and latency.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use floodgate_server::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use redis::IntoConnectionInfo;
use tonic::transport::Channel;

use super::cpu::cpu_time;
use super::load::{ClosedLoop, Seen, connect, request};
use super::process::{Proc, STARTS, free_port};

/// Settings of `floodgate bench fleet`.
#[derive(Args, Debug, Clone)]
pub(crate) struct FleetArgs {
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
    #[arg(long, default_value = "10s", value_parser = floodgate_runtime::settings::duration)]
    pub duration: Duration,
    /// Unmeasured time before each case.
    #[arg(long, default_value = "2s", value_parser = floodgate_runtime::settings::duration)]
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

struct RedisServer {
    _proc: Proc,
    port: u16,
    /// Connected without `CLIENT SETINFO`, so that it runs no command but
    /// those counted out of `INFO commandstats`.
    conn: redis::Connection,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    fn start(bin: &Path) -> anyhow::Result<RedisServer> {
        for _ in 0..STARTS {
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
            let mut proc = Proc(child);
            let info = ("127.0.0.1", port).into_connection_info()?;
            let quiet = info.redis_settings().clone().set_skip_set_lib_name();
            let client = redis::Client::open(info.set_redis_settings(quiet))?;
            let end = Instant::now() + Duration::from_secs(10);
            let conn = loop {
                // Exited: it could not bind the port.
                if proc.0.try_wait()?.is_some() {
                    break None;
                }
                let ping = |mut c: redis::Connection| {
                    redis::cmd("PING").query::<String>(&mut c).map(|_| c)
                };
                match client.get_connection().and_then(ping) {
                    Ok(c) => break Some(c),
                    Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(50)),
                    Err(e) => bail!("redis-server did not answer on port {port}: {e}"),
                }
            };
            let Some(conn) = conn else { continue };
            conn.set_read_timeout(Some(Duration::from_secs(5)))?;
            return Ok(RedisServer {
                _proc: proc,
                port,
                conn,
                _dir: dir,
            });
        }
        bail!("redis-server exited while starting, {STARTS} times")
    }

    /// `INFO section`.
    fn info(&mut self, section: &str) -> anyhow::Result<redis::InfoDict> {
        Ok(redis::cmd("INFO").arg(section).query(&mut self.conn)?)
    }

    /// Redis's usage so far, `INFO` itself left out.
    fn usage(&mut self) -> anyhow::Result<Usage> {
        let cpu = self.info("cpu")?;
        let seconds = ["used_cpu_sys", "used_cpu_user"].map(|f| cpu.get::<f64>(f).unwrap_or(0.0));
        let stats = self.info("commandstats")?;
        // `cmdstat_<name>: calls=<n>,usec=...`.
        let calls = |scripts: bool| -> u64 {
            (stats.keys())
                .filter_map(|key| {
                    let name = key.strip_prefix("cmdstat_")?;
                    let script = name.starts_with("eval") || name.starts_with("fcall");
                    if name == "info" || (scripts && !script) {
                        return None;
                    }
                    let value = stats.get::<String>(key)?;
                    let calls = value.strip_prefix("calls=")?.split(',').next()?;
                    calls.parse::<u64>().ok()
                })
                .sum()
        };
        Ok(Usage {
            cpu: seconds.iter().sum(),
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
        let fallbacks = [
            "floodgate_redis_fail_open_total",
            "floodgate_redis_fail_closed_total",
            "floodgate_redis_local_fallbacks_total",
        ];
        let total = (text.lines())
            .filter_map(|line| line.split_once(' '))
            .filter(|(name, _)| fallbacks.contains(name))
            .map(|(_, v)| v.trim().parse::<f64>().unwrap_or(0.0) as u64)
            .sum();
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
    for _ in 1..STARTS {
        if let Some(server) = start_server_once(bin, config, workers).await? {
            return Ok(server);
        }
    }
    start_server_once(bin, config, workers)
        .await?
        .with_context(|| {
            format!("floodgate serve exited while starting, {STARTS} times (its errors above)")
        })
}

/// Starts `floodgate serve` on ports picked now; `None` when it exited
/// while starting (its error printed), as when a port was taken.
async fn start_server_once(
    bin: &Path,
    config: &Path,
    workers: Option<usize>,
) -> anyhow::Result<Option<Server>> {
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
        if server.proc.0.try_wait()?.is_some() {
            return Ok(None);
        }
        if let Ok(ch) = connect(server.grpc).await {
            let mut c = RateLimitServiceClient::new(ch);
            if c.should_rate_limit(request("bench", "hot", "probe".into()))
                .await
                .is_ok()
            {
                return Ok(Some(server));
            }
        }
        if Instant::now() > end {
            bail!("floodgate serve on {} did not answer", server.grpc);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Measures one case and prints its row; `memory` holds the decisions per
/// server CPU second of the in-memory store's case of each workload.
async fn measure(
    args: &FleetArgs,
    bin: &Path,
    mode: &str,
    hot: bool,
    memory: &mut HashMap<bool, f64>,
) -> anyhow::Result<()> {
    let mut redis = redis_for(mode, args)?;
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
    // The channels stay open until the case ends, used or not.
    let (_channels, load) = start_load(args, &servers, hot).await?;
    tokio::time::sleep(args.warmup).await;
    let pids: Vec<u32> = servers.iter().map(|s| s.proc.0.id()).collect();
    let server_cpu = || -> f64 {
        pids.iter()
            .filter_map(|&p| cpu_time(p))
            .map(|d| d.as_secs_f64())
            .sum()
    };
    let fallbacks = || -> anyhow::Result<u64> { servers.iter().map(Server::fallbacks).sum() };
    let fallbacks0 = fallbacks()?;
    let redis0 = redis.as_mut().map(RedisServer::usage).transpose()?;
    let cpu0 = server_cpu();
    let elapsed = load.measure(args.duration).await.as_secs_f64();
    let cpu1 = server_cpu();
    let redis1 = redis.as_mut().map(RedisServer::usage).transpose()?;
    let fallbacks1 = fallbacks()?;
    let seen = load.finish().await?;
    let decisions = seen.decisions().max(1) as f64;
    let limit = if hot { args.hot_limit } else { args.key_limit };
    let server_us = (cpu1 - cpu0) * 1e6 / decisions;
    // Decisions per server CPU second, against the in-memory store's.
    let per_cpu = 1e6 / server_us.max(f64::MIN_POSITIVE);
    if mode == "memory" {
        memory.insert(hot, per_cpu);
    }
    Row {
        case: case_name(mode, hot, count, args.keys),
        rate: seen.decisions() as f64 / elapsed,
        server_us,
        ratio: memory.get(&hot).map(|m| per_cpu / m),
        usage: redis0.zip(redis1),
        limit,
        fallbacks: (redis0.is_some()).then(|| fallbacks1.saturating_sub(fallbacks0)),
        seen: &seen,
    }
    .print(decisions);
    Ok(())
}

/// The Redis server `mode` needs, started; `None` for the modes without
/// one.
fn redis_for(mode: &str, args: &FleetArgs) -> anyhow::Result<Option<RedisServer>> {
    Ok(match mode {
        "memory" | "local" => None,
        "exact" | "lease" | "sync" => Some(RedisServer::start(&args.redis_server)?),
        other => bail!("unknown mode `{other}` (expected memory, local, exact, lease or sync)"),
    })
}

/// How the table names a case: its mode (with the instance `count` beside
/// Redis), and its keys.
fn case_name(mode: &str, hot: bool, count: usize, keys: u64) -> String {
    match (mode, hot) {
        ("memory", true) => "memory, hot key".to_owned(),
        ("memory", false) => format!("memory, {keys} keys"),
        (_, true) => format!("{mode} ×{count}, hot key"),
        (_, false) => format!("{mode} ×{count}, {keys} keys"),
    }
}

/// The closed loop of requests on `args.connections` channels to each
/// server (returned with it): one hot key, or `args.keys` keys drawn at
/// random.
async fn start_load(
    args: &FleetArgs,
    servers: &[Server],
    hot: bool,
) -> anyhow::Result<(Vec<Channel>, ClosedLoop)> {
    let mut channels = Vec::new();
    for s in servers {
        for _ in 0..args.connections.max(1) {
            channels.push(connect(s.grpc).await?);
        }
    }
    let keys = args.keys.max(1);
    let load = ClosedLoop::start(&channels, args.concurrency, true, move |rng| {
        if hot {
            (0, request("bench", "hot", "x".into()))
        } else {
            let n = rng.u64(..keys);
            (n, request("bench", "key", format!("k{n}")))
        }
    });
    Ok((channels, load))
}

/// One case's figures, as its row of the table prints them.
struct Row<'a> {
    case: String,
    /// Decisions per second.
    rate: f64,
    /// Server CPU µs per decision.
    server_us: f64,
    /// Decisions per server CPU second against the in-memory store's.
    ratio: Option<f64>,
    /// What Redis had used before and after, if there is one.
    usage: Option<(Usage, Usage)>,
    /// The limit of each key.
    limit: u64,
    /// Decisions the failure policy made, with Redis.
    fallbacks: Option<u64>,
    seen: &'a Seen,
}

impl Row<'_> {
    /// Prints the row; Redis's figures are per decision (of `decisions`).
    fn print(&self, decisions: f64) {
        let redis = |f: fn(&Usage) -> f64, scale: f64, p: usize| {
            self.usage.map_or("-".to_owned(), |(a, b)| {
                format!("{:.p$}", (f(&b) - f(&a)) * scale / decisions)
            })
        };
        let (seen, limit) = (self.seen, self.limit);
        let admitted = &seen.admitted;
        println!(
            "{:<22} {:>11.0} {:>11.1} {:>9} {:>10} {:>10} {:>10} {:>13} {:>7} {:>8} {:>9} {:>6} {:>8.2} {:>8.2}",
            self.case,
            self.rate,
            self.server_us,
            self.ratio.map_or("-".to_owned(), |r| format!("{r:.2}")),
            redis(|u| u.cpu, 1e6, 1),
            redis(|u| u.scripts as f64, 1.0, 4),
            redis(|u| u.commands as f64, 1.0, 4),
            format!("{}/{limit}", admitted.values().copied().max().unwrap_or(0)),
            admitted.values().filter(|&&n| n > limit).count(),
            seen.unplaced,
            self.fallbacks.map_or("-".to_owned(), |f| f.to_string()),
            seen.errors,
            seen.hist.value_at_quantile(0.5) as f64 / 1000.0,
            seen.hist.value_at_quantile(0.99) as f64 / 1000.0,
        );
    }
}

/// Runs every case and prints the table.
pub(super) async fn run(args: FleetArgs) -> anyhow::Result<()> {
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
            measure(&args, &bin, mode, hot, &mut memory_rate).await?;
        }
    }
    Ok(())
}
