//! The time until a limit resets, as reported for a counter that holds
//! nothing yet (a key never seen, a check-only call, a window just begun).

use floodgate::algorithms::AnyLimit;
use floodgate::{Decision, Timestamp};

use super::until_window_end;

/// Sets the reset a decision reports when its counter is empty, per
/// algorithm ([`AnyLimit::reset_window`]), so that a fresh key reports what
/// a used one would:
///
/// * **fixed window**: the time to the end of the current epoch-aligned
///   window (`window − now mod window`), as envoyproxy/ratelimit reports it
///   whatever the count: the window ends then, used or not.
/// * **sliding window, sliding log, token bucket (GCRA), shaper**: zero.
///   These have no boundary: a reset is the time until what was counted has
///   expired or drained, and with nothing counted the quota is already
///   whole.
/// * **concurrency**: always zero. Units come back when their holders
///   release them, not at a time.
///
/// Decisions that already report a reset are left alone.
pub(super) fn fill_empty_reset(limit: &AnyLimit, now: Timestamp, d: &mut Decision) {
    if !d.reset_after.is_zero() {
        return;
    }
    if let Some(window) = limit.reset_window() {
        d.reset_after = until_window_end(now, window);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use floodgate::{Apply, ManualClock, StoreConfig};

    use crate::read::{LoadOptions, load_str};
    use crate::{Engine, MemoryBackend, OwnedDescriptor, PolicySet, Response};

    /// 2023-11-14 00:00:00 UTC plus 5 h 20 min 7 s: 18 h 39 min 53 s before
    /// the day's end, 39 min 53 s before the hour's.
    const NOW: u64 = 1_700_000_000 - 1_700_000_000 % 86_400 + 5 * 3600 + 20 * 60 + 7;

    /// An engine with one rule, `user` limited by `rate_limit`.
    fn engine(rate_limit: &str) -> Engine<MemoryBackend, Arc<ManualClock>> {
        let yaml = format!(
            "domains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {rate_limit}\n"
        );
        let spec = load_str("t.yaml", &yaml, &LoadOptions::default()).unwrap();
        let policy = PolicySet::compile(&spec).unwrap();
        let clock = Arc::new(ManualClock::new(floodgate::Timestamp::from_secs(NOW)));
        Engine::with_clock(
            policy,
            MemoryBackend::new(StoreConfig::default()).unwrap(),
            clock,
        )
    }

    /// The reset reported for `user=value`, charged `hits` (`Some(0)`:
    /// check only) with `apply`.
    fn reset(
        e: &Engine<MemoryBackend, Arc<ManualClock>>,
        value: &str,
        hits: Option<u64>,
        apply: Apply,
    ) -> Duration {
        let mut d = OwnedDescriptor::new([("user", value)]);
        d.hits_addend = hits;
        let mut r = Response::default();
        e.evaluate_now("d", &[d], 0, apply, &mut r)
            .unwrap()
            .unwrap();
        let s = &r.statuses[0];
        assert_eq!(
            Some(s.duration_until_reset),
            s.decision.map(|d| d.reset_after),
            "{s:?}"
        );
        s.duration_until_reset
    }

    const TO_DAY_END: Duration = Duration::from_secs(86_400 - (5 * 3600 + 20 * 60 + 7));

    #[test]
    fn a_fresh_fixed_window_key_reports_the_time_to_its_window_end() {
        let e = engine("{requests_per_unit: 3, unit: day}");
        // Check only (a descriptor's hits addend 0), then a dry run.
        assert_eq!(reset(&e, "fresh", Some(0), Apply::Commit), TO_DAY_END);
        assert_eq!(reset(&e, "fresh", None, Apply::Check), TO_DAY_END);
        // Used: the same.
        assert_eq!(reset(&e, "used", None, Apply::Commit), TO_DAY_END);
        assert_eq!(reset(&e, "used", Some(0), Apply::Commit), TO_DAY_END);
        // A cost the limit can never admit counts nothing: still the window.
        assert_eq!(reset(&e, "never", Some(9), Apply::Commit), TO_DAY_END);
        // A used key in a later window, which holds nothing yet.
        e.clock().advance(Duration::from_secs(86_400 + 60));
        assert_eq!(
            reset(&e, "used", Some(0), Apply::Commit),
            TO_DAY_END - Duration::from_secs(60)
        );
    }

    #[test]
    fn a_limit_override_on_a_fresh_key_reports_its_window_end() {
        let e = engine("{requests_per_unit: 3, unit: day}");
        let mut d = OwnedDescriptor::new([("user", "ov")]).limit(5, crate::unit::Unit::Hour);
        d.hits_addend = Some(0);
        let mut r = Response::default();
        e.evaluate_now("d", &[d], 0, Apply::Commit, &mut r)
            .unwrap()
            .unwrap();
        assert_eq!(
            r.statuses[0].duration_until_reset,
            Duration::from_secs(3600 - (20 * 60 + 7))
        );
    }

    #[test]
    fn algorithms_without_boundaries_report_zero_on_a_fresh_key() {
        for limit in [
            "{algorithm: sliding_window, requests: 3, per: 1h}",
            "{algorithm: sliding_log, requests: 3, per: 1h}",
            "{algorithm: token_bucket, requests: 3, per: 1h}",
            "{algorithm: shaper, rate: 1r/s, burst: 3}",
            "{algorithm: concurrency, max: 3}",
        ] {
            let e = engine(limit);
            assert_eq!(
                reset(&e, "fresh", Some(0), Apply::Commit),
                Duration::ZERO,
                "{limit}"
            );
            // A dry run reports what the real call does.
            assert_eq!(
                reset(&e, "fresh", None, Apply::Check),
                reset(&e, "fresh", None, Apply::Commit),
                "{limit}"
            );
        }
    }

    #[test]
    fn a_multi_limit_rule_fills_each_fixed_window() {
        let e = engine(
            "{limits: [{requests: 5, per: 1h}, {algorithm: token_bucket, requests: 100, per: 1d}]}",
        );
        let mut r = Response::default();
        let d = OwnedDescriptor::new([("user", "m")]).hits(0);
        e.evaluate_now("d", &[d], 0, Apply::Commit, &mut r)
            .unwrap()
            .unwrap();
        let resets: Vec<Duration> = r
            .limits()
            .map(|l| l.decision.unwrap().reset_after)
            .collect();
        assert_eq!(
            resets,
            [Duration::from_secs(3600 - (20 * 60 + 7)), Duration::ZERO]
        );
    }
}
