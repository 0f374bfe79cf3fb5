//! A Sentinel deployment: a primary, one replica, and sentinels
//! (`redis-server sentinel.conf --sentinel`) monitoring them as
//! `mymaster`, with a short `down-after-milliseconds` so that failovers
//! take a few seconds. Each sentinel runs from its own scratch directory
//! (sentinels rewrite their configuration file).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::process::{free_port, ping, require, scratch_dir, spawn};
use super::server::{Server, cli};

/// The name the sentinels monitor the primary under.
pub(crate) const MASTER: &str = "mymaster";

/// One sentinel process.
pub(crate) struct Sentinel {
    port: u16,
    child: Option<Child>,
}

impl Sentinel {
    fn start(primary: u16) -> Sentinel {
        for _ in 0..5 {
            let port = free_port();
            let dir = scratch_dir().join(format!("sentinel-{port}"));
            let _ = std::fs::create_dir_all(&dir);
            let conf: PathBuf = dir.join("sentinel.conf");
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {primary} 1\n\
                 sentinel down-after-milliseconds {MASTER} 500\n\
                 sentinel failover-timeout {MASTER} 2000\n\
                 sentinel parallel-syncs {MASTER} 1\n",
                dir.display()
            );
            std::fs::write(&conf, text).expect("write sentinel.conf");
            let mut cmd = Command::new("redis-server");
            cmd.arg(&conf)
                .arg("--sentinel")
                .current_dir(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let child = spawn(cmd).expect("spawn redis-server --sentinel");
            let mut s = Sentinel {
                port,
                child: Some(child),
            };
            if ping(port, Duration::from_secs(5)) {
                return s;
            }
            s.kill();
        }
        panic!("could not start a sentinel");
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `host:port`, as `REDIS_URL` lists sentinels.
    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub(crate) fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }

    /// A field of `SENTINEL MASTER mymaster`.
    fn field(&self, name: &str) -> Option<String> {
        let out = self.cli(&["sentinel", "master", MASTER]);
        let mut lines = out.lines();
        while let Some(l) = lines.next() {
            if l.trim() == name {
                return lines.next().map(|v| v.trim().to_owned());
            }
        }
        None
    }

    /// The port of the primary this sentinel reports.
    pub(crate) fn primary_port(&self) -> Option<u16> {
        let out = self.cli(&["sentinel", "get-master-addr-by-name", MASTER]);
        out.lines().nth(1).and_then(|p| p.trim().parse().ok())
    }

    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A primary, its replica and `n` sentinels, all ready: the replica in
/// sync, every sentinel aware of the replica and of the other sentinels.
pub(crate) struct SentinelSet {
    /// `[first primary, first replica]`; roles change with failovers.
    pub servers: Vec<Server>,
    pub sentinels: Vec<Sentinel>,
}

impl SentinelSet {
    pub(crate) fn start(n: usize) -> SentinelSet {
        require("redis-server");
        require("redis-cli");
        let primary = Server::start();
        let port = primary.port().to_string();
        let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port]);
        wait(Duration::from_secs(10), "the replica to sync", || {
            replica
                .cli(&["info", "replication"])
                .contains("master_link_status:up")
        });
        let sentinels: Vec<Sentinel> = (0..n).map(|_| Sentinel::start(primary.port())).collect();
        let set = SentinelSet {
            servers: vec![primary, replica],
            sentinels,
        };
        wait(Duration::from_secs(20), "the sentinels to meet", || {
            set.sentinels.iter().all(|s| {
                s.field("num-slaves").as_deref() == Some("1")
                    && s.field("num-other-sentinels") == Some((n - 1).to_string())
            })
        });
        set
    }

    /// The sentinels' addresses, `host:port` each.
    pub(crate) fn addrs(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::addr).collect()
    }

    /// The role server `i` reports (`master`, `slave`).
    pub(crate) fn role(&self, i: usize) -> String {
        let out = self.servers[i].cli(&["role"]);
        out.lines().next().unwrap_or("").to_owned()
    }

    /// Waits until server `i` says it is a primary and every live sentinel
    /// names it. (A primary failed over while up is demoted by the
    /// sentinels later, when they next look at it: up to ten seconds.)
    pub(crate) fn wait_primary(&self, i: usize, within: Duration) {
        let port = self.servers[i].port();
        wait(within, "the failover", || {
            self.role(i) == "master"
                && self
                    .sentinels
                    .iter()
                    .filter(|s| s.child.is_some())
                    .all(|s| s.primary_port() == Some(port))
        });
    }
}

/// Polls `ok` every 50 ms; panics after `within`.
pub(crate) fn wait(within: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
