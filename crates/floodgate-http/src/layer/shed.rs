//! Priority load shedding: an in-flight gauge and the low-priority test.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::identity::HttpIdentity;

use super::config::Shedding;

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

impl Shedding {
    /// Counts a request in `in_flight`, or sheds it (`None`): beyond
    /// `max_in_flight`, or beyond `low_priority_above` when it is low
    /// priority — its route template is listed, or its header has a listed
    /// value.
    pub(crate) fn enter<T>(
        &self,
        req: &http::Request<T>,
        identity: &HttpIdentity,
        in_flight: &Gauge,
    ) -> Option<GaugeGuard> {
        let low = &self.low_priority;
        let header = low.header.as_ref().is_some_and(|(name, values)| {
            req.headers().get_all(name).iter().any(|v| {
                v.to_str()
                    .is_ok_and(|v| values.iter().any(|x| x.eq_ignore_ascii_case(v.trim())))
            })
        });
        let is_low = header
            || !low.routes.is_empty()
                && identity
                    .route(req.uri().path())
                    .is_some_and(|t| low.routes.iter().any(|r| r == t));
        let hard = self.max_in_flight.unwrap_or(usize::MAX);
        in_flight.try_enter(match is_low {
            true => hard.min(self.low_priority_above),
            false => hard,
        })
    }
}
