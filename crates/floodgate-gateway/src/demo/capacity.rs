//! The demo upstream's capacity: at most `servers` requests served at
//! once, the others waiting their turn in arrival order, as in a server's
//! worker pool; each takes a service time drawn for it and spent asleep
//! (a timer, not the CPU the gateway in front needs). Its throughput is
//! at most `servers / mean service time` requests a second.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, oneshot};

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
    servers: Arc<Semaphore>,
    count: Arc<AtomicUsize>,
    service: Arc<dyn ServiceTime>,
}

impl Capacity {
    /// `servers` servers (at least 1), each request's work drawn from
    /// `service`.
    pub fn new(servers: usize, service: impl ServiceTime) -> Self {
        let servers = servers.max(1);
        Capacity {
            servers: Arc::new(Semaphore::new(servers)),
            count: Arc::new(servers.into()),
            service: Arc::new(service),
        }
    }

    /// Serves one request: waits for a server (first come, first served),
    /// then spends its work; whether it failed. The work goes on when the
    /// client goes away meanwhile, as a worker pool's does: a request
    /// abandoned in the queue still costs its service time.
    pub(crate) async fn serve(&self) -> bool {
        let (done, answer) = oneshot::channel();
        let (servers, service) = (self.servers.clone(), self.service.clone());
        tokio::spawn(async move {
            let Ok(_server) = servers.acquire_owned().await else {
                return;
            };
            let work = service.draw();
            tokio::time::sleep(work.time).await;
            let _ = done.send(work.fail);
        });
        answer.await.unwrap_or(true)
    }

    /// Changes the number of servers to `servers` (at least 1): more at
    /// once, fewer as busy ones finish.
    pub fn set_servers(&self, servers: usize) {
        let servers = servers.max(1);
        let before = self.count.swap(servers, Ordering::Relaxed);
        if servers > before {
            self.servers.add_permits(servers - before);
        } else if servers < before {
            let gone = u32::try_from(before - servers).unwrap_or(u32::MAX);
            let pool = self.servers.clone();
            tokio::spawn(async move {
                if let Ok(p) = pool.acquire_many_owned(gone).await {
                    p.forget();
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
