//! A shard's home: its lock and the per-access LRU tick on one cache line,
//! its table on another.
//!
//! Every access writes the lock and the tick, so that line moves between
//! cores that use the shard; the table's header (bucket pointer and mask)
//! and the published hint are read on every access but written only when
//! the table grows, so on their own line they stay cached, shared, on every
//! core. One line in motion per access instead of two, and it is asked for
//! (for writing) before the clock is read, so the lock is usually there
//! when it is taken.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use lock_api::RawMutex;

use super::lock::RawSpinLock;

struct Head {
    raw: RawSpinLock,
    tick: UnsafeCell<u32>,
    /// The latest instant a decision in this shard was made at (ns).
    latest: UnsafeCell<u64>,
}

struct Data<T> {
    /// Two words the holder publishes for readers that do not lock (the
    /// shard's table location, for prefetching before the lock is taken);
    /// written only when the table moves, so the line stays shared.
    hint: [AtomicUsize; 2],
    value: UnsafeCell<T>,
}

/// A value behind a spin lock, with an access tick kept next to the lock.
pub(crate) struct Slot<T> {
    head: CachePadded<Head>,
    data: CachePadded<Data<T>>,
}

// SAFETY: the data and the tick are only reached through a `SlotGuard`,
// which exists only while the lock is held, so at most one thread touches
// them at a time; `T: Send` lets that thread be any thread.
unsafe impl<T: Send> Sync for Slot<T> {}
unsafe impl<T: Send> Send for Slot<T> {}

impl<T> Slot<T> {
    /// An unlocked slot holding `value`.
    pub(crate) fn new(value: T) -> Self {
        Slot {
            head: CachePadded::new(Head {
                raw: RawSpinLock::INIT,
                tick: UnsafeCell::new(0),
                latest: UnsafeCell::new(0),
            }),
            data: CachePadded::new(Data {
                hint: [AtomicUsize::new(0), AtomicUsize::new(0)],
                value: UnsafeCell::new(value),
            }),
        }
    }

    /// The words last published with [`SlotGuard::set_hint`] (possibly
    /// stale by the time they are used: only for hints).
    #[inline]
    pub(crate) fn hint(&self) -> [usize; 2] {
        [
            self.data.hint[0].load(Ordering::Relaxed),
            self.data.hint[1].load(Ordering::Relaxed),
        ]
    }

    /// Asks for the lock's cache line, for writing, ahead of [`lock`].
    ///
    /// [`lock`]: Slot::lock
    #[inline]
    pub(crate) fn prefetch_lock(&self, p: super::prefetch::Prefetch) {
        p.write(&*self.head as *const Head as usize);
    }

    /// Locks the slot.
    #[inline]
    pub(crate) fn lock(&self) -> SlotGuard<'_, T> {
        self.head.raw.lock();
        SlotGuard {
            slot: self,
            _not_send: PhantomData,
        }
    }
}

/// Access to a locked slot; unlocks on drop.
pub(crate) struct SlotGuard<'a, T> {
    slot: &'a Slot<T>,
    _not_send: PhantomData<*const ()>,
}

impl<T> SlotGuard<'_, T> {
    /// Advances the access tick and returns it.
    #[inline]
    pub(crate) fn next_tick(&mut self) -> u32 {
        // SAFETY: the lock is held (this guard exists).
        let tick = unsafe { &mut *self.slot.head.tick.get() };
        *tick = tick.wrapping_add(1);
        *tick
    }

    /// The latest instant seen in this slot, at least `now`: `now` when it is
    /// not earlier than every instant seen before (and it becomes the
    /// latest), the latest otherwise. A clock that went backwards is thus
    /// seen as no time elapsed.
    #[inline]
    pub(crate) fn monotonic(&mut self, now: u64) -> u64 {
        // SAFETY: the lock is held (this guard exists).
        let latest = unsafe { &mut *self.slot.head.latest.get() };
        if now >= *latest {
            *latest = now;
            now
        } else {
            *latest
        }
    }

    /// Publishes two words for [`Slot::hint`].
    #[inline]
    pub(crate) fn set_hint(&self, hint: [usize; 2]) {
        self.slot.data.hint[0].store(hint[0], Ordering::Relaxed);
        self.slot.data.hint[1].store(hint[1], Ordering::Relaxed);
    }

    /// The current access tick.
    #[inline]
    pub(crate) fn tick(&self) -> u32 {
        // SAFETY: the lock is held (this guard exists).
        unsafe { *self.slot.head.tick.get() }
    }
}

impl<T> Deref for SlotGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the lock is held (this guard exists).
        unsafe { &*self.slot.data.value.get() }
    }
}

impl<T> DerefMut for SlotGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the lock is held and this guard is borrowed mutably.
        unsafe { &mut *self.slot.data.value.get() }
    }
}

impl<T> Drop for SlotGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this guard took the lock and releases it exactly once.
        unsafe { self.slot.head.raw.unlock() }
    }
}
