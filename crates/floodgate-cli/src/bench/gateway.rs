//! A `floodgate gateway` process for a benchmark: started on free ports
//! with a configuration written for it, ready once its `/ready` answers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::process::{Proc, STARTS, free_port};

/// A running gateway, killed on drop.
pub(super) struct GatewayProc {
    proc: Proc,
    /// Its proxy listener.
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl GatewayProc {
    /// Starts `bin gateway` on `config` (YAML text), with `workers` worker
    /// threads (none: one per core), and waits until it is ready.
    pub(super) fn start(bin: &Path, config: &str, workers: Option<usize>) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("gateway.yaml");
        std::fs::write(&path, config)?;
        for _ in 0..STARTS {
            if let Some((proc, addr)) = start_once(bin, &path, workers)? {
                return Ok(GatewayProc {
                    proc,
                    addr,
                    _dir: dir,
                });
            }
        }
        bail!("floodgate gateway exited while starting, {STARTS} times (its errors above)")
    }

    /// Its process id.
    pub(super) fn pid(&self) -> u32 {
        self.proc.0.id()
    }
}

/// Starts the gateway on ports picked now: `None` when it exited while
/// starting (its error printed), as when a port was taken meanwhile.
fn start_once(
    bin: &Path,
    config: &Path,
    workers: Option<usize>,
) -> anyhow::Result<Option<(Proc, SocketAddr)>> {
    let (port, admin) = (free_port()?, free_port()?);
    let child = Command::new(bin)
        .arg("gateway")
        .arg("--config")
        .arg(config)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--log-level", "error"])
        .args(workers.map(|w| format!("--workers={w}")))
        .env("FLOODGATE_ADMIN_ADDR", format!("127.0.0.1:{admin}"))
        .env_remove("REDIS_URL")
        .env_remove("FLOODGATE_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut proc = Proc(child);
    let (addr, admin) = (
        SocketAddr::from(([127, 0, 0, 1], port)),
        SocketAddr::from(([127, 0, 0, 1], admin)),
    );
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if proc.0.try_wait()?.is_some() {
            return Ok(None);
        }
        if ready(admin) && TcpStream::connect(addr).is_ok() {
            return Ok(Some((proc, addr)));
        }
        if Instant::now() > end {
            bail!("floodgate gateway on {addr} was not ready within 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `GET /ready` on the admin listener answers 200.
fn ready(admin: SocketAddr) -> bool {
    let answer = || -> std::io::Result<String> {
        let mut s = TcpStream::connect(admin)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.write_all(b"GET /ready HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok(text)
    };
    answer().is_ok_and(|t| t.starts_with("HTTP/1.1 200"))
}
