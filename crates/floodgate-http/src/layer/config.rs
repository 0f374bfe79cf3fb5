//! The layer's own settings: failure handling, bounded delays, load
//! shedding and concurrency queues.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::{Extensions, HeaderName};

/// What to do when the limiter cannot decide (a backend error).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnError {
    /// Let the request through, without rate-limit headers, and count it
    /// (`floodgate_http_fail_open_total`, [`LayerStats::fail_open`](super::LayerStats)).
    #[default]
    Allow,
    /// Reject it with the contract's error status (503 by default).
    Reject,
}

/// A concurrency limit with an optional bounded FIFO queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimit {
    /// Requests in flight at most.
    pub max: usize,
    /// Requests waiting for a permit at most (0: no queue, reject at once).
    pub queue: usize,
    /// Longest wait in the queue (none: wait as long as it takes).
    pub timeout: Option<Duration>,
}

/// A concurrency limit per value of a descriptor entry (per user, per
/// tenant, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyedQueueLimit {
    /// The descriptor entry key whose value selects the counter (`user`,
    /// `remote_address`, ...); requests without it are not limited.
    pub key: String,
    /// The limit of each value.
    pub limit: QueueLimit,
}

/// A selection of requests by route template or header value: which are
/// low priority (the sheddable class), and which are critical.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LowPriority {
    /// Route templates (of `http.routes`) that are selected.
    pub routes: Vec<String>,
    /// A header whose value (any case) selects the request.
    pub header: Option<(HeaderName, Vec<String>)>,
}

/// Priority load shedding (Stripe's fleet usage shedder): beyond a number of
/// requests in flight in this layer, low-priority requests are rejected with
/// 503 so the remaining capacity serves critical ones. With `adaptive`, that
/// number follows the upstream's measured latency
/// ([`adaptive`](super::adaptive)).
#[derive(Clone, Debug, PartialEq)]
pub struct Shedding {
    /// In-flight requests (all priorities) above which low-priority ones are
    /// shed (`usize::MAX`: none, the adaptive limit alone).
    pub low_priority_above: usize,
    /// In-flight requests above which every request is shed (optional).
    pub max_in_flight: Option<usize>,
    /// What is low priority (the sheddable class).
    pub low_priority: LowPriority,
    /// What is critical (the class that keeps a reserved share of the
    /// adaptive limit); the rest is the default class.
    pub critical: LowPriority,
    /// An adaptive concurrency limit shared by the three classes.
    pub adaptive: Option<Adaptive>,
    /// `Retry-After` of a shed request (none: not sent).
    pub retry_after: Option<Duration>,
}

/// The adaptive concurrency limit's settings (see
/// [`adaptive`](super::adaptive) for the controller they drive).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adaptive {
    /// The limit never goes below (at least 1: it never stalls at zero).
    pub min: usize,
    /// The limit never goes above.
    pub max: usize,
    /// The limit before anything is measured. The first measured interval
    /// runs under it: below the upstream's own concurrency, it measures
    /// the no-load latency at once.
    pub initial: usize,
    /// Latency tolerated over the no-load latency, as a fraction (0.5: up to
    /// 1.5 times): the limit settles where the mean latency is
    /// `no-load × (1 + tolerance)`.
    pub tolerance: f64,
    /// The weight of a new estimate in the limit (0 < smoothing ≤ 1; 1:
    /// the new estimate replaces the limit).
    pub smoothing: f64,
    /// A control interval lasts at least this long (and twice the last mean
    /// latency)...
    pub interval: Duration,
    /// ...and until this many requests completed in it (twice as many in
    /// the measured half of a drain). A heavy-tailed service time needs
    /// more: a window's mean is noisy.
    pub min_samples: u64,
    /// Control intervals between two drains that re-measure the no-load
    /// latency (0: never; it is then only lowered, by intervals faster than
    /// it).
    pub probe_every: u32,
    /// Sheddable requests are admitted while fewer than this fraction of
    /// the limit are in flight.
    pub sheddable_share: f64,
    /// Default requests are admitted while fewer than this fraction of the
    /// limit are in flight; critical ones up to the whole limit.
    pub default_share: f64,
    /// A queue for the requests over their class's limit (none: they are
    /// shed at once).
    pub queue: Option<AdaptiveQueue>,
}

/// The order in which waiting requests of one class get a slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueOrder {
    /// Oldest first while the queue empties now and then; newest first,
    /// and a bound of `target`, once it has not been empty for `interval`
    /// (controlled delay with adaptive LIFO).
    #[default]
    Codel,
    /// Newest first, each waiting at most `timeout`.
    Lifo,
    /// Oldest first, each waiting at most `timeout`.
    Fifo,
}

/// The queue in front of the adaptive limit (see
/// [`adaptive`](super::adaptive)): a request over its class's limit waits
/// for a slot, never longer than its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveQueue {
    /// Requests waiting at most.
    pub max_waiting: usize,
    /// The bound on a wait while the queue empties now and then (and
    /// always with `lifo` and `fifo`).
    pub timeout: Duration,
    /// The bound on a wait once the queue has stood (not been empty) for
    /// `interval` (`codel` only).
    pub target: Duration,
    /// How long the queue must stand before the bound drops to `target`.
    pub interval: Duration,
    /// Which waiting request of a class is served first.
    pub order: QueueOrder,
}

impl Default for AdaptiveQueue {
    fn default() -> Self {
        AdaptiveQueue {
            max_waiting: 128,
            timeout: Duration::from_millis(100),
            target: Duration::from_millis(5),
            interval: Duration::from_millis(100),
            order: QueueOrder::Codel,
        }
    }
}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive {
            min: 1,
            max: 1000,
            initial: 4,
            tolerance: 0.5,
            smoothing: 0.3,
            interval: Duration::from_millis(100),
            min_samples: 100,
            probe_every: 10,
            sheddable_share: 0.5,
            default_share: 0.8,
            queue: None,
        }
    }
}

/// Where the layer finds the client's socket address in a request's
/// extensions (the peer of `client_ip`). The default reads [`PeerAddr`]
/// and a bare [`SocketAddr`]; with axum use
/// `|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0)`.
pub type PeerFn = fn(&Extensions) -> Option<SocketAddr>;

/// The peer address, inserted into request extensions by whatever accepts
/// connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// Where a request comes from, as the server that calls
/// [`FloodgateLayer::serve`](super::FloodgateLayer::serve) knows
/// it: the peer's socket address, and the client address behind trusted
/// proxies once [resolved](super::FloodgateLayer::client_ip) (then the
/// layer's descriptors use it rather than resolve it again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr {
    pub(crate) peer: SocketAddr,
    pub(crate) resolved: Option<IpAddr>,
}

impl ClientAddr {
    /// A request from `peer`.
    pub fn new(peer: SocketAddr) -> Self {
        ClientAddr {
            peer,
            resolved: None,
        }
    }

    /// The peer's socket address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }
}

/// Reads [`PeerAddr`], then a bare [`SocketAddr`].
pub fn default_peer(ext: &Extensions) -> Option<SocketAddr> {
    ext.get::<PeerAddr>()
        .map(|p| p.0)
        .or_else(|| ext.get::<SocketAddr>().copied())
}

/// The layer's settings.
#[derive(Clone, Debug)]
pub struct LayerSettings {
    /// Limiter failures: fail open (default) or reject.
    pub on_error: OnError,
    /// Shaper-delayed requests waiting in this layer at most; beyond, a
    /// delayed request is rejected like one over a full burst.
    pub max_delayed: usize,
    /// Priority load shedding.
    pub shedding: Option<Shedding>,
    /// A concurrency limit over all requests of the layer.
    pub global_concurrency: Option<QueueLimit>,
    /// A concurrency limit per entry value.
    pub keyed_concurrency: Option<KeyedQueueLimit>,
    /// Where the peer address is found.
    pub peer: PeerFn,
}

impl Default for LayerSettings {
    fn default() -> Self {
        LayerSettings {
            on_error: OnError::Allow,
            max_delayed: 1024,
            shedding: None,
            global_concurrency: None,
            keyed_concurrency: None,
            peer: default_peer,
        }
    }
}

impl PartialEq for LayerSettings {
    fn eq(&self, o: &Self) -> bool {
        self.on_error == o.on_error
            && self.max_delayed == o.max_delayed
            && self.shedding == o.shedding
            && self.global_concurrency == o.global_concurrency
            && self.keyed_concurrency == o.keyed_concurrency
            && std::ptr::fn_addr_eq(self.peer, o.peer)
    }
}
