//! The settings' flags of each command, made from the one declaration of
//! every setting: the host's ([`Settings`]), the service's
//! ([`RlsSettings`]) and the gateway's ([`Draft`]). A command offers the
//! flags of what it reads; another binary's flag is refused, naming the
//! binary that reads it.

use clap::error::ErrorKind;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use floodgate_gateway::settings::Draft;
use floodgate_runtime::Settings;
use floodgate_runtime::settings::Flags;
use floodgate_runtime::settings::table::{Declared, add_flags};
use floodgate_server::RlsSettings;

/// The flags of a command: the host's settings, with `SERVE` the
/// service's, with `GATEWAY` the gateway's.
#[derive(Clone, Debug, Default)]
pub(crate) struct SettingFlags<const SERVE: bool, const GATEWAY: bool>(pub Flags);

/// The flags of `floodgate serve`.
pub(crate) type ServeFlags = SettingFlags<true, false>;
/// The flags of `floodgate gateway`.
pub(crate) type GatewayFlags = SettingFlags<false, true>;
/// The flags of `floodgate config check`: every binary's.
pub(crate) type CheckFlags = SettingFlags<true, true>;

impl<const SERVE: bool, const GATEWAY: bool> FromArgMatches for SettingFlags<SERVE, GATEWAY> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut f = Self::default();
        f.update_from_arg_matches(m)?;
        Ok(f)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.0.read_matches::<Settings>(m);
        let (serve, gateway) = ("floodgate serve", "floodgate gateway");
        if SERVE {
            self.0.read_matches::<RlsSettings>(m);
        } else {
            refuse_given::<RlsSettings>(m, serve, gateway)?;
        }
        if GATEWAY {
            self.0.read_matches::<Draft>(m);
        } else {
            refuse_given::<Draft>(m, gateway, serve)?;
        }
        Ok(())
    }
}

impl<const SERVE: bool, const GATEWAY: bool> Args for SettingFlags<SERVE, GATEWAY> {
    fn augment_args(cmd: Command) -> Command {
        let cmd = add_flags::<Settings>(cmd, "Settings");
        let cmd = match SERVE {
            true => add_flags::<RlsSettings>(cmd, "Service settings"),
            false => hidden::<RlsSettings>(cmd),
        };
        match GATEWAY {
            true => add_flags::<Draft>(cmd, "Gateway settings"),
            false => hidden::<Draft>(cmd),
        }
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// `T`'s flags, accepted but not shown, so that one given is refused by
/// [`refuse_given`] with a message naming its binary.
fn hidden<T: Declared>(cmd: Command) -> Command {
    let mut cmd = add_flags::<T>(cmd, "");
    for s in T::table().iter().filter(|s| s.flag.is_some()) {
        cmd = cmd.mut_arg(s.key, |a| a.hide(true));
    }
    cmd
}

/// An error for the first of `T`'s flags given in `m`: a setting of
/// `binary` only, which `command` does not read.
fn refuse_given<T: Declared>(
    m: &ArgMatches,
    binary: &str,
    command: &str,
) -> Result<(), clap::Error> {
    let mut given = Flags::new();
    given.read_matches::<T>(m);
    let table = T::table().iter();
    match table
        .filter_map(|s| s.flag.map(|f| (f, s.key)))
        .find(|(_, k)| given.get(k).is_some())
    {
        Some((flag, key)) => Err(clap::Error::raw(
            ErrorKind::ArgumentConflict,
            format!("--{flag} (`{key}`) is a setting of `{binary}`: `{command}` does not read it"),
        )),
        None => Ok(()),
    }
}

/// The process's environment.
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// What a configuration may hold for any command: every frontend's
/// sections and keys (a file may configure both `serve` and `gateway`).
pub(crate) fn sections() -> Vec<&'static str> {
    use floodgate_runtime::host::{Both, Frontend};
    Both::<floodgate_server::Rls, floodgate_gateway::Proxying>::sections()
}
