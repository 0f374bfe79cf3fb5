//! The algorithms. Each is a limit's parameters plus a pure decision function
//! ([`Algorithm::decide`](crate::Algorithm::decide)); see `docs/algorithms.md`
//! for when to use which.
//!
//! [`AnyLimit`] holds one limit of any algorithm, chosen at run time. What
//! the other layers need of an algorithm besides its decisions is asked of
//! it: its name in a configuration ([`AnyLimit::name`]), the quota a client
//! is told of ([`AnyLimit::quota`]), the windows it counts in
//! ([`AnyLimit::counting_window`], [`AnyLimit::reset_window`]) and its
//! parameters in words ([`AnyLimit::describe`]). Layers that implement an
//! algorithm elsewhere (the Redis store's scripts) match on
//! [`AnyLimit::kind`], exhaustively. A store holding keys of every kind
//! keeps each state as a 16-byte [`PackedState`] and decides through a
//! [`Packed`] limit, so that its entries are 32 bytes.
//!
//! # Adding an algorithm
//!
//! A new algorithm `Foo` is:
//!
//! 1. its module here, `foo.rs`: the limit, its state, its
//!    [`Algorithm`](crate::Algorithm) implementation and its `Shape` (name,
//!    quota, windows, words), with tests;
//! 2. a variant of `AnyLimit`'s kinds, of [`AnyState`] and of
//!    [`LimitKind`]: from there the compiler points at every match that must
//!    handle it (the dispatch in `any.rs`, the packing in `packed.rs`; in
//!    `floodgate-redis`, its encoding for the scripts, its scaling for the
//!    local fallback, the synchronisation modes it supports and how their
//!    state is installed; the tests that list one limit of every
//!    algorithm);
//! 3. its Redis script, `floodgate-redis/src/lua/foo.lua`, included with
//!    the others (`script.rs`), its arguments read in `read_item.lua` and
//!    its functions called in `dispatch.lua`;
//! 4. its name and fields in a configuration: a variant of
//!    `floodgate_policy::spec::LimitSpec`, read in `read/limits.rs` (the
//!    compiler then points at its compilation into an `AnyLimit`);
//! 5. its section in `docs/algorithms.md`.

mod any;
mod concurrency;
mod fixed_window;
mod gcra;
mod held_by;
mod leases;
mod packed;
mod set;
mod shape;
mod shaper;
mod sliding_log;
mod sliding_window;

pub use any::{AnyLimit, AnyState, LimitKind, Penalty};
pub use concurrency::Concurrency;
pub use fixed_window::{FixedWindow, WindowState};
pub use gcra::{Gcra, GcraState};
pub use held_by::HeldBy;
pub use leases::{ANONYMOUS, Holder, LeaseState};
pub use packed::{Packed, PackedState};
pub use set::Limits;
pub use shape::Quota;
pub use shaper::{NginxRate, Shaper, ShaperDelay, ShaperState};
pub use sliding_log::{LogState, SlidingLog};
pub use sliding_window::{SlidingWindow, SlidingWindowState, SubWindowCounter, SubWindowState};
