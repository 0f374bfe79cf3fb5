//! The send timeout of a connection's socket (nginx's `send_timeout`): a
//! client that accepts nothing written to it for the timeout — its socket
//! unread, its TCP window closed — has its connection failed, and with it
//! every response it held. The timer is armed only once a write waits; a
//! write that completes at once touches no timer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `io` whose writes fail with [`io::ErrorKind::TimedOut`] once they have
/// waited `timeout` without progress.
pub(super) struct SendTimed<I> {
    io: I,
    timeout: Duration,
    // Made at the first wait (boxed: hyper wants its IO `Unpin`), armed
    // while a write waits, reset by the next wait.
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
    expired: bool,
}

impl<I> SendTimed<I> {
    /// `io` under `timeout` (zero: no timeout).
    pub(super) fn new(io: I, timeout: Duration) -> Self {
        SendTimed {
            io,
            timeout,
            timer: None,
            armed: false,
            expired: false,
        }
    }

    /// Passes on what a write returned: progress disarms the timer; a
    /// wait arms it (the connection's task is woken when it expires) and,
    /// once it has expired, fails.
    fn timed<T>(&mut self, cx: &mut Context<'_>, out: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if out.is_ready() {
            self.armed = false;
            return out;
        }
        if self.timeout.is_zero() {
            return out;
        }
        if !self.armed {
            self.armed = true;
            let deadline = Instant::now() + self.timeout;
            match &mut self.timer {
                Some(t) => t.as_mut().reset(deadline),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        let expired = self
            .timer
            .as_mut()
            .is_some_and(|t| t.as_mut().poll(cx).is_ready());
        if expired {
            // Counted once: the writes that follow fail at once.
            if !std::mem::replace(&mut self.expired, true) {
                count_timeout("connection");
            }
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client accepted nothing written to it within the send timeout",
            )));
        }
        out
    }
}

/// Counts a send timeout in `floodgate_send_timeouts_total{kind}`: a
/// `connection` closed, or an HTTP/2 `stream` reset. Rare: the counter is
/// looked up when it happens, not carried by every connection.
pub(super) fn count_timeout(kind: &'static str) {
    metrics::counter!("floodgate_send_timeouts_total", "kind" => kind).increment(1);
}

impl<I: AsyncRead + Unpin> AsyncRead for SendTimed<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for SendTimed<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let out = Pin::new(&mut self.io).poll_write(cx, buf);
        self.timed(cx, out)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let out = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.timed(cx, out)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let out = Pin::new(&mut self.io).poll_flush(cx);
        self.timed(cx, out)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let out = Pin::new(&mut self.io).poll_shutdown(cx);
        self.timed(cx, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A peer that reads nothing: writes fill the pipe, then wait until
    /// the timeout fails them (the clock paused: it moves only to the
    /// next timer).
    #[tokio::test(start_paused = true)]
    async fn a_write_that_waits_past_the_timeout_fails() {
        let timeout = Duration::from_secs(60);
        let (near, _far) = tokio::io::duplex(1024);
        let mut io = SendTimed::new(near, timeout);
        io.write_all(&[7; 1024]).await.expect("room for it");
        let started = Instant::now();
        let err = io.write_all(&[7; 512]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), timeout);
    }

    /// A peer that reads, however slowly, keeps the writes going: each
    /// bit of progress starts the wait again.
    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_is_not_cut() {
        let timeout = Duration::from_secs(60);
        let (near, mut far) = tokio::io::duplex(1024);
        let mut io = SendTimed::new(near, timeout);
        let reader = tokio::spawn(async move {
            let mut chunk = [0; 512];
            let mut read = 0;
            loop {
                tokio::time::sleep(timeout / 2).await;
                match far.read(&mut chunk).await.unwrap() {
                    0 => return read,
                    n => read += n,
                }
            }
        });
        let started = Instant::now();
        for _ in 0..8 {
            io.write_all(&[7; 512])
                .await
                .expect("a reading peer takes it");
        }
        drop(io);
        assert_eq!(reader.await.unwrap(), 8 * 512);
        assert!(
            started.elapsed() > timeout * 2,
            "longer than the timeout in all"
        );
    }

    /// Writes that complete at once make no timer.
    #[tokio::test]
    async fn writes_that_complete_make_no_timer() {
        let (near, _far) = tokio::io::duplex(1 << 16);
        let mut io = SendTimed::new(near, Duration::from_secs(60));
        io.write_all(&[7; 4096]).await.unwrap();
        io.flush().await.unwrap();
        assert!(io.timer.is_none());
    }
}
