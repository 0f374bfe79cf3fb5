//! The keys with work for the background task: hits to push (`sync`),
//! leases to give back when they end, penalties and blocks to tell Redis
//! (`lease`), each due at an instant on the decision clock.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};

use super::entry::Names;

struct Job {
    due: u64,
    names: Arc<Names>,
}

impl PartialEq for Job {
    fn eq(&self, other: &Self) -> bool {
        self.due == other.due
    }
}
impl Eq for Job {}
impl PartialOrd for Job {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Job {
    /// The earliest due first (the heap is a max-heap).
    fn cmp(&self, other: &Self) -> Ordering {
        other.due.cmp(&self.due)
    }
}

/// A min-heap of keys by due instant. A key is queued at most once at a
/// time (its entry says so).
#[derive(Default)]
pub(crate) struct Queue {
    heap: Mutex<BinaryHeap<Job>>,
}

impl Queue {
    pub(super) fn push(&self, due: u64, names: Arc<Names>) {
        self.heap
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Job { due, names });
    }

    /// The keys due at `now` (all of them when `now` is `u64::MAX`).
    pub(super) fn due(&self, now: u64) -> Vec<Arc<Names>> {
        let mut heap = self
            .heap
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Vec::new();
        while heap.peek().is_some_and(|j| j.due <= now) {
            if let Some(j) = heap.pop() {
                out.push(j.names);
            }
        }
        out
    }

    pub(super) fn len(&self) -> usize {
        self.heap
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}
