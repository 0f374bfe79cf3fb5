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
pub struct SendTimed<I> {
    io: I,
    timeout: Duration,
    // Made at the first wait (boxed: hyper wants its IO `Unpin`), armed
    // while a write waits, reset by the next wait.
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl<I> SendTimed<I> {
    /// `io` under `timeout` (zero: no timeout).
    pub fn new(io: I, timeout: Duration) -> Self {
        SendTimed {
            io,
            timeout,
            timer: None,
            armed: false,
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
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client accepted nothing written to it within the send timeout",
            )));
        }
        out
    }
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
    use tokio::io::AsyncWriteExt;

    /// A peer that reads nothing: writes fill the pipe, then wait until
    /// the timeout fails them; a peer that reads keeps them going.
    #[tokio::test]
    async fn a_write_that_waits_past_the_timeout_fails() {
        let (near, far) = tokio::io::duplex(1024);
        let mut io = SendTimed::new(near, Duration::from_millis(100));
        let chunk = [7u8; 512];
        let started = std::time::Instant::now();
        let err = loop {
            if let Err(e) = io.write_all(&chunk).await {
                break e;
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(100));

        let (near, mut far2) = tokio::io::duplex(1024);
        let mut io = SendTimed::new(near, Duration::from_millis(100));
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut far2, &mut sink)
                .await
                .map(|_| sink.len())
        });
        for _ in 0..40 {
            io.write_all(&chunk).await.expect("a reading peer takes it");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(io);
        assert_eq!(reader.await.unwrap().unwrap(), 40 * 512);
        drop(far);
    }
}
