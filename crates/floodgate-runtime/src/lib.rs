//! # Floodgate's runtime
//!
//! What the decision service (`floodgate serve`) and the gateway
//! (`floodgate gateway`) share besides their protocols: the settings
//! ([`settings`]), the store ([`AnyBackend`]), metrics and logs, signals,
//! reload and shutdown ([`lifecycle`]), liveness and readiness
//! ([`Health`]), the admin listener ([`admin`]) and its live dashboard
//! (`dashboard`).
//!
//! Every setting is declared once and read the same way by every binary:
//! a flag over the environment over the file over its default.
//!
//! ```
//! use floodgate_policy::yaml::Document;
//! use floodgate_runtime::Settings;
//! use floodgate_runtime::settings::{Env, Flags};
//!
//! let file = "server: {workers: 1, shutdown_grace: 20s}";
//! let files = [Document::parse(&"floodgate.yaml".into(), file)?];
//! let env = |name: &str| (name == "FLOODGATE_WORKERS").then(|| "2".to_owned());
//! let settings = Settings::resolve(&Flags::new(), &Env::new(&env), &files)?;
//! assert_eq!(settings.server.workers, Some(2)); // the environment over the file
//! assert_eq!(settings.server.shutdown_grace.as_secs(), 20); // the file over the default
//!
//! let flags = Flags::new().with("server.workers", "4"); // `--workers 4`
//! let settings = Settings::resolve(&flags, &Env::new(&env), &files)?;
//! assert_eq!(settings.server.workers, Some(4)); // the flag over everything
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! See `docs/service.md` for the settings.

#![warn(missing_docs)]

pub mod admin;
mod admin_hosts;
pub mod backend;
pub mod config;
pub mod config_thread;
mod dashboard;
pub mod error;
pub mod health;
pub mod host;
pub mod lifecycle;
pub mod listener;
pub mod logging;
pub mod metrics;
pub mod settings;
pub mod signals;
pub mod sync_report;
pub mod threads;
pub mod tls;

pub use backend::AnyBackend;
pub use error::RuntimeError;
pub use health::Health;
pub use settings::Settings;
