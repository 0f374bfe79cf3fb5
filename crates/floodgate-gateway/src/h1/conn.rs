//! One upstream HTTP/1.1 connection of the gateway's own client: its
//! stream, read buffer and write buffer (kept across requests: no
//! allocation per request once warm).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use http::HeaderName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;

use super::head::{self, Head, Parsed};
use super::upload::Upload;
use crate::connection::ExchangeError;

/// An upstream connection's byte stream: TCP (`http://`), or TLS over TCP
/// (`https://`; boxed: the TLS state is large, and moved with the
/// connection in and out of the pool).
pub type Stream = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// Read buffer space reserved at a time.
pub(crate) const READ_CHUNK: usize = 8 * 1024;

/// An upstream connection, idle between two exchanges.
#[derive(Debug)]
pub struct Conn {
    /// The socket (plain or TLS).
    pub(crate) stream: Stream,
    /// Bytes read and not consumed yet.
    pub(crate) buf: BytesMut,
    out: Vec<u8>,
    /// The field names of the last response head (see
    /// [`head::parse_response`]).
    names: Vec<HeaderName>,
}

impl Conn {
    /// A new connection on `stream`.
    pub fn new(stream: Stream) -> Self {
        Conn {
            stream,
            buf: BytesMut::with_capacity(READ_CHUNK),
            out: Vec::with_capacity(1024),
            names: Vec::new(),
        }
    }

    /// Whether an idle connection can carry a request: nothing arrived
    /// while it was idle (a close, a stray byte, a TLS alert would have).
    /// No system call unless the runtime saw the socket become readable;
    /// then one non-blocking read, through TLS if any (so that a TLS
    /// record that carries no data, a session ticket, does not count).
    pub fn is_usable(&mut self) -> bool {
        let tcp = match &self.stream {
            Either::Left(tcp) => tcp,
            Either::Right(tls) => tls.get_ref().0,
        };
        let mut cx = Context::from_waker(Waker::noop());
        if tcp.poll_read_ready(&mut cx).is_pending() {
            return true;
        }
        let mut probe = [0u8; 1];
        let mut probe = ReadBuf::new(&mut probe);
        Pin::new(&mut self.stream)
            .poll_read(&mut cx, &mut probe)
            .is_pending()
    }

    /// Writes a request (its body, if any, streamed from `upload`) and
    /// reads the response head; the response body (if any) follows in the
    /// read buffer and on the stream, and what is left of the upload stays
    /// in `upload`. A `101` is a final response when the request asks for
    /// an `upgrade`.
    pub async fn request(
        &mut self,
        parts: &http::request::Parts,
        mut upload: Option<&mut Upload>,
        upgrade: bool,
    ) -> Result<Head, ExchangeError> {
        self.out.clear();
        let chunked = upload.as_ref().is_some_and(|u| u.chunked);
        head::encode_request(&mut self.out, parts, chunked);
        self.stream
            .write_all(&self.out)
            .await
            .map_err(ExchangeError::Write)?;
        if let Either::Right(_) = self.stream {
            self.stream.flush().await.map_err(ExchangeError::Write)?;
        }
        let mut answered = false;
        loop {
            if !self.buf.is_empty() {
                match head::parse_response(&mut self.buf, &parts.method, upgrade, &mut self.names)?
                {
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
            let read = match upload.as_deref_mut() {
                None => self.stream.read_buf(&mut self.buf).await,
                // The body is written while the head is awaited.
                Some(u) => {
                    std::future::poll_fn(|cx| {
                        if let Poll::Ready(Err(e)) = self.poll_upload(u, cx) {
                            return Poll::Ready(Err(e));
                        }
                        std::pin::pin!(self.stream.read_buf(&mut self.buf))
                            .poll(cx)
                            .map(Ok)
                    })
                    .await?
                }
            };
            match read {
                Ok(0) if nothing_yet => return Err(ExchangeError::Closed),
                Ok(0) => return Err(ExchangeError::Incomplete),
                Ok(_) => {}
                Err(e) if nothing_yet && e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(ExchangeError::Reset);
                }
                Err(e) => return Err(ExchangeError::Read(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (Conn, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (Conn::new(Either::Left(client)), server)
    }

    async fn readable(conn: &Conn) {
        if let Either::Left(s) = &conn.stream {
            s.readable().await.unwrap();
        }
    }

    #[tokio::test]
    async fn an_idle_connection_is_usable_until_something_arrives() {
        let (mut conn, mut server) = pair().await;
        assert!(conn.is_usable());
        // Readable once: a stray byte, then the probe read it.
        server.write_all(b"x").await.unwrap();
        readable(&conn).await;
        assert!(!conn.is_usable());

        let (mut conn, server) = pair().await;
        drop(server);
        readable(&conn).await;
        assert!(!conn.is_usable(), "closed by the upstream");
    }

    #[tokio::test]
    async fn a_request_gets_its_response_head_past_interim_ones() {
        let (mut conn, mut server) = pair().await;
        let answer = tokio::spawn(async move {
            let mut got = vec![0u8; 1024];
            let n = server.read(&mut got).await.unwrap();
            got.truncate(n);
            server
                .write_all(
                    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
                )
                .await
                .unwrap();
            (got, server)
        });
        let (parts, ()) = http::Request::get("/x").body(()).unwrap().into_parts();
        let head = conn.request(&parts, None, false).await.unwrap();
        assert_eq!(head.parts.status, 200);
        assert_eq!(&conn.buf[..], b"ok", "the body stays in the buffer");
        let (got, server) = answer.await.unwrap();
        assert_eq!(got, b"GET /x HTTP/1.1\r\n\r\n");
        // Closed before any byte of the next response: `Closed`.
        drop(server);
        conn.buf.clear();
        let err = conn.request(&parts, None, false).await.unwrap_err();
        assert!(
            matches!(
                err,
                ExchangeError::Closed | ExchangeError::Reset | ExchangeError::Write(_)
            ),
            "{err:?}"
        );
        assert!(err.may_retry(&http::Method::GET));
        assert!(!ExchangeError::Closed.may_retry(&http::Method::POST));
        assert!(ExchangeError::Reset.may_retry(&http::Method::GET));
    }
}
