//! Token-bucket assignments for token-bucket rules (GCRA): each of n
//! streams sharing a bucket gets `token_bucket {max_tokens,
//! tokens_per_fill, fill_interval}` holding its share of the rule's burst
//! and of its rate, so that Envoy enforces the rule's own shape locally.
//! Shares are rounded down, so the streams' buckets together hold at most
//! the rule's burst and refill at most at its rate — except that each
//! holds at least one token (with more streams than the burst, the fleet
//! may start with one token per stream).

use std::time::Duration;

use floodgate::algorithms::{Gcra, LimitKind};
use floodgate_policy::compile::{Action, Rule};

use crate::proto::envoy::r#type::v3::TokenBucket;

/// The rule's token bucket, when it is a rule of one token-bucket limit
/// (a rule of several limits is assigned `requests_per_time_unit`).
pub(crate) fn of(rule: &Rule) -> Option<&Gcra> {
    let Action::Limit(limits) = &rule.action else {
        return None;
    };
    match (limits.len(), limits.first().map(|l| l.limit.kind())) {
        (1, Some(LimitKind::Gcra(g))) => Some(g),
        _ => None,
    }
}

/// One of `streams` streams' share of `gcra`, for requests costing `cost`
/// tokens each.
pub(crate) fn share(gcra: &Gcra, streams: usize, cost: u64) -> TokenBucket {
    let divisor = (streams.max(1) as u64).saturating_mul(cost.max(1));
    let max_tokens = (gcra.burst() / divisor).max(1);
    let (count, period) = gcra.rate();
    // `count / divisor` tokens each period; fewer than one: one token
    // every `period · divisor / count`, rounded up.
    let (tokens, interval) = if count >= divisor {
        (count / divisor, period)
    } else {
        let nanos = period.as_nanos().saturating_mul(u128::from(divisor));
        let nanos = nanos.div_ceil(u128::from(count.max(1)));
        (
            1,
            Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)),
        )
    };
    TokenBucket {
        max_tokens: u32::try_from(max_tokens).unwrap_or(u32::MAX),
        tokens_per_fill: Some(u32::try_from(tokens).unwrap_or(u32::MAX)),
        fill_interval: prost_types::Duration::try_from(interval).ok(),
        name: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(t: &TokenBucket) -> (u32, u32, Duration) {
        let d = t.fill_interval.unwrap();
        let interval = Duration::new(d.seconds as u64, d.nanos as u32);
        (t.max_tokens, t.tokens_per_fill.unwrap(), interval)
    }

    #[test]
    fn burst_and_rate_are_divided_among_the_streams() {
        let g = Gcra::token_bucket(20, 10, Duration::from_secs(1)).unwrap();
        let s = Duration::from_secs(1);
        assert_eq!(parts(&share(&g, 1, 1)), (20, 10, s));
        assert_eq!(parts(&share(&g, 2, 1)), (10, 5, s));
        assert_eq!(parts(&share(&g, 3, 1)), (6, 3, s));
        // Each request costs 2 tokens of the rule: half as many.
        assert_eq!(parts(&share(&g, 1, 2)), (10, 5, s));
    }

    #[test]
    fn a_rate_below_one_a_period_becomes_a_longer_interval() {
        let g = Gcra::token_bucket(3, 3, Duration::from_secs(1)).unwrap();
        // 3/s over 4 streams: one token every 4/3 s each, at least one held.
        let (max, per, every) = parts(&share(&g, 4, 1));
        assert_eq!((max, per), (1, 1));
        assert_eq!(every, Duration::from_nanos(1_333_333_334));
        assert!(every.as_secs_f64() * 3.0 >= 4.0);
    }
}
