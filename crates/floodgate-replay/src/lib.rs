//! Replays access logs through Floodgate policies: what would the gateway
//! have decided, request by request, had these policies been in force?
//!
//! A replay reads logs the operator already has — nginx (`combined` or
//! any `log_format`), Envoy's JSON access log, JSON lines with a timestamp
//! (the gateway's own access log among them) — plain or gzip, builds each
//! request's descriptors with the gateway's `http:` identity, and decides
//! them with the gateway's engine and algorithms on a clock set to each
//! line's arrival time: the decisions are the gateway's, shaper delays and
//! shadow mode included. Several candidate configurations, or one with
//! each algorithm swapped in at the same nominal rate
//! ([`Variant`]), are replayed side by side over the same log in one pass.
//!
//! ```no_run
//! use floodgate_replay::{CandidateSpec, LogSource, ReplayOptions, replay};
//!
//! let options = ReplayOptions {
//!     candidates: vec![CandidateSpec::parse("gateway.yaml").unwrap()],
//!     logs: vec![LogSource::parse("/var/log/nginx/access.log.gz")],
//!     ..Default::default()
//! };
//! let result = replay(&options)?;
//! for c in &result.candidates {
//!     println!("{}: {} of {} requests denied", c.name, c.denied, c.requests);
//! }
//! # Ok::<(), floodgate_replay::ReplayError>(())
//! ```
//!
//! Memory is bounded by the configuration and the store's capacity, not
//! by the log: counters over time merge their buckets as the log grows,
//! the keys denied most are kept in a Space-Saving sketch, distinct keys
//! are estimated, and only the reordering window's lines are held.

mod candidate;
mod decide;
mod error;
mod format;
mod input;
mod printable;
mod record;
mod reorder;
pub mod report;
mod run;
mod stats;
mod variants;

pub use candidate::CandidateSpec;
pub use error::ReplayError;
pub use format::{COMBINED, LineError, LogFormat};
pub use input::{Issue, IssueKind, KEPT_ISSUES, LogSource, MAX_LINE};
pub use run::{InputStats, Replay, ReplayOptions, replay};
pub use stats::{
    CandidateReport, DelayStats, KeyCount, MAX_BUCKETS, Outcome, RuleReport, TRACKED_KEYS, Timeline,
};
pub use variants::Variant;
