//! [`TopKeys`]: the keys seen most often in a stream, in bounded memory
//! (the Space-Saving algorithm of Metwally, Agrawal and El Abbadi).
//!
//! At most `capacity` keys are tracked. A key already tracked has its
//! count raised; a new key takes the place of the tracked key with the
//! smallest count `m`, starting at `m + 1` with an error of `m` (it may
//! have been seen up to `m` times before, while untracked). So, for every
//! tracked key, `count - error <= true count <= count`; every key seen more
//! than `total / capacity` times is tracked; and the smallest count is at
//! most `total / capacity`.
//!
//! Adding a key costs one hash lookup and a sift in a heap of `capacity`
//! entries, and allocates nothing once the table is full: an evicted key's
//! buffer is reused by the key replacing it (keys longer than every buffer
//! so far grow it once).

use std::hash::BuildHasher;

use hashbrown::HashTable;

/// One tracked key.
#[derive(Clone, Debug)]
struct Slot {
    key: Vec<u8>,
    hash: u64,
    count: u64,
    error: u64,
    /// Its position in the heap.
    at: u32,
}

/// A tracked key and its counts, as [`TopKeys::top`] lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopKey<'a> {
    /// The key.
    pub key: &'a [u8],
    /// Its count: at least its true count, at most `error` more.
    pub count: u64,
    /// How much of `count` may come from keys it replaced.
    pub error: u64,
}

/// The most frequent keys of a stream, in bounded memory (see the module
/// documentation).
///
/// ```
/// use floodgate_policy::observe::TopKeys;
///
/// let mut top = TopKeys::new(2);
/// for key in ["a", "b", "a", "c", "a", "c", "c", "c"] {
///     top.add(key.as_bytes(), 1);
/// }
/// let best = top.top(1);
/// assert_eq!(best[0].key, b"c");
/// // "c" replaced "b": its count may include "b"'s one.
/// assert_eq!((best[0].count, best[0].error), (5, 1));
/// assert_eq!(top.total(), 8);
/// ```
#[derive(Clone)]
pub struct TopKeys {
    capacity: usize,
    slots: Vec<Slot>,
    /// Slot ids, a min-heap by count.
    heap: Vec<u32>,
    table: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
    total: u64,
}

impl std::fmt::Debug for TopKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopKeys")
            .field("capacity", &self.capacity)
            .field("tracked", &self.slots.len())
            .field("total", &self.total)
            .finish()
    }
}

impl TopKeys {
    /// Tracks at most `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, u32::MAX as usize);
        TopKeys {
            capacity,
            slots: Vec::new(),
            heap: Vec::new(),
            table: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            total: 0,
        }
    }

    /// The most keys tracked.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of keys tracked.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True before the first key.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The sum of every weight added.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Forgets everything (keeping the buffers).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.heap.clear();
        self.table.clear();
        self.total = 0;
    }

    /// Counts `weight` occurrences of `key`.
    pub fn add(&mut self, key: &[u8], weight: u64) {
        if weight == 0 {
            return;
        }
        self.total = self.total.saturating_add(weight);
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        if let Some(&id) = self.table.find(hash, |&id| slots[id as usize].key == key) {
            let slot = &mut self.slots[id as usize];
            slot.count = slot.count.saturating_add(weight);
            let at = slot.at as usize;
            self.sift_down(at);
            return;
        }
        if self.slots.len() < self.capacity {
            let id = self.slots.len() as u32;
            self.slots.push(Slot {
                key: key.to_vec(),
                hash,
                count: weight,
                error: 0,
                at: self.heap.len() as u32,
            });
            self.heap.push(id);
            let slots = &self.slots;
            self.table
                .insert_unique(hash, id, |&i| slots[i as usize].hash);
            let at = self.heap.len() - 1;
            self.sift_up(at);
            return;
        }
        // Replace the smallest.
        let id = self.heap[0];
        let old_hash = self.slots[id as usize].hash;
        if let Ok(entry) = self.table.find_entry(old_hash, |&i| i == id) {
            entry.remove();
        }
        let slot = &mut self.slots[id as usize];
        let min = slot.count;
        slot.key.clear();
        slot.key.extend_from_slice(key);
        slot.hash = hash;
        slot.error = min;
        slot.count = min.saturating_add(weight);
        let slots = &self.slots;
        self.table
            .insert_unique(hash, id, |&i| slots[i as usize].hash);
        self.sift_down(0);
    }

    /// The `n` keys with the largest counts, largest first (ties: the
    /// smaller error first).
    pub fn top(&self, n: usize) -> Vec<TopKey<'_>> {
        let mut all: Vec<TopKey<'_>> = self
            .slots
            .iter()
            .map(|s| TopKey {
                key: &s.key,
                count: s.count,
                error: s.error,
            })
            .collect();
        all.sort_unstable_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then(a.error.cmp(&b.error))
                .then(a.key.cmp(b.key))
        });
        all.truncate(n);
        all
    }

    /// The count of `key` if it is tracked.
    pub fn get(&self, key: &[u8]) -> Option<TopKey<'_>> {
        let hash = self.hasher.hash_one(key);
        let id = *self
            .table
            .find(hash, |&id| self.slots[id as usize].key == key)?;
        let s = &self.slots[id as usize];
        Some(TopKey {
            key: &s.key,
            count: s.count,
            error: s.error,
        })
    }

    fn count_at(&self, at: usize) -> u64 {
        self.slots[self.heap[at] as usize].count
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        let (ia, ib) = (self.heap[a] as usize, self.heap[b] as usize);
        self.slots[ia].at = a as u32;
        self.slots[ib].at = b as u32;
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.count_at(at) >= self.count_at(parent) {
                break;
            }
            self.swap(at, parent);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        let len = self.heap.len();
        loop {
            let left = 2 * at + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.count_at(right) < self.count_at(left) {
                right
            } else {
                left
            };
            if self.count_at(child) >= self.count_at(at) {
                break;
            }
            self.swap(at, child);
            at = child;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_stays_ordered() {
        let mut t = TopKeys::new(8);
        for i in 0..1000u32 {
            let k = (i * 7919 % 23).to_le_bytes();
            t.add(&k, 1 + u64::from(i % 3));
            for (at, &id) in t.heap.iter().enumerate() {
                assert_eq!(t.slots[id as usize].at as usize, at);
                if at > 0 {
                    assert!(t.count_at((at - 1) / 2) <= t.count_at(at));
                }
            }
        }
        assert_eq!(t.len(), 8);
    }
}
