//! The assignment a bucket gets from its rule's answer: everything allowed
//! when no rule limits it (as RLS answers `OK` to a descriptor no rule
//! matches), everything denied while the rule's counter is spent (or the
//! rule blocks or denies), else the rule's limit divided among the
//! streams reporting the bucket (weighted by their use, [`weights`]), per
//! the rule's unit — or, for a
//! token-bucket rule, a share of its burst and rate ([`token_bucket`]).

use floodgate::algorithms::Gcra;

use std::time::Duration;

use floodgate_policy::engine::{Code, Reason, Status};
use floodgate_policy::unit::Unit;

use crate::proto::envoy::r#type::v3::{
    RateLimitStrategy, RateLimitUnit,
    rate_limit_strategy::{BlanketRule, RequestsPerTimeUnit, Strategy},
};
use crate::proto::rlqs::rate_limit_quota_response::{
    BucketAction,
    bucket_action::{self, AbandonAction, QuotaAssignmentAction},
};

use super::mapping::BucketKey;
use super::token_bucket;
use super::weights::{self, Peers};

/// An assignment's kind, the `kind` label of
/// `floodgate_rlqs_actions_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `blanket_rule: ALLOW_ALL`.
    AllowAll,
    /// `blanket_rule: DENY_ALL`.
    DenyAll,
    /// `requests_per_time_unit`: a share of the rule's limit.
    Share,
    /// `abandon_action`.
    Abandon,
    /// `token_bucket`: a share of a token-bucket rule's burst and rate.
    TokenBucket,
}

impl Kind {
    /// Every kind, as labelled.
    pub(crate) const ALL: [Kind; 5] = [
        Kind::AllowAll,
        Kind::DenyAll,
        Kind::Share,
        Kind::Abandon,
        Kind::TokenBucket,
    ];

    /// Its label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::AllowAll => "allow_all",
            Kind::DenyAll => "deny_all",
            Kind::Share => "requests_per_time_unit",
            Kind::Abandon => "abandon",
            Kind::TokenBucket => "token_bucket",
        }
    }
}

/// The strategy for a bucket whose rule answered `status`, reported by
/// `peers` (this stream, whose use is `mine`, among them); `bucket`: the
/// rule's token bucket and its cost per request, when it is a
/// token-bucket rule (its shares are equal, not weighted by use).
pub(crate) fn strategy(
    status: &Status,
    peers: &Peers,
    mine: Option<u64>,
    bucket: Option<(&Gcra, u64)>,
) -> (Kind, Strategy) {
    let blanket = |kind, rule: BlanketRule| (kind, Strategy::BlanketRule(rule as i32));
    match status.reason {
        Reason::Blocked | Reason::Denied => return blanket(Kind::DenyAll, BlanketRule::DenyAll),
        Reason::Limited | Reason::Replaced => {}
        Reason::NoMatch | Reason::Unlimited | Reason::Disabled => {
            return blanket(Kind::AllowAll, BlanketRule::AllowAll);
        }
    }
    let Some(limit) = &status.current_limit else {
        return blanket(Kind::AllowAll, BlanketRule::AllowAll);
    };
    if status.code == Code::OverLimit || status.limit_remaining == 0 {
        return blanket(Kind::DenyAll, BlanketRule::DenyAll);
    }
    if let Some((gcra, cost)) = bucket {
        let streams = usize::try_from(peers.streams()).unwrap_or(usize::MAX);
        let share = token_bucket::share(gcra, streams, cost);
        return (Kind::TokenBucket, Strategy::TokenBucket(share));
    }
    let (per_unit, unit) = protocol_rate(limit.reported.requests_per_unit, limit.reported.unit);
    let length = match limit.reported.unit {
        Unit::Week => Unit::Day.duration(),
        other => other.duration(),
    };
    let share = weights::share(per_unit, length, peers, mine);
    let rate = RequestsPerTimeUnit {
        requests_per_time_unit: share,
        time_unit: unit as i32,
    };
    (Kind::Share, Strategy::RequestsPerTimeUnit(rate))
}

/// The blanket rule of `kind` (`AllowAll` or `DenyAll`; any other kind
/// denies).
pub(crate) fn blanket(kind: Kind) -> (Kind, Strategy) {
    let rule = match kind {
        Kind::AllowAll => BlanketRule::AllowAll,
        _ => BlanketRule::DenyAll,
    };
    let kind = if rule == BlanketRule::AllowAll {
        kind
    } else {
        Kind::DenyAll
    };
    (kind, Strategy::BlanketRule(rule as i32))
}

/// `strategy` in words, for the dashboard.
pub(crate) fn terms(strategy: &Strategy) -> String {
    match strategy {
        Strategy::RequestsPerTimeUnit(r) => {
            let unit = RateLimitUnit::try_from(r.time_unit).map_or("?", |u| u.as_str_name());
            format!(
                "{} per {}",
                r.requests_per_time_unit,
                unit.to_ascii_lowercase()
            )
        }
        Strategy::TokenBucket(t) => {
            let every = t
                .fill_interval
                .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9);
            let per_fill = t.tokens_per_fill.unwrap_or(1);
            format!(
                "token bucket of {}, {per_fill} every {every}s",
                t.max_tokens
            )
        }
        Strategy::BlanketRule(r) if *r == BlanketRule::AllowAll as i32 => "allow all".into(),
        Strategy::BlanketRule(_) => "deny all".into(),
    }
}

/// A rate in the units RLQS has (no week: a week's count is spread over
/// its days, rounded down).
fn protocol_rate(count: u32, unit: Unit) -> (u64, RateLimitUnit) {
    let count = u64::from(count);
    match unit {
        Unit::Second => (count, RateLimitUnit::Second),
        Unit::Minute => (count, RateLimitUnit::Minute),
        Unit::Hour => (count, RateLimitUnit::Hour),
        Unit::Day => (count, RateLimitUnit::Day),
        Unit::Week => (count / 7, RateLimitUnit::Day),
        Unit::Month => (count, RateLimitUnit::Month),
        Unit::Year => (count, RateLimitUnit::Year),
    }
}

/// The action assigning `strategy` to `key`'s bucket for `ttl`.
pub(crate) fn assign(key: &BucketKey, strategy: Strategy, ttl: Duration) -> BucketAction {
    let ttl = prost_types::Duration::try_from(ttl).unwrap_or_default();
    BucketAction {
        bucket_id: Some(key.bucket_id()),
        bucket_action: Some(bucket_action::BucketAction::QuotaAssignmentAction(
            QuotaAssignmentAction {
                assignment_time_to_live: Some(ttl),
                rate_limit_strategy: Some(RateLimitStrategy {
                    strategy: Some(strategy),
                }),
            },
        )),
    }
}

/// The action abandoning `key`'s bucket.
pub(crate) fn abandon(key: &BucketKey) -> BucketAction {
    BucketAction {
        bucket_id: Some(key.bucket_id()),
        bucket_action: Some(bucket_action::BucketAction::AbandonAction(AbandonAction {})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_policy::engine::CurrentLimit;
    use floodgate_policy::spec::Reported;

    fn limited(per_unit: u32, unit: Unit, remaining: u32, code: Code) -> Status {
        Status {
            code,
            reason: Reason::Limited,
            limit_remaining: remaining,
            current_limit: Some(CurrentLimit {
                reported: Reported {
                    requests_per_unit: per_unit,
                    unit,
                },
                name: None,
            }),
            ..Status::default()
        }
    }

    fn share(s: Strategy) -> (u64, i32) {
        match s {
            Strategy::RequestsPerTimeUnit(r) => (r.requests_per_time_unit, r.time_unit),
            other => panic!("not a share: {other:?}"),
        }
    }

    #[test]
    fn the_limit_is_divided_among_the_streams_rounded_down() {
        let status = limited(100, Unit::Minute, 40, Code::Ok);
        let minute = RateLimitUnit::Minute as i32;
        for (streams, each) in [(1, 100), (2, 50), (3, 33), (0, 100)] {
            let (kind, s) = strategy(&status, &Peers::unknown(streams), None, None);
            assert_eq!(kind, Kind::Share);
            assert_eq!(share(s), (each, minute));
        }
        let weekly = limited(700, Unit::Week, 1, Code::Ok);
        assert_eq!(
            share(strategy(&weekly, &Peers::unknown(2), None, None).1),
            (50, RateLimitUnit::Day as i32)
        );
    }

    #[test]
    fn a_spent_counter_denies_all_and_no_rule_allows_all() {
        let deny = Strategy::BlanketRule(BlanketRule::DenyAll as i32);
        let allow = Strategy::BlanketRule(BlanketRule::AllowAll as i32);
        let over = limited(100, Unit::Minute, 0, Code::OverLimit);
        assert_eq!(
            strategy(&over, &Peers::unknown(1), None, None),
            (Kind::DenyAll, deny.clone())
        );
        let spent = limited(100, Unit::Minute, 0, Code::Ok);
        assert_eq!(
            strategy(&spent, &Peers::unknown(1), None, None),
            (Kind::DenyAll, deny.clone())
        );
        let blocked = Status {
            reason: Reason::Blocked,
            ..Status::default()
        };
        assert_eq!(
            strategy(&blocked, &Peers::unknown(1), None, None),
            (Kind::DenyAll, deny.clone())
        );
        assert_eq!(
            strategy(&Status::default(), &Peers::unknown(1), None, None),
            (Kind::AllowAll, allow)
        );
    }
}
