//! `floodgate bench overload`: the gateway, with the adaptive concurrency
//! limit and without it, in front of a capacity-limited upstream, under
//! open-loop load at multiples of that capacity. Each run starts a fresh
//! upstream (in this process) and a fresh `floodgate gateway` process; a
//! run at a low load first measures the unloaded p99. Goodput is the
//! share of the capacity completed successfully within the client
//! timeout; the p99 is that of the admitted requests (a timed-out one
//! counted at the timeout) over the unloaded p99.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;

use super::capacity::CapacityArgs;
use super::cpu::cpu_time;
use super::gateway::GatewayProc;
use super::open_loop::{self, Arrivals, Load, Tally};

/// Flags of `floodgate bench overload`.
#[derive(Args, Debug, Clone)]
pub(crate) struct OverloadArgs {
    #[command(flatten)]
    pub capacity: CapacityArgs,
    /// The offered loads, as multiples of the upstream's capacity,
    /// comma-separated.
    #[arg(long, default_value = "1,2,10", value_delimiter = ',')]
    pub loads: Vec<f64>,
    /// Which gateways to run at each load: `on` (with the adaptive limit),
    /// `off` (without), comma-separated.
    #[arg(long, default_value = "on,off", value_delimiter = ',', value_parser = on_off)]
    pub limiter: Vec<bool>,
    /// The load of the unloaded run (a multiple of the capacity).
    #[arg(long, default_value_t = 0.2)]
    pub unloaded: f64,
    /// Measured time of each run.
    #[arg(long, default_value = "5s", value_parser = floodgate_runtime::settings::positive_duration)]
    pub duration: Duration,
    /// Unmeasured time before (the adaptive limit learns meanwhile: from
    /// its `initial` 4, a few seconds).
    #[arg(long, default_value = "5s", value_parser = floodgate_runtime::settings::duration)]
    pub warmup: Duration,
    /// The client timeout: a request not answered within it is given up.
    #[arg(long, default_value = "1s", value_parser = floodgate_runtime::settings::positive_duration)]
    pub timeout: Duration,
    /// How arrivals are spaced.
    #[arg(long, value_enum, default_value = "poisson")]
    pub arrivals: Arrivals,
    /// HTTP/2 connections of the load generator to the gateway (each takes
    /// `gateway.limits.max_concurrent_streams` requests at once, 256 by
    /// default).
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// The gateway's `http.layer.shedding.adaptive` section with the
    /// limiter on (YAML).
    #[arg(long, default_value = "{}")]
    pub adaptive: String,
    /// Worker threads of the gateway (none: one per core).
    #[arg(long)]
    pub gateway_workers: Option<usize>,
    /// One JSON object a line per run instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The `floodgate` binary to start (this one by default).
    #[arg(long)]
    pub floodgate: Option<PathBuf>,
}

fn on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("`{other}` is neither on nor off")),
    }
}

/// The servers of the upstream unless `--servers` says otherwise.
const SERVERS: usize = 8;

/// What one run measured.
struct Run {
    offered: f64,
    limiter: bool,
    /// Requests a second the upstream completes at most.
    capacity: f64,
    tally: Tally,
    /// The gateway's CPU time over the whole run.
    gateway_cpu: Option<Duration>,
}

impl Run {
    fn goodput(&self, duration: Duration) -> f64 {
        self.tally.ok as f64 / (self.capacity * duration.as_secs_f64())
    }
}

/// Runs the comparison and prints its table (or JSON lines).
pub(super) async fn run(args: OverloadArgs) -> anyhow::Result<()> {
    let servers = check(&args)?;
    let bin = match &args.floodgate {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating the floodgate binary")?,
    };
    let unloaded = one_run(&args, &bin, servers, args.unloaded, false).await?;
    let base = unloaded.tally.admitted_quantile(0.99);
    if base.is_zero() || unloaded.tally.ok == 0 {
        bail!("the unloaded run completed nothing: is the gateway answering?");
    }
    let print = |r: &Run, baseline: bool| {
        let line = if args.json {
            json_line(r, &args, base, baseline)
        } else {
            table_row(r, &args, base)
        };
        println!("{line}");
    };
    if !args.json {
        println!("{}", table_head(&args, servers, base));
    }
    print(&unloaded, true);
    for &offered in &args.loads {
        for &limiter in &args.limiter {
            let r = one_run(&args, &bin, servers, offered, limiter).await?;
            print(&r, false);
        }
    }
    Ok(())
}

/// The servers; the flags refused when they make no comparison.
fn check(args: &OverloadArgs) -> anyhow::Result<usize> {
    let servers = args.capacity.servers_or(SERVERS)?;
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if args.loads.is_empty() || !args.loads.iter().all(|&l| positive(l)) {
        bail!("--loads must be multiples of the capacity above 0, such as 1,2,10");
    }
    if !positive(args.unloaded) {
        bail!("--unloaded must be a multiple of the capacity above 0");
    }
    Ok(servers)
}

/// One run: a fresh upstream and gateway, `offered` × capacity for the
/// warm-up and the measured time.
async fn one_run(
    args: &OverloadArgs,
    bin: &std::path::Path,
    servers: usize,
    offered: f64,
    limiter: bool,
) -> anyhow::Result<Run> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let upstream_addr = listener.local_addr()?;
    let upstream = tokio::spawn(floodgate_gateway::demo::serve_with_capacity(
        listener,
        bytes::Bytes::from_static(b"served\n"),
        args.capacity.capacity(servers),
    ));
    let config = gateway_config(upstream_addr, limiter.then_some(args.adaptive.as_str()));
    let gateway = GatewayProc::start(bin, &config, args.gateway_workers)?;
    let capacity = args.capacity.rate(servers);
    let load = Load {
        target: gateway.addr,
        rate: offered * capacity,
        arrivals: args.arrivals,
        warmup: args.warmup,
        duration: args.duration,
        timeout: args.timeout,
        connections: args.connections,
    };
    let cpu0 = cpu_time(gateway.pid());
    let tally = open_loop::run(&load).await;
    let cpu1 = cpu_time(gateway.pid());
    drop(gateway);
    upstream.abort();
    Ok(Run {
        offered,
        limiter,
        capacity,
        tally,
        gateway_cpu: cpu0.zip(cpu1).map(|(a, b)| b.saturating_sub(a)),
    })
}

/// The gateway's configuration: one route to `upstream`, a rate limit
/// that never denies (the layer's usual work), and the adaptive limit
/// when given.
fn gateway_config(upstream: std::net::SocketAddr, adaptive: Option<&str>) -> String {
    let shedding = adaptive.map_or(String::new(), |a| {
        format!("  layer:\n    shedding:\n      adaptive: {a}\n")
    });
    format!(
        "gateway:\n  upstream: http://{upstream}\nhttp:\n  domain: bench\n  descriptors:\n    - [method]\n{shedding}domains:\n  - domain: bench\n    descriptors:\n      - key: method\n        rate_limit: {{requests: 1000000000, per: 1s}}\n"
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The gateway's CPU µs per request sent (warm-up included).
fn cpu_us(r: &Run) -> Option<f64> {
    r.gateway_cpu
        .map(|c| c.as_secs_f64() * 1e6 / r.tally.all.max(1) as f64)
}

fn json_line(r: &Run, args: &OverloadArgs, base: Duration, baseline: bool) -> String {
    let t = &r.tally;
    let p99 = t.admitted_quantile(0.99);
    format!(
        "{{\"offered\":{},\"limiter\":{},\"baseline\":{baseline},\"capacity\":{:.1},\"sent\":{},\"ok\":{},\"admitted\":{},\"shed\":{},\"timeouts\":{},\"errors\":{},\"goodput\":{:.4},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"unloaded_p99_ms\":{:.3},\"p99_ratio\":{:.3},\"gateway_cpu_us\":{}}}",
        r.offered,
        r.limiter,
        r.capacity,
        t.sent,
        t.ok,
        t.sent - t.shed,
        t.shed,
        t.timeouts,
        t.errors,
        r.goodput(args.duration),
        ms(t.admitted_quantile(0.5)),
        ms(p99),
        ms(base),
        p99.as_secs_f64() / base.as_secs_f64(),
        cpu_us(r).map_or("null".to_owned(), |c| format!("{c:.1}")),
    )
}

fn table_head(args: &OverloadArgs, servers: usize, base: Duration) -> String {
    format!(
        "upstream: {servers} servers × {:?} mean ({:.0} req/s); unloaded p99 {:.2} ms at {}× ({} s measured, timeout {:?})\n{:>8} {:>7} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>10}",
        args.capacity.mean(),
        args.capacity.rate(servers),
        ms(base),
        args.unloaded,
        args.duration.as_secs_f64(),
        args.timeout,
        "offered",
        "limiter",
        "req/s",
        "ok",
        "shed",
        "timeouts",
        "errors",
        "goodput",
        "p50 ms",
        "p99 ms",
        "p99 ×",
        "gw µs/req",
    )
}

fn table_row(r: &Run, args: &OverloadArgs, base: Duration) -> String {
    let t = &r.tally;
    let p99 = t.admitted_quantile(0.99);
    format!(
        "{:>7}× {:>7} {:>9.0} {:>8} {:>8} {:>8} {:>8} {:>7.1}% {:>9.2} {:>9.2} {:>8.2} {:>10}",
        r.offered,
        if r.limiter { "on" } else { "off" },
        t.sent as f64 / args.duration.as_secs_f64(),
        t.ok,
        t.shed,
        t.timeouts,
        t.errors,
        r.goodput(args.duration) * 100.0,
        ms(t.admitted_quantile(0.5)),
        ms(p99),
        p99.as_secs_f64() / base.as_secs_f64(),
        cpu_us(r).map_or("-".to_owned(), |c| format!("{c:.1}")),
    )
}
