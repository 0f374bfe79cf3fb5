//! A running binary's life after start-up: the configuration watched and
//! reloaded (polled, and at once on SIGHUP), and the shutdown sequence
//! (not ready at once, serving on for the delay, then the drain within the
//! grace period).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use floodgate_policy::reload::{Compiled, ConfigSource, HandOver, ReloadTrigger, Reloader};
use tokio::sync::watch;

use crate::health::Health;
use crate::signals::{AbortOnDrop, on_hangup};

/// The configuration watcher: polls every interval, checks at once on
/// SIGHUP and when [`reload_now`](Self::reload_now) asks; stops when
/// dropped.
pub struct Watching {
    trigger: ReloadTrigger,
    also: Arc<dyn Fn() + Send + Sync>,
    _hangup: AbortOnDrop,
    _watch: floodgate_policy::reload::WatchHandle,
}

impl Watching {
    /// Watches `source`, whose configuration `current` is running, every
    /// `interval` (zero: only when asked); each new valid configuration is
    /// handed to `apply`. `also` runs on every SIGHUP and
    /// [`reload_now`](Self::reload_now) too (e.g. to re-read a
    /// certificate).
    pub fn start<F, R>(
        source: ConfigSource,
        current: Compiled,
        interval: Duration,
        apply: F,
        also: impl Fn() + Send + Sync + 'static,
    ) -> Watching
    where
        F: FnMut(Compiled) -> R + Send + 'static,
        R: HandOver,
    {
        let mut apply = apply;
        // What a reload read and replaced is freed once it is handed over:
        // give it back then.
        let apply = move |c: Compiled| {
            let handed = apply(c);
            give_back_freed();
            handed
        };
        let watch = Reloader::new(source, &current, apply).spawn(interval);
        // The start-up load's files and parse trees are not needed any more.
        drop(current);
        give_back_freed();
        let trigger = watch.trigger();
        let also: Arc<dyn Fn() + Send + Sync> = Arc::new(also);
        let (t, a) = (trigger.clone(), also.clone());
        let hangup = on_hangup(move || {
            t.request();
            a();
        });
        Watching {
            trigger,
            also,
            _hangup: hangup,
            _watch: watch,
        }
    }

    /// Reloads now, as on SIGHUP: the files are checked at once, contents
    /// compared (on the watcher's thread; the outcome is logged and
    /// counted as any reload's).
    pub fn reload_now(&self) {
        self.trigger.request();
        (self.also)();
    }
}

/// Returns the memory freed by a configuration load (its files' parse
/// trees, a replaced policy) to the system, where the allocator would
/// otherwise keep it as resident memory (glibc's: a load's many small
/// blocks leave its heap fragmented, and only its top is trimmed by
/// itself).
fn give_back_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's
    // own heaps; it touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The shutdown sequence once the signal came: readiness turns false at
/// once while the listeners keep serving (new connections included) for
/// `delay`, so that load balancers and Envoy take the instance out of
/// rotation first; then `stop` turns true (the listeners stop accepting
/// and finish their requests in flight) and `drained` is awaited for up to
/// `grace`. Returns whether it finished in time.
pub async fn shut_down(
    health: &Health,
    delay: Duration,
    stop: &watch::Sender<bool>,
    grace: Duration,
    drained: impl Future,
) -> bool {
    health.start_draining();
    if !delay.is_zero() {
        tracing::info!(delay = ?delay, "not ready; serving on for the shutdown delay");
        tokio::time::sleep(delay).await;
    }
    stop.send_replace(true);
    tracing::info!(grace = ?grace, "draining in-flight requests");
    let finished = tokio::time::timeout(grace, drained).await.is_ok();
    if finished {
        tracing::info!("stopped");
    } else {
        tracing::warn!("grace period over; requests still in flight were abandoned");
    }
    finished
}
