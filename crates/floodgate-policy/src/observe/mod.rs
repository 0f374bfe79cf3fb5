//! Watching decisions: which keys are limited most, in bounded memory.

mod top_keys;

pub use top_keys::{TopKey, TopKeys};
