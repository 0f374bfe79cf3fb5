//! Loading configuration files into a [`PolicySpec`].
//!
//! A path is a file or a directory (every `*.yaml`/`*.yml` in it that does
//! not start with a dot, in name order). A file whose top level has `domain:`
//! is an envoyproxy/ratelimit file (one domain); any other file is a
//! Floodgate file, which may list envoyproxy/ratelimit files or directories
//! under `envoy_configs:`.

mod bounded;
mod descriptors;
mod envoy;
mod floodgate;
pub(crate) mod limits;
mod rate_limit;
mod sync_mode;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{ConfigError, ConfigErrors, Errors, Location};
use crate::spec::{Dialect, DomainSpec, PolicySpec};
use crate::yaml::Document;

pub use bounded::read_bounded;
pub use floodgate::{POLICY_SECTIONS, parse_cidr};
pub use limits::{ALGORITHMS, parse_nginx_rate};
pub use sync_mode::read_sync_mode;

/// How to load.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Merge several files of the same domain instead of rejecting them
    /// (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`).
    pub merge_domains: bool,
    /// Top-level sections of Floodgate files that other components read
    /// (e.g. `server`, `store`); accepted here, rejected if unknown to all.
    pub other_sections: Vec<&'static str>,
    /// Forces `settings.envoy_increment_all` (envoyproxy/ratelimit's
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, inverted).
    pub envoy_increment_all: Option<bool>,
    /// Accept an empty configuration: a file with nothing in it, a
    /// Floodgate domain with no rules, no domain at all. Without it each is
    /// an error — an emptied or truncated file would otherwise lift every
    /// limit it held — and a reload to such a configuration is refused.
    /// Only the operator can say so (a flag or an environment variable),
    /// never the files themselves: a file cannot vouch for its own
    /// emptiness.
    pub allow_empty: bool,
    /// Counts each reload under envoyproxy/ratelimit's names too
    /// (`ratelimit_service_config_load_success`, `_error`): its
    /// `USE_PROMETHEUS`.
    pub envoy_stats: bool,
}

/// The result of loading.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The policies.
    pub spec: PolicySpec,
    /// Every file read (to watch for changes).
    pub files: Vec<PathBuf>,
    /// For each of `files`, how many rules and list entries its domains
    /// define at their top level (a reload refuses a file that held some
    /// and holds none: see [`LoadOptions::allow_empty`]).
    pub held: Vec<usize>,
    /// The Floodgate-format documents, for the components that read their
    /// own sections from them.
    pub documents: Vec<Document>,
}

/// Loads `paths` (files or directories).
pub fn load(paths: &[PathBuf], options: &LoadOptions) -> Result<Loaded, ConfigErrors> {
    let mut errors = Errors::default();
    let mut loaded = Loaded::default();
    let mut settings_from: Option<Location> = None;
    let mut envoy_queue: Vec<PathBuf> = Vec::new();
    let mut seen = Seen::default();
    for path in paths {
        for file in expand(path, &mut errors) {
            if !seen.first_time(&file) {
                continue;
            }
            let Some(text) = read_text(&file, &mut errors) else {
                continue;
            };
            load_file(
                &file,
                &text,
                options,
                &mut loaded,
                &mut settings_from,
                &mut envoy_queue,
                &mut errors,
            );
        }
    }
    // envoyproxy/ratelimit files referenced from Floodgate files.
    for path in envoy_queue {
        for file in expand(&path, &mut errors) {
            if !seen.first_time(&file) {
                continue;
            }
            let Some(text) = read_text(&file, &mut errors) else {
                continue;
            };
            let name: Arc<str> = file.display().to_string().into();
            let mut held = 0;
            match Document::parse(&name, &text) {
                Ok(doc) => {
                    let Some(root) = errors.take(doc.root().map()) else {
                        continue;
                    };
                    if let Some(d) = envoy::read_envoy_file(&root, &mut errors) {
                        held = d.held();
                        loaded.spec.domains.push(d);
                    }
                }
                Err(e) => errors.push(e),
            }
            loaded.files.push(file);
            loaded.held.push(held);
        }
    }
    merge_domains(&mut loaded.spec, options.merge_domains, &mut errors);
    if let Some(v) = options.envoy_increment_all {
        loaded.spec.settings.envoy_increment_all = v;
    }
    let at = match paths {
        [one] => Location::file(&Arc::from(one.display().to_string())),
        _ => Location::default(),
    };
    check_not_empty(&loaded.spec, options, at, &mut errors);
    errors.finish(loaded)
}

/// Loads one file's text (for tests and `config check` of inline input).
pub fn load_str(name: &str, text: &str, options: &LoadOptions) -> Result<PolicySpec, ConfigErrors> {
    let mut errors = Errors::default();
    let mut loaded = Loaded::default();
    let mut queue = Vec::new();
    load_file(
        Path::new(name),
        text,
        options,
        &mut loaded,
        &mut None,
        &mut queue,
        &mut errors,
    );
    if !queue.is_empty() {
        errors.push(ConfigError::new(
            Location::file(&Arc::from(name)),
            "envoy_configs can only be used in a file loaded from disk",
        ));
    }
    merge_domains(&mut loaded.spec, options.merge_domains, &mut errors);
    if let Some(v) = options.envoy_increment_all {
        loaded.spec.settings.envoy_increment_all = v;
    }
    check_not_empty(
        &loaded.spec,
        options,
        Location::file(&Arc::from(name)),
        &mut errors,
    );
    errors.finish(loaded.spec)
}

/// Loads envoyproxy/ratelimit configurations that come as named texts
/// rather than files (the `RateLimitConfig` resources of an xDS server,
/// written out as that service writes them before loading): each is read
/// as a file of that service is, the domains merged or refused as
/// `options` say. Nothing is watched: [`Loaded::files`] stays empty.
pub fn load_envoy_texts(
    texts: &[(String, String)],
    options: &LoadOptions,
) -> Result<Loaded, ConfigErrors> {
    let mut errors = Errors::default();
    let mut loaded = Loaded::default();
    for (name, text) in texts {
        let name: Arc<str> = name.as_str().into();
        let doc = match Document::parse(&name, text) {
            Ok(doc) => doc,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let Some(root) = errors.take(doc.root().map()) else {
            continue;
        };
        if let Some(d) = envoy::read_envoy_file(&root, &mut errors) {
            loaded.spec.domains.push(d);
        }
    }
    merge_domains(&mut loaded.spec, options.merge_domains, &mut errors);
    if let Some(v) = options.envoy_increment_all {
        loaded.spec.settings.envoy_increment_all = v;
    }
    check_not_empty(&loaded.spec, options, Location::default(), &mut errors);
    errors.finish(loaded)
}

/// Refuses a configuration that limits nothing unless
/// [`LoadOptions::allow_empty`] says it is intended: no domain at all, or
/// a Floodgate domain without a single rule or list. (An
/// envoyproxy/ratelimit file of a domain without descriptors loads, as
/// that service loads it.)
fn check_not_empty(spec: &PolicySpec, options: &LoadOptions, at: Location, errors: &mut Errors) {
    if options.allow_empty || !errors.is_empty() {
        return;
    }
    if spec.domains.is_empty() {
        errors.push(ConfigError::new(
            at,
            "no domain is configured, so nothing would be limited; an empty configuration must be allowed explicitly (--allow-empty-config)",
        ));
    }
    for d in &spec.domains {
        if d.dialect == Dialect::Floodgate
            && d.descriptors.is_empty()
            && d.allow.is_empty()
            && d.deny.is_empty()
        {
            errors.push(ConfigError::new(
                d.at.clone(),
                format!(
                    "domain '{}' has no descriptors, allow or deny, so it limits nothing; an empty domain must be allowed explicitly (--allow-empty-config)",
                    crate::yaml::excerpt(&d.name)
                ),
            ));
        }
    }
}

/// Reads one file's `text` into `loaded`: an envoyproxy/ratelimit
/// domain, or a Floodgate file's settings (once in all files) and
/// domains; the envoyproxy/ratelimit files it lists go to
/// `envoy_queue`. An empty file is an error unless allowed.
fn load_file(
    file: &Path,
    text: &str,
    options: &LoadOptions,
    loaded: &mut Loaded,
    settings_from: &mut Option<Location>,
    envoy_queue: &mut Vec<PathBuf>,
    errors: &mut Errors,
) {
    let name: Arc<str> = file.display().to_string().into();
    loaded.files.push(file.to_path_buf());
    loaded.held.push(0);
    let doc = match Document::parse(&name, text) {
        Ok(doc) => doc,
        Err(e) => return errors.push(e),
    };
    let Some(root) = errors.take(doc.root().map()) else {
        return;
    };
    if root.keys().next().is_none() && !options.allow_empty {
        // Empty, blank, only comments: most likely a file emptied or cut
        // short while being written.
        return errors.push(ConfigError::new(
            Location::file(&name),
            "file is empty: nothing is configured in it; an empty file must be allowed explicitly (--allow-empty-config)",
        ));
    }
    if root.keys().any(|(k, _)| k == "domain") {
        if let Some(d) = envoy::read_envoy_file(&root, errors) {
            if let Some(h) = loaded.held.last_mut() {
                *h = d.held();
            }
            loaded.spec.domains.push(d);
        }
        return;
    }
    let dir = file.parent().unwrap_or(Path::new("."));
    let f = floodgate::read_floodgate_file(&root, dir, &options.other_sections, errors);
    if let Some(s) = f.settings {
        match settings_from {
            Some(first) => errors.push(ConfigError::new(
                root.get("settings")
                    .map(|n| n.at())
                    .unwrap_or_else(|| Location::file(&name)),
                format!("settings are already given in {first}"),
            )),
            None => {
                *settings_from = Some(root.get("settings").map(|n| n.at()).unwrap_or_default());
                loaded.spec.settings = s;
            }
        }
    }
    if let Some(h) = loaded.held.last_mut() {
        *h = f.domains.iter().map(DomainSpec::held).sum();
    }
    loaded.spec.domains.extend(f.domains);
    envoy_queue.extend(f.envoy_configs);
    drop(root);
    loaded.documents.push(doc);
}

/// Rejects (or merges) several files of one domain.
fn merge_domains(spec: &mut PolicySpec, merge: bool, errors: &mut Errors) {
    let mut out: Vec<crate::spec::DomainSpec> = Vec::with_capacity(spec.domains.len());
    for d in spec.domains.drain(..) {
        match out.iter_mut().find(|o| o.name == d.name) {
            Some(first) if merge => {
                first.descriptors.extend(d.descriptors);
                first.allow.extend(d.allow);
                first.deny.extend(d.deny);
            }
            Some(first) => errors.push(ConfigError::new(
                d.at.clone(),
                format!(
                    "duplicate domain '{}' in config file (first at {}; merge them with \
                     `--merge-domains`, or check files of separate deployments one by one \
                     with `floodgate config check --each`)",
                    d.name, first.at
                ),
            )),
            None => out.push(d),
        }
    }
    spec.domains = out;
}

/// The files read so far, by their canonical path: a file named twice,
/// or both on its own and through its directory, is read once.
#[derive(Default)]
struct Seen(std::collections::HashSet<PathBuf>);

impl Seen {
    /// Whether `file` is met for the first time (a path that cannot be
    /// resolved is taken as written: reading it reports why).
    fn first_time(&mut self, file: &Path) -> bool {
        let canonical = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
        self.0.insert(canonical)
    }
}

/// The files a path stands for.
fn expand(path: &Path, errors: &mut Errors) -> Vec<PathBuf> {
    let name: Arc<str> = path.display().to_string().into();
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            let mut files: Vec<PathBuf> = match std::fs::read_dir(path) {
                Ok(rd) => rd
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| is_config_name(p) && is_file(p, errors))
                    .collect(),
                Err(e) => {
                    errors.push(ConfigError::new(
                        Location::file(&name),
                        format!("cannot read directory: {e}"),
                    ));
                    return Vec::new();
                }
            };
            files.sort();
            files
        }
        Ok(_) => vec![path.to_path_buf()],
        Err(e) => {
            errors.push(ConfigError::new(
                Location::file(&name),
                format!("cannot read: {e}"),
            ));
            Vec::new()
        }
    }
}

/// Whether an entry of a configuration directory is named as a
/// configuration file: `*.yaml` or `*.yml`, not hidden (a dot-entry:
/// kubelet's `..data` and timestamped copies of a ConfigMap, editors'
/// files).
fn is_config_name(p: &Path) -> bool {
    let file = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !file.starts_with('.') && (file.ends_with(".yaml") || file.ends_with(".yml"))
}

/// Whether `p`, named as a configuration file, is one (following
/// symbolic links); an error otherwise: a directory or a link to nothing
/// in its place is a configuration that cannot be read, never one
/// without that file.
fn is_file(p: &Path, errors: &mut Errors) -> bool {
    let why = match std::fs::metadata(p) {
        Ok(m) if m.is_file() => return true,
        Ok(m) if m.is_dir() => "a directory, not a file".to_owned(),
        Ok(_) => "not a regular file".to_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            "a symbolic link to nothing".to_owned()
        }
        Err(e) => e.to_string(),
    };
    let name: Arc<str> = p.display().to_string().into();
    errors.push(ConfigError::new(
        Location::file(&name),
        format!("cannot read: {why}"),
    ));
    false
}

/// The text of `file`, read up to the size limit; `None` (an error
/// recorded) when it cannot be read, is too large or is not UTF-8.
fn read_text(file: &Path, errors: &mut Errors) -> Option<String> {
    let name: Arc<str> = file.display().to_string().into();
    // Bounded whatever the path names (a device, a pipe): never read
    // without end.
    match read_bounded(file, crate::yaml::MAX_FILE_BYTES as u64) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(s) => Some(s),
            Err(_) => {
                errors.push(ConfigError::new(
                    Location::file(&name),
                    "file is not valid UTF-8",
                ));
                None
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            errors.push(ConfigError::new(
                Location::file(&name),
                format!("file is {e}"),
            ));
            None
        }
        Err(e) => {
            errors.push(ConfigError::new(
                Location::file(&name),
                format!("cannot read: {e}"),
            ));
            None
        }
    }
}
