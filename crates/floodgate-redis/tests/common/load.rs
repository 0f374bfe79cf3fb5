//! Callers deciding in a loop under faults, each decision timed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use floodgate::algorithms::{AnyLimit, FixedWindow, Gcra, SlidingLog};
use floodgate::{Apply, Timestamp};
use floodgate_policy::Backend;
use floodgate_redis::ResilientBackend;

use super::{blank, item};

/// Callers deciding in a loop until stopped; each decision is timed.
/// Beside them a timer measures how late the machine wakes a task (a
/// loaded two-core machine can be 100 ms late), so that the bound checked
/// is the code's, not the scheduler's.
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<(u64, Duration)>>,
    lateness: tokio::task::JoinHandle<Duration>,
}

impl Load {
    pub(crate) fn start(b: &Arc<ResilientBackend>, tasks: usize, groups: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..tasks)
            .map(|t| {
                let b = b.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    let limits = [
                        AnyLimit::from(Gcra::new(1000, Duration::from_secs(1), 50).unwrap()),
                        AnyLimit::from(FixedWindow::new(100_000, Duration::from_secs(60)).unwrap()),
                        AnyLimit::from(SlidingLog::new(20, Duration::from_millis(100)).unwrap()),
                    ];
                    let (mut n, mut worst) = (0u64, Duration::ZERO);
                    while !stop.load(Ordering::Relaxed) {
                        let g = format!("load{}", (t + n as usize) % groups);
                        let keys: Vec<String> = (0..3).map(|i| format!("{g}:{i}")).collect();
                        let items: Vec<_> = limits
                            .iter()
                            .zip(&keys)
                            .map(|(l, k)| item(g.as_bytes(), k.as_bytes(), l, 1))
                            .collect();
                        let mut out = vec![blank(); items.len()];
                        let started = Instant::now();
                        b.decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
                            .await
                            .expect("a decision, whatever happens to Redis");
                        worst = worst.max(started.elapsed());
                        n += 1;
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    (n, worst)
                })
            })
            .collect();
        let lateness = floodgate_testkit::timer_lateness(stop.clone());
        Load {
            stop,
            handles,
            lateness,
        }
    }

    /// Stops the callers; returns the decisions made and the slowest one,
    /// less the most the timer beside them was woken late.
    pub(crate) async fn finish(self) -> (u64, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        let mut total = (0, Duration::ZERO);
        for h in self.handles {
            let (n, worst) = h.await.expect("no caller panicked");
            total = (total.0 + n, total.1.max(worst));
        }
        let late = self.lateness.await.expect("the timer ran");
        eprintln!(
            "slowest decision {:?}, timer woken up to {late:?} late",
            total.1
        );
        (total.0, total.1.saturating_sub(late))
    }
}
