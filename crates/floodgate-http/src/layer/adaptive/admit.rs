//! Admission with a queue: a request over its class's limit waits for a
//! slot, never longer than its bound; a slot freed goes to the highest
//! class waiting. Without waiters, admission stays one compare-and-swap;
//! the queue's lock is taken only while something waits.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use floodgate::Timestamp;
use tokio::sync::oneshot;

use super::super::config::AdaptiveQueue;
use super::limit::{AdaptiveLimit, Priority, Ticket};
use super::queue::WaitQueue;

type Queue = WaitQueue<oneshot::Sender<Ticket>>;

/// The queue of an [`AdaptiveLimit`] and what its request path reads
/// without the lock. `waiting` is sequentially consistent with the
/// in-flight count: a request announces itself waiting before it tries for
/// a slot again under the lock, and a release frees its slot before it
/// looks for waiters — so a slot freed is either taken by the waiter or
/// handed to it by the release.
#[derive(Debug)]
pub(super) struct Slots {
    queue: Option<Mutex<Queue>>,
    waiting: AtomicUsize,
    /// Nanoseconds between two completions, as last measured (0: not yet).
    gap: AtomicU64,
}

impl Slots {
    pub(super) fn new(cfg: Option<AdaptiveQueue>) -> Self {
        Slots {
            queue: cfg.map(|c| Mutex::new(WaitQueue::new(c))),
            waiting: AtomicUsize::new(0),
            gap: AtomicU64::new(0),
        }
    }

    /// Requests waiting.
    #[inline]
    pub(super) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Takes in the completions a second last measured.
    pub(super) fn measured(&self, rate: f64) {
        let gap = if rate > 0.0 { (1e9 / rate) as u64 } else { 0 };
        self.gap.store(gap, Ordering::Relaxed);
    }

    fn gap(&self) -> Option<Duration> {
        let gap = self.gap.load(Ordering::Relaxed);
        (gap > 0).then(|| Duration::from_nanos(gap))
    }
}

fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What [`AdaptiveLimit::admit`] made of a request.
#[derive(Debug)]
pub enum Admission {
    /// Admitted now.
    Admitted(Ticket),
    /// Waiting for a slot until its deadline.
    Waiting(Waiter),
    /// Shed: over its class's limit with no queue, or a queue it cannot
    /// wait in usefully (full, or a wait longer than its bound).
    Shed,
}

/// A request waiting for a slot. Its wait ends with
/// [`granted`](Self::granted) (or [`try_granted`](Self::try_granted)) or
/// with [`AdaptiveLimit::leave`] (its bound passed, its client went away);
/// a waiter dropped otherwise leaks nothing (the slot it is handed goes
/// back).
#[derive(Debug)]
#[must_use = "a waiter holds its place in the queue until it leaves"]
pub struct Waiter {
    id: u64,
    priority: Priority,
    deadline: Timestamp,
    rx: oneshot::Receiver<Ticket>,
}

/// Where a [`Waiter`] stands.
#[derive(Debug)]
pub enum Waited {
    /// Handed a slot.
    Granted(Ticket),
    /// Still waiting.
    Waiting,
    /// Shed: its bound passed, or a request of a higher class (or newer,
    /// once the newest go first) pushed it out of a full queue.
    Shed,
}

impl Waiter {
    /// When its bound passes: it is to [leave](AdaptiveLimit::leave) then.
    pub fn deadline(&self) -> Timestamp {
        self.deadline
    }

    /// Waits until handed a slot (none: shed).
    pub async fn granted(&mut self) -> Option<Ticket> {
        (&mut self.rx).await.ok()
    }

    /// Where it stands now, without waiting.
    pub fn try_granted(&mut self) -> Waited {
        match self.rx.try_recv() {
            Ok(t) => Waited::Granted(t),
            Err(oneshot::error::TryRecvError::Empty) => Waited::Waiting,
            Err(oneshot::error::TryRecvError::Closed) => Waited::Shed,
        }
    }
}

impl AdaptiveLimit {
    /// Admits a request of class `p` arriving at `now`, or lets it wait
    /// in the queue (`shedding.adaptive.queue`), or sheds it. While nobody
    /// waits, as [`try_acquire`](Self::try_acquire): one compare-and-swap.
    #[inline]
    pub fn admit(&self, p: Priority, now: Timestamp) -> Admission {
        if self.slots.waiting() == 0
            && let Some(t) = self.try_acquire(p, now)
        {
            return Admission::Admitted(t);
        }
        match &self.slots.queue {
            None => Admission::Shed,
            Some(queue) => self.wait(queue, p, now),
        }
    }

    /// The slow path of [`admit`](Self::admit), under the queue's lock.
    #[cold]
    fn wait(&self, queue: &Mutex<Queue>, p: Priority, now: Timestamp) -> Admission {
        let mut q = lock(queue);
        // Nobody of its class or higher waits: a slot free is its own.
        if q.next_class().is_none_or(|c| c as usize > p as usize)
            && let Some(t) = self.try_acquire(p, now)
        {
            return Admission::Admitted(t);
        }
        let (tx, rx) = oneshot::channel();
        let Ok((id, deadline, evicted)) = q.push(p, now, self.slots.gap(), tx) else {
            return Admission::Shed;
        };
        // Its waiter learns it was shed.
        drop(evicted);
        self.slots.waiting.store(q.len(), Ordering::SeqCst);
        self.serve(&mut q, now);
        let mut waiter = Waiter {
            id,
            priority: p,
            deadline,
            rx,
        };
        match waiter.try_granted() {
            Waited::Granted(t) => Admission::Admitted(t),
            _ => Admission::Waiting(waiter),
        }
    }

    /// Ends the wait of `w` at `now` (its bound passed, its client went
    /// away): out of the queue, or the slot it was handed meanwhile, to
    /// use or to [release](Self::release).
    pub fn leave(&self, mut w: Waiter, now: Timestamp) -> Option<Ticket> {
        if let Some(queue) = &self.slots.queue {
            let mut q = lock(queue);
            if q.remove(w.priority, w.id).is_some() {
                self.serve(&mut q, now);
                return None;
            }
        }
        match w.try_granted() {
            Waited::Granted(t) => Some(t),
            _ => None,
        }
    }

    /// Requests waiting in the queue.
    pub fn waiting(&self) -> usize {
        self.slots.waiting()
    }

    /// Hands the free slots to the waiting requests (after a release or a
    /// new limit).
    #[cold]
    pub(super) fn dispatch(&self, now: Timestamp) {
        if let Some(queue) = &self.slots.queue {
            self.serve(&mut lock(queue), now);
        }
    }

    /// Sheds the requests whose bound passed, then hands free slots to the
    /// highest class waiting, in its order, while its class's limit
    /// allows (a lower class never before a higher one).
    fn serve(&self, q: &mut Queue, now: Timestamp) {
        q.expire(now);
        while let Some(p) = q.next_class() {
            let Some(ticket) = self.try_acquire(p, now) else {
                break;
            };
            let Some(e) = q.take(p, now) else {
                break;
            };
            if e.item.send(ticket).is_err() {
                // Its waiter is gone without leaving: the slot is free.
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.slots.waiting.store(q.len(), Ordering::SeqCst);
        self.gauges.waiting(q.len());
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::config::{Adaptive, QueueOrder};
    use super::super::limit::Completion;
    use super::*;

    fn limit(initial: usize, order: QueueOrder) -> AdaptiveLimit {
        let queue = AdaptiveQueue {
            max_waiting: 8,
            order,
            ..AdaptiveQueue::default()
        };
        let cfg = Adaptive {
            min: 1,
            initial,
            queue: Some(queue),
            ..Adaptive::default()
        };
        AdaptiveLimit::new(cfg, Timestamp::ZERO)
    }

    fn admitted(a: Admission) -> Ticket {
        match a {
            Admission::Admitted(t) => t,
            other => panic!("{other:?}"),
        }
    }

    fn waiting(a: Admission) -> Waiter {
        match a {
            Admission::Waiting(w) => w,
            other => panic!("{other:?}"),
        }
    }

    const T0: Timestamp = Timestamp::ZERO;

    #[test]
    fn a_slot_freed_goes_to_the_highest_class_waiting() {
        let l = limit(2, QueueOrder::Fifo);
        let held = [0, 1].map(|_| admitted(l.admit(Priority::Critical, T0)));
        let mut sheddable = waiting(l.admit(Priority::Sheddable, T0));
        let mut critical = waiting(l.admit(Priority::Critical, T0));
        assert_eq!(l.waiting(), 2);
        let [a, b] = held;
        l.release(a, T0, Completion::Cancelled);
        let Waited::Granted(t) = critical.try_granted() else {
            panic!("the critical request waits on")
        };
        assert!(matches!(sheddable.try_granted(), Waited::Waiting));
        // Under its share of the limit again, the sheddable one goes.
        l.release(t, T0, Completion::Cancelled);
        l.release(b, T0, Completion::Cancelled);
        assert!(matches!(sheddable.try_granted(), Waited::Granted(_)));
        assert_eq!((l.waiting(), l.in_flight()), (0, 1));
    }

    #[test]
    fn a_higher_class_is_admitted_past_lower_ones_waiting() {
        // Limit 4: sheddable requests below 2 in flight.
        let l = limit(4, QueueOrder::Fifo);
        let held = [0, 1].map(|_| admitted(l.admit(Priority::Critical, T0)));
        let mut sheddable = waiting(l.admit(Priority::Sheddable, T0));
        let t = admitted(l.admit(Priority::Critical, T0));
        assert_eq!((l.waiting(), l.in_flight()), (1, 3));
        for t in held.into_iter().chain([t]) {
            l.release(t, T0, Completion::Cancelled);
        }
        assert!(matches!(sheddable.try_granted(), Waited::Granted(_)));
    }

    #[test]
    fn waiters_that_leave_or_vanish_leak_no_slot() {
        let l = limit(1, QueueOrder::Fifo);
        let held = admitted(l.admit(Priority::Critical, T0));
        let left = waiting(l.admit(Priority::Critical, T0));
        let vanished = waiting(l.admit(Priority::Critical, T0));
        assert!(l.leave(left, T0).is_none());
        assert_eq!(l.waiting(), 1);
        // Dropped without leaving: the slot it is handed comes back.
        drop(vanished);
        l.release(held, T0, Completion::Cancelled);
        assert_eq!((l.waiting(), l.in_flight()), (0, 0));
        assert!(matches!(
            l.admit(Priority::Critical, T0),
            Admission::Admitted(_)
        ));
    }

    #[test]
    fn a_waiter_handed_a_slot_as_it_leaves_gets_it() {
        let l = limit(1, QueueOrder::Fifo);
        let held = admitted(l.admit(Priority::Critical, T0));
        let w = waiting(l.admit(Priority::Critical, T0));
        l.release(held, T0, Completion::Cancelled);
        let t = l.leave(w, T0).expect("handed the slot");
        assert_eq!(l.in_flight(), 1);
        l.release(t, T0, Completion::Cancelled);
    }

    #[test]
    fn a_wait_past_its_bound_is_shed_when_slots_are_served() {
        let l = limit(1, QueueOrder::Fifo);
        let held = admitted(l.admit(Priority::Critical, T0));
        let mut w = waiting(l.admit(Priority::Critical, T0));
        assert_eq!(w.deadline(), Timestamp::from_millis(100));
        l.release(held, Timestamp::from_millis(101), Completion::Cancelled);
        assert!(matches!(w.try_granted(), Waited::Shed));
        assert_eq!((l.waiting(), l.in_flight()), (0, 0));
    }

    #[test]
    fn no_slot_is_lost_between_waiters_and_releases_on_threads() {
        // Two threads hold and release the one slot while two others
        // queue for it: every waiter is served, nothing stays in flight.
        let l = limit(1, QueueOrder::Fifo);
        let served = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..2_000 {
                        let t = match l.admit(Priority::Critical, T0) {
                            Admission::Admitted(t) => t,
                            Admission::Waiting(mut w) => loop {
                                match w.try_granted() {
                                    Waited::Granted(t) => break t,
                                    Waited::Waiting => std::thread::yield_now(),
                                    Waited::Shed => panic!("shed"),
                                }
                            },
                            Admission::Shed => continue,
                        };
                        served.fetch_add(1, Ordering::Relaxed);
                        l.release(t, T0, Completion::Cancelled);
                    }
                });
            }
        });
        assert!(served.load(Ordering::Relaxed) > 0);
        assert_eq!((l.waiting(), l.in_flight()), (0, 0));
    }
}
