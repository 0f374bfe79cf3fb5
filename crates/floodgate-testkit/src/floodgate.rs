//! The `floodgate serve` process under test.

use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::Command;

use crate::Process;
use crate::{free_port, http_request};

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
        let (grpc, http, admin) = (free_port(), free_port(), free_port());
        let mut process = Process::spawn("floodgate.yaml", config, |path| {
            let mut cmd = Command::new(bin);
            cmd.arg("serve")
                .arg("--config")
                .arg(path)
                .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
                .args(["--http-addr", &format!("127.0.0.1:{http}")])
                .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
                .args(["--reload-interval", reload_interval])
                .args(args)
                .env_remove("REDIS_URL")
                .env_remove("FLOODGATE_CONFIG");
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd
        });
        process.wait_ready(http);
        Floodgate {
            process,
            grpc,
            http,
            admin,
        }
    }

    /// The value of the first sample of `/metrics` whose line starts with
    /// `prefix` (0 when there is none).
    pub fn metric(&self, prefix: &str) -> f64 {
        let (_, text) = http_request(self.admin, "GET", "/metrics", None, b"").unwrap_or_default();
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    /// `127.0.0.1:<grpc>`.
    pub fn grpc_addr(&self) -> String {
        format!("127.0.0.1:{}", self.grpc)
    }
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
