//! An adaptive concurrency limit: the number of requests let through to
//! the upstream at once follows the latency measured, so the layer protects
//! a backend whose capacity nobody wrote down, and moves when it moves.
//! Configured as `shedding.adaptive` (see [`Adaptive`](super::Adaptive));
//! the results of its simulation are in `docs/http-contract.md`.
//!
//! # The controller
//!
//! A gradient controller, as Envoy's adaptive concurrency filter and
//! Netflix's concurrency-limits `Gradient2` are. Each control interval (at
//! least `interval` and twice the last mean latency, and until
//! `min_samples` requests completed in it) the mean latency of the
//! requests that succeeded is compared with a target,
//! `no-load latency × (1 + tolerance)`:
//!
//! ```text
//! gradient = clamp(target / measured, 0.5, 1 + tolerance)
//! estimate = limit × gradient (+ √limit while the gradient is at least 1)
//! limit    = limit × (1 − smoothing) + estimate × smoothing,  within [min, max]
//! ```
//!
//! Above the upstream's own concurrency, the latency grows with the queue,
//! so `limit × target / measured` is that concurrency times
//! `1 + tolerance` whatever the limit: the limit settles there, the
//! upstream kept busy by a small queue whose wait is the tolerance —
//! throughput at capacity, latency bounded. A halving of capacity doubles
//! the latency and the gradient halves the estimate at once; a doubling is
//! found by the gradient's upper clamp (`1 + tolerance` a step while the
//! latency is at its baseline), not by `√limit` steps alone as in
//! `Gradient2`, whose gradient never exceeds 1. The limit grows only when
//! it was used (at some completion of the interval, a quarter of it in
//! flight — half the sheddable class's share — as `Gradient2` grows only
//! above half its limit): an idle period does not leave a limit nothing has
//! tested. The first interval is not measured (only the fast requests of
//! those it admitted have completed by its end).
//!
//! **Errors and timeouts** (the layer counts a 502, 503 or 504 answer, and
//! an error of the inner service) are overload beyond the share that fails
//! without it (measured with the no-load latency: at the first measured
//! interval, then a slow moving average over drains): an interval whose
//! share of failures exceeds it by `e` (less two standard errors) caps
//! the gradient at `1 − e` (not below 0.5) and stops growth. Their latencies are not samples (an upstream failing fast would
//! look fast). A request whose client went away tells nothing.
//!
//! # The no-load latency
//!
//! Envoy measures its `minRTT` by pinning the limit to a few requests
//! (`min_concurrency`, 3 by default) for a while, every `interval` (60 s by
//! default): a service doing 1 000 requests at once drops to 3 during the
//! probe, and sheds the rest with 503. `Gradient2` keeps instead a long
//! moving average of latency as the baseline, which drifts up under
//! sustained load (its limit then creeps up with the queue it causes).
//!
//! Here, every `probe_every` intervals, once the limit is settled (a
//! gradient of at least `1 / (1 + tolerance)`; postponed three times at
//! most), the limit is **drained**: for one interval that is not measured
//! (the queue goes) and one that is, the default and sheddable classes are
//! admitted under `limit / (1 + tolerance)` — the upstream's own
//! concurrency at the operating point, so it stays busy and the throughput
//! (hence what is shed) does not change. Only requests admitted since the
//! drain began are samples. The drain's mean latency becomes the baseline
//! when the drain left workers idle (its throughput fell by a quarter of
//! the tolerance, its latency did not rise as much — a fall of capacity
//! meanwhile would raise it: no queue then); otherwise it may only
//! lower it (a drain that still queued would confirm a baseline too high:
//! the limit holds the latency at the target, and a drain by the same
//! factor finds the baseline it assumed). Every fourth drain is **deep**,
//! under `limit / (1 + tolerance)^1.5`; a deep drain that lowered the
//! baseline by more than 5 % is followed by a deeper one, until one finds
//! nothing lower — how a baseline learned too high (during a latency spike,
//! or before the upstream got faster) is found again. Between drains, an
//! interval faster than the baseline lowers it half way. The critical
//! class keeps the whole estimate during a drain: drains cost it nothing.
//!
//! # Priorities
//!
//! The three [`Priority`] classes share one limit and one in-flight count:
//! a sheddable request is admitted while fewer than `sheddable_share` of
//! the limit are in flight, a default one below `default_share`, a critical
//! one up to the whole limit (each at least 1). So sheddable requests are
//! shed first, default ones next, and critical ones keep
//! `1 − default_share` of the limit to themselves, while any class may use
//! what the others leave.
//!
//! # The queue
//!
//! With `shedding.adaptive.queue` ([`AdaptiveQueue`](super::AdaptiveQueue)),
//! a request over its class's limit waits for a slot
//! ([`AdaptiveLimit::admit`]) instead of being shed at once, never longer
//! than its bound: controlled delay as in Facebook's server queues ("Fail
//! at Scale", after CoDel) — `timeout` while the queue empties now and
//! then, `target` once it has not been empty for `interval` — with
//! adaptive LIFO, newest first while it stands (the oldest are the
//! likeliest to have been given up by their clients); or plain LIFO or
//! FIFO with `timeout`. A request whose expected wait (a slot's time, from
//! the measured completion rate, for each request served before it) is
//! past its bound is shed as it arrives. A slot freed goes to the highest
//! class waiting, within its share of the limit. While nobody waits,
//! admission is the one compare-and-swap below; the queue's lock is taken
//! only by waiting requests and the completions that hand them a slot.
//!
//! # Admission
//!
//! Exact and lock-free: [`AdaptiveLimit::try_acquire`] compares the atomic
//! in-flight count with the class's atomic limit and increments it in one
//! compare-and-swap; never more are in flight than the limit when they
//! were admitted. [`AdaptiveLimit::release`] adds the sample to atomic
//! sums; the completion that closes an interval runs the controller under
//! a lock taken with `try_lock` (another completion closing it meanwhile is
//! not waited for). Time is the caller's [`Timestamp`](floodgate::Timestamp),
//! so a simulation drives the same code on a virtual clock.

mod admit;
mod controller;
mod explain;
mod gauges;
mod limit;
mod queue;
pub(crate) mod read;
mod window;

pub use admit::{Admission, Waited, Waiter};
pub use controller::{Controller, Window};
pub use limit::{AdaptiveLimit, Completion, Priority, Ticket};
