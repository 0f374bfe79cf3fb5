//! The algorithms. Each is a limit's parameters plus a pure decision function
//! ([`Algorithm::decide`](crate::Algorithm::decide)); see `docs/algorithms.md`
//! for when to use which.

mod any;
mod concurrency;
mod fixed_window;
mod gcra;
mod set;
mod shape;
mod shaper;
mod sliding_log;
mod sliding_window;

pub use any::{AnyLimit, AnyState, LimitKind, Penalty};
pub use concurrency::Concurrency;
pub use fixed_window::{FixedWindow, WindowState};
pub use gcra::{Gcra, GcraState};
pub use set::Limits;
pub use shape::Quota;
pub use shaper::{NginxRate, Shaper, ShaperDelay, ShaperState};
pub use sliding_log::{LogState, SlidingLog};
pub use sliding_window::{SlidingWindow, SlidingWindowState, SubWindowCounter, SubWindowState};
