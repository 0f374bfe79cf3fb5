//! Spawning `redis-server` processes: a long-lived spawner thread, scratch
//! directories, free ports, readiness.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Spawns children from one long-lived thread, each child asking the kernel
/// to kill it when that thread (so the test process) ends: no server
/// outlives its test run, even after a crash.
pub(crate) fn spawn(mut cmd: Command) -> std::io::Result<Child> {
    type Job = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            for (mut cmd, reply) in rx {
                let _ = reply.send(cmd.spawn());
            }
        });
        Mutex::new(tx)
    });
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let (reply_tx, reply_rx) = mpsc::channel();
    tx.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .send((cmd, reply_tx))
        .expect("spawner thread");
    reply_rx.recv().expect("spawner reply")
}

pub(crate) fn require(tool: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "`{tool}` is not installed: the Redis backend's tests need a real Redis \
         (run scripts/test.sh, or `apt-get install redis-server`)"
    );
}

/// The directory for this process's servers; stale ones from dead runs are
/// removed.
pub(crate) fn scratch_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = std::env::temp_dir().join("floodgate-redis-tests");
        let _ = std::fs::create_dir_all(&root);
        if let Ok(entries) = std::fs::read_dir(&root) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let pid = name.split('-').next().and_then(|p| p.parse::<u32>().ok());
                if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = root.join(format!("{}-run", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        dir
    })
    .clone()
}

fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A port that is free, with `port + 10000` free too (a cluster bus port).
pub(crate) fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let seed = (std::process::id() as u16).wrapping_mul(97) % 20_000;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 21_000 + (seed.wrapping_add(n.wrapping_mul(7))) % 24_000;
        if port_free(port) && port_free(port + 10_000) {
            return port;
        }
    }
}

/// Sends `PING` and waits for `+PONG`.
pub(crate) fn ping(port: u16, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if let Ok(mut s) =
            TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(100))
        {
            let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
            let mut buf = [0u8; 7];
            if s.write_all(b"PING\r\n").is_ok()
                && s.read_exact(&mut buf).is_ok()
                && &buf == b"+PONG\r\n"
            {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}
