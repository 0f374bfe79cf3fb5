//! How late the runtime wakes timers while a test runs: on a loaded
//! machine a task sleeping 1 ms can wake many milliseconds later, and a
//! timing check must leave that much room.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

/// Sleeps 1 ms in a loop on the current runtime until `stop` turns true,
/// and returns the worst wake-up beyond 2 ms.
pub fn timer_lateness(stop: Arc<AtomicBool>) -> JoinHandle<Duration> {
    tokio::spawn(async move {
        let mut late = Duration::ZERO;
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            tokio::time::sleep(Duration::from_millis(1)).await;
            late = late.max(started.elapsed().saturating_sub(Duration::from_millis(2)));
        }
        late
    })
}
