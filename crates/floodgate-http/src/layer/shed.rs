//! Priority load shedding: an in-flight gauge, the classes of requests, and
//! what a request holds until it ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use floodgate::Clock;
use floodgate_policy::Backend;

use crate::identity::HttpIdentity;

use super::adaptive::{Completion, Priority, Ticket, Waiter};
use super::config::{LowPriority, Shedding};
use super::shared::{Hold, Shared};

/// A count of requests in some state, decremented by its [`GaugeGuard`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Gauge(Arc<AtomicUsize>);

/// One unit of a [`Gauge`], given back on drop.
#[derive(Debug)]
pub(crate) struct GaugeGuard(Arc<AtomicUsize>);

impl Gauge {
    /// Takes a unit if fewer than `max` are taken.
    pub(crate) fn try_enter(&self, max: usize) -> Option<GaugeGuard> {
        let (n, add) = (&self.0, |cur| (cur < max).then_some(cur + 1));
        let entered = n.fetch_update(Ordering::AcqRel, Ordering::Relaxed, add);
        entered.ok().map(|_| GaugeGuard(n.clone()))
    }

    /// Takes a unit whatever the count.
    pub(crate) fn enter(&self) -> GaugeGuard {
        self.0.fetch_add(1, Ordering::AcqRel);
        GaugeGuard(self.0.clone())
    }

    /// The units taken.
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request's place in the in-flight count and, with an adaptive limit,
/// under it: given back when the request ends, telling the controller how
/// it ended.
pub(crate) struct ShedHold<B: Backend, C: Clock + 'static> {
    _gauge: GaugeGuard,
    adaptive: Option<(Arc<Shared<B, C>>, Ticket)>,
    how: Completion,
}

impl<B: Backend, C: Clock + 'static> ShedHold<B, C> {
    pub(crate) fn new(gauge: GaugeGuard, adaptive: Option<(Arc<Shared<B, C>>, Ticket)>) -> Self {
        // Until answered, a request that ends was cancelled.
        let how = Completion::Cancelled;
        ShedHold {
            _gauge: gauge,
            adaptive,
            how,
        }
    }
}

impl<B: Backend, C: Clock + 'static> Hold for ShedHold<B, C> {
    fn answered(&mut self, status: Option<http::StatusCode>) {
        let overloaded = status.is_none_or(|s| matches!(s.as_u16(), 502..=504));
        self.how = match overloaded {
            true => Completion::Overloaded,
            false => Completion::Ok,
        };
    }
}

impl<B: Backend, C: Clock + 'static> Drop for ShedHold<B, C> {
    fn drop(&mut self) {
        if let Some((shared, ticket)) = self.adaptive.take()
            && let Some(limit) = &shared.adaptive
        {
            limit.release(ticket, shared.engine.clock().now(), self.how);
        }
    }
}

/// A request waiting in the adaptive limit's queue, counted in flight in
/// the layer meanwhile. Dropped while it waits (its client went away), it
/// leaves the queue, and gives back the slot it was handed meanwhile.
pub(crate) struct Queued<B: Backend, C: Clock + 'static> {
    gauge: Option<GaugeGuard>,
    shared: Arc<Shared<B, C>>,
    waiter: Option<Waiter>,
    pub(crate) priority: Priority,
}

impl<B: Backend, C: Clock + 'static> Queued<B, C> {
    pub(crate) fn new(
        gauge: GaugeGuard,
        shared: Arc<Shared<B, C>>,
        waiter: Waiter,
        priority: Priority,
    ) -> Self {
        Queued {
            gauge: Some(gauge),
            shared,
            waiter: Some(waiter),
            priority,
        }
    }

    /// Waits for a slot until the waiter's deadline: the request's hold
    /// then, or none when it is shed.
    pub(crate) async fn admitted(mut self) -> Option<ShedHold<B, C>> {
        let (shared, w) = (self.shared.clone(), self.waiter.as_mut()?);
        let limit = shared.adaptive.as_ref()?;
        let left = w
            .deadline()
            .saturating_duration_since(shared.engine.clock().now());
        let ticket = match tokio::time::timeout(left, w.granted()).await {
            Ok(granted) => {
                self.waiter = None;
                granted
            }
            Err(_) => limit.leave(self.waiter.take()?, shared.engine.clock().now()),
        }?;
        let adaptive = Some((shared.clone(), ticket));
        Some(ShedHold::new(self.gauge.take()?, adaptive))
    }
}

impl<B: Backend, C: Clock + 'static> Drop for Queued<B, C> {
    fn drop(&mut self) {
        if let Some(w) = self.waiter.take()
            && let Some(limit) = &self.shared.adaptive
        {
            let now = self.shared.engine.clock().now();
            if let Some(ticket) = limit.leave(w, now) {
                limit.release(ticket, now, Completion::Cancelled);
            }
        }
    }
}

/// Whether `sel` selects the request (its `route` template, when it was
/// needed, or a header value).
fn selects<T>(sel: &LowPriority, req: &http::Request<T>, route: Option<&str>) -> bool {
    let header = sel.header.as_ref().is_some_and(|(name, values)| {
        req.headers().get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| values.iter().any(|x| x.eq_ignore_ascii_case(v.trim())))
        })
    });
    header || route.is_some_and(|t| sel.routes.iter().any(|r| r == t))
}

impl Shedding {
    /// The request's class: critical when `critical` selects it, sheddable
    /// when `low_priority` does, default otherwise.
    pub(crate) fn priority<T>(&self, req: &http::Request<T>, identity: &HttpIdentity) -> Priority {
        let (low, critical) = (&self.low_priority, &self.critical);
        let route = match low.routes.is_empty() && critical.routes.is_empty() {
            true => None,
            false => identity.route(req.uri().path()),
        };
        if selects(critical, req, route) {
            Priority::Critical
        } else if selects(low, req, route) {
            Priority::Sheddable
        } else {
            Priority::Default
        }
    }

    /// Counts a request of class `p` in `in_flight`, or sheds it (`None`):
    /// beyond `max_in_flight`, or beyond `low_priority_above` when it is
    /// sheddable.
    pub(crate) fn enter(&self, p: Priority, in_flight: &Gauge) -> Option<GaugeGuard> {
        let hard = self.max_in_flight.unwrap_or(usize::MAX);
        in_flight.try_enter(match p {
            Priority::Sheddable => hard.min(self.low_priority_above),
            _ => hard,
        })
    }
}
