//! A `redis-server` on a free port, with no persistence, stopped on drop.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, require, wait_until};

/// A running `redis-server`.
pub struct Redis {
    child: Child,
    port: u16,
    args: Vec<String>,
    dir: tempfile::TempDir,
}

impl Redis {
    /// Starts one (panics if `redis-server` is missing or does not start).
    pub fn start() -> Redis {
        Self::start_with(&[])
    }

    /// Starts one with extra configuration arguments (`--name value`).
    pub fn start_with(args: &[&str]) -> Redis {
        for _ in 0..5 {
            if let Some(r) = Self::try_start_on(free_port(), args) {
                return r;
            }
        }
        panic!("could not start redis-server");
    }

    /// Starts one on `port` (panics if it does not start).
    pub fn start_on(port: u16) -> Redis {
        Self::try_start_on(port, &[])
            .unwrap_or_else(|| panic!("could not start redis-server on port {port}"))
    }

    fn try_start_on(port: u16, args: &[&str]) -> Option<Redis> {
        require("redis-server");
        let dir = tempfile::tempdir().expect("temp dir");
        let args: Vec<String> = args.iter().map(std::string::ToString::to_string).collect();
        let child = Self::spawn(port, &args, dir.path());
        let mut r = Redis {
            child,
            port,
            args,
            dir,
        };
        // Another server on the port would answer too: ours must be
        // running.
        if r.answers(Duration::from_secs(5)) && matches!(r.child.try_wait(), Ok(None)) {
            return Some(r);
        }
        let _ = r.child.kill();
        let _ = r.child.wait();
        None
    }

    fn spawn(port: u16, args: &[String], dir: &std::path::Path) -> Child {
        Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
            ])
            .arg(dir)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server")
    }

    /// Whether it answers `PING` with `PONG` (not `LOADING`) within `limit`.
    fn answers(&self, limit: Duration) -> bool {
        let port = self.port;
        wait_until(limit, || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .and_then(|mut s| {
                    use std::io::{Read, Write};
                    s.set_read_timeout(Some(Duration::from_secs(1)))?;
                    s.write_all(b"PING\r\n")?;
                    let mut b = [0u8; 7];
                    s.read_exact(&mut b)?;
                    Ok(&b == b"+PONG\r\n")
                })
                .unwrap_or(false)
        })
    }

    /// Kills the server (SIGKILL: a crash) and starts it again on the same
    /// port, arguments and directory: what it had written to its
    /// append-only file (with `--appendonly yes`) it has again, nothing
    /// else. Panics if it does not answer within 10 s.
    pub fn restart(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(self.port, &self.args, self.dir.path());
        assert!(
            self.answers(Duration::from_secs(10)),
            "redis-server did not come back on port {}",
            self.port
        );
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "could not send SIG{sig} to redis-server");
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        // A paused server must be able to die.
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
