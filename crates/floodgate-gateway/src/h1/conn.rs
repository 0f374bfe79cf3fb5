//! One upstream HTTP/1.1 connection of the gateway's own client: its
//! stream, read buffer and write buffer (kept across requests: no
//! allocation per request once warm).

use std::io;

use bytes::BytesMut;
use http::{HeaderMap, Method, Uri};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::head::{self, Head, Parsed};
use super::{ExchangeError, Stream};

/// Read buffer space reserved at a time.
pub(crate) const READ_CHUNK: usize = 8 * 1024;

/// An upstream connection, idle between two exchanges.
#[derive(Debug)]
pub struct Conn {
    pub(crate) stream: Stream,
    pub(crate) buf: BytesMut,
    out: Vec<u8>,
}

impl Conn {
    /// A new connection on `stream`.
    pub fn new(stream: Stream) -> Self {
        Conn {
            stream,
            buf: BytesMut::with_capacity(READ_CHUNK),
            out: Vec::with_capacity(1024),
        }
    }

    /// Whether an idle connection can carry a request: nothing arrived
    /// while it was idle (a close would have). One non-blocking read at
    /// most, only when the runtime saw the socket become readable.
    pub fn is_usable(&self) -> bool {
        if self.stream.is_quiet() {
            return true;
        }
        match &self.stream {
            Stream::Tcp(tcp) => {
                let mut probe = [0u8; 1];
                matches!(tcp.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
            // Readable TLS: a close_notify or an alert; not for reuse.
            Stream::Tls(_) => false,
        }
    }

    /// Writes a request without a body and reads the response head; the
    /// body (if any) follows in the read buffer and on the stream.
    pub async fn request(
        &mut self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<Head, ExchangeError> {
        self.out.clear();
        head::encode_request(&mut self.out, method, uri, headers);
        self.stream
            .write_all(&self.out)
            .await
            .map_err(ExchangeError::Write)?;
        if let Stream::Tls(_) = self.stream {
            self.stream.flush().await.map_err(ExchangeError::Write)?;
        }
        let mut answered = false;
        loop {
            if !self.buf.is_empty() {
                match head::parse_response(&mut self.buf, method)? {
                    Parsed::Final(head) => return Ok(head),
                    Parsed::Interim => {
                        answered = true;
                        continue;
                    }
                    Parsed::Partial => {}
                }
            }
            if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
                self.buf.reserve(READ_CHUNK);
            }
            let nothing_yet = !answered && self.buf.is_empty();
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) if nothing_yet => return Err(ExchangeError::Closed),
                Ok(0) => return Err(ExchangeError::Incomplete),
                Ok(_) => {}
                Err(e) if nothing_yet && e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(ExchangeError::Closed);
                }
                Err(e) => return Err(ExchangeError::Read(e)),
            }
        }
    }
}
