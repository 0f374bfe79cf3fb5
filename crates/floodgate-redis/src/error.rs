//! Errors: configuration mistakes, limits Redis cannot decide exactly, and
//! the mapping of the client's errors onto [`BackendError`].

use std::time::Duration;

use floodgate_policy::BackendError;
use redis::{ErrorKind, RedisError, ServerErrorKind};
use thiserror::Error;

/// A [`RedisConfig`](crate::RedisConfig) that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// No server address was given.
    #[error("no Redis URL given")]
    NoUrl,
    /// An address that is neither `host:port` nor a `redis://` style URL.
    #[error("invalid Redis URL {url:?}: {reason}")]
    Url {
        /// The address as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Sentinel mode without the name of the master to ask for.
    #[error("Sentinel mode needs the name of the master to ask the sentinels for")]
    NoMasterName,
    /// A Sentinel master name that holds whitespace, control characters or
    /// commas, or is too long.
    #[error("invalid Sentinel master name {0:?}")]
    MasterName(String),
    /// A key prefix with `{` or `}`: it would change the keys' hash slot.
    #[error("invalid key prefix {0:?}: it must not contain '{{' or '}}'")]
    Prefix(String),
    /// A setting that must be positive is zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// A pipelining window as long as the timeout or longer: every decision
    /// would time out waiting for its pipeline.
    #[error("pipeline window {window:?} must be shorter than the timeout {timeout:?}")]
    PipelineWindow {
        /// The window.
        window: Duration,
        /// The timeout.
        timeout: Duration,
    },
    /// TLS is misconfigured (or not compiled in: the `tls` feature).
    #[error("TLS: {0}")]
    Tls(String),
    /// The client refused the settings.
    #[error("Redis client: {0}")]
    Client(String),
}

/// A limit whose parameters cannot be represented exactly by the Redis
/// scripts (which compute in whole microseconds with integers below 2^53),
/// so deciding it in Redis could differ from the in-memory algorithm.
///
/// ```
/// use floodgate::algorithms::{AnyLimit, FixedWindow};
/// use std::time::Duration;
///
/// let odd = AnyLimit::from(FixedWindow::new(10, Duration::from_nanos(1_500)).unwrap());
/// let err = floodgate_redis::validate(&odd).unwrap_err();
/// assert!(err.to_string().contains("whole microseconds"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("limit cannot be decided exactly in Redis: {reason}")]
pub struct UnsupportedLimit {
    reason: String,
}

impl UnsupportedLimit {
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        UnsupportedLimit {
            reason: reason.into(),
        }
    }

    /// Why the limit is rejected.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// A synchronisation mode a limit cannot be decided in (see
/// [`supports_mode`](crate::supports_mode)).
///
/// ```
/// use floodgate::algorithms::{AnyLimit, SlidingLog};
/// use floodgate_policy::SyncMode;
/// use std::time::Duration;
///
/// let log = AnyLimit::from(SlidingLog::new(10, Duration::from_secs(1)).unwrap());
/// let err = floodgate_redis::supports_mode(&log, SyncMode::parse("lease").unwrap()).unwrap_err();
/// assert!(err.to_string().starts_with("sync mode lease does not apply to a sliding log"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{reason}")]
pub struct UnsupportedMode {
    reason: String,
}

impl UnsupportedMode {
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        UnsupportedMode {
            reason: reason.into(),
        }
    }
}

impl From<UnsupportedLimit> for BackendError {
    fn from(e: UnsupportedLimit) -> Self {
        BackendError::Protocol(e.to_string())
    }
}

/// Maps a client error: unreachable or overloaded servers, broken
/// connections and failures inside the client (a cluster connection's task
/// gone, a reply stream it could not parse, a rejected authentication) are
/// [`BackendError::Unavailable`]; client-side I/O timeouts
/// [`BackendError::Timeout`]; what a retry cannot change (a script error,
/// a reply of an unexpected type, an invalid client configuration)
/// [`BackendError::Protocol`].
///
/// The difference matters beyond the message: an unavailable Redis makes
/// the connection pool reconnect, counts towards the breaker, and a
/// permit's release that meets it is queued and sent again later, whereas
/// a protocol error's release is reported and dropped.
pub(crate) fn map_error(e: &RedisError, timeout: Duration) -> BackendError {
    if e.is_timeout() {
        return BackendError::Timeout(timeout);
    }
    let unavailable = match e.kind() {
        ErrorKind::Io
        | ErrorKind::ClusterConnectionNotFound
        // The connection must be re-established (its stream is out of
        // step, or the server no longer accepts the credentials).
        | ErrorKind::Parse
        | ErrorKind::AuthenticationFailed
        // Raised inside the client before or while sending: a cluster
        // request whose connection task failed, a missing slot, a failed
        // TLS handshake. Floodgate never sends an empty command.
        | ErrorKind::Client
        | ErrorKind::MasterNameNotFoundBySentinel
        | ErrorKind::NoValidReplicasFoundBySentinel => true,
        ErrorKind::Server(kind) => matches!(
            kind,
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask
        ),
        _ => false,
    };
    // BUSY (a script runs too long) and OOM are the server's state, not ours.
    let busy = matches!(e.code(), Some("BUSY" | "OOM" | "NOREPLICAS" | "LOADING"));
    if unavailable || busy || e.is_connection_dropped() || e.is_connection_refusal() {
        BackendError::Unavailable(e.to_string())
    } else {
        BackendError::Protocol(e.to_string())
    }
}

/// Whether `e` is Redis refusing a write because its memory is full
/// (`-OOM command not allowed when used memory > 'maxmemory'`): the server
/// answers, reads work, only new writes are refused.
pub(crate) fn is_memory_full(e: &BackendError) -> bool {
    matches!(e, BackendError::Unavailable(m) if m.contains("OOM"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(e: RedisError) -> BackendError {
        map_error(&e, Duration::from_millis(50))
    }

    fn unavailable(e: RedisError) -> bool {
        matches!(mapped(e), BackendError::Unavailable(_))
    }

    fn protocol(e: RedisError) -> bool {
        matches!(mapped(e), BackendError::Protocol(_))
    }

    #[test]
    fn failures_a_retry_can_cure_are_unavailability() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(unavailable(RedisError::from(refused)));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(unavailable(RedisError::from(reset)));
        for (kind, text) in [
            (
                ErrorKind::Client,
                "request wasn't handled due to internal failure",
            ),
            (ErrorKind::Parse, "invalid reply"),
            (ErrorKind::AuthenticationFailed, "WRONGPASS"),
            (ErrorKind::ClusterConnectionNotFound, "no connection"),
        ] {
            assert!(unavailable(RedisError::from((kind, text))), "{text}");
        }
        let loading =
            RedisError::from((ErrorKind::Server(ServerErrorKind::BusyLoading), "LOADING"));
        assert!(unavailable(loading));
    }

    #[test]
    fn timeouts_name_the_configured_timeout() {
        let timed_out = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(
            mapped(timed_out),
            BackendError::Timeout(Duration::from_millis(50))
        );
    }

    #[test]
    fn what_no_retry_changes_is_a_protocol_error() {
        for (kind, text) in [
            (ErrorKind::UnexpectedReturnType, "not an array"),
            (ErrorKind::InvalidClientConfig, "bad URL"),
            (
                ErrorKind::Server(ServerErrorKind::ResponseError),
                "ERR Error running script",
            ),
            (ErrorKind::Server(ServerErrorKind::CrossSlot), "CROSSSLOT"),
        ] {
            assert!(protocol(RedisError::from((kind, text))), "{text}");
        }
    }
}
