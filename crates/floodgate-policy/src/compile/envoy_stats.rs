//! A rule's statistics under envoyproxy/ratelimit's Prometheus names
//! (`ratelimit_service_rate_limit_*`, as its statsd exporter's default
//! mapper names them), with its semantics: hits, not requests, split
//! between `near_limit` and `over_limit` as its `base_limiter.go` splits
//! them. Labelled by the rule's path: bounded, never a request value.

use floodgate::Decision;
use metrics::Counter;

/// The counters of one rule (envoyproxy/ratelimit's
/// `stats.RateLimitStats`).
#[derive(Debug, Clone)]
pub(crate) struct EnvoyStats {
    total_hits: Counter,
    over_limit: Counter,
    near_limit: Counter,
    within_limit: Counter,
    shadow_mode: Counter,
    total_negative_hits: Counter,
}

/// The labels the default mapper gives the stats key `path`
/// (`domain.key1_value1.key2_value2…`): `domain` and `key1` for a key of
/// one level, `domain`, `key1` and `key2` for deeper keys (the levels past
/// the second are dropped).
pub(crate) fn labels(path: &str) -> Vec<(&'static str, String)> {
    let mut parts = path.split('.');
    let mut out = Vec::with_capacity(3);
    for name in ["domain", "key1", "key2"] {
        match parts.next() {
            Some(p) => out.push((name, p.to_owned())),
            None => break,
        }
    }
    out
}

impl EnvoyStats {
    /// Handles for the rule of stats key `path`, from the installed
    /// recorder.
    pub(crate) fn new(path: &str) -> Self {
        describe();
        let labels = labels(path);
        let c = |name: &'static str| metrics::counter!(name, labels.as_slice());
        EnvoyStats {
            total_hits: c("ratelimit_service_rate_limit_total_hits"),
            over_limit: c("ratelimit_service_rate_limit_over_limit"),
            near_limit: c("ratelimit_service_rate_limit_near_limit"),
            within_limit: c("ratelimit_service_rate_limit_within_limit"),
            shadow_mode: c("ratelimit_service_rate_limit_shadow_mode"),
            total_negative_hits: c("ratelimit_service_rate_limit_total_negative_hits"),
        }
    }

    /// Counts `hits` decided by `d` (the rule's narrowest decision) for a
    /// rule in shadow mode or not, at near-limit ratio `ratio`.
    /// envoyproxy/ratelimit knows its counter before and after the
    /// increment; here the count before is the limit less what remained
    /// (a denial that charged its hits leaves nothing: all its hits count
    /// over the limit).
    #[inline]
    pub(crate) fn count(&self, hits: u64, d: &Decision, shadow: bool, ratio: f64) {
        self.total_hits.increment(hits);
        let limit = d.limit;
        let near = near_threshold(limit, ratio);
        let before = limit.saturating_sub(d.remaining);
        if d.is_denied() {
            let over = if before >= limit {
                hits
            } else {
                self.near_limit.increment(limit - near.max(before));
                before.saturating_add(hits) - limit
            };
            self.over_limit.increment(over);
            if shadow {
                self.shadow_mode.increment(over);
            }
            return;
        }
        // Admitted: `before` is the count after the hits.
        let after = before;
        let before = after.saturating_sub(hits);
        if after > near {
            self.near_limit.increment(after - near.max(before));
        }
        self.within_limit.increment(hits);
    }

    /// Counts `hits` given back (negative hits): only in
    /// `total_negative_hits`, as `GenerateCacheKeys` counts them.
    pub(crate) fn negative(&self, hits: u64) {
        self.total_negative_hits.increment(hits);
    }

    /// Counts `hits` of a rule that denies every request
    /// (`requests_per_unit: 0`): all over the limit.
    pub(crate) fn blocked(&self, hits: u64) {
        self.total_hits.increment(hits);
        self.over_limit.increment(hits);
    }
}

/// ⌊`limit` × `ratio`⌋ in `float32`, as envoyproxy/ratelimit computes it.
fn near_threshold(limit: u64, ratio: f64) -> u64 {
    f64::from(limit as f32 * ratio as f32).floor().max(0.0) as u64
}

/// Says what the compatible counters count.
fn describe() {
    for (name, what) in [
        (
            "ratelimit_service_rate_limit_total_hits",
            "hits asked of the rule",
        ),
        (
            "ratelimit_service_rate_limit_over_limit",
            "hits over the rule's limit",
        ),
        (
            "ratelimit_service_rate_limit_near_limit",
            "hits above the near-limit ratio, within the limit",
        ),
        (
            "ratelimit_service_rate_limit_within_limit",
            "hits the rule admitted",
        ),
        (
            "ratelimit_service_rate_limit_shadow_mode",
            "hits over the limit of a rule in shadow mode",
        ),
        (
            "ratelimit_service_rate_limit_total_negative_hits",
            "hits given back (negative hits)",
        ),
    ] {
        metrics::describe_counter!(
            name,
            format!(
                "envoyproxy/ratelimit's statistic: {what}, by the rule's stats key (domain, key1, key2)."
            )
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_the_default_mapper() {
        let l = |p| {
            labels(p)
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(l("d.k_v"), ["domain=d", "key1=k_v"]);
        assert_eq!(l("d.a_1.b"), ["domain=d", "key1=a_1", "key2=b"]);
        assert_eq!(l("d.a.b_2.c"), ["domain=d", "key1=a", "key2=b_2"]);
    }

    /// The counters of the stats key `d.k_v` after `run` counts on them:
    /// total, over, near, within, shadow, negative.
    fn counted(run: impl FnOnce(&EnvoyStats)) -> [u64; 6] {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || run(&EnvoyStats::new("d.k_v")));
        let values: std::collections::HashMap<String, u64> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(k, _, _, v)| match v {
                DebugValue::Counter(c) => Some((k.key().name().to_owned(), c)),
                _ => None,
            })
            .collect();
        [
            "total_hits",
            "over_limit",
            "near_limit",
            "within_limit",
            "shadow_mode",
            "total_negative_hits",
        ]
        .map(|s| values[&format!("ratelimit_service_rate_limit_{s}")])
    }

    fn decision(outcome: floodgate::Outcome, limit: u64, remaining: u64) -> Decision {
        Decision {
            outcome,
            limit,
            remaining,
            reset_after: std::time::Duration::ZERO,
            retry_after: None,
        }
    }

    #[test]
    fn hits_split_at_the_thresholds_as_base_limiter_splits_them() {
        use floodgate::Outcome::{Allowed, Denied};
        // Limit 10, near from 8. Admitted 3 taking the count from 6 to 9:
        // one near. Then 3 more with 1 left, not charged: from 9 to 12,
        // two over, and the one between 9 and the limit near.
        let got = counted(|s| {
            s.count(3, &decision(Allowed, 10, 1), false, 0.8);
            s.count(3, &decision(Denied, 10, 1), false, 0.8);
        });
        assert_eq!(got, [6, 2, 2, 3, 0, 0]);
        // At the limit already: every hit over, and shadow for a shadow rule.
        let got = counted(|s| s.count(4, &decision(Denied, 10, 0), true, 0.8));
        assert_eq!(got, [4, 4, 0, 0, 4, 0]);
        // A block: every hit over.
        assert_eq!(counted(|s| s.blocked(5)), [5, 5, 0, 0, 0, 0]);
        // Negative hits: only in their own counter, as `GenerateCacheKeys`
        // counts them.
        assert_eq!(counted(|s| s.negative(7)), [0, 0, 0, 0, 0, 7]);
    }

    #[test]
    fn near_threshold_is_float32s() {
        assert_eq!(near_threshold(10, 0.8), 8);
        assert_eq!(near_threshold(5, 0.8), 4);
        assert_eq!(near_threshold(3, 0.0), 0);
    }
}
