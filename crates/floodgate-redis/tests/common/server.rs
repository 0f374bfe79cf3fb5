//! One `redis-server` process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::process::{free_port, ping, require, scratch_dir, spawn};

/// One `redis-server` process.
pub(crate) struct Server {
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    pub(crate) child: Option<Child>,
}

impl Server {
    /// A standalone server on a free port.
    pub(crate) fn start() -> Server {
        Self::start_with(&[])
    }

    /// A server with extra configuration arguments (`--name value`).
    pub(crate) fn start_with(extra: &[&str]) -> Server {
        require("redis-server");
        require("redis-cli");
        for _ in 0..5 {
            let port = free_port();
            let dir = scratch_dir().join(format!("node-{port}"));
            let _ = std::fs::create_dir_all(&dir);
            let mut s = Server {
                port,
                dir,
                extra: extra.iter().map(std::string::ToString::to_string).collect(),
                child: None,
            };
            if s.launch() {
                return s;
            }
        }
        panic!("could not start redis-server");
    }

    fn launch(&mut self) -> bool {
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = spawn(cmd).expect("spawn redis-server");
        self.child = Some(child);
        if ping(self.port, Duration::from_secs(5)) {
            true
        } else {
            self.kill();
            false
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").arg(sig).arg(pid.to_string()).status();
        }
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing answers.
    pub(crate) fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws it (SIGCONT).
    pub(crate) fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, empty (no data, no scripts).
    pub(crate) fn restart(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(self.dir.join(format!("nodes-{}.conf", self.port)));
        for _ in 0..50 {
            if self.launch() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("could not restart redis-server on port {}", self.port);
    }

    /// Runs `redis-cli -p <port> args…` and returns its output.
    pub(crate) fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }

    /// A plain synchronous connection for inspecting keys.
    pub(crate) fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("connect to test server")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}

/// Runs `redis-cli -p <port> args…`.
pub(crate) fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
