//! The gateway's own HTTP/1.1 client, for every request towards an
//! HTTP/1.1 upstream: the request is written and the response read in the
//! request's own task, on a pooled connection, with no connection task,
//! channel or second copy of the request in between. A request body
//! streams up as the client sends it ([`upload`]); the response body
//! streams from the same connection, which returns to the pool when both
//! have ended. After a `101 Switching Protocols` to a request that asked
//! for an upgrade, the connection becomes a tunnel's.
//!
//! HTTP/2 upstreams go through hyper's client
//! (`connection::send_http2`).
//!
//! Response framing follows RFC 9112 §6.3: no body for `HEAD`, 204 and
//! 304; `Transfer-Encoding` over `Content-Length` (and then the connection
//! is not reused); conflicting lengths are errors (502); interim responses
//! (1xx) are skipped.

pub mod body;
pub mod conn;
pub mod framing;
pub mod head;
pub mod upload;

pub use body::ResponseBody;
pub use conn::Conn;
pub use conn::Stream;

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
