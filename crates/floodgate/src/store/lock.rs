//! The shard lock: a test-and-set lock that spins briefly, then yields.
//!
//! Critical sections are a hash probe and a few arithmetic operations (tens
//! of nanoseconds), so a waiter almost always gets the lock within a few
//! spins; taking it costs one atomic swap and releasing it one plain store,
//! about half of a futex-based mutex's uncontended cost. A waiter that keeps
//! failing yields its time slice, so a preempted holder gets to run.

use std::sync::atomic::{AtomicBool, Ordering};

/// The raw lock (see [`Slot`](super::slot::Slot)).
pub(crate) struct RawSpinLock(AtomicBool);

impl RawSpinLock {
    #[cold]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            while self.0.load(Ordering::Relaxed) {
                if spins < 100 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if !self.0.swap(true, Ordering::Acquire) {
                return;
            }
        }
    }
}

// SAFETY: the flag is set by exactly one successful swap from `false` (with
// acquire ordering) and cleared only by its holder (with release ordering),
// so at most one guard exists at a time and the holder's writes are visible
// to the next holder.
unsafe impl lock_api::RawMutex for RawSpinLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: RawSpinLock = RawSpinLock(AtomicBool::new(false));
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    fn lock(&self) {
        // Straight to the swap: the line is usually free, and reading it
        // first would fetch it shared, then again to own it. A waiter spins
        // on reads (`lock_contended`), not taking the line from the holder.
        if self.0.swap(true, Ordering::Acquire) {
            self.lock_contended();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        !self.0.swap(true, Ordering::Acquire)
    }

    #[inline]
    unsafe fn unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}
