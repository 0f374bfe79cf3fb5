//! `floodgate gateway`: the reverse proxy enforcing Floodgate policies, and
//! `floodgate bench upstream`, a tiny upstream for demos and benchmarks.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Args;
use floodgate_runtime::logging;
use floodgate_runtime::settings::{Env, warn_unsupported};

use crate::flags::{GatewayFlags, env};

/// `floodgate gateway`: every setting has a flag, over the environment
/// and the configuration file.
#[derive(Args, Debug, Default)]
pub struct GatewayArgs {
    #[command(flatten)]
    pub flags: GatewayFlags,
}

/// Runs the gateway until SIGTERM/SIGINT.
pub fn run(args: GatewayArgs) -> anyhow::Result<()> {
    // Before loading: rules resolve their metric handles when compiled.
    let prometheus = floodgate_runtime::metrics::install()?;
    let loaded = floodgate_gateway::load(&args.flags.0, &Env::new(&env))?;
    let mut log = loaded.runtime.settings.server.log.clone();
    if loaded.gateway.access_log {
        // Access lines pass whatever level the other logs are filtered at.
        log.level = format!("{},{}=info", log.level, floodgate_gateway::access::TARGET);
    }
    logging::init(&log)?;
    warn_unsupported(env);
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
    let rt = floodgate_runtime::threads::runtime(args.workers, "upstream")?;
    eprintln!("upstream listening on http://{}", args.listen);
    rt.block_on(floodgate_gateway::demo::run_demo(
        args.listen,
        bytes::Bytes::from(args.body.into_bytes()),
    ))
    .with_context(|| format!("listen on {}", args.listen))
}
