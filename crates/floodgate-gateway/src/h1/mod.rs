//! The gateway's own HTTP/1.1 client, for the requests that carry no body
//! and ask for no upgrade (most of an API's traffic): the request head is
//! written and the response read in the request's own task, on a pooled
//! connection, with no connection task, channel or second copy of the
//! request in between. The response body streams from the same
//! connection, which returns to the pool when the body ends.
//!
//! Requests with a body, upgrades and HTTP/2 upstreams go through hyper's
//! client ([`connect`](crate::connect)).
//!
//! Response framing follows RFC 9112 §6.3: no body for `HEAD`, 204 and
//! 304; `Transfer-Encoding` over `Content-Length` (and then the connection
//! is not reused); conflicting lengths are errors (502); interim responses
//! (1xx) are skipped.

pub mod body;
pub mod chunked;
pub mod conn;
pub mod head;
pub mod stream;

use std::io;

pub use body::ResponseBody;
pub use conn::Conn;
pub use stream::Stream;

/// A response head or body the upstream framed wrongly.
#[derive(Debug, thiserror::Error)]
pub enum FramingError {
    /// Not an HTTP/1.x response head.
    #[error("malformed response head: {0}")]
    Head(httparse::Error),
    /// The head did not end within [`head::MAX_HEAD_BYTES`].
    #[error("response head larger than {} bytes", head::MAX_HEAD_BYTES)]
    HeadTooLarge,
    /// A status code outside 100–999.
    #[error("invalid status code {0}")]
    Status(u16),
    /// `101 Switching Protocols` to a request that asked for no upgrade.
    #[error("101 Switching Protocols without an upgrade asked for")]
    UnaskedUpgrade,
    /// A field name that is not a token.
    #[error("invalid field name in the response head")]
    FieldName,
    /// A field value with forbidden bytes.
    #[error("invalid field value in the response head")]
    FieldValue,
    /// A `Content-Length` that is not one decimal number.
    #[error("invalid or conflicting Content-Length")]
    ContentLength,
    /// A chunked body that breaks the coding.
    #[error("chunked body: {0}")]
    Chunk(&'static str),
}

/// Why an exchange on an upstream HTTP/1.1 connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The request head could not be written whole (so the upstream did
    /// not act on it).
    #[error("writing the request: {0}")]
    Write(io::Error),
    /// The connection closed (or was reset) before any byte of a response.
    #[error("the connection closed before a response")]
    Closed,
    /// Reading failed mid-response.
    #[error("reading the response: {0}")]
    Read(io::Error),
    /// The connection closed mid-response.
    #[error("the connection closed mid-response")]
    Incomplete,
    /// The response was malformed.
    #[error(transparent)]
    Framing(#[from] FramingError),
}

impl ExchangeError {
    /// Whether the request can be sent again on another connection: it
    /// was not written whole, or (for an idempotent method, RFC 9110
    /// §9.2.2) the connection closed before answering.
    pub fn may_retry(&self, method: &http::Method) -> bool {
        use http::Method;
        match self {
            ExchangeError::Write(_) => true,
            ExchangeError::Closed => matches!(
                *method,
                Method::GET
                    | Method::HEAD
                    | Method::OPTIONS
                    | Method::TRACE
                    | Method::PUT
                    | Method::DELETE
            ),
            _ => false,
        }
    }
}
