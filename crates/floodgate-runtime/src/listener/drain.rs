//! Graceful shutdown of client connections: a signal every connection
//! watches (it then finishes its requests in flight and closes), and a
//! count of the connections still open. Upgraded connections (tunnels)
//! are not waited for.

use std::future::Future;
use std::pin::{Pin, pin};

use tokio::sync::{mpsc, watch};

/// The shutdown signal and the count of connections watching it.
#[derive(Debug)]
pub struct Drain {
    signal: watch::Sender<bool>,
    open: mpsc::Sender<()>,
    closed: mpsc::Receiver<()>,
}

/// One connection's view of a [`Drain`]: dropped when the connection ends.
#[derive(Clone, Debug)]
pub struct DrainWatcher {
    signal: watch::Receiver<bool>,
    _open: mpsc::Sender<()>,
}

impl Default for Drain {
    fn default() -> Self {
        Self::new()
    }
}

impl Drain {
    /// No connection yet, no shutdown.
    pub fn new() -> Self {
        let (signal, _) = watch::channel(false);
        let (open, closed) = mpsc::channel(1);
        Drain {
            signal,
            open,
            closed,
        }
    }

    /// A watcher for a new connection.
    pub fn watcher(&self) -> DrainWatcher {
        DrainWatcher {
            signal: self.signal.subscribe(),
            _open: self.open.clone(),
        }
    }

    /// Signals shutdown, then waits until every watcher is dropped.
    pub async fn shutdown(self) {
        let Drain {
            signal,
            open,
            mut closed,
        } = self;
        signal.send_replace(true);
        drop(open);
        // Nothing is ever sent: this returns once every sender is gone.
        let _ = closed.recv().await;
    }
}

impl DrainWatcher {
    /// Resolves once shutdown is signalled.
    pub async fn signalled(&mut self) {
        let _ = self.signal.wait_for(|stop| *stop).await;
    }

    /// Drives `conn` to its end; once shutdown is signalled, `graceful`
    /// asks it to finish its requests in flight and close.
    pub async fn watch<C, T>(mut self, conn: C, graceful: impl FnOnce(Pin<&mut C>)) -> T
    where
        C: Future<Output = T>,
    {
        let mut conn = pin!(conn);
        // The connection first: the signal's check takes a lock.
        tokio::select! {
            biased;
            out = conn.as_mut() => return out,
            _ = self.signal.wait_for(|stop| *stop) => {}
        }
        graceful(conn.as_mut());
        conn.await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn waits_for_watchers_then_returns() {
        let drain = Drain::new();
        let w = drain.watcher();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let conn = tokio::spawn(w.watch(
            async move {
                let _ = rx.await;
                7
            },
            |_c| {
                let _ = tx.send(());
            },
        ));
        tokio::time::timeout(Duration::from_secs(5), drain.shutdown())
            .await
            .unwrap();
        assert_eq!(conn.await.unwrap(), 7);
    }
}
