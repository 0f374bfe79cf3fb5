//! Real Redis servers for the tests: `redis-server` processes on free ports,
//! killed on drop (and by the kernel if the test process dies), and a real
//! six-node cluster (three primaries, three replicas).
//!
//! `redis-server` and `redis-cli` must be installed: the tests fail, loudly,
//! without them (`scripts/test.sh` installs them).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use floodgate::algorithms::AnyLimit;
use floodgate::{Decision, Outcome};
use floodgate_policy::Item;

/// Spawns children from one long-lived thread, each child asking the kernel
/// to kill it when that thread (so the test process) ends: no server
/// outlives its test run, even after a crash.
fn spawn(mut cmd: Command) -> std::io::Result<Child> {
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
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, reply_tx))
        .expect("spawner thread");
    reply_rx.recv().expect("spawner reply")
}

fn require(tool: &str) {
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
fn scratch_dir() -> PathBuf {
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
pub fn free_port() -> u16 {
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
pub fn ping(port: u16, within: Duration) -> bool {
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

/// One `redis-server` process.
pub struct Server {
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl Server {
    /// A standalone server on a free port.
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    /// A server with extra configuration arguments (`--name value`).
    pub fn start_with(extra: &[&str]) -> Server {
        require("redis-server");
        require("redis-cli");
        for _ in 0..5 {
            let port = free_port();
            let dir = scratch_dir().join(format!("node-{port}"));
            let _ = std::fs::create_dir_all(&dir);
            let mut s = Server {
                port,
                dir,
                extra: extra.iter().map(|s| s.to_string()).collect(),
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

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
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
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws it (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, empty (no data, no scripts).
    pub fn restart(&mut self) {
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
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }

    /// A plain synchronous connection for inspecting keys.
    pub fn conn(&self) -> redis::Connection {
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
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A Redis Cluster: three primaries, each with one replica.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start() -> Cluster {
        let nodes: Vec<Server> = (0..6)
            .map(|_| {
                Server::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "1000",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
            })
            .collect();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
        let out = Command::new("redis-cli")
            .args(&args)
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Cluster { nodes };
        cluster.wait_ok(Duration::from_secs(20));
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// Waits until every node reports `cluster_state:ok`, every replica's
    /// link to its primary is up, and every slot is served.
    pub fn wait_ok(&self, within: Duration) {
        let end = Instant::now() + within;
        loop {
            let ok = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                let info = n.cli(&["cluster", "info"]);
                let repl = n.cli(&["info", "replication"]);
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && (repl.contains("role:master") || repl.contains("master_link_status:up"))
            });
            if ok {
                return;
            }
            assert!(Instant::now() < end, "cluster did not become ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The node serving `slot` as primary, and its replica if it has one,
    /// as seen by a live node (`None` while nobody serves the slot).
    pub fn owners(&self, slot: u16) -> Option<(usize, Option<usize>)> {
        let live = self.nodes.iter().find(|n| n.child.is_some())?;
        let nodes = live.cli(&["cluster", "nodes"]);
        let port_of = |addr: &str| -> Option<u16> {
            addr.split('@').next()?.rsplit(':').next()?.parse().ok()
        };
        let idx = |p: u16| self.nodes.iter().position(|n| n.port() == p);
        let lines: Vec<Vec<&str>> = nodes
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        let owner = lines.iter().find(|f| {
            f.len() > 8
                && f[2].contains("master")
                && !f[2].contains("fail")
                && f[8..].iter().any(|range| {
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
                })
        })?;
        let primary = idx(port_of(owner[1])?)?;
        let replica = lines
            .iter()
            .find(|f| f.len() > 3 && f[2].contains("slave") && f[3] == owner[0])
            .and_then(|f| port_of(f[1]))
            .and_then(idx);
        Some((primary, replica))
    }

    /// A synchronous cluster connection for inspecting keys.
    pub fn conn(&self) -> redis::cluster::ClusterConnection {
        redis::cluster::ClusterClient::new(self.urls())
            .and_then(|c| c.get_connection())
            .expect("connect to test cluster")
    }
}

/// The slot of a key (CRC16 of its hash tag).
pub fn slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|o| {
            key[o + 1..]
                .iter()
                .position(|&b| b == b'}')
                .filter(|&c| c > 0)
                .map(|c| &key[o + 1..o + 1 + c])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &b in tag {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// A placeholder decision to fill output slices with.
pub fn blank() -> Decision {
    Decision {
        outcome: Outcome::Never,
        limit: u64::MAX,
        remaining: u64::MAX,
        reset_after: Duration::MAX,
        retry_after: None,
    }
}

/// A batch item.
pub fn item<'a>(group: &'a [u8], key: &'a [u8], limit: &'a AnyLimit, cost: u64) -> Item<'a> {
    Item {
        group,
        key,
        limit,
        cost,
    }
}

/// `d` rounded up to whole microseconds.
pub fn ceil_us(d: Duration) -> Duration {
    Duration::from_micros(d.as_nanos().div_ceil(1000) as u64)
}

/// The in-memory decision with its durations rounded up to whole µs, as
/// Redis reports them.
pub fn as_redis(d: Decision) -> Decision {
    Decision {
        reset_after: ceil_us(d.reset_after),
        retry_after: d.retry_after.map(ceil_us),
        ..d
    }
}

/// A multi-threaded runtime for tests that are not `#[tokio::test]`.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The same decisions made by the in-memory backend and a Redis backend
/// (client-supplied time), compared item by item.
pub struct Twin {
    pub memory: floodgate_policy::MemoryBackend,
    pub redis: floodgate_redis::RedisBackend,
}

impl Twin {
    /// A twin over `urls` in `mode`, keys under `prefix`.
    pub async fn new(urls: Vec<String>, mode: floodgate_redis::Mode, prefix: &str) -> Twin {
        let config = floodgate_redis::RedisConfig {
            urls,
            mode,
            key_prefix: prefix.to_owned(),
            timeout: Duration::from_secs(5),
            time_source: floodgate_redis::TimeSource::Client {
                expiry_slack: Duration::from_secs(3600),
            },
            ..floodgate_redis::RedisConfig::default()
        };
        Twin {
            memory: floodgate_policy::MemoryBackend::new(floodgate::StoreConfig::default())
                .expect("memory backend"),
            redis: floodgate_redis::RedisBackend::connect(&config)
                .await
                .expect("connect"),
        }
    }

    /// Decides `items` at `now_us` on both; panics (with `ctx`) if they
    /// differ; returns the combined decision.
    pub async fn step(
        &self,
        items: &[Item<'_>],
        now_us: u64,
        apply: floodgate::Apply,
        ctx: &str,
    ) -> Decision {
        use floodgate_policy::Backend;
        let now = floodgate::Timestamp::from_micros(now_us);
        let mut m = vec![blank(); items.len()];
        let mut r = vec![blank(); items.len()];
        let dm = self.memory.decide_now(items, now, apply, &mut m);
        let dr = self
            .redis
            .decide(items, now, apply, &mut r)
            .await
            .unwrap_or_else(|e| panic!("{ctx}: redis failed: {e}"));
        for (i, (a, b)) in m.iter().zip(&r).enumerate() {
            assert_eq!(
                as_redis(*a),
                *b,
                "{ctx}: item {i} at {now_us} µs ({apply:?})"
            );
        }
        assert_eq!(
            as_redis(dm),
            dr,
            "{ctx}: combined at {now_us} µs ({apply:?})"
        );
        dr
    }

    /// Releases on both.
    pub async fn release(&self, item: Item<'_>, units: u64) {
        use floodgate_policy::Backend;
        let now = floodgate::Timestamp::ZERO;
        self.memory.release_now(item, units, now);
        self.redis.release(item, units, now).await.expect("release");
    }
}
