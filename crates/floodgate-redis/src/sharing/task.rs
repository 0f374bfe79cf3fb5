//! The background task of the keys decided here: every tick, the work due
//! (hits pushed, leases that ended given back, penalties and blocks told
//! to Redis). It holds the keys only weakly: it ends with the backend, or
//! with the runtime it was spawned on (the next decision then spawns it on
//! the caller's).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use floodgate::Timestamp;

use super::{Gate, Sharing};
use crate::RedisBackend;

/// How often the task looks for due work.
const TICK: Duration = Duration::from_millis(5);

/// Clears the flag when the task ends, however it ends (a runtime shutting
/// down drops it).
struct Alive(Arc<AtomicBool>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Spawns the task on the current runtime, if there is one (the flag is
/// already set by the caller; it is cleared if there is none).
pub(super) fn spawn(
    sharing: Weak<Sharing>,
    alive: Arc<AtomicBool>,
    redis: Arc<RedisBackend>,
    gate: Gate,
) {
    let guard = Alive(alive);
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    handle.spawn(async move {
        let _guard = guard;
        loop {
            tokio::time::sleep(TICK).await;
            let Some(s) = sharing.upgrade() else {
                break;
            };
            s.run_due(&redis, &gate, wall(), false).await;
        }
    });
}

/// This process's wall clock (the caller's time of the background work).
fn wall() -> Timestamp {
    Timestamp::from_nanos(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
    )
}
