//! Telling HTTP/2 (prior knowledge) from HTTP/1.1 on a new connection: the
//! first bytes are read, within the header timeout, and replayed to the
//! chosen protocol. hyper-util's `auto::Builder` makes the same choice but
//! reads the preface with no time limit: a socket that sends nothing would
//! hold its connection slot for ever.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The HTTP/2 connection preface (RFC 9113 §3.4).
pub(super) const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the first bytes of a connection say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sniffed {
    /// The HTTP/2 preface.
    Http2,
    /// Anything else (HTTP/1.x, or garbage for HTTP/1's parser to reject).
    Http1,
    /// The client closed before sending anything.
    Closed,
}

/// Reads until the bytes tell HTTP/2's preface from anything else. The
/// bytes read are returned to be replayed.
pub async fn sniff<T: AsyncRead + Unpin>(io: &mut T) -> io::Result<(Sniffed, Bytes)> {
    let mut buf = BytesMut::with_capacity(2048);
    loop {
        if io.read_buf(&mut buf).await? == 0 {
            let kind = if buf.is_empty() {
                Sniffed::Closed
            } else {
                Sniffed::Http1
            };
            return Ok((kind, buf.freeze()));
        }
        let n = buf.len().min(H2_PREFACE.len());
        if buf[..n] != H2_PREFACE[..n] {
            return Ok((Sniffed::Http1, buf.freeze()));
        }
        if n == H2_PREFACE.len() {
            return Ok((Sniffed::Http2, buf.freeze()));
        }
    }
}

pin_project! {
    /// An IO object whose first reads return `prefix`.
    #[derive(Debug)]
    pub struct Prefixed<T> {
        prefix: Bytes,
        #[pin]
        io: T,
    }
}

impl<T> Prefixed<T> {
    /// `io`, with `prefix` read first.
    pub fn new(prefix: Bytes, io: T) -> Self {
        Prefixed { prefix, io }
    }
}

impl<T: AsyncRead> AsyncRead for Prefixed<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        this.io.poll_read(cx, buf)
    }
}

impl<T: AsyncWrite> AsyncWrite for Prefixed<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sniffs_and_replays() {
        let (mut a, mut b) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut a, b"GET / HTTP/1.1\r\n")
            .await
            .unwrap();
        let (kind, prefix) = sniff(&mut b).await.unwrap();
        assert_eq!(kind, Sniffed::Http1);
        let mut p = Prefixed::new(prefix, b);
        let mut out = vec![0u8; 16];
        p.read_exact(&mut out).await.unwrap();
        assert_eq!(&out, b"GET / HTTP/1.1\r\n");

        let (mut a, mut b) = tokio::io::duplex(64);
        // The preface in two pieces.
        tokio::io::AsyncWriteExt::write_all(&mut a, &H2_PREFACE[..5])
            .await
            .unwrap();
        let t = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            tokio::io::AsyncWriteExt::write_all(&mut a, &H2_PREFACE[5..])
                .await
                .unwrap();
            a
        });
        let (kind, prefix) = sniff(&mut b).await.unwrap();
        assert_eq!(kind, Sniffed::Http2);
        assert_eq!(&prefix[..], &H2_PREFACE[..]);
        drop(t.await.unwrap());
        let (a, mut b) = tokio::io::duplex(64);
        drop(a);
        assert_eq!(sniff(&mut b).await.unwrap().0, Sniffed::Closed);
    }
}
