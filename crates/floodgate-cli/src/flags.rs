//! The settings' flags of each command, made from the one declaration of
//! every setting (the runtime's [`Settings`], and the gateway's [`Draft`]).

use clap::{ArgMatches, Args, Command, FromArgMatches};
use floodgate_gateway::settings::Draft;
use floodgate_runtime::Settings;
use floodgate_runtime::settings::Flags;
use floodgate_runtime::settings::table::add_flags;

/// The flags of a command: every setting of the runtime, and with
/// `GATEWAY` every setting of the gateway too.
#[derive(Clone, Debug, Default)]
pub(crate) struct SettingFlags<const GATEWAY: bool>(pub Flags);

/// The flags of `floodgate serve`.
pub(crate) type ServeFlags = SettingFlags<false>;
/// The flags of `floodgate gateway` and `floodgate config check`.
pub(crate) type GatewayFlags = SettingFlags<true>;

impl<const GATEWAY: bool> FromArgMatches for SettingFlags<GATEWAY> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut f = Self::default();
        f.update_from_arg_matches(m)?;
        Ok(f)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.0.read_matches::<Settings>(m);
        if GATEWAY {
            self.0.read_matches::<Draft>(m);
        }
        Ok(())
    }
}

impl<const GATEWAY: bool> Args for SettingFlags<GATEWAY> {
    fn augment_args(cmd: Command) -> Command {
        let cmd = add_flags::<Settings>(cmd, "Settings");
        if !GATEWAY {
            return cmd;
        }
        add_flags::<Draft>(cmd, "Gateway settings")
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// The process's environment.
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The sections a configuration may hold for any command: every
/// frontend's (a file may configure both `serve` and `gateway`).
pub(crate) fn sections() -> Vec<&'static str> {
    use floodgate_runtime::host::{Both, Frontend};
    Both::<floodgate_server::Rls, floodgate_gateway::Proxying>::sections()
}
