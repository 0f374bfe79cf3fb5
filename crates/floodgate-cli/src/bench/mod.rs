//! `floodgate bench`: a closed-loop load generator for Envoy RLS servers,
//! a fleet of `floodgate serve` processes on one Redis measured under it,
//! a do-nothing RLS server (the harness's ceiling), an upstream for the
//! gateway (tiny, or of a limited capacity), and the gateway's adaptive
//! limit measured in front of that upstream under open-loop overload.

mod capacity;
mod cpu;
mod fleet;
mod gateway;
mod load;
mod null;
mod open_loop;
mod overload;
mod process;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};

/// Benchmarks.
#[derive(Subcommand, Debug)]
pub(crate) enum BenchCommand {
    /// Closed-loop load on an Envoy RLS v3 server over HTTP/2.
    Rls(RlsArgs),
    /// Several `floodgate serve` processes on one `redis-server`, for each
    /// synchronisation mode, beside one on the in-memory store: a table of
    /// decisions/s, server and Redis CPU and Redis commands per decision,
    /// the most admitted in a window against the limit, and latency.
    Fleet(Box<fleet::FleetArgs>),
    /// A do-nothing RLS server (answers OK, one status per descriptor).
    NullRls {
        /// Listen address.
        #[arg(long, default_value = "127.0.0.1:8091")]
        addr: SocketAddr,
    },
    /// A tiny HTTP/1.1 and HTTP/2 upstream answering 200 with a small body
    /// (for the gateway's quick start and benchmarks); with `--servers`, of
    /// a limited capacity: a worker pool with a queue and a service time.
    Upstream(UpstreamArgs),
    /// The gateway with the adaptive concurrency limit and without it, in
    /// front of a capacity-limited upstream, under open-loop load at
    /// multiples of its capacity: goodput and p99 against the unloaded
    /// p99, one row (or JSON line) per run.
    Overload(Box<overload::OverloadArgs>),
}

/// Load generator settings.
#[derive(Args, Debug, Clone)]
pub(crate) struct RlsArgs {
    /// The server's gRPC address.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub addr: SocketAddr,
    /// Requests in flight (closed loop: each sends its next when answered).
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// HTTP/2 connections the requests are spread over.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Distinct descriptor values, drawn at random.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Measured time.
    #[arg(long, default_value = "15s", value_parser = floodgate_runtime::settings::duration)]
    pub duration: Duration,
    /// Unmeasured time before.
    #[arg(long, default_value = "2s", value_parser = floodgate_runtime::settings::duration)]
    pub warmup: Duration,
    /// The domain sent.
    #[arg(long, default_value = "bench")]
    pub domain: String,
    /// The descriptor key sent (the value is `k<n>`).
    #[arg(long, default_value = "key")]
    pub key: String,
    /// Take the descriptor values in order (`k0`, `k1`, …, wrapping at
    /// `keys`) instead of at random: every value is sent once before any is
    /// sent twice (to fill a server with `keys` distinct keys).
    #[arg(long)]
    pub sequential: bool,
    /// A server process whose CPU time (and resident memory) to report.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// A label for the report line.
    #[arg(long, default_value = "")]
    pub label: String,
}

/// Runs a benchmark command.
pub(crate) fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    match cmd {
        BenchCommand::Rls(args) => runtime()?.block_on(load::run(args)),
        BenchCommand::Fleet(args) => runtime()?.block_on(fleet::run(*args)),
        BenchCommand::NullRls { addr } => runtime()?.block_on(null::serve(addr)),
        BenchCommand::Upstream(args) => run_upstream(args),
        BenchCommand::Overload(args) => runtime()?.block_on(overload::run(*args)),
    }
}

/// Flags of `floodgate bench upstream`.
#[derive(Args, Debug, Clone)]
pub(crate) struct UpstreamArgs {
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    /// The response body.
    #[arg(long, default_value = "hello from the upstream\n")]
    pub body: String,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    #[command(flatten)]
    pub capacity: capacity::CapacityArgs,
    /// With `--servers`: the servers from given times on, e.g.
    /// `10s:4,20s:8` (halved after 10 s, back after 20 s).
    #[arg(long, value_delimiter = ',', value_parser = capacity::schedule_step)]
    pub capacity_schedule: Vec<(Duration, usize)>,
}

/// Serves the demo upstream forever.
fn run_upstream(args: UpstreamArgs) -> anyhow::Result<()> {
    let rt = floodgate_runtime::host::runtime(args.workers, "upstream")?;
    let body = bytes::Bytes::from(args.body.into_bytes());
    let listen = args.listen;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(listen))
        .with_context(|| format!("listen on {listen}"))?;
    let Some(servers) = args.capacity.servers else {
        eprintln!("upstream listening on http://{listen}");
        rt.block_on(floodgate_gateway::demo::serve_demo(listener, body));
        return Ok(());
    };
    let servers = args.capacity.servers_or(servers)?;
    let capacity = args.capacity.capacity(servers);
    eprintln!(
        "upstream listening on http://{listen}: {servers} servers × {:?} mean, {:.0} req/s",
        args.capacity.mean(),
        args.capacity.rate(servers)
    );
    rt.spawn(capacity::follow_schedule(
        capacity.clone(),
        args.capacity_schedule,
    ));
    rt.block_on(floodgate_gateway::demo::serve_with_capacity(
        listener, body, capacity,
    ));
    Ok(())
}
