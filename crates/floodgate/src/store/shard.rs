//! One shard of the store: a hash table of entries, with idle-key reclaim
//! amortized over insertions, and at capacity the store's [`WhenFull`]
//! rule (approximate-LRU eviction for [`WhenFull::Evict`]).

use hashbrown::HashTable;

use super::WhenFull;
use super::prefetch::Prefetch;
use crate::Timestamp;

/// Shards never sweep below this many entries (nor above their capacity).
const MIN_SWEEP: usize = 64;
/// How many entries the LRU threshold is estimated from.
const SAMPLE: usize = 256;
/// `idle` of an entry that must never be dropped (permits are held).
pub(crate) const PINNED: u32 = u32::MAX;
/// `idle` of an entry idle too far ahead to say: never reclaimed, but
/// evicted like any other.
const FAR: u32 = PINNED - 1;
/// Control bytes a table has beyond one per bucket (hashbrown's group
/// width, mirrored at the end).
pub(crate) const GROUP: usize = 16;
/// Seconds past a shard's base after which the base moves up to now.
const REBASE: u64 = 1 << 31;

/// A key and its limit's state.
pub(crate) struct Entry<K, S> {
    /// The limit's state.
    pub(crate) state: S,
    /// The key.
    pub(crate) key: K,
    /// Whole seconds after the shard's base (rounded up) at which the state
    /// equals a fresh one.
    pub(crate) idle: u32,
    /// The shard's access tick at the last use (for LRU).
    pub(crate) touched: u32,
}

/// A part of the store, locked as one.
pub(crate) struct Shard<K, S> {
    /// The entries, by key hash.
    pub(crate) table: HashTable<Entry<K, S>>,
    /// The most entries held.
    cap: usize,
    sweep_at: usize,
    /// The instant (whole seconds) entries' idle times count from: moved up
    /// every 2^31 s, so that 32 bits reach past any instant a key is seen at.
    base: u64,
    /// The second (since the epoch) in which a sweep of the full shard last
    /// found no room ([`NEVER`] if none has): new keys in that second find
    /// none either, without a sweep each (which would let a flood of new
    /// keys make every request scan the shard).
    full_in: u64,
}

/// Bytes a table of `buckets` buckets takes.
pub(crate) fn table_bytes<K, S>(buckets: usize) -> usize {
    match buckets {
        0 => 0,
        n => n * (std::mem::size_of::<Entry<K, S>>() + 1) + GROUP,
    }
}

/// The buckets of a table grown to hold `keys`: it doubles when 7/8 full
/// (tables of fewer than 8 buckets hold one less than their buckets).
pub(crate) fn buckets_holding(keys: usize) -> usize {
    match keys {
        0 => 0,
        1..4 => 4,
        4..8 => 8,
        _ => (keys.saturating_mul(8) / 7).next_power_of_two(),
    }
}

/// [`Shard::full_in`] before any sweep has found the shard full.
const NEVER: u64 = u64::MAX;

/// What a sweep removed.
#[derive(Default)]
pub(crate) struct Swept {
    /// Idle entries dropped.
    pub(crate) reclaimed: u64,
    /// Entries evicted at capacity.
    pub(crate) evicted: u64,
}

impl std::ops::AddAssign for Swept {
    fn add_assign(&mut self, other: Swept) {
        self.reclaimed += other.reclaimed;
        self.evicted += other.evicted;
    }
}

/// The idle instant `t` of a state decided at `now` by a limit that `pins`
/// or not ([`Algorithm::pins`](crate::Algorithm::pins)), as whole seconds
/// after `base`, rounded up: [`PINNED`] for [`Timestamp::MAX`] from a limit
/// that pins (the key must be kept), [`FAR`] at most otherwise. A decision
/// at `Timestamp::MAX` itself reports idle states idle at `now`, so nothing
/// is pinned then.
#[inline]
pub(crate) fn idle_secs(t: Timestamp, now: Timestamp, base: u64, pins: bool) -> u32 {
    if t == Timestamp::MAX {
        return if pins && now != Timestamp::MAX {
            PINNED
        } else {
            FAR
        };
    }
    let secs = t.as_nanos().div_ceil(1_000_000_000);
    secs.saturating_sub(base).min(u64::from(FAR)) as u32
}

/// `now` as whole seconds after `base`, rounded down: below [`FAR`], so an
/// entry is idle at `now` iff its `idle` is at most this.
#[inline]
fn now_secs(now: Timestamp, base: u64) -> u32 {
    now.as_secs().saturating_sub(base).min(u64::from(FAR) - 1) as u32
}

/// Where a key's entry probably is, from a shard's published [`table_hint`]
/// (taken before the shard is locked): its control group is prefetched, and
/// its home bucket for writing, so they arrive while the lock is being
/// taken. A stale or wrong hint costs a useless prefetch, never a wrong
/// access: nothing is read through these addresses.
///
/// [`table_hint`]: Shard::table_hint
#[inline]
pub(crate) fn prefetch_entry<K, S>(p: Prefetch, [ctrl, mask]: [usize; 2], hash: u64) {
    if ctrl != 0 {
        // hashbrown probes from `hash & bucket_mask`; bucket `i` sits
        // `(i + 1)` entries below the control bytes.
        let pos = hash as usize & mask;
        p.read(ctrl.wrapping_add(pos));
        p.write(ctrl.wrapping_sub((pos + 1) * std::mem::size_of::<Entry<K, S>>()));
    }
}

impl<K, S> Shard<K, S> {
    /// An empty shard that holds about `cap` entries.
    pub(crate) fn new(cap: usize) -> Self {
        Shard {
            table: HashTable::new(),
            cap,
            sweep_at: MIN_SWEEP.min(cap),
            base: 0,
            full_in: NEVER,
        }
    }

    /// Bytes the table takes: an entry and a control byte per bucket, and
    /// a group of control bytes.
    pub(crate) fn bytes(&self) -> usize {
        table_bytes::<K, S>(self.table.num_buckets())
    }

    /// The most entries held.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// The instant (whole seconds) entries' idle times count from.
    #[inline]
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// Drops every entry idle at `now`; returns how many.
    pub(crate) fn reclaim(&mut self, now: Timestamp) -> u64 {
        let now_secs = now_secs(now, self.base);
        let before = self.table.len();
        self.table.retain(|e| e.idle > now_secs);
        (before - self.table.len()) as u64
    }

    /// Moves the base up to `now` once `now` is [`REBASE`] seconds past it,
    /// keeping every entry's idle instant (or its being far or pinned).
    /// `now` must not be earlier than any instant decided in the shard.
    fn rebase(&mut self, now: Timestamp) {
        let delta = now.as_secs().saturating_sub(self.base);
        if delta < REBASE {
            return;
        }
        for e in &mut self.table {
            if e.idle < FAR {
                e.idle = u64::from(e.idle).saturating_sub(delta) as u32;
            }
        }
        self.base += delta;
    }

    /// The table's location for [`prefetch_entry`]: the address of its
    /// control bytes (found from any occupied bucket, hashbrown keeping
    /// bucket `i` `(i + 1)` entries below them) and its bucket mask; zeros
    /// when empty.
    pub(crate) fn table_hint(&self) -> [usize; 2] {
        let Some(i) = self.table.iter_buckets().next() else {
            return [0, 0];
        };
        let Some(e) = self.table.get_bucket(i) else {
            return [0, 0];
        };
        let ctrl =
            (e as *const Entry<K, S> as usize) + (i + 1) * std::mem::size_of::<Entry<K, S>>();
        [ctrl, self.table.num_buckets() - 1]
    }

    /// Makes room before an insertion, and says whether there is room.
    /// Once the shard has grown enough since the last sweep, it drops every
    /// idle entry (a state equal to a fresh key's loses nothing); at `cap`,
    /// [`WhenFull::Evict`] then evicts the least recently used eighth of
    /// the entries that hold no permits. Every other entry still restricts
    /// its key, so with no room left the new key is not inserted (the
    /// store applies its [`WhenFull`] rule), and the full shard is swept
    /// again at most once a second: idle instants are whole seconds, so a
    /// restriction that has lapsed makes room within one. `now` is the
    /// shard's latest instant (see [`rebase`](Self::rebase)).
    pub(crate) fn before_insert(
        &mut self,
        now: Timestamp,
        tick: u32,
        when_full: WhenFull,
    ) -> (Swept, bool) {
        let cap = self.cap;
        let mut swept = Swept::default();
        self.rebase(now);
        let len = self.table.len();
        if len < self.sweep_at {
            return (swept, true);
        }
        if len >= cap && self.full_in == now.as_secs() {
            return (swept, false);
        }
        swept.reclaimed = self.reclaim(now);
        if self.table.len() >= cap && when_full == WhenFull::Evict {
            swept.evicted = self.evict_lru(cap, tick);
        }
        let len = self.table.len();
        if len >= cap {
            self.full_in = now.as_secs();
            self.sweep_at = cap;
            return (swept, false);
        }
        self.sweep_at = (2 * len).clamp(MIN_SWEEP.min(cap), cap);
        (swept, true)
    }

    /// Evicts about an eighth of `cap`, oldest use first, never a pinned
    /// entry. The age threshold is estimated from a sample of entries (hash
    /// order is random, so the first entries are a fair sample).
    fn evict_lru(&mut self, cap: usize, tick: u32) -> u64 {
        let len = self.table.len();
        let target = (len + 1).saturating_sub(cap - cap / 8).max(1);
        let mut ages = [0u32; SAMPLE];
        let mut n = 0;
        for e in &self.table {
            if e.idle != PINNED {
                ages[n] = tick.wrapping_sub(e.touched);
                n += 1;
                if n == SAMPLE {
                    break;
                }
            }
        }
        if n == 0 {
            return 0;
        }
        // Keep entries younger than the age at the (1 − target/len) quantile.
        let drop = (n * target).div_ceil(len).clamp(1, n);
        let idx = n - drop;
        let (_, &mut threshold, _) = ages[..n].select_nth_unstable(idx);
        let before = len;
        self.table
            .retain(|e| e.idle == PINNED || tick.wrapping_sub(e.touched) < threshold);
        (before - self.table.len()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::{Entry, FAR, PINNED, REBASE, Shard, idle_secs};
    use crate::Timestamp;

    /// Moving the base keeps every idle instant, and far and pinned entries
    /// stay so; idle times are counted from the base, never wrapped.
    #[test]
    fn a_rebase_keeps_every_idle_instant() {
        let mut shard: Shard<u64, ()> = Shard::new(64);
        let start = REBASE - 10;
        let at = |secs: u64| Timestamp::from_secs(secs);
        for (key, idle) in [(0, 0), (1, 15), (2, 20 + 3_600), (3, FAR), (4, PINNED)] {
            let idle = if idle < FAR {
                start as u32 + idle
            } else {
                idle
            };
            shard.table.insert_unique(
                key,
                Entry {
                    state: (),
                    key,
                    idle,
                    touched: 0,
                },
                |e| e.key,
            );
        }
        shard.rebase(at(start + 20));
        assert_eq!(shard.base(), start + 20);
        let idle = |k: u64| shard.table.find(k, |e| e.key == k).map(|e| e.idle);
        assert_eq!(
            [0, 1, 2, 3, 4].map(idle),
            [Some(0), Some(0), Some(3_600), Some(FAR), Some(PINNED)]
        );
        assert_eq!(shard.reclaim(at(start + 20)), 2);
        assert_eq!(shard.reclaim(at(start + 20 + 3_599)), 0);
        assert_eq!(shard.reclaim(at(start + 20 + 3_600)), 1);
        // Never reclaimed by time: only eviction removes a far entry.
        assert_eq!(shard.reclaim(Timestamp::MAX), 0);
        assert_eq!(shard.table.len(), 2);
        let base = shard.base();
        let now = at(base);
        assert_eq!(idle_secs(at(base - 5), now, base, true), 0);
        assert_eq!(idle_secs(at(base + 7), now, base, true), 7);
        assert_eq!(idle_secs(at(base + (1 << 33)), now, base, true), FAR);
        assert_eq!(idle_secs(Timestamp::MAX, now, base, true), PINNED);
        assert_eq!(idle_secs(Timestamp::MAX, now, base, false), FAR);
        assert_eq!(idle_secs(Timestamp::MAX, Timestamp::MAX, base, true), FAR);
    }

    /// The hint is right about hashbrown's layout: bucket `i` is `i + 1`
    /// entries below the control bytes, and the mask is the bucket mask (a
    /// hashbrown release that changed either would only make the prefetches
    /// useless, which this test would notice), and probing starts at
    /// `hash & mask`.
    #[test]
    fn the_table_hint_locates_every_bucket() {
        let mut shard: Shard<u64, u128> = Shard::new(1 << 20);
        assert_eq!(shard.table_hint(), [0, 0]);
        let size = std::mem::size_of::<Entry<u64, u128>>();
        for n in 0..3_000u64 {
            let hash = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            shard.table.insert_unique(
                hash,
                Entry {
                    state: 0,
                    key: n,
                    idle: 1,
                    touched: 0,
                },
                |e| e.key.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            );
            if n == 0 {
                // Alone in its table, a key sits in its home bucket.
                let [_, mask] = shard.table_hint();
                let home = shard.table.find_bucket_index(hash, |e| e.key == 0);
                assert_eq!(home, Some(hash as usize & mask));
            }
            if n % 97 != 0 {
                continue;
            }
            let [ctrl, mask] = shard.table_hint();
            assert_eq!(mask + 1, shard.table.num_buckets());
            for i in shard.table.iter_buckets() {
                let e = shard.table.get_bucket(i).unwrap();
                assert_eq!(e as *const Entry<u64, u128> as usize, ctrl - (i + 1) * size);
            }
        }
    }
}
