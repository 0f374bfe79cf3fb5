//! An adaptive concurrency limit: the number of requests let through to
//! the upstream at once follows the latency measured, so the layer protects
//! a backend whose capacity nobody wrote down, and moves when it moves.
//!
//! # The controller
//!
//! A gradient controller, as Envoy's adaptive concurrency filter and
//! Netflix's concurrency-limits `Gradient2` are. Each control interval (at
//! least `interval`, and until `min_samples` requests completed in it) the
//! mean latency of the requests that succeeded is compared with a target,
//! `no-load latency × (1 + tolerance)`:
//!
//! ```text
//! gradient = clamp(target / measured, 0.5, 1 + tolerance)
//! estimate = limit × gradient + √limit
//! limit    = limit × (1 − smoothing) + estimate × smoothing,  within [min, max]
//! ```
//!
//! Below the limit, the product `limit × target / measured` is the
//! upstream's concurrency times `1 + tolerance` whatever the limit (the
//! latency grows with the queue), so the limit settles there, the upstream
//! kept busy by a small queue whose wait is the tolerance: throughput at
//! the upstream's capacity, latency bounded. A halving of capacity doubles
//! the latency: the gradient halves the limit at once; a doubling is found
//! by the gradient's upper clamp (`1 + tolerance` a step while the latency
//! is at its baseline), not by `√limit` steps alone as in `Gradient2`,
//! whose gradient never exceeds 1 — so both converge in a few intervals.
//! The limit grows only when it was used (half of it in flight at some
//! completion of the interval, as `Gradient2` does): an idle period does
//! not leave a limit nothing has tested.
//!
//! **Errors and timeouts** (the layer counts a 502, 503 or 504 answer, and
//! an error of the service) are overload: an interval with a fraction `f`
//! of failures caps the gradient at `1 − f` (not below 0.5) and stops
//! growth. Their latencies are not samples (an upstream failing fast
//! would look fast).
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
//! Here, every `probe_every` intervals one interval is a **drain**: the
//! limit applied is the estimate without its tolerated queue,
//! `limit / (1 + tolerance)` — the upstream's own concurrency at the
//! operating point, so it stays busy and the throughput (and what is
//! shed) does not change — and the mean latency of the requests admitted
//! during the drain (only those: older ones waited in the queue) is the new
//! baseline. It may fall at once, and rise by at most `1 + tolerance / 2` a
//! drain (a drain while the capacity falls sees queueing it did not cause;
//! a slow drift of the service time is followed). Between drains, an
//! interval faster than the baseline lowers it half way.
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

mod controller;
mod limit;
pub(crate) mod read;
mod window;

pub use controller::{Controller, Window};
pub use limit::{AdaptiveLimit, Completion, Priority, Ticket};
