//! Pipelining by window: commands that arrive within a short window after
//! the first one are written to Redis together, as one pipeline.
//!
//! A multiplexed connection already writes whatever is queued when it
//! writes, but at moderate load almost nothing is queued: every decision
//! is then its own write on the client and its own read, reply and wake-up
//! on the server, which doubles Redis's CPU time per decision compared
//! with the same decisions arriving in batches. With a window (Envoy's
//! `REDIS_PIPELINE_WINDOW` and `REDIS_PIPELINE_LIMIT`), each connection
//! holds the first command for at most `window`, or until `limit` commands
//! are waiting, and sends them in one write: Redis's CPU per decision
//! falls, at the price of up to `window` more latency for each decision.
//!
//! Each connection has a flusher task, started when it is first needed on
//! the runtime the pool was opened on (where the connections' own tasks
//! run; a caller's runtime may be idle between its calls), or on the
//! caller's when that one is gone, and started again if its runtime ends.
//! The window is
//! timed with a `timerfd` on Linux (tokio's timers count whole
//! milliseconds, too coarse for windows of a few hundred microseconds),
//! with tokio's timer elsewhere.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, RedisError, RedisResult, Value};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};

use crate::stats::RedisStats;
use crate::timer::Timer;

/// A command waiting for its window, with where its reply goes.
struct Pending {
    cmd: Cmd,
    reply: oneshot::Sender<RedisResult<Value>>,
}

/// One connection's queue into its flusher (`None` until first used).
type Lane = RwLock<Option<mpsc::UnboundedSender<Pending>>>;

/// The windows of a pool's connections.
pub(crate) struct Window {
    window: Duration,
    limit: usize,
    lanes: Box<[Lane]>,
    stats: Arc<RedisStats>,
    /// The runtime the pool was opened on.
    home: Option<tokio::runtime::Handle>,
}

impl Window {
    /// A window of `window` (non-zero) and at most `limit` commands per
    /// pipeline (0: no limit) for `connections` connections.
    pub(crate) fn new(
        window: Duration,
        limit: usize,
        connections: usize,
        stats: Arc<RedisStats>,
    ) -> Self {
        Window {
            window,
            limit: if limit == 0 { usize::MAX } else { limit },
            lanes: (0..connections).map(|_| RwLock::new(None)).collect(),
            stats,
            home: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// Sends `cmd` on connection `i` (`conn`) in the next pipeline.
    pub(crate) async fn query(
        &self,
        i: usize,
        conn: &ConnectionManager,
        cmd: &Cmd,
    ) -> RedisResult<Value> {
        let lane = &self.lanes[i % self.lanes.len()];
        let (reply, answer) = oneshot::channel();
        let mut pending = Pending {
            cmd: cmd.clone(),
            reply,
        };
        let sent = {
            let tx = lane
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match tx.as_ref() {
                Some(tx) => tx.send(pending).map_err(|e| e.0),
                None => Err(pending),
            }
        };
        if let Err(back) = sent {
            // No flusher yet, or its runtime is gone: start one here.
            pending = back;
            let mut tx = lane
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let live = match tx.as_ref() {
                Some(t) if !t.is_closed() => t,
                _ => tx.insert(self.spawn(conn.clone())),
            };
            if let Err(e) = live.send(pending) {
                drop(e);
                return Err(gone());
            }
        }
        answer.await.unwrap_or_else(|_| Err(gone()))
    }

    fn spawn(&self, conn: ConnectionManager) -> mpsc::UnboundedSender<Pending> {
        if let Some(home) = &self.home {
            let (tx, rx) = mpsc::unbounded_channel();
            home.spawn(self.flush(rx, conn.clone()));
            // A runtime that has shut down drops the task at once.
            if !tx.is_closed() {
                return tx;
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(self.flush(rx, conn));
        tx
    }

    fn flush(
        &self,
        rx: mpsc::UnboundedReceiver<Pending>,
        conn: ConnectionManager,
    ) -> impl Future<Output = ()> + Send + 'static {
        flush(rx, conn, self.window, self.limit, self.stats.clone())
    }
}

fn gone() -> RedisError {
    RedisError::from((
        redis::ErrorKind::Io,
        "the pipeline's task ended before the reply",
    ))
}

/// The flusher: gathers a window's commands, sends them as one pipeline
/// and hands each caller its reply, while the earlier pipelines' replies
/// come in.
async fn flush(
    mut rx: mpsc::UnboundedReceiver<Pending>,
    conn: ConnectionManager,
    window: Duration,
    limit: usize,
    stats: Arc<RedisStats>,
) {
    let mut timer = Timer::new();
    let mut sending = FuturesUnordered::new();
    let mut open = true;
    while open {
        let first = tokio::select! {
            p = rx.recv() => match p {
                Some(p) => p,
                None => break,
            },
            Some(()) = sending.next(), if !sending.is_empty() => continue,
        };
        let mut batch = vec![first];
        let deadline = Instant::now() + window;
        timer.arm(window);
        loop {
            // Whatever is queued now, then wait for more until the window
            // ends or the pipeline is full.
            while batch.len() < limit {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            if !open || batch.len() >= limit || Instant::now() >= deadline {
                break;
            }
            tokio::select! {
                p = rx.recv() => match p {
                    Some(p) => batch.push(p),
                    None => open = false,
                },
                () = timer.expired() => break,
                Some(()) = sending.next(), if !sending.is_empty() => {}
            }
        }
        sending.push(send(conn.clone(), batch, &stats));
    }
    while sending.next().await.is_some() {}
}

/// Sends `batch` as one pipeline and answers each of its callers. A
/// command whose caller has given up meanwhile (its timeout ended while it
/// waited) is not sent: nobody would learn its outcome.
async fn send(mut conn: ConnectionManager, batch: Vec<Pending>, stats: &RedisStats) {
    let mut pipe = redis::pipe();
    let mut replies = Vec::with_capacity(batch.len());
    for p in batch {
        if !p.reply.is_closed() {
            pipe.add_command(p.cmd);
            replies.push(p.reply);
        }
    }
    if replies.is_empty() {
        return;
    }
    stats.pipelines.inc();
    match conn.req_packed_commands(&pipe, 0, replies.len()).await {
        Ok(values) if values.len() == replies.len() => {
            for (reply, v) in replies.into_iter().zip(values) {
                let r = match v {
                    Value::ServerError(e) => Err(e.into()),
                    v => Ok(v),
                };
                let _ = reply.send(r);
            }
        }
        Ok(values) => {
            let e = RedisError::from((
                redis::ErrorKind::Client,
                "a pipeline's reply count did not match its commands",
                format!("{} replies to {} commands", values.len(), replies.len()),
            ));
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}
