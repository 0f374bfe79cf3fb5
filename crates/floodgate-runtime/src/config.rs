//! Loading the configuration, the one way every command does: the
//! settings read before the files (their paths, merging) from flags, the
//! environment and the defaults; the files, with the host's sections and
//! the frontends' accepted ([`sections`](crate::host::sections)); then
//! every setting (flags > environment > file > defaults).

use floodgate_policy::read::LoadOptions;
use floodgate_policy::reload::{Compiled, ConfigSource};

use crate::config_thread::ConfigThread;
use crate::error::RuntimeError;
use crate::settings::{ConfigType, Env, Flags, Given, Settings};

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
    /// Why the binary starts without a configuration (none: it has one),
    /// not ready until the first comes: it comes from an xDS server, or
    /// the files did not load and `start_without_config` is set.
    pub without_config: Option<String>,
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
    let xds = boot.config.config_type == ConfigType::XdsSotw;
    // Over xDS the policies come from the server only: no file is read.
    let paths = if xds {
        Vec::new()
    } else {
        boot.config
            .resolved_paths(default_config)
            .map_err(RuntimeError::Runtime)?
    };
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
    let (compiled, first) = if xds {
        (None, None)
    } else {
        first_load(&thread, &source, boot.config.start_without_config)?
    };
    // The files' first load, under envoyproxy/ratelimit's names too (over
    // xDS, the first configuration counts as every later one does).
    if source.options.envoy_stats && !xds {
        floodgate_policy::reload::count_envoy_load(compiled.is_some());
    }
    let without_config = match (&compiled, xds) {
        (Some(_), _) => None,
        (None, true) => Some("it comes from the xDS server".to_owned()),
        (None, false) => Some(format!(
            "the files do not load: {}",
            first.unwrap_or_default()
        )),
    };
    let compiled = compiled.unwrap_or_else(|| unloaded(&source));
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
        without_config,
    })
}

/// What runs before the first configuration: no policy, the files of
/// `source` watched as if they held none (the first that loads is
/// applied).
fn unloaded(source: &ConfigSource) -> Compiled {
    let loaded = floodgate_policy::read::Loaded {
        files: source.paths.clone(),
        held: vec![0; source.paths.len()],
        ..Default::default()
    };
    Compiled {
        policy: floodgate_policy::PolicySet::empty(),
        loaded,
    }
}

/// The files' first load, on `thread`; when `start_without_config`, one
/// that fails leaves the binary to start without a configuration (the
/// files are watched: the first valid version is applied), its errors
/// returned to be logged once logging is set up.
fn first_load(
    thread: &ConfigThread,
    source: &ConfigSource,
    start_without_config: bool,
) -> Result<(Option<Compiled>, Option<String>), RuntimeError> {
    let files = source.clone();
    match thread.run(move || files.compile()) {
        Ok(compiled) => Ok((Some(compiled), None)),
        Err(errors) if start_without_config => Ok((None, Some(errors.to_string()))),
        Err(errors) => Err(RuntimeError::Config(errors)),
    }
}
