//! The `floodgate serve` process under test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::{free_port, http_request, wait_until};

/// A running `floodgate serve` on free ports, with its configuration in a
/// temporary directory (rewrite it with [`Floodgate::write_config`] to test
/// hot reload). Killed on drop.
pub struct Floodgate {
    child: Option<Child>,
    /// gRPC port.
    pub grpc: u16,
    /// HTTP port.
    pub http: u16,
    /// Admin port.
    pub admin: u16,
    dir: tempfile::TempDir,
}

impl Floodgate {
    /// Starts `bin serve` on `config` (YAML text) with extra arguments and
    /// environment variables, and waits until `/ready` answers 200.
    pub fn start(bin: &Path, config: &str, args: &[&str], env: &[(&str, &str)]) -> Floodgate {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("floodgate.yaml"), config).expect("write config");
        let (grpc, http, admin) = (free_port(), free_port(), free_port());
        let log = std::fs::File::create(dir.path().join("stderr.log")).expect("log file");
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .arg("--config")
            .arg(dir.path().join("floodgate.yaml"))
            .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
            .args(["--http-addr", &format!("127.0.0.1:{http}")])
            .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
            .args(["--reload-interval", "100ms"])
            .args(args)
            .env_remove("REDIS_URL")
            .env_remove("FLOODGATE_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn floodgate");
        let mut f = Floodgate {
            child: Some(child),
            grpc,
            http,
            admin,
            dir,
        };
        let ready = wait_until(Duration::from_secs(20), || {
            if let Some(Ok(Some(_))) = f.child.as_mut().map(|c| c.try_wait()) {
                return true;
            }
            matches!(
                http_request(http, "GET", "/ready", None, b""),
                Some((200, _))
            )
        });
        let exited = f.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
        if !ready || exited.is_some() {
            panic!(
                "floodgate did not become ready (exit: {exited:?}); its log:\n{}",
                f.log()
            );
        }
        f
    }

    /// The configuration file.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("floodgate.yaml")
    }

    /// Replaces the configuration file (atomically, by rename).
    pub fn write_config(&self, text: &str) {
        let tmp = self.dir.path().join(".floodgate.yaml.tmp");
        std::fs::write(&tmp, text).expect("write config");
        std::fs::rename(&tmp, self.config_path()).expect("rename config");
    }

    /// What the process logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// `127.0.0.1:<grpc>`.
    pub fn grpc_addr(&self) -> String {
        format!("127.0.0.1:{}", self.grpc)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Sends a signal (`TERM`, `INT`, ...).
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status();
    }

    /// Waits for the process to exit, up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut status = None;
        wait_until(timeout, || {
            status = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            status.is_some()
        });
        if status.is_some() {
            self.child = None;
        }
        status
    }
}

impl Drop for Floodgate {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
