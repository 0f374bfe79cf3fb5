//! `floodgate serve`: the decision service.

use anyhow::Context;
use clap::Args;
use floodgate_runtime::logging;
use floodgate_runtime::settings::{Env, warn_unsupported};

use crate::flags::{ServeFlags, env};

/// `floodgate serve`: every setting has a flag, over the environment and
/// the configuration file.
#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    #[command(flatten)]
    pub flags: ServeFlags,
}

/// Runs the service until SIGTERM/SIGINT.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    // Before loading: rules resolve their metric handles when compiled.
    let prometheus = floodgate_runtime::metrics::install()?;
    let loaded = floodgate_runtime::config::load(&args.flags.0, &Env::new(&env))?;
    logging::init(&loaded.settings.server.log)?;
    warn_unsupported(env);
    floodgate_server::run(loaded, Some(prometheus)).context("floodgate serve")?;
    Ok(())
}
