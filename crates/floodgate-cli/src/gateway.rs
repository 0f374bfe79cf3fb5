//! `floodgate gateway`: the reverse proxy enforcing Floodgate policies, and
//! `floodgate bench upstream`, a tiny upstream for demos and benchmarks.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use floodgate_gateway::{GatewayOptions, UpstreamUrl};
use floodgate_runtime::logging;
use floodgate_runtime::settings::{overrides_from_env, parse_listen, warn_unsupported_env};

/// Flags of `floodgate gateway`; each overrides the configuration file.
#[derive(Args, Debug, Default)]
pub struct GatewayArgs {
    /// Configuration files or directories (the `gateway:`, `http:`,
    /// `store:`, `server:` sections and the policies).
    #[arg(short, long = "config", value_name = "PATH", required = true)]
    pub config: Vec<PathBuf>,
    /// Listen address (over `gateway.listen`).
    #[arg(long, value_name = "ADDR", value_parser = listen)]
    pub listen: Option<SocketAddr>,
    /// Upstream URL, repeatable (over `gateway.upstream.url`).
    #[arg(long, value_name = "URL", value_parser = upstream)]
    pub upstream: Vec<UpstreamUrl>,
    /// Merge several files of one domain instead of rejecting them.
    #[arg(long)]
    pub merge_domains: bool,
    /// Log filter (info, debug, ...).
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
}

fn listen(s: &str) -> Result<SocketAddr, String> {
    parse_listen(s)?.ok_or_else(|| "the gateway needs a listen address".into())
}

fn upstream(s: &str) -> Result<UpstreamUrl, String> {
    UpstreamUrl::parse(s)
}

/// Runs the gateway until SIGTERM/SIGINT.
pub fn run(args: GatewayArgs) -> anyhow::Result<()> {
    let env = overrides_from_env(|k| std::env::var(k).ok())?;
    let flags = floodgate_runtime::settings::Overrides {
        log_level: args.log_level.clone(),
        ..Default::default()
    };
    let opts = GatewayOptions {
        paths: args.config,
        merge_domains: args.merge_domains,
        env,
        flags,
        listen: args.listen,
        upstreams: args.upstream,
    };
    // Before loading: rules resolve their metric handles when compiled.
    let prometheus = floodgate_runtime::metrics::install()?;
    let loaded = floodgate_gateway::load(&opts)?;
    let mut log = loaded.settings.server.log.clone();
    if loaded.gateway.access_log {
        // Access lines pass whatever level the other logs are filtered at.
        log.level = format!("{},{}=info", log.level, floodgate_gateway::access::TARGET);
    }
    logging::init(&log)?;
    warn_unsupported_env(|k| std::env::var(k).ok());
    floodgate_gateway::run(loaded, Some(prometheus)).context("floodgate gateway")?;
    Ok(())
}

/// Flags of `floodgate bench upstream`.
#[derive(Args, Debug, Clone)]
pub struct UpstreamArgs {
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
pub fn run_upstream(args: UpstreamArgs) -> anyhow::Result<()> {
    let mut builder = match args.workers {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(w) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(w.max(1));
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let rt = builder.enable_all().build()?;
    eprintln!("upstream listening on http://{}", args.listen);
    rt.block_on(floodgate_gateway::demo::run_demo(
        args.listen,
        bytes::Bytes::from(args.body.into_bytes()),
    ))
    .with_context(|| format!("listen on {}", args.listen))
}
