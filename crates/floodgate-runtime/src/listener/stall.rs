//! The send timeout of an HTTP/2 stream: a stream whose client opens no
//! room in its flow-control window for the timeout (a zero window, no
//! `WINDOW_UPDATE`) is reset, and its response dropped — a stall the
//! socket does not show, since the client reads it.
//!
//! hyper answers each stream in a task of its own, made by the
//! connection's executor: [`StreamExec`] wraps each in [`Watched`]. While
//! the stream waits for room, hyper holds the frame it took from the
//! response body and polls the body no more; the body (the listener's
//! wrapper) marks, during the task's poll, whether the last thing it did
//! was hand out a data frame ([`handed_out`]) or wait for its own source
//! ([`waiting`]). A poll that ends with a frame handed out and the stream
//! still pending is a wait for the client; the task's timer is armed then,
//! and only then. Dropping the task makes hyper's HTTP/2 library reset
//! the stream (`RST_STREAM`, `CANCEL`).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

/// What a response body did last in the poll under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// Nothing (not polled in this poll).
    Untouched,
    /// Handed out a data frame.
    Handed,
    /// Anything else: waited for its own source, ended, failed.
    Waiting,
}

thread_local! {
    static MARK: Cell<Mark> = const { Cell::new(Mark::Untouched) };
}

/// The response body handed out a data frame (called from its poll).
pub(super) fn handed_out() {
    MARK.set(Mark::Handed);
}

/// The response body did anything but hand out a data frame.
pub(super) fn waiting() {
    MARK.set(Mark::Waiting);
}

/// The executor of an HTTP/2 connection's stream tasks: each runs
/// [`Watched`] under the send timeout (zero: none).
#[derive(Clone, Copy, Debug)]
pub(super) struct StreamExec {
    pub(super) send_timeout: Duration,
}

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        if self.send_timeout.is_zero() {
            tokio::spawn(fut);
        } else {
            tokio::spawn(Watched::new(fut, self.send_timeout));
        }
    }
}

pin_project! {
    /// A stream's task, ended (the stream reset) once it has waited for
    /// its client for `timeout`.
    pub struct Watched<F> {
        #[pin]
        task: F,
        timeout: Duration,
        #[pin]
        timer: Option<Sleep>,
        armed: bool,
    }
}

impl<F> Watched<F> {
    fn new(task: F, timeout: Duration) -> Self {
        Watched {
            task,
            timeout,
            timer: None,
            armed: false,
        }
    }
}

impl<F: Future<Output = ()>> Future for Watched<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let me = self.project();
        MARK.set(Mark::Untouched);
        if me.task.poll(cx).is_ready() {
            return Poll::Ready(());
        }
        let mut timer = me.timer;
        match MARK.replace(Mark::Untouched) {
            // Woken for something else (a window update too small, a
            // ping): the wait goes on.
            Mark::Untouched => {}
            Mark::Waiting => *me.armed = false,
            // A frame handed out now: the wait for the client starts now.
            Mark::Handed => {
                *me.armed = true;
                let deadline = Instant::now() + *me.timeout;
                match timer.as_mut().as_pin_mut() {
                    Some(t) => t.reset(deadline),
                    None => timer.set(Some(tokio::time::sleep_until(deadline))),
                }
            }
        }
        if !*me.armed {
            return Poll::Pending;
        }
        match timer.as_pin_mut().map(|t| t.poll(cx)) {
            Some(Poll::Ready(())) => {
                tracing::debug!(
                    "HTTP/2 stream reset: the client opened no window within the send timeout"
                );
                super::send::count_timeout("stream");
                Poll::Ready(())
            }
            _ => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream task that hands out a frame and then waits for ever is
    /// ended after the timeout, not before; one that waits for its own
    /// source is not ended (the clock paused: it moves only to the next
    /// timer).
    #[tokio::test(start_paused = true)]
    async fn a_stream_waiting_for_its_client_ends_after_the_timeout() {
        let timeout = Duration::from_secs(60);
        // As hyper does: the body is polled no more while the frame waits.
        let mut first = true;
        let stalled = Watched::new(
            std::future::poll_fn(move |_| {
                if std::mem::take(&mut first) {
                    handed_out();
                }
                Poll::<()>::Pending
            }),
            timeout,
        );
        let started = Instant::now();
        stalled.await;
        assert_eq!(started.elapsed(), timeout);

        let busy = Watched::new(
            std::future::poll_fn(|_| {
                waiting();
                Poll::<()>::Pending
            }),
            timeout,
        );
        let outlived = tokio::time::timeout(timeout * 10, busy).await;
        assert!(outlived.is_err(), "waiting for its source: kept");
    }

    /// Each frame handed out starts the wait again.
    #[tokio::test(start_paused = true)]
    async fn progress_starts_the_wait_again() {
        let timeout = Duration::from_secs(60);
        let started = Instant::now();
        let mut polls = 0;
        let task = std::future::poll_fn(move |cx| {
            // Room for a frame every half timeout, three times.
            if polls < 3 {
                polls += 1;
                handed_out();
                let waker = cx.waker().clone();
                tokio::spawn(async move {
                    tokio::time::sleep(timeout / 2).await;
                    waker.wake();
                });
            }
            Poll::<()>::Pending
        });
        Watched::new(task, timeout).await;
        assert_eq!(started.elapsed(), timeout / 2 * 2 + timeout);
    }
}
