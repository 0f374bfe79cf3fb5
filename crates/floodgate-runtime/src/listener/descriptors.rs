//! The process's file descriptors, the resource a connection flood
//! exhausts first: the soft limit raised to the hard one, the number of
//! client connections that leaves room for (so a listener stops accepting
//! before they run out), and telling an `accept` that failed for want of
//! descriptors (or kernel memory) from one that failed for its own
//! connection.

use std::io;

/// Descriptors kept for everything but client connections and their
/// upstream connections: listeners, the admin listener's connections
/// ([`ADMIN_CONNECTIONS`](super::ADMIN_CONNECTIONS)), the runtime's own,
/// Redis connections, configuration and certificate files.
pub const RESERVE: u64 = 64;

/// The soft limit on open files (`ulimit -n`), raised to the hard limit
/// first if it is lower. `None` when it cannot be read.
pub fn raise_limit() -> Option<u64> {
    let (before, _) = rlimit::Resource::NOFILE.get().ok()?;
    let limit = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(before);
    if limit > before {
        tracing::debug!(from = before, to = limit, "raised the open files limit");
    }
    Some(limit)
}

/// How many client connections `limit` open files leave room for, at
/// `per_connection` descriptors each (the gateway's: the client's and an
/// upstream connection), after [`RESERVE`]; at least one.
pub fn connection_budget(limit: u64, per_connection: u64) -> usize {
    let budget = limit.saturating_sub(RESERVE) / per_connection.max(1);
    usize::try_from(budget).unwrap_or(usize::MAX).max(1)
}

/// The connections of a listener when its settings give no cap.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// The connections of each of the `what` listeners: `configured` (none:
/// [`DEFAULT_MAX_CONNECTIONS`]), lowered to what the open files limit
/// (raised to its hard limit first) leaves room for at `per_connection`
/// descriptors each. A cap the settings gave is lowered with a warning;
/// the default follows the limit, said at INFO.
pub fn fit_max_connections(what: &str, configured: Option<usize>, per_connection: u64) -> usize {
    let cap = configured.unwrap_or(DEFAULT_MAX_CONNECTIONS);
    let Some(files) = raise_limit() else {
        return cap;
    };
    let budget = connection_budget(files, per_connection);
    if budget < cap && configured.is_none() {
        tracing::info!(
            listeners = what,
            max_connections = budget,
            open_files_limit = files,
            "max_connections: what the open files limit leaves room for"
        );
    } else if budget < cap {
        tracing::warn!(
            listeners = what,
            max_connections = cap,
            open_files_limit = files,
            lowered_to = budget,
            "max_connections is more than the open files limit allows: lowered; raise the \
             limit (ulimit -n, LimitNOFILE) to use the setting"
        );
    }
    budget.min(cap)
}

/// Whether `accept` failed because the process (or the system) is out of
/// descriptors or memory — a condition that lasts until something is
/// closed — rather than because of the connection being accepted.
pub fn exhausted(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Whether `accept` failed for the connection being accepted only (it
/// went away first): the next one can be accepted at once.
pub fn connection_only(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || matches!(e.raw_os_error(), Some(libc::EPROTO | libc::EPERM))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_and_errors() {
        assert_eq!(connection_budget(256, 2), 96);
        assert_eq!(connection_budget(256, 1), 192);
        assert_eq!(connection_budget(1_048_576, 2), 524_256);
        assert_eq!(connection_budget(10, 2), 1);
        assert!(raise_limit().is_some_and(|l| l >= 16));
        assert!(exhausted(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(exhausted(&io::Error::from_raw_os_error(libc::ENFILE)));
        assert!(!exhausted(&io::Error::from_raw_os_error(
            libc::ECONNABORTED
        )));
        assert!(connection_only(&io::Error::from_raw_os_error(
            libc::ECONNABORTED
        )));
        assert!(!connection_only(&io::Error::from_raw_os_error(
            libc::EMFILE
        )));
    }
}
