//! Floodgate policies: who is limited, by what, at how many layers.

#![warn(missing_docs)]

pub mod backend;

pub use backend::{Backend, BackendError, Item, MemoryBackend};
