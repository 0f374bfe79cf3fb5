//! The local fallback of [`FailurePolicy::Local`](crate::FailurePolicy): an
//! in-process [`MemoryBackend`] deciding the same limits, each count divided
//! by the expected number of instances. Scaled limits are built once per
//! distinct limit and cached, never per request. The in-memory store
//! remembers the concurrency permits it admits until they are given back,
//! so that their releases find it whatever the breaker says by then.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use floodgate::algorithms::{
    AnyLimit, Concurrency, FixedWindow, Gcra, LimitKind, NginxRate, Shaper, ShaperDelay,
    SlidingLog, SlidingWindow, SubWindowCounter,
};
use floodgate::{Apply, Decision, StoreConfig, Timestamp};
use floodgate_policy::{Item, MemoryBackend, Released, SyncBackend};

pub(crate) struct LocalFallback {
    memory: MemoryBackend,
    divide_by: u32,
    scaled: RwLock<HashMap<AnyLimit, Arc<AnyLimit>>>,
}

/// `limit` with every count, burst and capacity divided by `d` (rounded
/// down, at least 1); periods and windows unchanged. GCRA keeps its exact
/// rate divided by `d` (the period is multiplied instead when it can be);
/// an nginx rate is rounded to a whole number of requests per minute. The
/// penalty mode and the block duration are kept. A limit that cannot be
/// scaled is kept as it is.
pub fn scale(limit: &AnyLimit, d: u32) -> AnyLimit {
    let d64 = u64::from(d.max(1));
    let div = |x: u64| (x / d64).max(1);
    let scaled: Option<AnyLimit> = match limit.kind() {
        LimitKind::Gcra(g) => {
            let (count, period) = g.rate();
            let burst = div(g.burst());
            period
                .checked_mul(d.max(1))
                .and_then(|p| Gcra::new(count, p, burst).ok())
                .or_else(|| Gcra::new(div(count), period, burst).ok())
                .map(Into::into)
        }
        LimitKind::FixedWindow(f) => FixedWindow::new(div(f.limit()), f.window())
            .ok()
            .map(Into::into),
        LimitKind::SlidingWindow(w) => SlidingWindow::new(div(w.limit()), w.window())
            .ok()
            .map(Into::into),
        LimitKind::SubWindows(w) => {
            SubWindowCounter::new(div(w.limit()), w.window(), w.sub_windows())
                .ok()
                .map(Into::into)
        }
        LimitKind::SlidingLog(l) => SlidingLog::new(div(l.limit()), l.window())
            .ok()
            .map(Into::into),
        LimitKind::Shaper(s) => {
            let millis = s.rate_millis() / d64;
            let rate = if millis >= 1000 && millis % 1000 == 0 {
                NginxRate::PerSecond(millis / 1000)
            } else {
                NginxRate::PerMinute((millis * 60 / 1000).max(1))
            };
            let delay = match s.delay_millis() {
                0 => ShaperDelay::Queue,
                u64::MAX => ShaperDelay::NoDelay,
                m => ShaperDelay::After(m / 1000 / d64),
            };
            Shaper::new(rate, s.burst() / d64, delay)
                .ok()
                .map(Into::into)
        }
        LimitKind::Concurrency(c) => Concurrency::new(div(c.max())).ok().map(Into::into),
    };
    scaled.map_or_else(
        || limit.clone(),
        |s| {
            s.with_penalty_mode(limit.penalty_mode())
                .with_block(limit.block())
        },
    )
}

impl LocalFallback {
    /// A store of `capacity` keys dividing limits by `divide_by`.
    pub(crate) fn new(capacity: usize, divide_by: u32) -> Result<Self, floodgate::ConfigError> {
        Ok(LocalFallback {
            memory: MemoryBackend::new(StoreConfig::with_capacity(capacity.max(1)))?,
            divide_by,
            scaled: RwLock::new(HashMap::new()),
        })
    }

    /// The permits admitted here and not given back (one per permit and
    /// key).
    pub(crate) fn permits(&self) -> usize {
        self.memory.held_permits()
    }

    fn limit_for(&self, limit: &AnyLimit) -> Option<Arc<AnyLimit>> {
        if self.divide_by <= 1 {
            return None;
        }
        if let Some(s) = self
            .scaled
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(limit)
        {
            return Some(s.clone());
        }
        let s = Arc::new(scale(limit, self.divide_by));
        let mut map = self
            .scaled
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Limits come from configuration, so the map stays small; bound it
        // anyway against a stream of ever-new limits.
        if map.len() >= 10_000 {
            map.clear();
        }
        Some(map.entry(limit.clone()).or_insert(s).clone())
    }

    pub(crate) fn decide(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Decision {
        let scaled: Vec<Option<Arc<AnyLimit>>> =
            items.iter().map(|i| self.limit_for(i.limit)).collect();
        let local: Vec<Item<'_>> = items
            .iter()
            .zip(&scaled)
            .map(|(i, s)| Item {
                limit: s.as_deref().unwrap_or(i.limit),
                // Each counter on its own, as in Redis.
                zone: None,
                ..*i
            })
            .collect();
        // The store remembers the permits it admits (under their own keys:
        // the scaled limits do not change them).
        self.memory.decide_now(&local, now, apply, out)
    }

    /// Gives back up to `units` of `item.permit` here if this store admitted
    /// that permit and it still holds units of `item.key`: the units given
    /// back, or `None` (the store is left as it is). Costs one atomic load
    /// while no permit is held.
    pub(crate) fn release_permit(&self, item: Item<'_>, units: u64, now: Timestamp) -> Option<u64> {
        if self.memory.held_permits() == 0 {
            return None;
        }
        match self.release(item, units, now) {
            Released::Given(n) | Released::Queued(n) => Some(n),
            Released::NotHeld => None,
        }
    }

    /// Gives back up to what `item.permit` holds of `item.key` here.
    pub(crate) fn release(&self, item: Item<'_>, units: u64, now: Timestamp) -> Released {
        let scaled = self.limit_for(item.limit);
        let item = Item {
            limit: scaled.as_deref().unwrap_or(item.limit),
            ..item
        };
        self.memory.release_now(item, units, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::algorithms::Penalty;
    use std::time::Duration;

    #[test]
    fn scales_each_kind() {
        let g =
            AnyLimit::from(Gcra::new(10, Duration::from_secs(1), 20).unwrap()).with_penalty(true);
        let s = scale(&g, 4);
        let LimitKind::Gcra(sg) = s.kind() else {
            panic!()
        };
        assert_eq!(sg.rate(), (10, Duration::from_secs(4)));
        assert_eq!(sg.burst(), 5);
        assert!(s.penalty());
        let f = scale(
            &AnyLimit::from(FixedWindow::new(3, Duration::from_secs(1)).unwrap()),
            10,
        );
        let LimitKind::FixedWindow(sf) = f.kind() else {
            panic!()
        };
        assert_eq!(sf.limit(), 1);
        let sh = AnyLimit::from(
            Shaper::new(NginxRate::PerSecond(10), 8, ShaperDelay::After(4)).unwrap(),
        );
        let sh = scale(&sh, 2);
        let LimitKind::Shaper(ss) = sh.kind() else {
            panic!()
        };
        assert_eq!(
            (ss.rate_millis(), ss.burst(), ss.delay_millis()),
            (5000, 4, 2000)
        );
        let c = scale(&AnyLimit::from(Concurrency::new(9).unwrap()), 2);
        let LimitKind::Concurrency(sc) = c.kind() else {
            panic!()
        };
        assert_eq!(sc.max(), 4);
    }

    #[test]
    fn scale_keeps_penalty_mode_and_block() {
        for p in [Penalty::None, Penalty::OwnDenials, Penalty::AllDenials] {
            let limit = AnyLimit::from(FixedWindow::new(8, Duration::from_secs(1)).unwrap())
                .with_penalty_mode(p)
                .with_block(Duration::from_millis(1500));
            let s = scale(&limit, 4);
            assert_eq!(s.penalty_mode(), p);
            assert_eq!(s.block(), Duration::from_millis(1500));
        }
    }
}
