//! [`LimitedKeys`]: the keys limited most right now, fed by the engine's
//! decisions (see [`Engine::with_observer`](crate::Engine::with_observer)),
//! for a live view such as the admin dashboard.
//!
//! Only limited decisions are recorded — a denial, a shaper's delay, a
//! shadow-mode rule's would-be denial — so an admitted request costs a
//! look at its statuses and nothing more. Keys are spread over shards by
//! their hash, each a [`TopKeys`] sketch behind its own lock, so callers
//! on different threads rarely wait for one another; a key always lands
//! in the same shard, so the shards' lists join without double counting.
//! Counts cover the current window and the one before it (each
//! [`window`](LimitedKeys::window) long): "right now", not since start.

use std::cell::RefCell;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::Duration;

use floodgate::Timestamp;

use super::TopKeys;
use crate::engine::Descriptor;

/// Shards (a power of two).
const SHARDS: usize = 8;
/// Separates the outcome, the rule and the entries in a sketch key.
const SEP: u8 = 0x1f;

/// How a key was limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limited {
    /// Denied.
    Denied,
    /// Delayed by a shaper.
    Delayed,
    /// Would have been denied by a shadow-mode rule.
    Shadow,
}

impl Limited {
    fn code(self) -> u8 {
        match self {
            Limited::Denied => b'd',
            Limited::Delayed => b'w',
            Limited::Shadow => b's',
        }
    }

    fn from_code(c: u8) -> Option<Limited> {
        match c {
            b'd' => Some(Limited::Denied),
            b'w' => Some(Limited::Delayed),
            b's' => Some(Limited::Shadow),
            _ => None,
        }
    }

    /// Its name: `denied`, `delayed`, `shadow`.
    pub fn name(self) -> &'static str {
        match self {
            Limited::Denied => "denied",
            Limited::Delayed => "delayed",
            Limited::Shadow => "shadow",
        }
    }
}

/// A key limited often, as [`LimitedKeys::top`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitedKey {
    /// The rule that limited it.
    pub rule: String,
    /// The descriptor's entries, `key=value` joined by `, `.
    pub key: String,
    /// How.
    pub how: Limited,
    /// Times, over the current and the previous window (at most `error`
    /// more than the true number).
    pub count: u64,
    /// The sketch's possible overcount.
    pub error: u64,
}

struct Shard {
    /// The current window's start (ns), and its keys.
    start: u64,
    current: TopKeys,
    previous: TopKeys,
}

/// The keys limited most over the last one or two windows (see the module
/// documentation).
pub struct LimitedKeys {
    shards: [Mutex<Shard>; SHARDS],
    window: u64,
    hasher: foldhash::fast::RandomState,
}

impl std::fmt::Debug for LimitedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitedKeys")
            .field("window", &Duration::from_nanos(self.window))
            .finish_non_exhaustive()
    }
}

thread_local! {
    static KEY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl LimitedKeys {
    /// Tracks up to `capacity` keys per window (spread over the shards),
    /// counted over windows of `window`.
    pub fn new(capacity: usize, window: Duration) -> Self {
        let per = capacity.div_ceil(SHARDS).max(1);
        LimitedKeys {
            shards: std::array::from_fn(|_| {
                Mutex::new(Shard {
                    start: 0,
                    current: TopKeys::new(per),
                    previous: TopKeys::new(per),
                })
            }),
            window: (window.as_nanos().min(u128::from(u64::MAX)) as u64).max(1),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// The length of a window.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// Records that `rule` limited the descriptor `d` at `now`.
    pub fn record<D: Descriptor + ?Sized>(&self, now: Timestamp, rule: &str, how: Limited, d: &D) {
        KEY.with_borrow_mut(|key| {
            key.clear();
            key.push(how.code());
            key.extend_from_slice(rule.as_bytes());
            key.push(SEP);
            for j in 0..d.len() {
                let (k, v) = d.entry(j);
                if j > 0 {
                    key.extend_from_slice(b", ");
                }
                key.extend_from_slice(k.as_bytes());
                key.push(b'=');
                key.extend_from_slice(v.as_bytes());
            }
            let shard = self.hasher.hash_one(&key[..]) as usize % SHARDS;
            let mut s = match self.shards[shard].lock() {
                Ok(s) => s,
                Err(poisoned) => poisoned.into_inner(),
            };
            self.rotate(&mut s, now.as_nanos());
            s.current.add(key, 1);
        });
    }

    fn rotate(&self, s: &mut Shard, now: u64) {
        let start = now - now % self.window;
        if start == s.start {
            return;
        }
        if start == s.start.saturating_add(self.window) {
            std::mem::swap(&mut s.current, &mut s.previous);
        } else if start > s.start {
            // More than a window without a record: both are stale.
            s.previous.clear();
        } else {
            // The clock went back: count on in the current window.
            return;
        }
        s.current.clear();
        s.start = start;
    }

    /// The `n` keys limited most over the current and the previous window
    /// as of `now`, most first.
    pub fn top(&self, now: Timestamp, n: usize) -> Vec<LimitedKey> {
        let mut all: Vec<LimitedKey> = Vec::new();
        for shard in &self.shards {
            let mut s = match shard.lock() {
                Ok(s) => s,
                Err(poisoned) => poisoned.into_inner(),
            };
            self.rotate(&mut s, now.as_nanos());
            let mut merged: Vec<(Vec<u8>, u64, u64)> = s
                .current
                .top(usize::MAX)
                .into_iter()
                .map(|t| (t.key.to_vec(), t.count, t.error))
                .collect();
            for t in s.previous.top(usize::MAX) {
                match merged.iter_mut().find(|m| m.0 == t.key) {
                    Some(m) => {
                        m.1 += t.count;
                        m.2 += t.error;
                    }
                    None => merged.push((t.key.to_vec(), t.count, t.error)),
                }
            }
            drop(s);
            all.extend(merged.into_iter().filter_map(|(key, count, error)| {
                let how = Limited::from_code(*key.first()?)?;
                let text = String::from_utf8_lossy(&key[1..]).into_owned();
                let (rule, entries) = text.split_once(SEP as char)?;
                Some(LimitedKey {
                    rule: rule.to_owned(),
                    key: entries.to_owned(),
                    how,
                    count,
                    error,
                })
            }));
        }
        all.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then(a.error.cmp(&b.error))
                .then_with(|| (&a.rule, &a.key).cmp(&(&b.rule, &b.key)))
        });
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OwnedDescriptor;

    #[test]
    fn windows_roll_over() {
        let k = LimitedKeys::new(64, Duration::from_secs(10));
        let d = OwnedDescriptor::new([("user", "ann")]);
        let e = OwnedDescriptor::new([("user", "bob"), ("route", "/x")]);
        let t = |s: u64| Timestamp::from_secs(1_000 + s);
        for _ in 0..3 {
            k.record(t(1), "per-user", Limited::Denied, &d);
        }
        k.record(t(12), "per-user", Limited::Denied, &d);
        k.record(t(12), "api", Limited::Delayed, &e);
        let top = k.top(t(15), 10);
        assert_eq!(top[0].key, "user=ann");
        assert_eq!((top[0].count, top[0].how), (4, Limited::Denied));
        assert_eq!(top[1].key, "user=bob, route=/x");
        assert_eq!(
            (top[1].rule.as_str(), top[1].how),
            ("api", Limited::Delayed)
        );
        // Two windows on, the first has gone.
        let top = k.top(t(21), 10);
        assert_eq!(top[0].count, 1);
        // Long idle: nothing is left.
        assert!(k.top(t(60), 10).is_empty());
    }
}
