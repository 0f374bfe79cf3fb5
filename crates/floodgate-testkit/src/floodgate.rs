//! The `floodgate serve` process under test.

use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::Command;

use crate::{Process, free_port, metric};

/// A running `floodgate serve` on free ports, with its configuration in a
/// temporary directory (rewrite it with [`Process::write_config`] to test
/// hot reload). Killed on drop; the [`Process`] methods apply to it.
pub struct Floodgate {
    process: Process,
    /// gRPC port.
    pub grpc: u16,
    /// HTTP port.
    pub http: u16,
    /// Admin port.
    pub admin: u16,
}

impl Floodgate {
    /// Starts `bin serve` on `config` (YAML text) with extra arguments and
    /// environment variables, and waits until `/ready` answers 200.
    pub fn start(bin: &Path, config: &str, args: &[&str], env: &[(&str, &str)]) -> Floodgate {
        Self::start_polling(bin, config, "100ms", args, env)
    }

    /// Like [`start`](Self::start), polling the configuration every
    /// `reload_interval` (`"0"`: only on SIGHUP).
    pub fn start_polling(
        bin: &Path,
        config: &str,
        reload_interval: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Floodgate {
        let mut serve = Self::spawn(bin, config, reload_interval, args, env, |_| {});
        let http = serve.http;
        serve.wait_ready(http);
        serve
    }

    /// Spawns `bin serve` like [`start_polling`](Self::start_polling),
    /// with `adjust` applied to its command last (a resource limit, say),
    /// without waiting for it.
    pub fn spawn(
        bin: &Path,
        config: &str,
        reload_interval: &str,
        args: &[&str],
        env: &[(&str, &str)],
        adjust: impl FnOnce(&mut Command),
    ) -> Floodgate {
        let (grpc, http, admin) = (free_port(), free_port(), free_port());
        let process = Process::spawn("floodgate.yaml", config, |path| {
            let mut cmd = command(bin, "serve", path);
            cmd.args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
                .args(["--http-addr", &format!("127.0.0.1:{http}")])
                .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
                .args(["--reload-interval", reload_interval])
                .args(args)
                .envs(env.iter().copied());
            adjust(&mut cmd);
            cmd
        });
        Floodgate {
            process,
            grpc,
            http,
            admin,
        }
    }

    /// The value of the first sample of `/metrics` whose line starts with
    /// `prefix` (0 when there is none; see [`metric`](crate::metric)).
    pub fn metric(&self, prefix: &str) -> f64 {
        metric(self.admin, prefix)
    }

    /// `127.0.0.1:<grpc>`.
    pub fn grpc_addr(&self) -> String {
        format!("127.0.0.1:{}", self.grpc)
    }
}

/// `bin subcommand --config config`, without the settings the test
/// runner's environment may carry (a Redis URL, a configuration path,
/// shutdown and reload timings): a test passes the ones it means.
pub(crate) fn command(bin: &Path, subcommand: &str, config: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg(subcommand).arg("--config").arg(config);
    for name in [
        "REDIS_URL",
        "FLOODGATE_CONFIG",
        "FLOODGATE_SHUTDOWN_DELAY",
        "FLOODGATE_SHUTDOWN_GRACE",
        "FLOODGATE_RELOAD_INTERVAL",
    ] {
        cmd.env_remove(name);
    }
    cmd
}

impl Deref for Floodgate {
    type Target = Process;

    fn deref(&self) -> &Process {
        &self.process
    }
}

impl DerefMut for Floodgate {
    fn deref_mut(&mut self) -> &mut Process {
        &mut self.process
    }
}
