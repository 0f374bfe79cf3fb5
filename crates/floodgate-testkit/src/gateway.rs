//! The `floodgate gateway` process under test.

use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::floodgate::command;
use crate::{Process, free_port, metric, wait_until};

/// A running `floodgate gateway` on free ports (its listener by flag, its
/// admin listener by environment), with its configuration in a temporary
/// directory (rewrite it with [`Process::write_config`] to test hot
/// reload). Killed on drop; the [`Process`] methods apply to it.
pub struct Gateway {
    process: Process,
    /// The proxy listener's port.
    pub port: u16,
    /// Admin port.
    pub admin: u16,
}

impl Gateway {
    /// Starts `bin gateway` on `config` (YAML text) with extra arguments
    /// and environment variables, and waits until `/ready` answers 200
    /// and its listener takes connections (the admin listener is bound
    /// first).
    pub fn start(bin: &Path, config: &str, args: &[&str], env: &[(&str, &str)]) -> Gateway {
        let mut gateway = Self::spawn(bin, config, args, env, |_| {});
        let admin = gateway.admin;
        gateway.wait_ready(admin);
        let port = gateway.port;
        let listening = wait_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(
            listening,
            "the gateway does not listen; its log:\n{}",
            gateway.log()
        );
        gateway
    }

    /// Spawns `bin gateway` like [`start`](Self::start), with `adjust`
    /// applied to its command last (a resource limit, say), without
    /// waiting for it.
    pub fn spawn(
        bin: &Path,
        config: &str,
        args: &[&str],
        env: &[(&str, &str)],
        adjust: impl FnOnce(&mut Command),
    ) -> Gateway {
        let (port, admin) = (free_port(), free_port());
        let process = Process::spawn("gateway.yaml", config, |path| {
            let mut cmd = command(bin, "gateway", path);
            cmd.args(["--listen", &format!("127.0.0.1:{port}")])
                .args(args)
                .env("FLOODGATE_ADMIN_ADDR", format!("127.0.0.1:{admin}"))
                .envs(env.iter().copied());
            adjust(&mut cmd);
            cmd
        });
        Gateway {
            process,
            port,
            admin,
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The value of the first sample of `/metrics` whose line starts with
    /// `prefix` (0 when there is none; see [`metric`](crate::metric)).
    pub fn metric(&self, prefix: &str) -> f64 {
        metric(self.admin, prefix)
    }
}

impl Deref for Gateway {
    type Target = Process;

    fn deref(&self) -> &Process {
        &self.process
    }
}

impl DerefMut for Gateway {
    fn deref_mut(&mut self) -> &mut Process {
        &mut self.process
    }
}
