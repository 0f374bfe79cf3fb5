//! nginx's `limit_req` zone, for the keys of one [`Shaper`]: a node per key
//! and a queue of them, least recently looked up last, under one lock.
//!
//! nginx keeps a key's node until the zone deletes it, and the zone deletes
//! nodes only when a key without one arrives (`ngx_http_limit_req_lookup`
//! calling `ngx_http_limit_req_expire`): before giving that key a node it
//! looks at the oldest node, deletes it if it is
//! [expirable](Shaper::expirable) (idle a minute and drained), and then
//! does the same once more with the next oldest; it stops at the first
//! node it keeps. When the zone is full it first deletes the oldest node
//! whatever its state, then up to two expirable ones. Every lookup moves
//! the key's node to the front of the queue, whether the request passes or
//! not; a request that another limit rejects still gives its key a node
//! (never charged).
//!
//! So whether a key that has been idle for a minute still has its node
//! depends on the other keys of its zone; [`ShaperZone`] holds the nodes
//! and the queue to decide exactly as nginx does. A zone holds at most
//! `capacity` nodes where nginx's holds as many as fit in its size.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

use hashbrown::HashMap;

use crate::algorithm::{Algorithm, Apply};
use crate::algorithms::{Shaper, ShaperState};
use crate::key::ToKey;
use crate::{ConfigError, Decision, Timestamp};

/// No node (the end of the queue, or of the free list).
const NIL: u32 = u32::MAX;

/// The nodes of one nginx zone (see the module docs).
///
/// ```
/// use floodgate::algorithms::{NginxRate, Shaper, ShaperDelay};
/// use floodgate::store::ShaperZone;
/// use floodgate::{Apply, Timestamp};
///
/// // rate=1r/m, no burst: a request drains in 62.5 s.
/// let shaper = Shaper::new(NginxRate::PerMinute(1), 0, ShaperDelay::Queue).unwrap();
/// let zone: ShaperZone<String> = ShaperZone::new(1000).unwrap();
/// let at = |ms: u64| Timestamp::from_millis(1_000_000 + ms);
/// assert!(zone.decide(&shaper, "a", at(0), 1, Apply::Commit).is_allowed());
/// // Alone in its zone, "a" keeps its node: still rejected at 61 s.
/// assert!(zone.decide(&shaper, "a", at(61_000), 1, Apply::Commit).is_denied());
/// // "b" arrives: "a", idle a minute and drained, loses its node...
/// assert!(zone.decide(&shaper, "b", at(61_500), 1, Apply::Commit).is_allowed());
/// // ...so its next request starts afresh.
/// assert!(zone.decide(&shaper, "a", at(62_000), 1, Apply::Commit).is_allowed());
/// ```
pub struct ShaperZone<K> {
    nodes: Mutex<Nodes<K>>,
}

/// A locked [`ShaperZone`]: several decisions made together, with nothing
/// in between.
pub struct ZoneGuard<'a, K> {
    nodes: MutexGuard<'a, Nodes<K>>,
}

struct Node<K> {
    key: K,
    state: ShaperState,
    /// Towards the front of the queue (more recently looked up).
    newer: u32,
    /// Towards the back (less recently looked up); the free list's link.
    older: u32,
}

struct Nodes<K> {
    index: HashMap<K, u32, foldhash::quality::RandomState>,
    slab: Vec<Node<K>>,
    /// The most recently looked-up node.
    front: u32,
    /// The least recently looked-up node: the first nginx would expire.
    back: u32,
    /// Slots of deleted nodes, linked through `older`.
    free: u32,
    capacity: usize,
    /// The latest instant a decision was made at (ns): a clock that goes
    /// backwards is seen as no time elapsed.
    latest: u64,
}

impl<K: Hash + Eq + Clone> ShaperZone<K> {
    /// A zone of at most `capacity` nodes.
    pub fn new(capacity: usize) -> Result<Self, ConfigError> {
        if capacity == 0 || capacity >= NIL as usize {
            return Err(ConfigError::new(
                "capacity",
                format!(
                    "must be between 1 and {} (got {capacity})",
                    NIL as usize - 1
                ),
            ));
        }
        Ok(ShaperZone {
            nodes: Mutex::new(Nodes {
                index: HashMap::default(),
                slab: Vec::new(),
                front: NIL,
                back: NIL,
                free: NIL,
                capacity,
                latest: 0,
            }),
        })
    }

    /// Locks the zone.
    pub fn lock(&self) -> ZoneGuard<'_, K> {
        ZoneGuard {
            // A panic while the lock was held cannot leave the queue half
            // linked (no code that panics runs while it is), so the nodes
            // are usable.
            nodes: self
                .nodes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        }
    }

    /// Decides on a request of `cost` for `key` under `limit` at `now`, as
    /// nginx's lookup does: see [`ZoneGuard::decide`].
    pub fn decide<Q>(
        &self,
        limit: &Shaper,
        key: &Q,
        now: Timestamp,
        cost: u64,
        apply: Apply,
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        self.lock().decide(limit, key, now, cost, apply)
    }

    /// Keys that have a node.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no key has a node.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Hash + Eq + Clone> ZoneGuard<'_, K> {
    /// Decides on a request of `cost` for `key` under `limit` at `now`.
    ///
    /// [`Apply::Check`] and a cost of 0 only look: no node is moved, made
    /// or deleted. Any other `apply` is nginx's lookup: the key's node moves
    /// to the front, or the key is given one (after the zone has deleted up
    /// to two expirable nodes, and the oldest if it is full), and `limit`
    /// decides on it with `apply` — [`Apply::Rejected`] for a request
    /// another limit rejected, which nginx looks up without charging.
    pub fn decide<Q>(
        &mut self,
        limit: &Shaper,
        key: &Q,
        now: Timestamp,
        cost: u64,
        apply: Apply,
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToKey<K> + ?Sized,
    {
        let z = &mut *self.nodes;
        z.latest = z.latest.max(now.as_nanos());
        let now = Timestamp::from_nanos(z.latest);
        let found = z.index.get(key).copied();
        if apply == Apply::Check || cost == 0 {
            let mut state = found.map_or_else(ShaperState::default, |i| z.slab[i as usize].state);
            return limit.decide(&mut state, now, cost, apply);
        }
        let i = match found {
            Some(i) => {
                z.unlink(i);
                z.push_front(i);
                i
            }
            None => {
                z.expire(limit, now, 1);
                if z.index.len() >= z.capacity {
                    z.expire(limit, now, 0);
                }
                z.insert(key.to_key())
            }
        };
        limit.decide(&mut z.slab[i as usize].state, now, cost, apply)
    }

    /// What [`decide`](Self::decide) with `apply` would answer, changing
    /// nothing: the key's state is copied (a fresh one when it has no
    /// node) and decided on. A dry run of a request is this with the
    /// `apply` the real call would use.
    pub fn dry_run<Q>(
        &self,
        limit: &Shaper,
        key: &Q,
        now: Timestamp,
        cost: u64,
        apply: Apply,
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let z = &*self.nodes;
        let now = Timestamp::from_nanos(z.latest.max(now.as_nanos()));
        let mut state = z
            .index
            .get(key)
            .map_or_else(ShaperState::default, |&i| z.slab[i as usize].state);
        limit.decide(&mut state, now, cost, apply)
    }

    /// Keys that have a node.
    pub fn len(&self) -> usize {
        self.nodes.index.len()
    }

    /// True when no key has a node.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Hash + Eq + Clone> Nodes<K> {
    /// nginx's `ngx_http_limit_req_expire(ctx, n)`: from the back of the
    /// queue, while `n < 3`, delete the node (unconditionally when `n` is
    /// 0, otherwise only if it is expirable, stopping at the first that is
    /// not).
    fn expire(&mut self, limit: &Shaper, now: Timestamp, mut n: u32) {
        while n < 3 && self.back != NIL {
            let i = self.back;
            if n != 0 && !limit.expirable(&self.slab[i as usize].state, now) {
                return;
            }
            n += 1;
            self.unlink(i);
            self.index.remove(&self.slab[i as usize].key);
            self.slab[i as usize].older = self.free;
            self.free = i;
        }
    }

    /// A node for `key`, fresh, at the front.
    fn insert(&mut self, key: K) -> u32 {
        let node = Node {
            key: key.clone(),
            state: ShaperState::default(),
            newer: NIL,
            older: NIL,
        };
        let i = if self.free != NIL {
            let i = self.free;
            self.free = self.slab[i as usize].older;
            self.slab[i as usize] = node;
            i
        } else {
            self.slab.push(node);
            (self.slab.len() - 1) as u32
        };
        self.index.insert(key, i);
        self.push_front(i);
        i
    }

    fn unlink(&mut self, i: u32) {
        let (newer, older) = {
            let n = &self.slab[i as usize];
            (n.newer, n.older)
        };
        if newer == NIL {
            self.front = older;
        } else {
            self.slab[newer as usize].older = older;
        }
        if older == NIL {
            self.back = newer;
        } else {
            self.slab[older as usize].newer = newer;
        }
    }

    fn push_front(&mut self, i: u32) {
        let old = self.front;
        {
            let n = &mut self.slab[i as usize];
            n.newer = NIL;
            n.older = old;
        }
        if old == NIL {
            self.back = i;
        } else {
            self.slab[old as usize].newer = i;
        }
        self.front = i;
    }
}

#[cfg(test)]
mod tests {
    use super::ShaperZone;
    use crate::algorithms::{NginxRate, Shaper, ShaperDelay};
    use crate::{Apply, Timestamp};

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(10_000_000 + ms)
    }

    /// The queue stays linked through moves, deletions and reused slots.
    #[test]
    fn the_queue_is_least_recently_looked_up_last() {
        let shaper = Shaper::new(NginxRate::PerMinute(1), 0, ShaperDelay::Queue).unwrap();
        let zone: ShaperZone<u32> = ShaperZone::new(3).unwrap();
        for k in 0..3 {
            zone.decide(&shaper, &k, at(0), 1, Apply::Commit);
        }
        // Looked up again (and rejected): 0 moves to the front.
        assert!(
            zone.decide(&shaper, &0, at(1), 1, Apply::Commit)
                .is_denied()
        );
        // Full: key 3 takes the place of the oldest, 1, whatever its state.
        assert!(
            zone.decide(&shaper, &3, at(2), 1, Apply::Commit)
                .is_allowed()
        );
        assert_eq!(zone.len(), 3);
        assert!(
            zone.decide(&shaper, &1, at(3), 1, Apply::Commit)
                .is_allowed()
        );
        // 2 went for 1; 0 and 3 kept their nodes.
        assert!(
            zone.decide(&shaper, &0, at(4), 1, Apply::Commit)
                .is_denied()
        );
        assert!(
            zone.decide(&shaper, &3, at(4), 1, Apply::Commit)
                .is_denied()
        );
        assert!(
            zone.decide(&shaper, &2, at(5), 1, Apply::Commit)
                .is_allowed()
        );
        let nodes = zone.lock();
        let mut order = Vec::new();
        let mut i = nodes.nodes.front;
        while i != super::NIL {
            order.push(nodes.nodes.slab[i as usize].key);
            i = nodes.nodes.slab[i as usize].older;
        }
        // 2 (just given a node), 3, 0; 1 was the oldest when 2 arrived.
        assert_eq!(order, [2, 3, 0]);
    }

    /// A look (a check, or a cost of 0) moves, makes and deletes nothing.
    #[test]
    fn a_check_changes_no_node() {
        let shaper = Shaper::new(NginxRate::PerMinute(1), 0, ShaperDelay::Queue).unwrap();
        let zone: ShaperZone<u32> = ShaperZone::new(10).unwrap();
        zone.decide(&shaper, &0, at(0), 1, Apply::Commit);
        assert!(
            zone.decide(&shaper, &1, at(61_000), 1, Apply::Check)
                .is_allowed()
        );
        assert!(
            zone.decide(&shaper, &1, at(61_000), 0, Apply::Commit)
                .is_allowed()
        );
        assert_eq!(zone.len(), 1);
        assert!(
            zone.decide(&shaper, &0, at(61_000), 1, Apply::Commit)
                .is_denied()
        );
    }

    #[test]
    fn a_zone_needs_room() {
        assert!(ShaperZone::<u32>::new(0).is_err());
        assert!(ShaperZone::<u32>::new(u32::MAX as usize).is_err());
    }
}
