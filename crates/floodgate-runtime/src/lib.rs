//! # Floodgate's runtime
//!
//! The host of Floodgate's frontends — the decision service
//! (`floodgate serve`) and the gateway (`floodgate gateway`): a frontend
//! ([`host::Frontend`]) brings its protocol, its sections of the file and
//! its listeners; the [`host`] runs it through one lifecycle (the store,
//! metrics and logs, health, reload all or nothing, the admin listener and
//! its live dashboard, signals, the shutdown delay and the drain). Every
//! listener is made the same way ([`listener`]): its protections and its
//! TLS ([`tls`]) are one group of [`settings`] instantiated per listener.
//! The policies come from files, watched, or from an xDS management server
//! (envoyproxy/ratelimit's `RateLimitConfig` resources, [`host::proto`]); either
//! way they are compiled and put in force the same way, and a binary may
//! start before the first is loaded (not ready until then).
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
//! let settings = Settings::resolve(&Flags::new(), &Env::new(&env), &files, &[])?;
//! assert_eq!(settings.server.workers, Some(2)); // the environment over the file
//! assert_eq!(settings.server.shutdown_grace.as_secs(), 20); // the file over the default
//!
//! let flags = Flags::new().with("server.workers", "4"); // `--workers 4`
//! let settings = Settings::resolve(&flags, &Env::new(&env), &files, &[])?;
//! assert_eq!(settings.server.workers, Some(4)); // the flag over everything
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! See `docs/service.md` for the settings.

mod admin;
mod admin_hosts;
mod backend;
mod config;
mod config_thread;
mod dashboard;
mod error;
mod health;
pub mod host;
mod lifecycle;
pub mod listener;
mod logging;
mod metrics;
mod otel;
mod process_metrics;
pub mod settings;
mod signals;
mod threads;
pub mod tls;
mod xds;

pub use error::RuntimeError;
pub use settings::Settings;
