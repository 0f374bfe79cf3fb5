//! # Floodgate's runtime
//!
//! What the decision service (`floodgate serve`) and the gateway
//! (`floodgate gateway`) share besides their protocols: the settings
//! ([`settings`]), the store ([`AnyBackend`]), metrics and logs, signals,
//! reload and shutdown ([`lifecycle`]), liveness and readiness
//! ([`Health`]), the admin listener ([`admin`]) and its live dashboard
//! ([`dashboard`]).
//!
//! See `docs/service.md` for the settings.

#![warn(missing_docs)]

pub mod admin;
pub mod backend;
pub mod config;
pub mod config_thread;
mod dashboard;
pub mod error;
pub mod health;
pub mod lifecycle;
pub mod listener;
pub mod logging;
pub mod metrics;
pub mod settings;
pub mod signals;
pub mod sync_report;
pub mod threads;

pub use backend::AnyBackend;
pub use error::RuntimeError;
pub use health::Health;
pub use settings::Settings;
