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
    pub fn try_enter(&self, max: usize) -> Option<GaugeGuard> {
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            if cur >= max {
                return None;
            }
            match self
                .0
                .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Some(GaugeGuard(self.0.clone())),
                Err(now) => cur = now,
            }
        }
    }

    /// Takes a unit whatever the count.
    pub fn enter(&self) -> GaugeGuard {
        self.0.fetch_add(1, Ordering::AcqRel);
        GaugeGuard(self.0.clone())
    }

    /// The units taken.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The shedder: in-flight requests of the layer, and who is low priority.
pub(crate) struct Shedder {
    pub config: Shedding,
    pub in_flight: Gauge,
}

impl Shedder {
    pub fn new(config: Shedding) -> Self {
        Shedder {
            config,
            in_flight: Gauge::default(),
        }
    }

    /// Whether a request is low priority: its route template is listed, or
    /// its header has a listed value.
    pub fn is_low<T>(&self, req: &http::Request<T>, identity: &HttpIdentity) -> bool {
        let low = &self.config.low_priority;
        if let Some((name, values)) = &low.header {
            let hit = req.headers().get_all(name).iter().any(|v| {
                v.to_str()
                    .is_ok_and(|v| values.iter().any(|x| x.eq_ignore_ascii_case(v.trim())))
            });
            if hit {
                return true;
            }
        }
        !low.routes.is_empty()
            && identity
                .route(req.uri().path())
                .is_some_and(|t| low.routes.iter().any(|r| r == t))
    }

    /// Counts a request in flight, or sheds it (`None`).
    pub fn enter(&self, low: bool) -> Option<GaugeGuard> {
        let hard = self.config.max_in_flight.unwrap_or(usize::MAX);
        let max = if low {
            hard.min(self.config.low_priority_above)
        } else {
            hard
        };
        self.in_flight.try_enter(max)
    }
}
