//! Loading the configuration, the one way every command does: the
//! settings read before the files (their paths, merging) from flags, the
//! environment and the defaults; the files, with the host's sections and
//! the frontends' accepted ([`sections`](crate::host::sections)); then
//! every setting (flags > environment > file > defaults).

use floodgate_policy::read::LoadOptions;
use floodgate_policy::reload::{Compiled, ConfigSource};

use crate::config_thread::ConfigThread;
use crate::error::RuntimeError;
use crate::settings::{Env, Flags, Given, Settings};

/// A loaded configuration.
#[derive(Debug)]
pub struct Loaded {
    /// Where it came from (watched for reloads).
    pub source: ConfigSource,
    /// The policies and the documents.
    pub compiled: Compiled,
    /// Every setting.
    pub settings: Settings,
    /// The flags and environment it was read with (a reload reads its
    /// files with them).
    pub given: Given,
    /// The keys of the host's sections its frontends read themselves (a
    /// reload leaves them to them too).
    pub frontend_keys: Vec<&'static str>,
    /// The thread it was loaded on, where it is watched and reloaded (see
    /// `Watching`).
    pub thread: ConfigThread,
}

/// Logs what a binary loaded and runs with: the files read, the domains
/// and rules they hold, the store (once logging is set up, which the
/// loaded settings configure).
pub(crate) fn log_loaded(
    files: &[std::path::PathBuf],
    policy: &floodgate_policy::PolicySet,
    store: &crate::settings::StoreSettings,
) {
    let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    tracing::info!(
        files = %files.join(","),
        domains = policy.domains().count(),
        rules = policy.rules().len(),
        store = %store.describe(),
        "configuration loaded"
    );
}

/// Loads the configuration that `flags` and `env` point to (none: the
/// first of `default_config` that exists, the command's), its files
/// holding the host's sections, the policies and `sections` (what the
/// frontends read: [`Frontend::sections`](crate::host::Frontend::sections),
/// their top-level sections and their keys of the host's). Install the
/// metrics recorder before serving: a rule resolves its metric handles
/// from it on its first decision.
pub fn load(
    flags: &Flags,
    env: &Env<'_>,
    sections: &[&'static str],
    default_config: &[&str],
) -> Result<Loaded, RuntimeError> {
    let (loaded, given) = Given::record(flags, env, |flags, env| {
        read(flags, env, sections, default_config)
    });
    loaded.map(|loaded| Loaded { given, ..loaded })
}

fn read(
    flags: &Flags,
    env: &Env<'_>,
    sections: &[&'static str],
    default_config: &[&str],
) -> Result<Loaded, RuntimeError> {
    let frontend_keys = crate::host::keys(sections);
    let boot = Settings::resolve(flags, env, &[], &frontend_keys).map_err(RuntimeError::Config)?;
    let paths = boot
        .config
        .resolved_paths(default_config)
        .map_err(RuntimeError::Runtime)?;
    let source = ConfigSource {
        paths,
        options: LoadOptions {
            merge_domains: boot.config.merge_domains,
            other_sections: crate::host::sections(sections),
            envoy_increment_all: boot.policy.envoy_increment_all,
            allow_empty: boot.config.allow_empty,
            envoy_stats: boot.policy.envoy_stats.unwrap_or(false),
        },
    };
    let thread = ConfigThread::spawn().map_err(|e| RuntimeError::Runtime(e.to_string()))?;
    let files = source.clone();
    let compiled = thread
        .run(move || files.compile())
        .map_err(RuntimeError::Config)?;
    if source.options.envoy_stats {
        floodgate_policy::reload::count_envoy_load(true);
    }
    let documents = &compiled.loaded.documents;
    let settings =
        Settings::resolve(flags, env, documents, &frontend_keys).map_err(RuntimeError::Config)?;
    Ok(Loaded {
        source,
        compiled,
        settings,
        given: Given::default(),
        frontend_keys,
        thread,
    })
}
