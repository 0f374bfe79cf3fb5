//! A tower layer limiting HTTP requests with a Floodgate policy engine,
//! answering per the [`contract`](crate::contract).
//!
//! For each request the layer:
//!
//! 1. sheds it with 503 if shedding is on and the layer is busy for its
//!    class (critical, default or low priority, by route template or
//!    header): beyond fixed counts of requests in flight, or beyond its
//!    share of an [`adaptive`] concurrency limit that follows the
//!    upstream's latency (or, with its queue, after waiting for a slot
//!    within a bound);
//! 2. builds its descriptors ([`HttpIdentity`](crate::HttpIdentity), with
//!    `extension` values from the [`Attributes`](crate::identity::Attributes)
//!    an earlier middleware put in the request's extensions) into pooled
//!    buffers;
//! 3. waits for a permit of the layer's concurrency limits (global, per
//!    key) in a bounded FIFO queue with a timeout, if configured;
//! 4. decides with the engine: **denied** → the contract's rejection,
//!    without calling the inner service; **delayed** (a shaper) → sleeps
//!    the delay (at most `max_delayed` requests at once; beyond, rejected
//!    without being charged) without holding its in-flight place or
//!    permits, takes them again (steps 1 and 3), then continues;
//!    **allowed** → calls the inner service and adds the rate-limit
//!    headers to its response;
//! 5. keeps the engine's concurrency units, the queue permits and its
//!    in-flight count until the response **body** ends or is dropped
//!    (cancellation and panics included);
//! 6. on an engine error, fails open (default; counted) or rejects with 503.
//!
//! Each request is counted once by its final outcome in
//! `floodgate_requests_total{api="http"}` ([`RequestResult`]).
//!
//! A request that waits for nothing (no queue, an in-memory store, no
//! delay) is decided as it arrives: what is left to wait for is the inner
//! service alone. One descriptor whose rule is known in advance is decided
//! by that rule directly (an engine plan).
//!
//! # Costs known after the response
//!
//! With `http.response_cost` (see [`identity`](crate::identity)), an
//! admitted request keeps its descriptors until its cost is known: read
//! from a response header as the response's head is seen, or from a
//! trailer as its body ends. That cost (less what admission charged: the
//! request's `cost`, if any) is charged to every descriptor of the
//! request, forced ([`Apply::Force`](floodgate::Apply::Force), what a
//! rule's `penalty: true` makes of every charge): it counts whole even
//! past the limit, even past the whole limit. The limit is then in debt:
//! every request is denied (429, with `Retry-After` and `RateLimit` exact
//! as for any denial) until the refill repays it — a token bucket by its
//! drip, a fixed window at its end. A request the layer denies is not
//! charged after; neither is one whose inner service fails without a
//! response, nor one let through because the limiter failed. A charge the
//! store refuses is counted (`floodgate_http_response_charge_failures_total`).
//! Each charge is counted by how its cost was found in
//! `floodgate_http_response_costs_total{result}` (`read`, `capped`,
//! `missing`, `invalid`, `unfinished`).
//!
//! # Use
//!
//! As a tower layer ([`FloodgateLayer`] makes a [`FloodgateService`]), or
//! from a server's own handler: [`FloodgateLayer::serve`], given the
//! client's address ([`ClientAddr`]) or not. Each returns the same
//! [`ResponseFuture`]. Its admission step alone, without a server (as an
//! offline replay of logged requests runs it), is [`admission`].
//!
//! # Configuration
//!
//! ```yaml
//! http:
//!   layer:
//!     on_error: allow            # allow (fail open) | reject (503)
//!     max_delayed: 1024          # shaper-delayed requests at once
//!     shedding:
//!       low_priority_above: 400  # in flight; low priority beyond → 503
//!       max_in_flight: 1000      # optional: everything beyond → 503
//!       retry_after: 1s
//!       low_priority:
//!         routes: ["/reports/{id}"]
//!         header: {name: x-priority, values: [low, batch]}
//!       critical:                # same form as low_priority
//!         routes: ["/checkout"]
//!       adaptive:                # optional; then low_priority_above is too
//!         min: 1
//!         max: 1000
//!         initial: 4
//!         tolerance: 0.5         # latency up to 1.5 × the no-load latency
//!         smoothing: 0.3
//!         interval: 100ms
//!         min_samples: 100
//!         probe_every: 10        # intervals between drains
//!         shares: {sheddable: 0.5, default: 0.8}
//!         queue:             # optional: wait for a slot, within a bound
//!           max_waiting: 128
//!           timeout: 100ms
//!           target: 5ms          # the bound once the queue stands (codel)
//!           interval: 100ms
//!           order: codel         # codel | lifo | fifo
//!     concurrency:
//!       global: {max: 100, queue: 50, timeout: 2s}
//!       per_key: {key: user, max: 4, queue: 8, timeout: 500ms}
//! ```

pub mod adaptive;
pub mod admission;
mod body;
mod charge;
mod config;
#[allow(clippy::module_inception)]
mod layer;
mod policy_cache;
mod queue;
mod read;
mod request;
mod requests;
mod shared;
mod shed;

pub use body::FloodgateBody;
pub use config::{
    Adaptive, AdaptiveQueue, ClientAddr, KeyedQueueLimit, LayerSettings, LowPriority, OnError,
    PeerAddr, PeerFn, QueueLimit, QueueOrder, Shedding, default_peer,
};
pub use layer::{FloodgateLayer, FloodgateService};
pub use read::LAYER;
pub use request::ResponseFuture;
pub use requests::{REQUESTS_TOTAL, RequestCounters, RequestResult};
pub use shared::LayerStats;
