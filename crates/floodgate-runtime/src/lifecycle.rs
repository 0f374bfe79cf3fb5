//! A running binary's life after start-up: the configuration watched and
//! reloaded (polled, and at once on SIGHUP), and the shutdown sequence
//! (not ready at once, serving on for the delay, then the drain within the
//! grace period).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use floodgate_policy::reload::{Compiled, ConfigSource, HandOver, ReloadTrigger, Reloader};
use futures_util::future::OptionFuture;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::config_thread::ConfigThread;
use crate::health::Health;

/// The configuration watcher: polls every interval, checks at once on
/// SIGHUP and when [`reload_now`](Self::reload_now) asks; stops when
/// dropped.
pub(crate) struct Watching {
    trigger: ReloadTrigger,
    also: Arc<dyn Fn(bool) + Send + Sync>,
    signals: JoinHandle<()>,
    _watch: floodgate_policy::reload::WatchHandle,
}

impl Watching {
    /// Watches `source`, whose configuration `current` is running, every
    /// `interval` (zero: only when asked), on `thread`, the thread that
    /// loaded it; each new valid configuration is handed to `apply`.
    /// `also` runs at the same pace, told whether the check was asked for
    /// (SIGHUP, [`reload_now`](Self::reload_now)) rather than polled: e.g.
    /// to re-read a certificate that changed, or at once when asked. A
    /// SIGHUP no longer ends the process, as it would by default.
    pub(crate) fn start<F, R>(
        thread: ConfigThread,
        source: ConfigSource,
        current: Compiled,
        interval: Duration,
        mut apply: F,
        also: impl Fn(bool) + Send + Sync + 'static,
    ) -> Watching
    where
        F: FnMut(Compiled) -> R + Send + 'static,
        R: HandOver,
    {
        // What a reload read and replaced is freed once it is handed over:
        // give it back then.
        let apply = move |c: Compiled| {
            let handed = apply(c);
            give_back_freed();
            handed
        };
        let reloader = thread.run(move || {
            let reloader = Reloader::new(source, &current, apply);
            // The start-up load's files and parse trees are not needed any
            // more: freed by the thread that allocated them.
            drop(current);
            give_back_freed();
            reloader
        });
        let interval = Some(interval).filter(|i| !i.is_zero());
        let watch = reloader.spawn_on(interval, |watch| thread.finish(watch));
        let trigger = watch.trigger();
        let also: Arc<dyn Fn(bool) + Send + Sync> = Arc::new(also);
        // Listened to at once: from now on a SIGHUP does not end the process.
        let hangup = signal(SignalKind::hangup())
            .map_err(|e| tracing::warn!(error = %e, "cannot listen to SIGHUP"))
            .ok();
        let reloads = (trigger.clone(), also.clone());
        let signals = tokio::spawn(on_signal_or_tick(reloads, hangup, interval));
        Watching {
            trigger,
            also,
            signals,
            _watch: watch,
        }
    }

    /// Reloads now, as on SIGHUP: the files are checked at once, contents
    /// compared (on the watcher's thread; the outcome is logged and
    /// counted as any reload's).
    pub(crate) fn reload_now(&self) {
        self.trigger.request();
        (self.also)(true);
    }
}

/// Until the runtime shuts down: on a `hangup` signal, asks `trigger` for
/// a reload and runs `also(true)`; every `interval` (if any), runs
/// `also(false)`.
async fn on_signal_or_tick(
    (trigger, also): (ReloadTrigger, Arc<dyn Fn(bool) + Send + Sync>),
    mut hangup: Option<Signal>,
    interval: Option<Duration>,
) {
    let mut tick = interval.map(|i| {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + i, i);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick
    });
    loop {
        // Without SIGHUP or a poll, its branch is off (`None`).
        let hup = OptionFuture::from(hangup.as_mut().map(tokio::signal::unix::Signal::recv));
        let polled = OptionFuture::from(tick.as_mut().map(tokio::time::Interval::tick));
        tokio::select! {
            Some(got) = hup => {
                // None: the runtime is shutting down.
                let Some(()) = got else { return };
                tracing::info!("SIGHUP received: reloading the configuration");
                trigger.request();
                also(true);
            }
            Some(_) = polled => also(false),
            else => return,
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.signals.abort();
    }
}

/// Returns the memory freed by a configuration load (its files' parse
/// trees, a replaced policy) to the system, where the allocator would
/// otherwise keep it as resident memory: a load allocates about ten times
/// what the compiled policy keeps. The binaries allocate with mimalloc,
/// which keeps freed pages for reuse until it is told to collect (this
/// thread's heap, then every thread's unused segments); glibc's allocator
/// (where a program embedding the runtime uses it) trims only its heap's
/// top by itself. Each call is a no-op for the allocator not in use.
fn give_back_freed() {
    // SAFETY: mi_collect only frees mimalloc's own unused pages and
    // segments; it touches no live allocation.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
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
/// `grace`; last, the store gives back what this instance holds of its
/// counters ([`AnyBackend::give_back`](crate::AnyBackend::give_back)).
/// Returns whether the requests finished in time.
pub(crate) async fn shut_down(
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
    health.engine().backend().give_back().await;
    finished
}
