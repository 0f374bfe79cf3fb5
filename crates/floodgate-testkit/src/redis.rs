//! A `redis-server` on a free port, with no persistence, stopped on drop.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, require, wait_until};

/// A running `redis-server`.
pub struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    /// Starts one (panics if `redis-server` is missing or does not start).
    pub fn start() -> Redis {
        for _ in 0..5 {
            if let Some(r) = Self::try_start_on(free_port()) {
                return r;
            }
        }
        panic!("could not start redis-server");
    }

    /// Starts one on `port` (panics if it does not start).
    pub fn start_on(port: u16) -> Redis {
        Self::try_start_on(port)
            .unwrap_or_else(|| panic!("could not start redis-server on port {port}"))
    }

    fn try_start_on(port: u16) -> Option<Redis> {
        require("redis-server");
        {
            let dir = tempfile::tempdir().expect("temp dir");
            let child = Command::new("redis-server")
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
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn redis-server");
            let mut r = Redis {
                child,
                port,
                _dir: dir,
            };
            let up = wait_until(Duration::from_secs(5), || {
                std::net::TcpStream::connect(("127.0.0.1", port))
                    .and_then(|mut s| {
                        use std::io::{Read, Write};
                        s.write_all(b"PING\r\n")?;
                        let mut b = [0u8; 7];
                        s.read_exact(&mut b)?;
                        Ok(&b == b"+PONG\r\n")
                    })
                    .unwrap_or(false)
            });
            if up {
                return Some(r);
            }
            let _ = r.child.kill();
        }
        None
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
