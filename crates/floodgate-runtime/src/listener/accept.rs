//! The accept loop every listener runs, the service's and the gateway's:
//! at most as many connections as its places (fitted to the open files
//! limit, [`descriptors`](super::descriptors)); when every place is taken,
//! or `accept` fails for want of descriptors, the connections that have
//! waited longest without a request in flight are closed to make room
//! ([`Connections`]), and a failing `accept` is retried after a growing
//! pause, never at once; on shutdown no new connection while the open ones
//! finish their requests in flight.

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError, watch};
use tokio_util::task::TaskTracker;

use super::activity::{Activity, Connections};
use super::descriptors;
use super::socket::Listen;

/// Connections closed at a time to make room when descriptors run out.
const EVICT_BATCH: usize = 8;
/// How often a new connection waiting for a place looks again for one to
/// close (a connection may have finished its request since).
const ROOM_RETRY: Duration = Duration::from_millis(20);

/// A connection's place under its listener's cap, held until the
/// connection (and whatever it was upgraded to) ends.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    gauge: metrics::Gauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
    }
}

/// An accepted connection (on a socket whose connections are `S`).
pub(super) struct Accepted<S> {
    /// The socket.
    pub stream: S,
    /// The client's address.
    pub peer: SocketAddr,
    /// Its place under the cap.
    pub slot: Slot,
    /// Its requests in flight (a connection with none may be closed to
    /// make room).
    pub activity: Arc<Activity>,
    /// The shutdown signal: true once the connection is to finish its
    /// requests in flight and close.
    pub stop: watch::Receiver<bool>,
}

/// What a listener's accept loop counts.
#[derive(Clone)]
pub struct Counters {
    /// Connections open.
    pub connections: metrics::Gauge,
    /// Connections closed to make room.
    pub evicted: metrics::Counter,
    /// `accept` failures (descriptors or memory exhausted).
    pub accept_errors: metrics::Counter,
}

impl Counters {
    /// `floodgate_connections`, `floodgate_connections_evicted_total` and
    /// `floodgate_accept_errors_total`, labelled `listener = what`.
    pub fn of(what: &'static str) -> Self {
        Counters {
            connections: metrics::gauge!("floodgate_connections", "listener" => what),
            evicted: metrics::counter!("floodgate_connections_evicted_total", "listener" => what),
            accept_errors: metrics::counter!("floodgate_accept_errors_total", "listener" => what),
        }
    }
}

/// Accepts connections on `listener` until `stop` turns true, at most
/// `places` at once, and spawns `serve` for each (closed early if chosen
/// to make room while it has no request in flight); then stops accepting
/// and returns once every connection has ended (the caller bounds the
/// wait).
pub(super) async fn accept_loop<L: Listen, F, Fut>(
    listener: L,
    places: usize,
    counters: Counters,
    stop: watch::Receiver<bool>,
    mut serve: F,
) where
    F: FnMut(Accepted<L::Stream>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    // Connections closed at a time when every place is taken: room for
    // the next few, without waiting for one closed connection at a time.
    let room_batch = (places / 16).clamp(1, EVICT_BATCH);
    let permits = Arc::new(Semaphore::new(places.max(1)));
    let registry = Arc::new(Connections::new(counters.evicted.clone()));
    // The connections, waited for on shutdown (not the tunnels they may
    // be upgraded to).
    let connections = TaskTracker::new();
    let mut accepting = Accepting::default();
    let mut stopping = stop.clone();
    let shutdown = async move {
        let _ = stopping.wait_for(|s| *s).await;
    };
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            a = accepting.accept(&listener, &registry, &counters.accept_errors) => a,
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(TryAcquireError::Closed) => break,
            Err(TryAcquireError::NoPermits) => {
                let room = place_when_room(&permits, &registry, room_batch, shutdown.as_mut());
                match room.await {
                    Some(p) => p,
                    None => break,
                }
            }
        };
        let accepted = (stream, peer);
        spawn_connection::<L, _, _>(
            accepted,
            permit,
            &registry,
            &counters,
            &stop,
            &mut serve,
            &connections,
        );
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Every place is taken: room is made by closing the connections that
/// have waited longest without a request (`batch` at a time), else the
/// new one waits for a connection to end. None: `shutdown` came first, or
/// the places are gone.
async fn place_when_room(
    permits: &Arc<Semaphore>,
    registry: &Connections,
    batch: usize,
    mut shutdown: Pin<&mut impl Future<Output = ()>>,
) -> Option<OwnedSemaphorePermit> {
    loop {
        registry.evict_waiting(batch);
        tokio::select! {
            biased;
            _ = shutdown.as_mut() => return None,
            p = permits.clone().acquire_owned() => return p.ok(),
            _ = tokio::time::sleep(ROOM_RETRY) => {}
        }
    }
}

/// Serves the accepted connection (`stream` from `peer`) in a task of
/// `connections`, holding its place `permit`, registered in `registry` so
/// that it is closed to make room while it waits for nothing.
fn spawn_connection<L: Listen, F, Fut>(
    (stream, peer): (L::Stream, SocketAddr),
    permit: OwnedSemaphorePermit,
    registry: &Arc<Connections>,
    counters: &Counters,
    stop: &watch::Receiver<bool>,
    serve: &mut F,
    connections: &TaskTracker,
) where
    F: FnMut(Accepted<L::Stream>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    L::ready(&stream);
    let registered = registry.register();
    // A request sent with the connection is there already: its head is
    // arriving, not a connection that waits for nothing.
    if has_bytes(&stream) {
        registered.activity().heard();
    }
    counters.connections.increment(1.0);
    let activity = registered.activity().clone();
    let serving = serve(Accepted {
        stream,
        peer,
        slot: Slot {
            _permit: permit,
            gauge: counters.connections.clone(),
        },
        activity: activity.clone(),
        stop: stop.clone(),
    });
    connections.spawn(async move {
        // The connection first: the check for eviction is the cheap
        // one, made at each of its wake-ups.
        tokio::select! {
            biased;
            _ = serving => {}
            _ = closed_to_make_room(&activity) => {
                tracing::debug!(%peer, "connection closed to make room");
            }
        }
        drop(registered);
    });
}

/// Whether bytes wait to be read on `stream` (one non-blocking peek).
fn has_bytes(stream: &impl AsFd) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
    matches!(socket2::SockRef::from(stream).peek(&mut byte), Ok(n) if n > 0)
}

/// Resolves once the connection has been chosen to close to make room
/// and has no request in flight.
async fn closed_to_make_room(activity: &Activity) {
    loop {
        activity.evicted().await;
        if !activity.keep() {
            return;
        }
    }
}

/// The accept loop's state through a run of failures.
#[derive(Default)]
struct Accepting {
    /// Failures in a row, and when the first of them happened.
    failing: Option<(u64, tokio::time::Instant)>,
}

impl Accepting {
    /// The pause after `failures` failures in a row: 10 ms, doubling up to
    /// 1 s.
    fn pause(failures: u64) -> Duration {
        Duration::from_millis(10u64 << failures.saturating_sub(1).min(7))
            .min(Duration::from_secs(1))
    }

    /// Accepts the next connection. When descriptors (or kernel memory)
    /// run out, the connections that have waited longest are closed and
    /// `accept` is retried after a growing pause, never at once; a run of
    /// failures is logged when it starts and when it ends.
    async fn accept<L: Listen>(
        &mut self,
        listener: &L,
        registry: &Connections,
        errors: &metrics::Counter,
    ) -> (L::Stream, SocketAddr) {
        loop {
            match listener.accept().await {
                Ok(a) => {
                    if let Some((failures, since)) = self.failing.take() {
                        tracing::info!(
                            failures,
                            after = ?since.elapsed(),
                            "accepting connections again"
                        );
                    }
                    return a;
                }
                Err(e) if descriptors::connection_only(&e) => {
                    tracing::debug!(error = %e, "a connection went away before it was accepted");
                }
                Err(e) => {
                    errors.increment(1);
                    let closed = if descriptors::exhausted(&e) {
                        registry.evict_waiting(EVICT_BATCH)
                    } else {
                        0
                    };
                    let (failures, _) =
                        self.failing.get_or_insert((0, tokio::time::Instant::now()));
                    *failures += 1;
                    let pause = Self::pause(*failures);
                    if *failures == 1 {
                        tracing::warn!(
                            error = %e,
                            closed_waiting_connections = closed,
                            "accept failed; retrying with a growing pause"
                        );
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, TcpStream};

    #[test]
    fn the_pause_grows_to_a_second() {
        let p: Vec<u64> = (1..=9)
            .map(|n| Accepting::pause(n).as_millis() as u64)
            .collect();
        assert_eq!(p, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    }

    /// With every place taken by connections that sent nothing, a new
    /// connection gets a place: the one that waited longest is closed.
    #[tokio::test]
    async fn a_full_listener_makes_room() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = watch::channel(false);
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(accept_loop(
            listener,
            2,
            Counters::of("test"),
            rx,
            move |a: Accepted<TcpStream>| {
                let seen_tx = seen_tx.clone();
                async move {
                    let _ = seen_tx.send(a.peer);
                    let mut b = [0u8; 1];
                    let mut stream = a.stream;
                    let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut b).await;
                    drop(a.slot);
                }
            },
        ));
        let mut first = TcpStream::connect(addr).await.unwrap();
        let second = TcpStream::connect(addr).await.unwrap();
        for _ in 0..2 {
            seen.recv().await.unwrap();
        }
        let third = TcpStream::connect(addr).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), seen.recv())
            .await
            .expect("room made for the third")
            .unwrap();
        // The first, which waited longest, was closed.
        let mut b = [0u8; 1];
        let n = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read(&mut first, &mut b),
        )
        .await
        .unwrap();
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        tx.send_replace(true);
        drop((second, third));
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }
}
