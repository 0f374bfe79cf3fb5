//! The settings' flags of each command, made from the one declaration of
//! every setting ([`floodgate_runtime::settings::table`], and the
//! gateway's [`floodgate_gateway::settings::table`]).

use clap::{ArgMatches, Args, Command, FromArgMatches};
use floodgate_runtime::settings::Flags;
use floodgate_runtime::settings::table::add_flags;

/// The flags of `floodgate serve`: every setting of the runtime.
#[derive(Clone, Debug, Default)]
pub struct ServeFlags(pub Flags);

impl FromArgMatches for ServeFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut f = ServeFlags::default();
        f.update_from_arg_matches(m)?;
        Ok(f)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.0.read_matches(floodgate_runtime::settings::table(), m);
        Ok(())
    }
}

impl Args for ServeFlags {
    fn augment_args(cmd: Command) -> Command {
        add_flags(cmd, floodgate_runtime::settings::table(), "Settings")
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// The flags of `floodgate gateway` and `floodgate config check`: every
/// setting of the runtime and of the gateway.
#[derive(Clone, Debug, Default)]
pub struct GatewayFlags(pub Flags);

impl FromArgMatches for GatewayFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut f = GatewayFlags::default();
        f.update_from_arg_matches(m)?;
        Ok(f)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.0.read_matches(floodgate_runtime::settings::table(), m);
        self.0.read_matches(floodgate_gateway::settings::table(), m);
        Ok(())
    }
}

impl Args for GatewayFlags {
    fn augment_args(cmd: Command) -> Command {
        let cmd = add_flags(cmd, floodgate_runtime::settings::table(), "Settings");
        add_flags(
            cmd,
            floodgate_gateway::settings::table(),
            "Gateway settings",
        )
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// The process's environment.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}
