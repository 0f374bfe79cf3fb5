//! A few multiplexed connections, shared by every concurrent decision.
//!
//! Single server: [`ConnectionManager`]s (a multiplexed, pipelined
//! connection that reconnects by itself). Sentinel: the same, to the
//! primary the sentinels name, replaced when it moves ([`Primary`]).
//! Cluster: the cluster client's async connection (one multiplexed
//! connection per node, routing by slot, following `MOVED`/`ASK`,
//! refreshing the slot map after failovers).
//! Requests are spread round-robin; each connection carries any number of
//! requests in flight, so a handful serve thousands of concurrent callers.
//! A single server's connections may also hold commands for a short window
//! to write them together ([`Window`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::try_join_all;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::{Client, Cmd, IntoConnectionInfo, RedisResult, Value};

use crate::primary::{Primary, PrimarySettings, primary_redis_settings};
use crate::sentinel::Sentinels;
use crate::stats::RedisStats;
use crate::window::Window;
use crate::{ConfigError, Mode, RedisConfig};

/// The connections, by how Redis is reached.
enum Conns {
    /// One server.
    Single(Vec<ConnectionManager>),
    /// A cluster (each connection reaches every node).
    Cluster(Vec<ClusterConnection>),
    /// The primary the sentinels name.
    Sentinel(Primary),
}

/// The connections of one backend.
pub(crate) struct Pool {
    /// The connections.
    conns: Conns,
    /// Counts the commands sent: the next goes on connection `next % n`.
    next: AtomicUsize,
    /// The pipelining window (single server, when configured).
    window: Option<Window>,
}

/// A client the configuration cannot make.
fn client_error(e: redis::RedisError) -> ConfigError {
    ConfigError::Client(e.to_string())
}

/// The certificates for `rediss://` URLs: `None` to use the system's trust
/// store (or when no URL uses TLS).
#[cfg(feature = "tls")]
fn certificates(config: &RedisConfig) -> Result<Option<redis::TlsCertificates>, ConfigError> {
    if !config.urls.iter().any(|u| u.starts_with("rediss://")) {
        return Ok(None);
    }
    // One crypto provider for the process (another crate may have chosen).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let files = &config.tls;
    if files.ca_file.is_none() && files.client_cert_file.is_none() {
        return Ok(None);
    }
    // Bounded: a path naming a device or an endless pipe is refused, not
    // read until memory runs out.
    let read = |p: &std::path::PathBuf| {
        floodgate_policy::read::read_bounded(p, 4 << 20)
            .map_err(|e| ConfigError::Tls(format!("{}: {e}", p.display())))
    };
    let client_tls = match (&files.client_cert_file, &files.client_key_file) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: read(key)?,
        }),
        _ => None,
    };
    let root_cert = files.ca_file.as_ref().map(read).transpose()?;
    Ok(Some(redis::TlsCertificates {
        client_tls,
        root_cert,
    }))
}

#[cfg(not(feature = "tls"))]
fn certificates(config: &RedisConfig) -> Result<Option<()>, ConfigError> {
    if config.urls.iter().any(|u| u.starts_with("rediss://")) {
        return Err(ConfigError::Tls(
            "rediss:// needs the `tls` feature of floodgate-redis".into(),
        ));
    }
    Ok(None)
}

/// The sockets' settings. `TCP_NODELAY`: a multiplexed connection has
/// requests in flight nearly all the time, and with Nagle's algorithm each
/// small write would wait for the acknowledgement of the previous one.
fn tcp() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

/// A client for `url`, with the certificates of `config`.
fn client(config: &RedisConfig, url: &str) -> Result<Client, ConfigError> {
    let info = url
        .into_connection_info()
        .map_err(client_error)?
        .set_tcp_settings(tcp());
    match certificates(config)? {
        #[cfg(feature = "tls")]
        Some(certs) => Client::build_with_tls(info, certs).map_err(client_error),
        #[cfg(not(feature = "tls"))]
        Some(()) => Client::open(info).map_err(client_error),
        None => Client::open(info).map_err(client_error),
    }
}

/// `config.connections` connections to one server (`lazy`: dialled on
/// first use).
async fn open_single(
    config: &RedisConfig,
    lazy: bool,
    settings: &ConnectionManagerConfig,
) -> Result<Vec<ConnectionManager>, PoolError> {
    let client = client(config, &config.urls[0])?;
    let mut v = Vec::with_capacity(config.connections);
    for _ in 0..config.connections {
        let c = if lazy {
            ConnectionManager::new_lazy_with_config(client.clone(), settings.clone())
                .map_err(client_error)?
        } else {
            ConnectionManager::new_with_config(client.clone(), settings.clone())
                .await
                .map_err(PoolError::Connect)?
        };
        v.push(c);
    }
    Ok(v)
}

/// `config.connections` connections to a cluster (`lazy`: dialled on first
/// use), reaching its nodes as its seed `urls` are reached.
async fn open_cluster(
    config: &RedisConfig,
    lazy: bool,
) -> Result<Vec<ClusterConnection>, PoolError> {
    let builder = ClusterClientBuilder::new(config.urls.iter().map(String::as_str));
    #[cfg(feature = "tls")]
    let builder = match certificates(config)? {
        Some(certs) => builder.certs(certs),
        None => builder,
    };
    #[cfg(not(feature = "tls"))]
    certificates(config)?;
    let client = builder
        .tcp_settings(tcp())
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.timeout)
        .retries(3)
        .min_retry_wait(5)
        .max_retry_wait(config.timeout.as_millis().max(10) as u64)
        .build()
        .map_err(client_error)?;
    let mut v = Vec::with_capacity(config.connections);
    for _ in 0..config.connections {
        let c = if lazy {
            client.get_pending_async_connection_with_config(ClusterConfig::default())
        } else {
            client
                .get_async_connection()
                .await
                .map_err(PoolError::Connect)?
        };
        v.push(c);
    }
    Ok(v)
}

/// Connections to the primary the sentinels at `urls` name for
/// `master_name` (`lazy`: dialled on first use).
async fn open_sentinel(
    config: &RedisConfig,
    master_name: &str,
    lazy: bool,
    settings: ConnectionManagerConfig,
) -> Result<Primary, PoolError> {
    let clients = config
        .urls
        .iter()
        .map(|u| client(config, u))
        .collect::<Result<Vec<_>, _>>()?;
    // The primary is reached as the sentinels are (TLS or not, same
    // certificates), with its own credentials.
    let template = clients
        .first()
        .ok_or(ConfigError::NoUrl)?
        .get_connection_info()
        .clone()
        .set_redis_settings(primary_redis_settings(config.primary_auth.as_deref()));
    let primary = PrimarySettings {
        sentinels: Sentinels::new(clients, master_name, config.connect_timeout),
        template,
        settings,
        connections: config.connections,
        connect_timeout: config.connect_timeout,
    };
    Primary::open(primary, lazy)
        .await
        .map_err(PoolError::Connect)
}

impl Pool {
    /// Opens the connections. With `lazy`, nothing is dialled until the
    /// first request (so a backend can be built while Redis is down).
    pub(crate) async fn open(
        config: &RedisConfig,
        lazy: bool,
        stats: Arc<RedisStats>,
    ) -> Result<Pool, PoolError> {
        let n = config.connections;
        let settings = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.timeout))
            .set_number_of_retries(2)
            .set_min_delay(std::time::Duration::from_millis(10))
            .set_max_delay(config.connect_timeout);
        let conns = match &config.mode {
            Mode::Single => Conns::Single(open_single(config, lazy, &settings).await?),
            Mode::Cluster => Conns::Cluster(open_cluster(config, lazy).await?),
            Mode::Sentinel { master_name } => {
                Conns::Sentinel(open_sentinel(config, master_name, lazy, settings).await?)
            }
        };
        let window = match conns {
            Conns::Single(_) if !config.pipeline_window.is_zero() => Some(Window::new(
                config.pipeline_window,
                config.pipeline_limit,
                n,
                stats,
            )),
            _ => None,
        };
        Ok(Pool {
            conns,
            next: AtomicUsize::new(0),
            window,
        })
    }

    /// Sends one command on the next connection.
    pub(crate) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        match &self.conns {
            Conns::Single(v) => {
                let c = &v[i % v.len()];
                if let Some(w) = &self.window {
                    return w.query(i, c, cmd).await;
                }
                cmd.query_async(&mut c.clone()).await
            }
            Conns::Cluster(v) => {
                let mut c = v[i % v.len()].clone();
                cmd.query_async(&mut c).await
            }
            Conns::Sentinel(p) => p.query(cmd, i).await,
        }
    }

    /// Sends `cmd` (a `PING`) on every connection, at once: `Ok` when each
    /// answers. A connection still holding the failure of an outage (its
    /// reconnection attempts ended before the server came back) returns
    /// that failure once and starts connecting again; it is asked once
    /// more, so that it answers if the server does. The cluster client
    /// reconnects per node by itself: one of its connections is asked.
    pub(crate) async fn query_every(&self, cmd: &Cmd) -> RedisResult<()> {
        /// `cmd` on `c`, asked again once if it fails.
        async fn twice(mut c: ConnectionManager, cmd: &Cmd) -> RedisResult<Value> {
            match cmd.query_async(&mut c).await {
                Ok(v) => Ok(v),
                Err(_) => cmd.query_async(&mut c).await,
            }
        }
        let conns = match &self.conns {
            Conns::Single(v) => v.clone(),
            Conns::Sentinel(p) => p.connections(),
            Conns::Cluster(_) => return self.query(cmd).await.map(|_| ()),
        };
        if conns.is_empty() {
            // No primary found yet: the error says so.
            return self.query(cmd).await.map(|_| ());
        }
        try_join_all(conns.into_iter().map(|c| twice(c, cmd)))
            .await
            .map(|_| ())
    }

    /// A call failed for lack of a server: with Sentinel, checks in the
    /// background whether the primary moved. (The other modes' clients
    /// reconnect and follow failovers by themselves.)
    pub(crate) fn suspect(&self) {
        if let Conns::Sentinel(p) = &self.conns {
            p.suspect();
        }
    }
}

/// Why the connections could not be opened.
#[derive(Debug)]
pub(crate) enum PoolError {
    Config(ConfigError),
    Connect(redis::RedisError),
}

impl From<ConfigError> for PoolError {
    fn from(e: ConfigError) -> Self {
        PoolError::Config(e)
    }
}
