//! The upstream's failures by kind
//! (`floodgate_gateway_upstream_errors_total{kind}`): each exchange that
//! brought the client a 502 or 504 instead of the upstream's response,
//! counted once under what broke, as far as the forwarding code can tell
//! it. Handles registered once, when the proxy is built: a failure costs
//! one atomic increment.

use std::io;

use crate::connect::ConnectError;
use crate::connection::ExchangeError;
use crate::upload::UploadError;

/// What broke in an exchange with the upstream (its `kind` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpstreamFailure {
    /// The upstream refused the connection (nothing listens there).
    ConnectRefused,
    /// No connection within `connect_timeout` (TLS handshake included).
    ConnectTimeout,
    /// Another failure to connect: name resolution, no route to the host.
    ConnectError,
    /// The TLS handshake failed (certificate, server name, protocol).
    Tls,
    /// The connection was reset (or aborted) by the upstream.
    Reset,
    /// The connection closed before the response was whole.
    Closed,
    /// The upstream broke HTTP: a malformed response, a failed HTTP/2
    /// handshake or stream.
    Protocol,
    /// No response head within `response_timeout`.
    ResponseTimeout,
    /// Another error reading or writing the connection.
    Io,
}

impl UpstreamFailure {
    /// Every kind, in the order of [`UpstreamFailure::label`]'s values.
    pub(crate) const ALL: [UpstreamFailure; 9] = [
        UpstreamFailure::ConnectRefused,
        UpstreamFailure::ConnectTimeout,
        UpstreamFailure::ConnectError,
        UpstreamFailure::Tls,
        UpstreamFailure::Reset,
        UpstreamFailure::Closed,
        UpstreamFailure::Protocol,
        UpstreamFailure::ResponseTimeout,
        UpstreamFailure::Io,
    ];

    /// Its `kind` label.
    pub(crate) const fn label(self) -> &'static str {
        match self {
            UpstreamFailure::ConnectRefused => "connect_refused",
            UpstreamFailure::ConnectTimeout => "connect_timeout",
            UpstreamFailure::ConnectError => "connect_error",
            UpstreamFailure::Tls => "tls",
            UpstreamFailure::Reset => "reset",
            UpstreamFailure::Closed => "closed",
            UpstreamFailure::Protocol => "protocol",
            UpstreamFailure::ResponseTimeout => "response_timeout",
            UpstreamFailure::Io => "io",
        }
    }

    /// Whether the client is answered 504 (a timeout) rather than 502.
    pub(crate) const fn is_timeout(self) -> bool {
        matches!(
            self,
            UpstreamFailure::ConnectTimeout | UpstreamFailure::ResponseTimeout
        )
    }

    /// The kind of `e`.
    pub(crate) fn of(e: &ExchangeError) -> Self {
        match e {
            ExchangeError::Connect(c) => Self::of_connect(c),
            ExchangeError::Write(e) | ExchangeError::Read(e) => Self::of_io(e),
            ExchangeError::Reset => UpstreamFailure::Reset,
            ExchangeError::Closed | ExchangeError::Incomplete => UpstreamFailure::Closed,
            ExchangeError::Framing(_) => UpstreamFailure::Protocol,
            ExchangeError::Hyper(h) => Self::of_hyper(h),
            ExchangeError::Upload(UploadError::Client(_) | UploadError::TooLarge) => {
                UpstreamFailure::Io
            }
        }
    }

    fn of_connect(e: &ConnectError) -> Self {
        match e {
            ConnectError::Tcp(_, e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                UpstreamFailure::ConnectRefused
            }
            ConnectError::Tcp(..) => UpstreamFailure::ConnectError,
            ConnectError::Timeout(_) => UpstreamFailure::ConnectTimeout,
            ConnectError::Tls(..) | ConnectError::ServerName(_) => UpstreamFailure::Tls,
            ConnectError::Handshake(_, h) => Self::of_hyper(h),
        }
    }

    fn of_io(e: &io::Error) -> Self {
        use io::ErrorKind::*;
        match e.kind() {
            ConnectionReset | ConnectionAborted | BrokenPipe => UpstreamFailure::Reset,
            UnexpectedEof => UpstreamFailure::Closed,
            _ => UpstreamFailure::Io,
        }
    }

    /// An HTTP/2 connection's failure: its I/O error's kind when it has
    /// one, else the protocol's.
    fn of_hyper(e: &hyper::Error) -> Self {
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            if let Some(io) = s.downcast_ref::<io::Error>() {
                return Self::of_io(io);
            }
            source = s.source();
        }
        if e.is_incomplete_message() || e.is_closed() {
            UpstreamFailure::Closed
        } else {
            UpstreamFailure::Protocol
        }
    }
}

/// The counters, one per kind.
pub(crate) struct UpstreamErrors {
    counters: [metrics::Counter; UpstreamFailure::ALL.len()],
}

/// The name of the metric.
const UPSTREAM_ERRORS: &str = "floodgate_gateway_upstream_errors_total";

impl UpstreamErrors {
    /// Handles from the installed recorder.
    pub(crate) fn new() -> Self {
        metrics::describe_counter!(
            UPSTREAM_ERRORS,
            "Exchanges with the upstream that brought no response (answered 502 or 504), by what broke."
        );
        UpstreamErrors {
            counters: UpstreamFailure::ALL
                .map(|k| metrics::counter!(UPSTREAM_ERRORS, "kind" => k.label())),
        }
    }

    /// Counts one failure of `kind`.
    #[inline]
    pub(crate) fn count(&self, kind: UpstreamFailure) {
        self.counters[kind as usize].increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: io::ErrorKind) -> io::Error {
        io::Error::from(kind)
    }

    #[test]
    fn the_kinds_of_exchange_errors() {
        use UpstreamFailure as K;
        let tcp = |k| ExchangeError::Connect(ConnectError::Tcp("u".into(), io(k)));
        let cases = [
            (tcp(io::ErrorKind::ConnectionRefused), K::ConnectRefused),
            (tcp(io::ErrorKind::HostUnreachable), K::ConnectError),
            (
                ExchangeError::Connect(ConnectError::Timeout("u".into())),
                K::ConnectTimeout,
            ),
            (
                ExchangeError::Connect(ConnectError::Tls(
                    "u".into(),
                    io(io::ErrorKind::InvalidData),
                )),
                K::Tls,
            ),
            (
                ExchangeError::Connect(ConnectError::ServerName("u".into())),
                K::Tls,
            ),
            (ExchangeError::Reset, K::Reset),
            (
                ExchangeError::Read(io(io::ErrorKind::ConnectionReset)),
                K::Reset,
            ),
            (
                ExchangeError::Write(io(io::ErrorKind::BrokenPipe)),
                K::Reset,
            ),
            (ExchangeError::Closed, K::Closed),
            (ExchangeError::Incomplete, K::Closed),
            (ExchangeError::Read(io(io::ErrorKind::Other)), K::Io),
        ];
        for (e, kind) in cases {
            assert_eq!(UpstreamFailure::of(&e), kind, "{e:?}");
        }
    }

    #[test]
    fn labels_are_in_the_order_of_the_kinds() {
        for (i, k) in UpstreamFailure::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i, "{}", k.label());
        }
        assert!(UpstreamFailure::ResponseTimeout.is_timeout());
        assert!(!UpstreamFailure::Reset.is_timeout());
    }
}
