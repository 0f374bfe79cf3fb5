//! A counting global allocator, per thread (parallel tests do not
//! interfere): the heap a thread's allocations still hold, in bytes and in
//! allocations, and how many allocations it made.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static BYTES: Cell<i64> = const { Cell::new(0) };
    static BLOCKS: Cell<i64> = const { Cell::new(0) };
    static MADE: Cell<u64> = const { Cell::new(0) };
}

fn add(bytes: i64, blocks: i64) {
    let _ = BYTES.try_with(|c| c.set(c.get() + bytes));
    let _ = BLOCKS.try_with(|c| c.set(c.get() + blocks));
    if blocks > 0 {
        let _ = MADE.try_with(|c| c.set(c.get() + 1));
    }
}

/// How many allocations this thread has made so far.
pub(crate) fn made() -> u64 {
    MADE.with(Cell::get)
}

/// What this thread's allocations hold now: bytes asked for, and blocks.
pub(crate) fn held() -> (i64, i64) {
    (BYTES.with(Cell::get), BLOCKS.with(Cell::get))
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size() as i64, 1);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        add(layout.size() as i64, 1);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add(new_size as i64 - layout.size() as i64, 0);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add(-(layout.size() as i64), -1);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;
