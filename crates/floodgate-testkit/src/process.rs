//! A process under test with its configuration file and its log in a
//! temporary directory of its own.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::{http_request, wait_until};

/// A spawned process, its configuration file (rewrite it with
/// [`Process::write_config`] to test hot reload) and its standard error
/// (read with [`Process::log`]). Killed on drop.
pub struct Process {
    child: Option<Child>,
    dir: tempfile::TempDir,
    config: &'static str,
}

impl Process {
    /// Writes `config` to a file `name` in a new temporary directory, then
    /// spawns the command `build` makes from that file's path, its
    /// standard output discarded and its standard error logged.
    pub fn spawn(
        name: &'static str,
        config: &str,
        build: impl FnOnce(&Path) -> Command,
    ) -> Process {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(name);
        std::fs::write(&path, config).expect("write config");
        let log = std::fs::File::create(dir.path().join("stderr.log")).expect("log file");
        let child = build(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn the process under test");
        Process {
            child: Some(child),
            dir,
            config: name,
        }
    }

    /// Waits until `GET /ready` on `port` answers 200; panics with the log
    /// if the process exits first or is not ready within 20 s.
    pub fn wait_ready(&mut self, port: u16) {
        let ready = wait_until(Duration::from_secs(20), || {
            self.exited().is_some()
                || matches!(
                    http_request(port, "GET", "/ready", None, b""),
                    Some((200, _))
                )
        });
        let exited = self.exited();
        if !ready || exited.is_some() {
            panic!(
                "the process did not become ready (exit: {exited:?}); its log:\n{}",
                self.log()
            );
        }
    }

    /// The exit status, if the process has exited.
    fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// The configuration file.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join(self.config)
    }

    /// Replaces the configuration file (atomically, by rename).
    pub fn write_config(&self, text: &str) {
        let tmp = self.dir.path().join(format!(".{}.tmp", self.config));
        std::fs::write(&tmp, text).expect("write config");
        std::fs::rename(&tmp, self.config_path()).expect("rename config");
    }

    /// What the process logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .map(std::process::Child::id)
            .unwrap_or(0)
    }

    /// The process's resident size now, in bytes (`VmRSS` of
    /// `/proc/PID/status`; 0 where it cannot be read).
    pub fn resident_bytes(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|kb| kb.trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
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
            status = self.exited();
            status.is_some()
        });
        if status.is_some() {
            self.child = None;
        }
        status
    }
}

/// Makes `cmd` run with at most `n` open files, soft and hard limit (so
/// that it cannot raise it), set in the child between fork and exec.
pub fn limit_open_files(cmd: &mut Command, n: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only `setrlimit`, async-signal-safe, runs between fork and
    // exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
