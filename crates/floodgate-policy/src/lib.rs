//! Floodgate policies: who is limited, by what, at how many layers.

pub mod backend;
pub mod compile;
pub mod engine;
pub mod error;
pub mod failure;
pub mod observe;
mod permit;
pub mod read;
pub mod reload;
pub mod spec;
pub mod sync_mode;
pub mod unit;
pub mod yaml;
mod zones;

pub use backend::{
    Backend, BackendError, Decided, Fallback, Item, KeyId, MemoryBackend, Released, SyncBackend,
};
pub use compile::PolicySet;
pub use engine::{
    Code, Descriptor, DirectPlan, Engine, EngineError, ErrorCode, OwnedDescriptor, Response, Status,
};
pub use error::{ConfigError, ConfigErrors, Location};
pub use failure::OnFailure;
pub use permit::{BadPermit, Permit};
pub use sync_mode::{Held, SyncMode};
