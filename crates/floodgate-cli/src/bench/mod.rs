//! `floodgate bench`: a closed-loop load generator for Envoy RLS servers,
//! a fleet of `floodgate serve` processes on one Redis measured under it,
//! a do-nothing RLS server (the harness's ceiling), and a tiny upstream
//! for the gateway.

mod cpu;
mod fleet;
mod load;
mod null;

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
    /// (for the gateway's quick start and benchmarks).
    Upstream(UpstreamArgs),
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
}

/// Serves the demo upstream forever.
fn run_upstream(args: UpstreamArgs) -> anyhow::Result<()> {
    let rt = floodgate_runtime::host::runtime(args.workers, "upstream")?;
    eprintln!("upstream listening on http://{}", args.listen);
    rt.block_on(floodgate_gateway::demo::run_demo(
        args.listen,
        bytes::Bytes::from(args.body.into_bytes()),
    ))
    .with_context(|| format!("listen on {}", args.listen))
}
