//! Shares weighted by use: a stream that used less than half its equal
//! share of a bucket's limit keeps twice what it used (at least a quarter
//! of the equal share), and what such idle streams give up is split
//! equally among the others, the busy ones. With nobody busy, every
//! stream gets its equal share. Every share is rounded down, so however
//! the streams are classed the shares add up to at most the limit.
//!
//! A stream's use is its last report's requests (`num_requests_allowed`
//! plus `num_requests_denied`: what was asked of it, so that a stream
//! denied everything is not taken for idle) over its `time_elapsed`, in
//! thousandths of a request per second; a report with no elapsed time
//! gives no use, and the stream counts as busy.

use std::time::Duration;

/// The streams sharing a bucket: each one's use (thousandths of a
/// request per second; `None`: unknown), and how many instances each
/// stands for (1; the local fallback's `divide_by` when Redis cannot count
/// the fleet's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Peers {
    /// Each stream's use.
    pub(crate) usages: Vec<Option<u64>>,
    /// Instances each stands for (at least 1).
    pub(crate) times: u64,
}

impl Peers {
    /// `n` streams (at least 1) whose use is unknown.
    #[cfg(test)]
    pub(crate) fn unknown(n: usize) -> Self {
        Peers {
            usages: vec![None; n.max(1)],
            times: 1,
        }
    }

    /// How many streams share the limit equally (at least 1).
    pub(crate) fn streams(&self) -> u64 {
        (self.usages.len().max(1) as u64).saturating_mul(self.times.max(1))
    }
}

/// A report's use: `asked` requests over `elapsed`, in thousandths of a
/// request per second (`None` with no elapsed time).
pub(crate) fn usage(asked: u64, elapsed: Option<Duration>) -> Option<u64> {
    let nanos = elapsed.filter(|d| !d.is_zero())?.as_nanos();
    let per = u128::from(asked) * 1_000_000_000_000 / nanos;
    Some(u64::try_from(per).unwrap_or(u64::MAX))
}

/// The share of a stream whose use is `mine` of a limit of `limit` per
/// `unit` shared by `peers` (which counts it).
pub(crate) fn share(limit: u64, unit: Duration, peers: &Peers, mine: Option<u64>) -> u64 {
    let equal = limit / peers.streams();
    let kept = |u: Option<u64>| idle_share(u?, unit, equal);
    let busy = peers.usages.iter().filter(|u| kept(**u).is_none()).count() as u64;
    if busy == 0 {
        return equal;
    }
    if let Some(k) = kept(mine) {
        return k;
    }
    let freed: u64 = (peers.usages.iter())
        .filter_map(|u| kept(*u))
        .map(|k| equal - k)
        .sum();
    equal + freed / busy
}

/// What an idle stream keeps (its use per `unit` doubled, at least a
/// quarter of `equal`); `None` when it is busy (keeping that would not be
/// less than `equal`).
fn idle_share(usage: u64, unit: Duration, equal: u64) -> Option<u64> {
    let per_unit = u128::from(usage) * unit.as_nanos() / 1_000_000_000_000;
    let doubled = u64::try_from(per_unit.saturating_mul(2)).unwrap_or(u64::MAX);
    let keep = doubled.max(equal / 4);
    (keep < equal).then_some(keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    /// Use of `per_minute` requests a minute.
    fn per_minute(n: u64) -> Option<u64> {
        usage(n, Some(MINUTE))
    }

    fn peers(usages: &[Option<u64>]) -> Peers {
        Peers {
            usages: usages.to_vec(),
            times: 1,
        }
    }

    #[test]
    fn the_idle_keep_twice_their_use_and_the_busy_get_the_rest() {
        let p = peers(&[per_minute(5), per_minute(80)]);
        assert_eq!(share(100, MINUTE, &p, per_minute(5)), 12);
        assert_eq!(share(100, MINUTE, &p, per_minute(80)), 88);
        // 20 a minute is 333 thousandths a second: 19.98 a minute, rounded
        // down.
        let p = peers(&[per_minute(20), per_minute(80)]);
        assert_eq!(share(100, MINUTE, &p, per_minute(20)), 38);
        assert_eq!(share(100, MINUTE, &p, per_minute(80)), 62);
    }

    #[test]
    fn with_nobody_busy_or_use_unknown_shares_are_equal() {
        let idle = peers(&[per_minute(0), per_minute(1)]);
        assert_eq!(share(100, MINUTE, &idle, per_minute(0)), 50);
        let unknown = Peers::unknown(3);
        assert_eq!(share(100, MINUTE, &unknown, None), 33);
        assert_eq!(usage(10, None), None);
        assert_eq!(usage(10, Some(Duration::ZERO)), None);
        let halves = Peers {
            usages: vec![None],
            times: 2,
        };
        assert_eq!(share(100, MINUTE, &halves, None), 50);
    }

    #[test]
    fn shares_never_add_up_past_the_limit() {
        let uses = [0, 1, 3, 7, 12, 24, 25, 26, 49, 50, 99, 1000];
        for limit in [1, 7, 100, 1001] {
            for a in uses {
                for b in uses {
                    for c in uses {
                        let all = [a, b, c].map(per_minute);
                        let p = peers(&all);
                        let sum: u64 = all.iter().map(|u| share(limit, MINUTE, &p, *u)).sum();
                        assert!(sum <= limit, "{limit} {a} {b} {c}: {sum}");
                    }
                }
            }
        }
    }
}
