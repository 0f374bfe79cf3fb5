//! Hot reload: watch the configuration files, and when they change, load and
//! compile them; a valid configuration is swapped in atomically, an invalid
//! one is rejected (logged, counted) and the running one stays.
//!
//! Files are polled (size, modification time and identity of each file,
//! following symlinks, then a hash of the contents), which also catches the
//! symlink swaps of Kubernetes ConfigMap volumes and editors that replace
//! files instead of writing them. A reload can also be asked for at once
//! ([`ReloadTrigger`], e.g. on `SIGHUP`): the contents are then compared
//! whatever the files' metadata says. Files still being written are not
//! read until they settle (see [`Reloader`]).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crate::compile::PolicySet;
use crate::compile::StableHasher;
use crate::error::{ConfigError, ConfigErrors, Errors, Location};
use crate::read::{LoadOptions, Loaded, load};

/// Where the configuration comes from.
#[derive(Clone, Debug)]
pub struct ConfigSource {
    /// Files and directories.
    pub paths: Vec<PathBuf>,
    /// How to read them.
    pub options: LoadOptions,
}

/// What a file looks like from outside, to tell that it changed without
/// reading it: its size, modification time and identity (device and
/// inode, following symlinks; zero where the platform has none). The
/// identity catches a file renamed into place with the size and the
/// modification time (to the file system's clock tick) of the one it
/// replaces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileStamp {
    /// Size in bytes.
    pub len: u64,
    /// Modification time, in nanoseconds since the Unix epoch.
    pub modified: u64,
    /// Inode number.
    pub ino: u64,
    /// Device number.
    pub dev: u64,
}

impl FileStamp {
    /// The stamp of `path` now (none: it cannot be looked at).
    pub fn of(path: &Path) -> Option<FileStamp> {
        let m = std::fs::metadata(path).ok()?;
        let modified = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .unwrap_or_default()
            .as_nanos() as u64;
        #[cfg(unix)]
        let (ino, dev) = {
            use std::os::unix::fs::MetadataExt;
            (m.ino(), m.dev())
        };
        #[cfg(not(unix))]
        let (ino, dev) = (0, 0);
        Some(FileStamp {
            len: m.len(),
            modified,
            ino,
            dev,
        })
    }
}

/// A loaded and compiled configuration.
#[derive(Debug)]
pub struct Compiled {
    /// The compiled policies.
    pub policy: PolicySet,
    /// Everything read (other components parse their sections from it).
    pub loaded: Loaded,
}

impl ConfigSource {
    /// Loads and compiles.
    pub fn compile(&self) -> Result<Compiled, ConfigErrors> {
        let loaded = load(&self.paths, &self.options)?;
        let policy = PolicySet::compile(&loaded.spec)?;
        Ok(Compiled { policy, loaded })
    }

    /// What `files` and every entry of the watched directories look like
    /// now (new files in a watched directory count as changes too), in
    /// path order.
    fn look(&self, files: &[PathBuf]) -> Looks {
        let mut all: Vec<PathBuf> = files.to_vec();
        for p in &self.paths {
            if let Ok(rd) = std::fs::read_dir(p) {
                all.extend(rd.filter_map(|e| e.ok().map(|e| e.path())));
            }
        }
        all.sort();
        all.dedup();
        all.into_iter()
            .map(|f| {
                let stamp = FileStamp::of(&f);
                (f, stamp)
            })
            .collect()
    }

    /// A fingerprint of the files' contents, read through a small buffer
    /// (a file of the largest size is not held, nor left to the
    /// allocator).
    fn digest(&self, files: &[PathBuf]) -> u64 {
        let mut h = StableHasher::default();
        let mut buf = vec![0; 64 << 10];
        for f in files {
            h.field(f.as_os_str().as_encoded_bytes());
            // The contents, then their length (or a mark: unreadable).
            let read = std::fs::File::open(f).and_then(|file| {
                let mut file = file.take(crate::yaml::MAX_FILE_BYTES as u64 + 1);
                let mut len = 0u64;
                loop {
                    match file.read(&mut buf) {
                        Ok(0) => return Ok(len),
                        Ok(n) => {
                            h.bytes(&buf[..n]);
                            len += n as u64;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
            });
            h.u64(read.unwrap_or(u64::MAX));
        }
        h.finish()
    }
}

/// What each file of `loaded` holds.
fn held(loaded: &Loaded) -> Vec<(PathBuf, usize)> {
    loaded
        .files
        .iter()
        .cloned()
        .zip(loaded.held.iter().copied())
        .collect()
}

/// Each watched file and its stamp (none: it cannot be looked at).
type Looks = Vec<(PathBuf, Option<FileStamp>)>;

/// The first file whose look differs between `a` and `b`, for logs.
fn first_change(a: &Looks, b: &Looks) -> String {
    let changed = a
        .iter()
        .chain(b)
        .find(|entry| !a.contains(entry) || !b.contains(entry));
    changed.map_or_else(String::new, |(p, _)| p.display().to_string())
}

/// How long the files must stay unchanged before they are read, unless set
/// ([`Reloader::with_settle`]) or taken from the polling interval (the
/// shorter of the two).
pub const SETTLE: Duration = Duration::from_secs(1);

/// Looks at still-changing files before a check gives up for this round.
const SETTLE_ROUNDS: usize = 2;

/// The result of one check for changes.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// Nothing changed.
    Unchanged,
    /// A new configuration was loaded and handed over.
    Applied,
    /// The files changed but do not load; the running configuration stays.
    Rejected(ConfigErrors),
    /// The files load, but the hand-over refused the configuration (e.g. a
    /// rule the store cannot decide); the running configuration stays.
    Refused(String),
    /// The files kept changing (size, time or identity) while they were
    /// looked at or read: still being written. Nothing was applied; the
    /// running configuration stays and the next check reads them again.
    Unsettled {
        /// A file that changed.
        file: String,
    },
}

/// What a reloader's hand-over returns: `()` (it always takes the new
/// configuration) or a `Result` whose error refuses it.
pub trait HandOver {
    /// `Err` with the reason when the configuration was refused.
    fn refused(self) -> Result<(), String>;
}

impl HandOver for () {
    fn refused(self) -> Result<(), String> {
        Ok(())
    }
}

impl<E: std::fmt::Display> HandOver for Result<(), E> {
    fn refused(self) -> Result<(), String> {
        self.map_err(|e| e.to_string())
    }
}

/// Checks a [`ConfigSource`] for changes and hands each new valid
/// configuration to `apply`.
///
/// Files are read only once they have stopped changing: a change seen is
/// looked at again after the settling time, then the files are read and
/// looked at once more. A file that changed in between (a writer still at
/// work, a file truncated and being rewritten in place) is not applied:
/// the check is refused ([`ReloadOutcome::Unsettled`]), logged and counted
/// (`floodgate_config_reloads_total{result="unsettled"}`), and repeated
/// later. Replacing a file by a rename is atomic and needs no settling.
pub struct Reloader<F> {
    source: ConfigSource,
    files: Vec<PathBuf>,
    /// What each file of the running configuration holds (see
    /// [`Loaded::held`]).
    held: Vec<(PathBuf, usize)>,
    looks: Looks,
    digest: u64,
    settle: Option<Duration>,
    stop: Option<Arc<Flags>>,
    apply: F,
}

impl<F, R> Reloader<F>
where
    F: FnMut(Compiled) -> R + Send,
    R: HandOver,
{
    /// Watches `source`, whose current configuration `current` is already
    /// running.
    pub fn new(source: ConfigSource, current: &Compiled, apply: F) -> Self {
        let files = current.loaded.files.clone();
        Reloader {
            held: held(&current.loaded),
            looks: source.look(&files),
            digest: source.digest(&files),
            files,
            source,
            settle: None,
            stop: None,
            apply,
        }
    }

    /// How long files must stay unchanged before they are read (default:
    /// [`SETTLE`], or the polling interval if shorter).
    pub fn with_settle(mut self, settle: Duration) -> Self {
        self.settle = Some(settle);
        self
    }

    fn settle(&self) -> Duration {
        self.settle.unwrap_or(SETTLE)
    }

    /// Checks once: nothing more when no file's metadata changed.
    pub fn poll(&mut self) -> ReloadOutcome {
        self.check(false)
    }

    /// Checks once, comparing the contents even when no file's metadata
    /// changed (a reload asked for: a file rewritten within the same
    /// modification time and size is still seen).
    pub fn poll_now(&mut self) -> ReloadOutcome {
        self.check(true)
    }

    /// Waits `d`; false when the watcher is being stopped meanwhile.
    fn pause(&self, d: Duration) -> bool {
        let Some(flags) = &self.stop else {
            std::thread::sleep(d);
            return true;
        };
        let until = std::time::Instant::now() + d;
        loop {
            if flags.stop.load(Ordering::Acquire) {
                return false;
            }
            let now = std::time::Instant::now();
            if now >= until {
                return true;
            }
            std::thread::park_timeout(until - now);
        }
    }

    fn check(&mut self, forced: bool) -> ReloadOutcome {
        let mut files = self.files.clone();
        let mut before = self.source.look(&files);
        if before == self.looks && !forced {
            return ReloadOutcome::Unchanged;
        }
        let mut changed = String::new();
        for _ in 0..SETTLE_ROUNDS {
            if !self.pause(self.settle()) {
                return ReloadOutcome::Unchanged;
            }
            let again = self.source.look(&files);
            if again != before {
                changed = first_change(&before, &again);
                before = again;
                continue;
            }
            if self.same_contents(&files, &again) {
                self.looks = again;
                return self.unchanged();
            }
            let result = self.source.compile();
            let read = match &result {
                Ok(c) => c.loaded.files.clone(),
                Err(_) => files.clone(),
            };
            let after = self.source.look(&read);
            if after == before {
                self.looks = after;
                return self.settled(result);
            }
            // Changed while read, or other files now take part (a new
            // `envoy_configs` entry): look at them settle too.
            changed = first_change(&before, &after);
            files = read;
            before = after;
        }
        metrics::counter!("floodgate_config_reloads_total", "result" => "unsettled").increment(1);
        metrics::gauge!("floodgate_config_last_reload_ok").set(0.0);
        tracing::warn!(
            file = %changed,
            "configuration files are still being written; the running configuration stays in force until they settle"
        );
        ReloadOutcome::Unsettled { file: changed }
    }

    /// Whether the running configuration's `files`, looking as `now`
    /// (directories' entries included), hold what they held when it was
    /// loaded: the same paths, each present, the same bytes. Settings
    /// other than the files' do not change while a binary runs, so the
    /// same bytes load into the same configuration: no need to compile.
    fn same_contents(&self, files: &[PathBuf], now: &Looks) -> bool {
        now.len() == self.looks.len()
            && now
                .iter()
                .zip(&self.looks)
                .all(|((a, stamp), (b, _))| a == b && stamp.is_some())
            && self.source.digest(files) == self.digest
    }

    /// Reports files read again with nothing changed in them: logged and
    /// counted (`floodgate_config_reloads_total{result="unchanged"}`).
    /// They hold what is running, so no refused file is left waiting: a
    /// failed reload's alarm (`floodgate_config_last_reload_ok` 0) clears
    /// when its file is put back as it was.
    fn unchanged(&self) -> ReloadOutcome {
        metrics::counter!("floodgate_config_reloads_total", "result" => "unchanged").increment(1);
        metrics::gauge!("floodgate_config_last_reload_ok").set(1.0);
        tracing::info!("the configuration is unchanged: nothing compiled or replaced");
        ReloadOutcome::Unchanged
    }

    /// Refuses a configuration where a file that held rules holds none
    /// (emptied of them, or cut short before them), unless an empty
    /// configuration is allowed. Deleting the file is how its rules are
    /// removed.
    fn emptied(&self, compiled: &Compiled) -> Result<(), ConfigErrors> {
        if self.source.options.allow_empty {
            return Ok(());
        }
        let mut errors = Errors::default();
        for (file, now) in compiled.loaded.files.iter().zip(&compiled.loaded.held) {
            let before = self.held.iter().find(|(f, _)| f == file).map(|h| h.1);
            if let (0, Some(before @ 1..)) = (*now, before) {
                errors.push(ConfigError::new(
                    Location::file(&Arc::from(file.display().to_string())),
                    format!(
                        "the file held {before} rule(s) and now holds none (emptied, or cut short?); removing every rule of a file must be allowed explicitly (--allow-empty-config), or the file deleted"
                    ),
                ));
            }
        }
        errors.finish(())
    }

    /// Counts a reload that was applied (`ok`) or not: under
    /// envoyproxy/ratelimit's names too with its `USE_PROMETHEUS`
    /// ([`LoadOptions::envoy_stats`](crate::read::LoadOptions::envoy_stats)).
    fn count(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        metrics::counter!("floodgate_config_reloads_total", "result" => result).increment(1);
        if self.source.options.envoy_stats {
            count_envoy_load(ok);
        }
    }

    /// Hands over what settled files loaded into, or reports why not.
    fn settled(&mut self, result: Result<Compiled, ConfigErrors>) -> ReloadOutcome {
        let result = result.and_then(|c| self.emptied(&c).map(|()| c));
        let outcome = match result {
            Ok(compiled) => {
                let digest = self.source.digest(&compiled.loaded.files);
                self.files = compiled.loaded.files.clone();
                if digest == self.digest {
                    return self.unchanged();
                }
                self.digest = digest;
                let held = held(&compiled.loaded);
                match (self.apply)(compiled).refused() {
                    Ok(()) => {
                        self.held = held;
                        self.count(true);
                        tracing::info!("configuration reloaded");
                        ReloadOutcome::Applied
                    }
                    Err(reason) => {
                        self.count(false);
                        tracing::error!(%reason, "configuration refused; the running configuration stays in force");
                        ReloadOutcome::Refused(reason)
                    }
                }
            }
            Err(errors) => {
                self.count(false);
                tracing::error!(%errors, "configuration rejected; the running configuration stays in force");
                ReloadOutcome::Rejected(errors)
            }
        };
        metrics::gauge!("floodgate_config_last_reload_ok").set(
            if matches!(
                outcome,
                ReloadOutcome::Rejected(_) | ReloadOutcome::Refused(_)
            ) {
                0.0
            } else {
                1.0
            },
        );
        outcome
    }

    /// Polls every `interval` on a background thread until the returned
    /// handle is dropped; [`WatchHandle::trigger`] asks for a check at once.
    pub fn spawn(self, interval: Duration) -> WatchHandle
    where
        F: 'static,
    {
        self.spawn_with(Some(interval).filter(|i| !i.is_zero()))
    }

    /// Like [`spawn`](Self::spawn); with no interval the thread checks only
    /// when a [`ReloadTrigger`] asks. Files still being written are checked
    /// again once the settling time has passed.
    pub fn spawn_with(self, interval: Option<Duration>) -> WatchHandle
    where
        F: 'static,
    {
        self.spawn_on(interval, |watch| {
            std::thread::Builder::new()
                .name("floodgate-config-watch".into())
                .spawn(watch)
                .ok()
        })
    }

    /// Like [`spawn_with`](Self::spawn_with), on the thread that `thread`
    /// runs the watcher on (none: it could not; nothing is watched): e.g.
    /// the thread that loaded the running configuration, so that the
    /// policies a reload replaces are freed by the thread that allocated
    /// them. The watcher parks that thread between checks.
    pub fn spawn_on(
        mut self,
        interval: Option<Duration>,
        thread: impl FnOnce(Box<dyn FnOnce() + Send>) -> Option<JoinHandle<()>>,
    ) -> WatchHandle
    where
        F: 'static,
    {
        let flags = Arc::new(Flags::default());
        self.stop = Some(flags.clone());
        if self.settle.is_none() {
            self.settle = Some(interval.map_or(SETTLE, |i| i.min(SETTLE)));
        }
        let shared = flags.clone();
        let thread = thread(Box::new(move || {
            // After an unsettled check: check again soon, as asked.
            let mut again: Option<bool> = None;
            while !shared.stop.load(Ordering::Acquire) {
                // Not when a check was asked for already: its wake-up may
                // have been spent before this thread came to wait (by
                // whatever it ran before, e.g. waiting for this job).
                if !shared.asked.load(Ordering::Acquire) {
                    match (again, interval) {
                        (Some(_), _) => std::thread::park_timeout(self.settle()),
                        (None, Some(i)) => std::thread::park_timeout(i),
                        (None, None) => std::thread::park(),
                    }
                }
                if shared.stop.load(Ordering::Acquire) {
                    break;
                }
                let asked = shared.asked.swap(false, Ordering::AcqRel);
                let outcome = if asked || again == Some(true) {
                    self.poll_now()
                } else if interval.is_some() || again.is_some() {
                    self.poll()
                } else {
                    continue;
                };
                again = match outcome {
                    ReloadOutcome::Unsettled { .. } => Some(asked || again == Some(true)),
                    _ => None,
                };
            }
        }));
        WatchHandle { flags, thread }
    }
}

#[derive(Default)]
struct Flags {
    stop: AtomicBool,
    asked: AtomicBool,
}

/// Stops the watcher thread when dropped.
pub struct WatchHandle {
    flags: Arc<Flags>,
    thread: Option<JoinHandle<()>>,
}

impl WatchHandle {
    /// A handle that asks the watcher for a check at once (cloneable, for
    /// a signal handler).
    pub fn trigger(&self) -> ReloadTrigger {
        ReloadTrigger {
            flags: self.flags.clone(),
            thread: self.thread.as_ref().map(|t| t.thread().clone()),
        }
    }
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.flags.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Asks a running watcher to check its files now, contents included (see
/// [`Reloader::poll_now`]). Requests made while a check runs are merged
/// into the next one.
#[derive(Clone)]
pub struct ReloadTrigger {
    flags: Arc<Flags>,
    thread: Option<std::thread::Thread>,
}

impl ReloadTrigger {
    /// Asks for a check; returns at once (the check runs on the watcher's
    /// thread, and its outcome is logged and counted as any reload's).
    pub fn request(&self) {
        self.flags.asked.store(true, Ordering::Release);
        if let Some(t) = &self.thread {
            t.unpark();
        }
    }
}

impl std::fmt::Debug for ReloadTrigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReloadTrigger")
    }
}

/// Counts a configuration load under envoyproxy/ratelimit's names
/// (`ratelimit_service_config_load_success`, `_error`), as its service
/// counts each load of its runtime files.
pub fn count_envoy_load(ok: bool) {
    metrics::describe_counter!(
        "ratelimit_service_config_load_success",
        "envoyproxy/ratelimit's name: configurations loaded and put in force (the first one included)."
    );
    metrics::describe_counter!(
        "ratelimit_service_config_load_error",
        "envoyproxy/ratelimit's name: configurations that could not be loaded or put in force."
    );
    let name = if ok {
        "ratelimit_service_config_load_success"
    } else {
        "ratelimit_service_config_load_error"
    };
    metrics::counter!(name).increment(1);
}
