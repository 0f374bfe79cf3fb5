//! The open streams of one HTTP/2 client connection, so that a connection
//! with none for the idle timeout is closed (a client that sends only the
//! preface and `SETTINGS`, or stops opening streams, does not keep its
//! place under `max_connections`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// The count of a connection's open streams.
#[derive(Debug)]
pub struct Streams {
    count: Arc<watch::Sender<usize>>,
}

impl Streams {
    /// No stream open.
    pub fn new() -> Self {
        Streams {
            count: Arc::new(watch::Sender::new(0)),
        }
    }

    /// A stream opens; it is counted until the returned value is dropped
    /// (with its response body, or its request's future).
    pub fn open(&self) -> OpenStream {
        self.count.send_modify(|n| *n += 1);
        OpenStream(self.count.clone())
    }

    /// Streams open now.
    #[cfg(test)]
    pub fn count(&self) -> usize {
        *self.count.borrow()
    }

    /// Resolves once no stream has been open for `timeout`.
    pub async fn idle_for(&self, timeout: Duration) {
        let mut rx = self.count.subscribe();
        loop {
            if rx.wait_for(|n| *n == 0).await.is_err() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(timeout) => return,
                changed = rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// One open stream (see [`Streams::open`]).
#[derive(Debug)]
pub struct OpenStream(Arc<watch::Sender<usize>>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_only_without_open_streams() {
        let s = Streams::new();
        let open = s.open();
        let idle = s.idle_for(Duration::from_millis(50));
        tokio::pin!(idle);
        // A stream open: never idle.
        assert!(
            tokio::time::timeout(Duration::from_millis(200), idle.as_mut())
                .await
                .is_err()
        );
        drop(open);
        assert_eq!(s.count(), 0);
        let started = tokio::time::Instant::now();
        idle.await;
        assert!(started.elapsed() >= Duration::from_millis(50));
    }
}
