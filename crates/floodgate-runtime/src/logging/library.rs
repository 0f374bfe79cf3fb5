//! The filter that holds lines from libraries to the [`throttle`] budget,
//! and the thread that reports what it dropped.
//!
//! A line is a library's when its target is not one of Floodgate's crates
//! (`floodgate*`). A library the operator's filter names (`h2=debug`,
//! `info,hyper=warn`) is not throttled: asking for its lines is asking for
//! all of them. The throttle filters the log's layer after the level's
//! filter ([`FilterExt::and`](tracing_subscriber::filter::FilterExt::and)):
//! it judges only lines that would be written, so the events below the
//! level — HTTP/2's `trace!` lines, dozens per request — keep call sites
//! disabled once and for all, cost nothing, and spend no budget.

use std::sync::Arc;
use std::thread::Thread;

use floodgate::{Clock, SystemClock};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata};
use tracing_subscriber::layer::{Context, Filter};

use super::throttle::{self, Throttle, Verdict};

/// The target of the summary lines.
const TARGET: &str = "floodgate_runtime::logging";

/// Drops the lines of libraries beyond the budget (see the module): a
/// filter of the log's layer.
pub(crate) struct LibraryThrottle {
    throttle: Arc<Throttle>,
    /// Target prefixes the operator's filter names.
    named: Vec<String>,
    reporter: Thread,
}

impl LibraryThrottle {
    /// The layer for the filter `directives`, and its reporter thread
    /// started.
    pub(crate) fn start(directives: &str) -> std::io::Result<LibraryThrottle> {
        let throttle = Arc::new(Throttle::new(throttle::INTERVAL, throttle::BURST));
        let counted = throttle.clone();
        let reporter = std::thread::Builder::new()
            .name("floodgate-log-summary".into())
            .spawn(move || report(&counted))?
            .thread()
            .clone();
        Ok(LibraryThrottle {
            throttle,
            named: named_targets(directives),
            reporter,
        })
    }

    fn throttled(&self, target: &str) -> bool {
        !target.starts_with("floodgate") && !self.named.iter().any(|n| target.starts_with(n))
    }
}

impl<S> Filter<S> for LibraryThrottle {
    fn enabled(&self, _: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        true
    }

    /// A library's events are judged one by one; the rest pass as the
    /// level's filter says.
    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if meta.is_event() && self.throttled(meta.target()) {
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }

    fn event_enabled(&self, event: &Event<'_>, _: &Context<'_, S>) -> bool {
        if !self.throttled(event.metadata().target()) {
            return true;
        }
        match self.throttle.admit(SystemClock.now()) {
            Verdict::Pass => true,
            Verdict::Suppress { first } => {
                if first {
                    self.reporter.unpark();
                }
                false
            }
        }
    }
}

/// Forever: woken by the first line dropped, waits out an interval, then
/// logs how many were dropped (one line an interval at most, from this
/// thread since a layer cannot log while it filters).
fn report(throttle: &Throttle) {
    loop {
        std::thread::park();
        std::thread::sleep(throttle::INTERVAL);
        let suppressed = throttle.take_suppressed();
        if suppressed > 0 {
            tracing::warn!(
                target: TARGET,
                suppressed,
                interval_s = throttle::INTERVAL.as_secs(),
                "log lines from libraries suppressed (at most {} an interval; name a library in server.log.level to see all of its lines)",
                throttle::BURST
            );
        }
    }
}

/// The targets `directives` name (`h2` of `h2=debug` or `h2`; none of
/// `info`).
fn named_targets(directives: &str) -> Vec<String> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    directives
        .split(',')
        .filter_map(|d| {
            let target = d.split(['=', '[']).next()?.trim();
            let level = LEVELS.iter().any(|l| l.eq_ignore_ascii_case(target));
            (!target.is_empty() && !level && !d.trim_start().starts_with('['))
                .then(|| target.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::layer::{Layer, SubscriberExt};

    /// Counts the events it is given.
    struct Written(Arc<AtomicUsize>);

    impl<S: tracing::Subscriber> Layer<S> for Written {
        fn on_event(&self, _: &Event<'_>, _: Context<'_, S>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A library's lines below the level are neither written nor counted
    /// against the budget (HTTP/2 makes dozens a request): the budget is
    /// whole for the lines that would be written.
    #[test]
    fn lines_below_the_level_spend_no_budget() {
        let libraries = LibraryThrottle::start("info").unwrap();
        let throttle = libraries.throttle.clone();
        let written = Arc::new(AtomicUsize::new(0));
        // The log's own directives: a test's dispatcher alive beside
        // another's changes the interest of the call sites both see.
        let directives = format!("info,{}=off", crate::otel::TARGET);
        let filter = EnvFilter::new(directives).and(libraries);
        let log = tracing_subscriber::registry().with(Written(written.clone()).with_filter(filter));
        tracing::subscriber::with_default(log, || {
            for _ in 0..1000 {
                tracing::trace!(target: "h2::proto", "below the level");
            }
            for _ in 0..throttle::BURST {
                tracing::warn!(target: "h2::proto", "a library's warning");
            }
        });
        assert_eq!(written.load(Ordering::Relaxed), throttle::BURST as usize);
        assert_eq!(throttle.take_suppressed(), 0);
    }

    #[test]
    fn the_targets_a_filter_names() {
        assert!(named_targets("info").is_empty());
        assert!(named_targets("WARN, [span]=debug").is_empty());
        assert_eq!(named_targets("info,h2=debug"), ["h2"]);
        assert_eq!(
            named_targets("hyper, h2::proto[conn]=trace ,floodgate_server=debug"),
            ["hyper", "h2::proto", "floodgate_server"]
        );
    }
}
