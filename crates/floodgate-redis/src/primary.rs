//! The connections to a Sentinel-managed primary, following failovers.
//!
//! Decisions go to a few multiplexed [`ConnectionManager`]s to the primary,
//! exactly as on a single server. When a call fails (connection errors,
//! timeouts, `READONLY` from a demoted primary), the backend calls
//! [`Primary::suspect`]: a background task asks the sentinels where the
//! primary is, confirms it with `ROLE`, and swaps in connections to it if
//! it moved — retrying (50 ms, doubling up to 250 ms) until a primary
//! confirms, so decisions resume by themselves after a failover while the
//! failure policy and the breaker answer in between. The connections are
//! kept when the primary did not move. Another task asks the sentinels
//! every second, so that a failover is followed even while the old primary
//! still answers (before the sentinels demote it, which can take ten
//! seconds).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult};
use redis::{RedisConnectionInfo, Value};

use crate::sentinel::{Addr, Sentinels, is_primary};

/// Discoveries start at most this often (each failed call asks for one).
const MIN_GAP: Duration = Duration::from_millis(100);
/// How often the sentinels are asked whether the primary moved, so that a
/// failover that leaves the old primary up (a manual one, a partition) is
/// followed before the old primary is demoted, not after.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// Retries of an unconfirmed discovery back off up to this.
const MAX_PAUSE: Duration = Duration::from_millis(250);

/// Connections to the current primary.
struct Current {
    /// Where the primary is.
    addr: Addr,
    /// `connections` connections to it.
    conns: Vec<ConnectionManager>,
}

/// What the primary's connections and its discovery tasks share.
struct Shared {
    /// The sentinels that name the primary.
    sentinels: Sentinels,
    /// Auth, TLS and handshake settings of the primary (its address is
    /// filled in from the sentinels' answer).
    template: ConnectionInfo,
    /// Timeouts and retries of each connection.
    settings: ConnectionManagerConfig,
    /// Connections to open.
    connections: usize,
    /// How long asking a server whether it is the primary may take.
    connect_timeout: Duration,
    /// The connections to the primary, once one is known.
    current: RwLock<Option<Arc<Current>>>,
    /// A discovery task is running.
    following: AtomicBool,
    /// The watching task is running.
    watching: AtomicBool,
    /// When the last discovery started.
    last: Mutex<Option<Instant>>,
}

/// The connections of a backend in [`Mode::Sentinel`](crate::Mode).
pub(crate) struct Primary {
    /// Shared with the discovery and watching tasks.
    shared: Arc<Shared>,
}

/// What the primary's connections are made of.
pub(crate) struct PrimarySettings {
    /// The sentinels that name the primary.
    pub sentinels: Sentinels,
    /// Auth, TLS and handshake settings of the primary (its address is
    /// filled in from the sentinels' answer).
    pub template: ConnectionInfo,
    /// Timeouts and retries of each connection.
    pub settings: ConnectionManagerConfig,
    /// Connections to open.
    pub connections: usize,
    /// How long asking a server whether it is the primary may take
    /// (connecting to it: three times as long).
    pub connect_timeout: Duration,
}

impl Primary {
    /// Finds the primary and connects to it; with `lazy`, returns at once
    /// and looks for it in the background (calls fail until it is found).
    pub(crate) async fn open(s: PrimarySettings, lazy: bool) -> RedisResult<Primary> {
        let shared = Arc::new(Shared {
            sentinels: s.sentinels,
            template: s.template,
            settings: s.settings,
            connections: s.connections.max(1),
            connect_timeout: s.connect_timeout,
            current: RwLock::new(None),
            following: AtomicBool::new(false),
            watching: AtomicBool::new(false),
            last: Mutex::new(None),
        });
        if lazy {
            suspect(&shared);
        } else {
            let found = shared.discover().await?;
            shared.install(found);
        }
        watch(&shared);
        Ok(Primary { shared })
    }

    /// Sends `cmd` on connection `i` (modulo their number) to the primary.
    pub(crate) async fn query(&self, cmd: &Cmd, i: usize) -> RedisResult<Value> {
        if !self.shared.watching.load(Ordering::Relaxed) {
            // The runtime that ran the watcher is gone: start another.
            watch(&self.shared);
        }
        let Some(current) = self.shared.current() else {
            suspect(&self.shared);
            return Err(RedisError::from((
                ErrorKind::Io,
                "no primary found yet through the sentinels for",
                self.shared.sentinels.master_name().to_owned(),
            )));
        };
        let mut conn = current.conns[i % current.conns.len()].clone();
        cmd.query_async(&mut conn).await
    }

    /// The connections to the current primary (none before one is found).
    pub(crate) fn connections(&self) -> Vec<ConnectionManager> {
        self.shared
            .current()
            .map(|c| c.conns.clone())
            .unwrap_or_default()
    }

    /// A call failed: checks with the sentinels, in the background, whether
    /// the primary moved (at most one check at a time, and not more often
    /// than every 100 ms).
    pub(crate) fn suspect(&self) {
        suspect(&self.shared);
    }
}

/// [`Primary::suspect`]: starts a discovery in the background unless one
/// runs or the last started less than [`MIN_GAP`] ago (with a primary
/// known).
fn suspect(shared: &Arc<Shared>) {
    if shared.following.swap(true, Ordering::AcqRel) {
        return;
    }
    {
        let mut last = shared
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let recent = last.is_some_and(|t| t.elapsed() < MIN_GAP);
        if recent && shared.current().is_some() {
            shared.following.store(false, Ordering::Release);
            return;
        }
        *last = Some(Instant::now());
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        shared.following.store(false, Ordering::Release);
        return;
    };
    runtime.spawn(follow(Arc::downgrade(shared)));
}

/// Starts the watching task, unless it runs.
fn watch(shared: &Arc<Shared>) {
    if shared.watching.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        shared.watching.store(false, Ordering::Release);
        return;
    };
    runtime.spawn(watching(Arc::downgrade(shared)));
}

/// Clears a task's flag (`following`, `watching`) when the task ends,
/// however it ends: its runtime may drop it, and another must then be
/// able to start.
struct Running {
    /// The state the task works for (gone once the pool is dropped).
    shared: Weak<Shared>,
    /// The task's flag in it.
    flag: fn(&Shared) -> &AtomicBool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.shared.upgrade() {
            (self.flag)(&s).store(false, Ordering::Release);
        }
    }
}

/// Every [`WATCH_EVERY`], asks the sentinels where the primary is, and
/// looks for it if they name another address than the current one. Ends
/// when the backend is dropped.
async fn watching(shared: Weak<Shared>) {
    let _running = Running {
        shared: shared.clone(),
        flag: |s| &s.watching,
    };
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(s) = shared.upgrade() else {
            return;
        };
        if let Ok(candidates) = s.sentinels.candidates().await {
            let current = s.current().map(|c| c.addr.clone());
            if current.as_ref() != candidates.first() {
                suspect(&s);
            }
        }
    }
}

/// Looks for the primary until one confirms, then installs it. Ends early
/// if the backend is dropped.
async fn follow(shared: Weak<Shared>) {
    let _running = Running {
        shared: shared.clone(),
        flag: |s| &s.following,
    };
    let mut pause = Duration::from_millis(50);
    loop {
        let Some(s) = shared.upgrade() else {
            return;
        };
        if let Ok(found) = s.discover().await {
            s.install(found);
            return;
        }
        drop(s);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

impl Shared {
    /// The connections to the primary, if one is known.
    fn current(&self) -> Option<Arc<Current>> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Makes `found` the current connections (unless they already are).
    fn install(&self, found: Arc<Current>) {
        let mut current = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &found)) {
            *current = Some(found);
        }
    }

    /// The confirmed primary: the current connections if it did not move,
    /// new ones otherwise.
    async fn discover(&self) -> RedisResult<Arc<Current>> {
        let candidates = self.sentinels.candidates().await?;
        let current = self.current();
        let mut last_error = None;
        for addr in candidates {
            let client = match Client::open(self.info(&addr)) {
                Ok(c) => c,
                Err(e) => {
                    last_error = Some(e);
                    continue;
                }
            };
            match is_primary(&client, self.connect_timeout).await {
                Ok(true) => {}
                Ok(false) => {
                    last_error = Some(RedisError::from((
                        ErrorKind::Io,
                        "the address the sentinels gave is not a primary",
                        format!("{}:{}", addr.0, addr.1),
                    )));
                    continue;
                }
                Err(e) => {
                    last_error = Some(e);
                    continue;
                }
            }
            if let Some(c) = current.as_ref().filter(|c| c.addr == addr) {
                return Ok(c.clone());
            }
            match self.connect(client, addr).await {
                Ok(c) => return Ok(c),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error
            .unwrap_or_else(|| RedisError::from((ErrorKind::Io, "no primary confirmed its role"))))
    }

    /// Opens the connections to the primary at `addr`, each within three
    /// connect timeouts.
    async fn connect(&self, client: Client, addr: Addr) -> RedisResult<Arc<Current>> {
        let mut conns = Vec::with_capacity(self.connections);
        for _ in 0..self.connections {
            let open = ConnectionManager::new_with_config(client.clone(), self.settings.clone());
            match tokio::time::timeout(self.connect_timeout.saturating_mul(3), open).await {
                Ok(c) => conns.push(c?),
                Err(_) => {
                    return Err(RedisError::from((
                        ErrorKind::Io,
                        "cannot connect to the primary in time",
                        format!("{}:{}", addr.0, addr.1),
                    )));
                }
            }
        }
        Ok(Arc::new(Current { addr, conns }))
    }

    /// The connection settings of the primary at `addr`: TLS as the
    /// sentinels use it, the primary's own credentials.
    fn info(&self, (host, port): &Addr) -> ConnectionInfo {
        let addr = match self.template.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.clone(),
                port: *port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.clone(), *port),
        };
        self.template.clone().set_addr(addr)
    }
}

/// The handshake settings of the primary: `auth` is `password` or
/// `user:password`.
pub(crate) fn primary_redis_settings(auth: Option<&str>) -> RedisConnectionInfo {
    let settings = RedisConnectionInfo::default();
    match auth.map(|a| a.split_once(':').unwrap_or(("", a))) {
        Some(("", password)) => settings.set_password(password),
        Some((user, password)) => settings.set_username(user).set_password(password),
        None => settings,
    }
}
