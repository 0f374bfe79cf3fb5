//! The position single-valued headers describe (`X-RateLimit-*`,
//! envoyproxy/ratelimit's `RateLimit-*`): one picker, [`pick`], for the
//! contract's [`Report`] (the gateway, the layer) and for an engine
//! response's statuses (the Envoy form of a decision service).
//!
//! Both rank the same way — a denying position if there is one, else the
//! one with the least remaining, the first of equals — and differ only in
//! how they break ties, each as its clients expect: the Envoy form as
//! envoyproxy/ratelimit does (the last denying status; checked against its
//! reference model), the report by the longest wait, then the smaller
//! quota.

use floodgate_policy::{Code, Status};

use super::report::{CurrentLine, Report};

/// The denying item with the greatest `denying` rank if any, else the one
/// with the least `least` rank; the first of equals either way.
fn pick<T, D: Ord, L: Ord>(
    items: impl DoubleEndedIterator<Item = T> + Clone,
    denying: impl Fn(&T) -> Option<D>,
    least: impl Fn(&T) -> L,
) -> Option<T> {
    // `max_by_key` keeps the last of equals: from the end, the first.
    let ranked = items.clone().rev().filter_map(|t| Some((denying(&t)?, t)));
    match ranked.max_by(|a, b| a.0.cmp(&b.0)) {
        Some((_, t)) => Some(t),
        None => items.min_by_key(least),
    }
}

impl Report {
    /// The position reported by single-valued headers (`X-RateLimit-*`):
    /// on a denial, the denying one with the longest known wait; otherwise
    /// the one with the least remaining (ties: the smaller quota, then the
    /// first).
    pub fn primary(&self) -> Option<&CurrentLine> {
        let quota = |c: &CurrentLine| self.policies().get(c.policy).map_or(0, |p| p.quota);
        pick(
            self.current().iter(),
            |c| c.denied.then_some((c.timed, c.reset)),
            |c| (c.remaining, quota(c)),
        )
    }
}

/// The status the Envoy form describes, as envoyproxy/ratelimit picks it:
/// the one with the least remaining among those with a limit (the first on
/// ties; none when every one has `u32::MAX` left, its starting minimum),
/// except that an over-limit status not in quota mode takes the place (the
/// last of them).
pub(crate) fn most_restrictive(statuses: &[Status]) -> Option<&Status> {
    let over = |s: &Status| s.code == Code::OverLimit && !s.quota;
    let limited = statuses.iter().enumerate();
    let limited = limited.filter(|(_, s)| s.current_limit.is_some());
    pick(
        limited,
        |(i, s)| over(s).then_some(*i),
        |(_, s)| s.limit_remaining,
    )
    .map(|(_, s)| s)
    .filter(|s| over(s) || s.limit_remaining < u32::MAX)
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use floodgate_policy::engine::CurrentLimit;
    use floodgate_policy::spec::Reported;
    use floodgate_policy::unit::Unit;

    use super::*;

    /// An RLS status of a 3-per-minute limit: over it when nothing remains.
    pub(in crate::contract) fn status(remaining: u32, reset: Duration) -> Status {
        Status {
            code: if remaining == 0 {
                Code::OverLimit
            } else {
                Code::Ok
            },
            current_limit: Some(CurrentLimit {
                reported: Reported {
                    requests_per_unit: 3,
                    unit: Unit::Minute,
                },
                name: None,
            }),
            limit_remaining: remaining,
            duration_until_reset: reset,
            ..Status::default()
        }
    }

    #[test]
    fn the_described_status_is_picked_as_envoyproxy_ratelimit_picks_it() {
        let ms = Duration::from_millis;
        let with = |remaining, reset, quota| Status {
            quota,
            ..status(remaining, ms(reset))
        };
        let pick = |statuses: Vec<Status>| {
            let at = most_restrictive(&statuses).map(|p| p.duration_until_reset);
            statuses
                .iter()
                .position(|s| Some(s.duration_until_reset) == at)
        };
        // The least remaining, the first on ties.
        assert_eq!(
            pick(vec![
                with(2, 1, false),
                with(1, 2, false),
                with(1, 3, false)
            ]),
            Some(1)
        );
        // Over the limit: the last over-limit status, not the first.
        assert_eq!(
            pick(vec![
                with(0, 1, false),
                with(2, 2, false),
                with(0, 3, false)
            ]),
            Some(2)
        );
        // A quota-mode status over its limit takes no precedence, but its
        // remaining 0 still counts as the least.
        assert_eq!(
            pick(vec![with(1, 1, false), with(0, 2, true), with(3, 3, false)]),
            Some(1)
        );
        // A shadow-mode status over its limit is OK: the least remaining.
        let mut shadow = with(0, 4, false);
        shadow.code = Code::Ok;
        assert_eq!(
            pick(vec![with(1, 1, false), shadow, with(0, 5, true)]),
            Some(1)
        );
        // No limit, no headers.
        assert_eq!(pick(vec![Status::default()]), None);
        // Nothing below envoyproxy/ratelimit's starting minimum, no headers.
        assert_eq!(pick(vec![with(u32::MAX, 1, false)]), None);
    }
}
