//! The queue in front of the adaptive limit, as a policy: who may wait,
//! how long at most, who is evicted when it is full, who is served next.
//! Pure: time is the caller's [`Timestamp`], the waiting requests'
//! handles are `T`; [`AdaptiveLimit`](super::AdaptiveLimit) holds it
//! under a lock taken only when something waits.

use std::collections::VecDeque;
use std::time::Duration;

use floodgate::Timestamp;

use super::super::config::{AdaptiveQueue, QueueOrder};
use super::limit::Priority;

/// One waiting request.
#[derive(Debug)]
pub(super) struct Entry<T> {
    pub(super) id: u64,
    pub(super) deadline: Timestamp,
    pub(super) item: T,
}

/// A request let in to wait: its id, its deadline, and the request it
/// pushed out of a full queue (none: there was room).
pub(super) type Enqueued<T> = (u64, Timestamp, Option<T>);

/// The waiting requests, one line per [`Priority`].
#[derive(Debug)]
pub(super) struct WaitQueue<T> {
    cfg: AdaptiveQueue,
    classes: [VecDeque<Entry<T>>; 3],
    len: usize,
    /// Since when the queue has not been empty (nanoseconds).
    busy_since: u64,
    next_id: u64,
}

impl<T> WaitQueue<T> {
    pub(super) fn new(cfg: AdaptiveQueue) -> Self {
        WaitQueue {
            cfg,
            classes: Default::default(),
            len: 0,
            busy_since: 0,
            next_id: 0,
        }
    }

    /// Requests waiting.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether the queue has not been empty for `interval` at `now`: it
    /// is standing — the upstream is overloaded, not absorbing a burst.
    pub(super) fn standing(&self, now: Timestamp) -> bool {
        let stood = now.as_nanos().saturating_sub(self.busy_since);
        self.cfg.order == QueueOrder::Codel
            && self.len > 0
            && Duration::from_nanos(stood) >= self.cfg.interval
    }

    /// Whether the newest of a class is served first at `now`.
    fn lifo(&self, now: Timestamp) -> bool {
        match self.cfg.order {
            QueueOrder::Lifo => true,
            QueueOrder::Fifo => false,
            QueueOrder::Codel => self.standing(now),
        }
    }

    /// How long a request arriving at `now` may wait: `target` once the
    /// queue stands, `timeout` otherwise.
    pub(super) fn bound(&self, now: Timestamp) -> Duration {
        match self.standing(now) {
            true => self.cfg.target,
            false => self.cfg.timeout,
        }
    }

    /// Requests served before a newcomer of class `p` at `now`: every one
    /// of a higher class, and its own class unless the newest goes first.
    fn ahead(&self, p: Priority, now: Timestamp) -> usize {
        let higher: usize = self.classes[..p as usize].iter().map(VecDeque::len).sum();
        let own = self.classes[p as usize].len();
        higher + if self.lifo(now) { 0 } else { own }
    }

    /// Lets a request of class `p` in to wait at `now`, a slot freeing
    /// every `gap` (none: not measured yet). Refused (`Err`, its handle
    /// given back) when it would wait longer than its bound, or when the
    /// queue is full of requests it may not push out: those of a lower
    /// class, or the oldest of its own once the newest go first.
    pub(super) fn push(
        &mut self,
        p: Priority,
        now: Timestamp,
        gap: Option<Duration>,
        item: T,
    ) -> Result<Enqueued<T>, T> {
        let bound = self.bound(now);
        let expected = gap.map_or(Duration::ZERO, |g| g * (self.ahead(p, now) + 1) as u32);
        if expected > bound {
            return Err(item);
        }
        let evicted = match self.len < self.cfg.max_waiting {
            true => None,
            false => match self.evict(p, now) {
                Some(e) => Some(e.item),
                None => return Err(item),
            },
        };
        if self.len == 0 {
            self.busy_since = now.as_nanos();
        }
        let (id, deadline) = (self.next_id, now.saturating_add(bound));
        self.next_id += 1;
        self.classes[p as usize].push_back(Entry { id, deadline, item });
        self.len += 1;
        Ok((id, deadline, evicted))
    }

    /// Takes out the oldest request of the lowest class waiting, if a
    /// newcomer of class `p` may push it out.
    fn evict(&mut self, p: Priority, now: Timestamp) -> Option<Entry<T>> {
        let lowest = (p as usize..3)
            .rev()
            .find(|c| !self.classes[*c].is_empty())?;
        if lowest == p as usize && !self.lifo(now) {
            return None;
        }
        self.len -= 1;
        self.classes[lowest].pop_front()
    }

    /// The class of the request to serve next: the highest waiting.
    pub(super) fn next_class(&self) -> Option<Priority> {
        let c = self.classes.iter().position(|q| !q.is_empty())?;
        Some([Priority::Critical, Priority::Default, Priority::Sheddable][c])
    }

    /// Takes out the request of class `p` to serve next at `now`.
    pub(super) fn take(&mut self, p: Priority, now: Timestamp) -> Option<Entry<T>> {
        let lifo = self.lifo(now);
        let line = &mut self.classes[p as usize];
        let e = match lifo {
            true => line.pop_back(),
            false => line.pop_front(),
        }?;
        self.len -= 1;
        Some(e)
    }

    /// Takes out request `id` of class `p`, if it still waits.
    pub(super) fn remove(&mut self, p: Priority, id: u64) -> Option<Entry<T>> {
        let line = &mut self.classes[p as usize];
        let at = line.iter().position(|e| e.id == id)?;
        self.len -= 1;
        line.remove(at)
    }

    /// Drops the requests whose bound passed at `now` (their handles
    /// dropped: they learn they were shed).
    pub(super) fn expire(&mut self, now: Timestamp) {
        for line in &mut self.classes {
            line.retain(|e| e.deadline > now);
        }
        self.len = self.classes.iter().map(VecDeque::len).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_nanos(ms * MS)
    }

    fn queue(order: QueueOrder, max_waiting: usize) -> WaitQueue<u32> {
        WaitQueue::new(AdaptiveQueue {
            max_waiting,
            order,
            ..AdaptiveQueue::default()
        })
    }

    fn push(q: &mut WaitQueue<u32>, p: Priority, ms: u64, item: u32) -> Option<u32> {
        q.push(p, at(ms), None, item).ok().and_then(|e| e.2)
    }

    fn served(q: &mut WaitQueue<u32>, ms: u64) -> Vec<u32> {
        std::iter::from_fn(|| q.next_class().and_then(|p| q.take(p, at(ms))))
            .map(|e| e.item)
            .collect()
    }

    #[test]
    fn codel_waits_up_to_timeout_until_the_queue_stands_then_up_to_target() {
        let mut q = queue(QueueOrder::Codel, 10);
        let (_, deadline, _) = q.push(Priority::Default, at(0), None, 1).unwrap();
        assert_eq!(deadline, at(100));
        assert!(!q.standing(at(99)));
        let (_, deadline, _) = q.push(Priority::Default, at(100), None, 2).unwrap();
        assert_eq!(deadline, at(105));
        // Emptied: the long bound again.
        served(&mut q, 100);
        let (_, deadline, _) = q.push(Priority::Default, at(101), None, 3).unwrap();
        assert_eq!(deadline, at(201));
    }

    #[test]
    fn codel_serves_the_oldest_first_then_the_newest_once_the_queue_stands() {
        let mut q = queue(QueueOrder::Codel, 10);
        for (i, ms) in [0, 10, 20].into_iter().enumerate() {
            push(&mut q, Priority::Default, ms, i as u32);
        }
        assert_eq!(q.take(Priority::Default, at(50)).unwrap().item, 0);
        assert_eq!(served(&mut q, 120), [2, 1]);
    }

    #[test]
    fn lifo_and_fifo_keep_their_order_and_their_timeout() {
        for (order, expected) in [(QueueOrder::Lifo, [2, 1, 0]), (QueueOrder::Fifo, [0, 1, 2])] {
            let mut q = queue(order, 10);
            for i in 0..3 {
                push(&mut q, Priority::Default, 0, i);
            }
            let (_, deadline, _) = q.push(Priority::Default, at(500), None, 9).unwrap();
            assert_eq!(deadline, at(600), "{order:?}");
            q.remove(Priority::Default, 3).unwrap();
            assert_eq!(served(&mut q, 500), expected, "{order:?}");
        }
    }

    #[test]
    fn a_request_that_would_wait_past_its_bound_is_refused_at_once() {
        let mut q = queue(QueueOrder::Fifo, 10);
        let gap = Some(Duration::from_millis(30));
        // 30 ms for the first, 60 and 90 for the next: 120 is over 100.
        for i in 0..3 {
            assert!(q.push(Priority::Default, at(0), gap, i).is_ok());
        }
        assert_eq!(q.push(Priority::Default, at(0), gap, 3).unwrap_err(), 3);
        // A critical request waits behind none of them.
        assert!(q.push(Priority::Critical, at(0), gap, 4).is_ok());
        // A standing queue's bound is 5 ms: one slot away is too far.
        let mut q = queue(QueueOrder::Codel, 10);
        push(&mut q, Priority::Default, 0, 0);
        assert!(q.push(Priority::Default, at(100), gap, 1).is_err());
        let short = Some(Duration::from_millis(1));
        assert!(q.push(Priority::Default, at(100), short, 1).is_ok());
    }

    #[test]
    fn the_highest_class_is_served_first_and_pushes_lower_ones_out() {
        let mut q = queue(QueueOrder::Fifo, 3);
        push(&mut q, Priority::Sheddable, 0, 0);
        push(&mut q, Priority::Sheddable, 0, 1);
        push(&mut q, Priority::Default, 0, 2);
        // Full: a critical request pushes out the oldest sheddable one.
        assert_eq!(push(&mut q, Priority::Critical, 0, 3), Some(0));
        // Full of requests no lower than it: a default one is refused.
        push(&mut q, Priority::Critical, 0, 4);
        assert_eq!(q.push(Priority::Default, at(0), None, 5).unwrap_err(), 5);
        assert_eq!(served(&mut q, 0), [3, 4, 2]);
    }

    #[test]
    fn once_the_newest_go_first_a_full_queue_pushes_out_its_oldest() {
        let mut q = queue(QueueOrder::Lifo, 2);
        push(&mut q, Priority::Default, 0, 0);
        push(&mut q, Priority::Default, 0, 1);
        assert_eq!(push(&mut q, Priority::Default, 1, 2), Some(0));
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn cancelled_and_expired_requests_leave_the_queue() {
        let mut q = queue(QueueOrder::Fifo, 10);
        let (id, _, _) = q.push(Priority::Default, at(0), None, 0).unwrap();
        push(&mut q, Priority::Default, 50, 1);
        assert_eq!(q.remove(Priority::Default, id).unwrap().item, 0);
        assert!(q.remove(Priority::Default, id).is_none());
        q.expire(at(149));
        assert_eq!(q.len(), 1);
        q.expire(at(150));
        assert_eq!((q.len(), q.next_class()), (0, None));
    }
}
