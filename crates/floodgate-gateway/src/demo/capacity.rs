//! The demo upstream's capacity: at most `servers` requests served at
//! once, the others waiting their turn in arrival order, as in a server's
//! worker pool; each takes a service time drawn for it and spent asleep
//! (a timer, not the CPU the gateway in front needs). Its throughput is
//! `servers / mean service time` requests a second under a queue: a
//! server hands over at its deadline, not when its timer fires, so the
//! timer's millisecond ticks and a late wake-up do not cost capacity.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::time::Instant;

/// What serving one request takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Work {
    /// The time a server spends on it.
    pub time: Duration,
    /// Whether it fails (answered 503).
    pub fail: bool,
}

/// Draws the work of each request served.
pub trait ServiceTime: Send + Sync + 'static {
    /// The work of the next request.
    fn draw(&self) -> Work;
}

/// A pool of servers with a FIFO queue (clones share it).
#[derive(Clone)]
pub struct Capacity {
    /// Idle servers, each as the time it became free; the lock is taken
    /// in arrival order (tokio's mutex is fair): the queue.
    idle: Arc<Mutex<mpsc::UnboundedReceiver<Instant>>>,
    free: mpsc::UnboundedSender<Instant>,
    servers: Arc<std::sync::Mutex<Servers>>,
    service: Arc<dyn ServiceTime>,
}

/// The servers there should be, and how many of those at work still
/// have to leave (each as it finishes, or idle, as it is next taken).
#[derive(Default)]
struct Servers {
    count: usize,
    leaving: usize,
}

impl Capacity {
    /// `servers` servers (at least 1), each request's work drawn from
    /// `service`.
    pub fn new(servers: usize, service: impl ServiceTime) -> Self {
        let (free, idle) = mpsc::unbounded_channel();
        let capacity = Capacity {
            idle: Arc::new(Mutex::new(idle)),
            free,
            servers: Arc::default(),
            service: Arc::new(service),
        };
        capacity.set_servers(servers);
        capacity
    }

    /// Serves one request: waits for a server (first come, first served),
    /// then spends its work; whether it failed. The work goes on when the
    /// client goes away meanwhile, as a worker pool's does: a request
    /// abandoned in the queue still costs its service time.
    pub(crate) async fn serve(&self) -> bool {
        let (done, answer) = oneshot::channel();
        let this = self.clone();
        let arrived = Instant::now();
        tokio::spawn(async move {
            let Some(free_since) = this.next_server().await else {
                return;
            };
            let work = this.service.draw();
            // Started when both were there: the server and the request.
            let deadline = free_since.max(arrived) + work.time;
            tokio::time::sleep_until(deadline).await;
            if !this.leaves() {
                let _ = this.free.send(deadline);
            }
            let _ = done.send(work.fail);
        });
        answer.await.unwrap_or(true)
    }

    /// Waits for the next server staying: the time it became free.
    async fn next_server(&self) -> Option<Instant> {
        let mut idle = self.idle.lock().await;
        loop {
            let free_since = idle.recv().await?;
            if !self.leaves() {
                return Some(free_since);
            }
        }
    }

    /// Whether a server now free leaves (the servers were reduced).
    fn leaves(&self) -> bool {
        let mut s = self
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let leaves = s.leaving > 0;
        s.leaving -= usize::from(leaves);
        leaves
    }

    /// Changes the number of servers to `servers` (at least 1): more at
    /// once, fewer as busy ones finish (ahead of the queue).
    pub fn set_servers(&self, servers: usize) {
        let servers = servers.max(1);
        let mut s = self
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if servers < s.count {
            s.leaving += s.count - servers;
        } else {
            let more = servers - s.count;
            // Servers about to leave stay instead; the rest are new.
            let stay = more.min(s.leaving);
            s.leaving -= stay;
            for _ in stay..more {
                let _ = self.free.send(Instant::now());
            }
        }
        s.count = servers;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Fixed(Duration);

    impl ServiceTime for Fixed {
        fn draw(&self) -> Work {
            Work {
                time: self.0,
                fail: false,
            }
        }
    }

    /// Two servers of 100 ms serve six requests in three rounds: no more
    /// than two at once, the last done after 300 ms.
    #[tokio::test(start_paused = true)]
    async fn serves_at_most_servers_at_once() {
        let capacity = Capacity::new(2, Fixed(Duration::from_millis(100)));
        let t0 = tokio::time::Instant::now();
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let (c, done) = (capacity.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                c.serve().await;
                done.fetch_add(1, Ordering::Relaxed);
                tokio::time::Instant::now() - t0
            }));
        }
        let mut ends = Vec::new();
        for t in tasks {
            ends.push(t.await.unwrap().as_millis());
        }
        ends.sort_unstable();
        assert_eq!(ends, [100, 100, 200, 200, 300, 300]);
    }

    /// Fewer servers take effect as busy ones finish, ahead of the
    /// requests waiting: four servers of 100 ms reduced to one with eight
    /// requests there serve the four waiting one at a time.
    #[tokio::test(start_paused = true)]
    async fn fewer_servers_leave_as_they_finish() {
        let capacity = Capacity::new(4, Fixed(Duration::from_millis(100)));
        let t0 = tokio::time::Instant::now();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let c = capacity.clone();
                tokio::spawn(async move {
                    c.serve().await;
                    (tokio::time::Instant::now() - t0).as_millis()
                })
            })
            .collect();
        tokio::task::yield_now().await;
        capacity.set_servers(1);
        let mut ends = Vec::new();
        for t in tasks {
            ends.push(t.await.unwrap());
        }
        ends.sort_unstable();
        assert_eq!(ends, [100, 100, 100, 100, 200, 300, 400, 500]);
    }

    /// Fewer servers take effect as busy ones finish; more at once.
    #[tokio::test(start_paused = true)]
    async fn the_servers_can_change() {
        let capacity = Capacity::new(4, Fixed(Duration::from_millis(100)));
        capacity.set_servers(1);
        tokio::task::yield_now().await;
        let rounds = |n: usize| {
            let c = capacity.clone();
            async move {
                let t0 = tokio::time::Instant::now();
                let all: Vec<_> = (0..n)
                    .map(|_| {
                        tokio::spawn({
                            let c = c.clone();
                            async move { c.serve().await }
                        })
                    })
                    .collect();
                for t in all {
                    t.await.unwrap();
                }
                (tokio::time::Instant::now() - t0).as_millis()
            }
        };
        assert_eq!(rounds(3).await, 300);
        capacity.set_servers(3);
        assert_eq!(rounds(3).await, 100);
    }
}
