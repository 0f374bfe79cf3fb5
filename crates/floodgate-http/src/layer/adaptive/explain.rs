//! What a configured adaptive limit will do, in words and numbers: the
//! lines `floodgate config check` prints for `shedding.adaptive`.

use super::super::config::{Adaptive, AdaptiveQueue, QueueOrder};
use super::limit::class_limit;

impl Adaptive {
    /// What the controller will do, one line each: its bounds, the target
    /// latency, the control interval, the smoothing, the drains that learn
    /// the no-load latency, each class's limit at the initial and the
    /// largest limit, the queue.
    pub fn explain(&self) -> Vec<String> {
        let tol = self.tolerance;
        let mut lines = vec![
            format!(
                "limit between {} and {} requests in flight, {} before anything is measured",
                self.min, self.max, self.initial
            ),
            format!(
                "target latency: no-load latency × (1 + {tol}) = {:.2} × the no-load latency; \
                 the limit settles where the mean latency is that",
                1.0 + tol
            ),
            format!(
                "control interval: at least {:?} and twice the last mean latency, and {} completions \
                 ({} while measuring the no-load latency)",
                self.interval,
                self.min_samples,
                self.min_samples.saturating_mul(2)
            ),
            format!(
                "each interval: limit × {:.2} + (limit × gradient, + √limit while growing) × {}, \
                 the gradient target / measured within [0.5, {:.2}]",
                1.0 - self.smoothing,
                self.smoothing,
                1.0 + tol
            ),
            self.explain_drains(),
        ];
        lines.extend(self.explain_classes());
        lines.push(match &self.queue {
            None => "queue: none (a request over its class's limit is shed at once)".into(),
            Some(q) => q.explain(),
        });
        lines
    }

    fn explain_drains(&self) -> String {
        match self.probe_every {
            0 => "no drains: the no-load latency is learned once, then only lowered by intervals \
                  faster than it"
                .into(),
            n => format!(
                "the no-load latency is re-measured every {n} intervals (once settled) by a drain: \
                 default and sheddable requests admitted under limit / {:.2} for two intervals \
                 (every fourth drain deeper); the critical class keeps the whole limit",
                1.0 + self.tolerance
            ),
        }
    }

    /// Each class's limit at the initial and the largest limit.
    fn explain_classes(&self) -> [String; 3] {
        let at = |share: f64| {
            let (i, m) = (self.initial, self.max);
            let (ci, cm) = (class_limit(i, share), class_limit(m, share));
            format!("{ci} of {i} at the initial limit, {cm} of {m} at the largest")
        };
        let pct = |s: f64| s * 100.0;
        [
            format!(
                "sheddable requests admitted below {}% of the limit: {}",
                pct(self.sheddable_share),
                at(self.sheddable_share)
            ),
            format!(
                "default requests admitted below {}% of the limit: {}",
                pct(self.default_share),
                at(self.default_share)
            ),
            format!(
                "critical requests admitted up to the whole limit ({}% of it kept for them)",
                pct(1.0 - self.default_share).round()
            ),
        ]
    }
}

impl AdaptiveQueue {
    /// What the queue will do, in one line.
    fn explain(&self) -> String {
        let (timeout, interval, target) = (self.timeout, self.interval, self.target);
        let bound = match self.order {
            QueueOrder::Codel => format!(
                "each waits at most {timeout:?}, oldest first; once the queue has not been empty \
                 for {interval:?}, at most {target:?} and newest first (controlled delay, adaptive \
                 LIFO)"
            ),
            QueueOrder::Lifo => format!("each waits at most {timeout:?}, newest first"),
            QueueOrder::Fifo => format!("each waits at most {timeout:?}, oldest first"),
        };
        format!(
            "queue: up to {} requests over their class's limit wait for a slot, the highest class \
             first; {bound}; one that would wait longer is shed at once",
            self.max_waiting
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_controller_is_explained_with_its_numbers() {
        let a = Adaptive {
            queue: Some(AdaptiveQueue::default()),
            ..Adaptive::default()
        };
        let text = a.explain().join("\n");
        for expected in [
            "limit between 1 and 1000 requests in flight, 4 before anything is measured",
            "no-load latency × (1 + 0.5) = 1.50 × the no-load latency",
            "at least 100ms and twice the last mean latency, and 100 completions (200 while",
            "re-measured every 10 intervals",
            "sheddable requests admitted below 50% of the limit: 2 of 4 at the initial limit, 500 of 1000 at the largest",
            "default requests admitted below 80% of the limit: 3 of 4 at the initial limit, 800 of 1000",
            "(20% of it kept for them)",
            "queue: up to 128 requests",
            "at most 100ms, oldest first; once the queue has not been empty for 100ms, at most 5ms and newest first",
        ] {
            assert!(text.contains(expected), "no `{expected}` in:\n{text}");
        }
    }
}
