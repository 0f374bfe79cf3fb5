//! Turning decisions into statuses, the overall code and metrics.

use floodgate::{Decision, Timestamp};

use crate::compile::{PolicySet, Rule};
use crate::spec::{Reported, Settings};

use super::response::{Code, Reason, Response, Status};
use super::scratch::{LimitRef, Scratch};
use super::{PLACEHOLDER, current, limit_of, reset};

/// Which of `decisions` [`Decision::narrowest`] takes its numbers from: the
/// denying one with the least remaining if any denies, else the one with the
/// least remaining (ties: the smaller limit, then the first).
pub(super) fn narrowest_index(decisions: &[Decision]) -> usize {
    let any_denied = decisions.iter().any(Decision::is_denied);
    decisions
        .iter()
        .enumerate()
        .filter(|(_, d)| !any_denied || d.is_denied())
        .min_by_key(|(_, d)| (d.remaining, d.limit))
        .map_or(0, |(i, _)| i)
}

/// Turns the decisions (made at `now`) into statuses, the overall code and
/// metrics.
pub(super) fn finish(policy: &PolicySet, now: Timestamp, response: &mut Response) {
    let Response {
        statuses,
        scratch,
        overall,
        shadowed,
        limited,
        ..
    } = response;
    for (slot, d) in scratch.slots.iter().zip(scratch.decisions.iter_mut()) {
        reset::fill_empty_reset(limit_of(policy, &scratch.overrides, slot.limit), now, d);
    }
    // Kept in a local until the end (not written through on each status).
    let mut any_limited = settle_all(policy, statuses, scratch);
    any_limited |= count_blocks(policy, statuses);
    *limited = any_limited;
    if is_over(policy, statuses) {
        over_limit(policy, overall, shadowed);
    }
}

/// Settles each descriptor's status from its run of counters' decisions;
/// whether any rule limited the request.
#[inline]
fn settle_all(policy: &PolicySet, statuses: &mut [Status], scratch: &Scratch) -> bool {
    let settings = &policy.settings;
    let mut any_limited = false;
    let mut k = 0;
    let slots = &scratch.slots;
    while k < slots.len() {
        let desc = slots[k].descriptor as usize;
        let mut end = k + 1;
        while end < slots.len() && slots[end].descriptor as usize == desc {
            end += 1;
        }
        let decisions = &scratch.decisions[k..end];
        let pick = k + narrowest_index(decisions);
        let reported = match slots[pick].limit {
            LimitRef::Rule(id, idx) => {
                let rule = policy.rule(id);
                Some((rule, rule.limits()[idx as usize].reported))
            }
            LimitRef::Override(_) => None,
        };
        any_limited |= settle(&mut statuses[desc], decisions, reported, settings);
        k = end;
    }
    any_limited
}

/// Blocking rules without a counter count as over-limit decisions too:
/// whether any blocked the request.
#[inline]
fn count_blocks(policy: &PolicySet, statuses: &[Status]) -> bool {
    let mut any = false;
    for s in statuses {
        if s.reason == Reason::Blocked && s.code == Code::OverLimit {
            if let Some(rule) = s.rule.map(|id| policy.rule(id)) {
                any = true;
                if matches!(rule.action, crate::compile::Action::Block { .. }) {
                    rule.metrics().over_limit.increment(1);
                    if policy.settings.envoy_stats {
                        rule.envoy_stats().blocked(s.hits.saturating_mul(rule.cost));
                    }
                }
            }
        }
    }
    any
}

/// Whether the request is over the limit overall: any enforced over-limit
/// descriptor, or every quota one. An unlimited descriptor is no quota
/// descriptor, whatever its rule says (envoyproxy/ratelimit leaves
/// unlimited descriptors out of the count).
#[inline]
fn is_over(policy: &PolicySet, statuses: &[Status]) -> bool {
    let quota = |s: &Status| {
        s.reason != Reason::Unlimited && s.rule.is_some_and(|id| policy.rule(id).quota)
    };
    let hard_over = statuses
        .iter()
        .any(|s| s.code == Code::OverLimit && !quota(s));
    let mut quotas = statuses.iter().filter(|s| quota(s)).peekable();
    let quota_over = quotas.peek().is_some() && quotas.all(|s| s.code == Code::OverLimit);
    hard_over || quota_over
}

/// The response is over the limit: so it answers, unless global shadow
/// mode only reports it.
pub(super) fn over_limit(policy: &PolicySet, overall: &mut Code, shadowed: &mut bool) {
    if policy.settings.shadow_mode {
        *shadowed = true;
        metrics::counter!("floodgate_global_shadow_mode_total").increment(1);
    } else {
        *overall = Code::OverLimit;
    }
}

/// One descriptor's status from the decisions of its counters (resets
/// already filled): the narrowest decides, `reported` is the rule and limit
/// it comes from (none for a limit override). Counts the rule's metrics
/// (under envoyproxy/ratelimit's names too when `settings` say so).
/// Returns whether the rule limited the request (denied, delayed, or a
/// shadow-mode hit).
pub(super) fn settle(
    status: &mut Status,
    decisions: &[Decision],
    reported: Option<(&Rule, Reported)>,
    settings: &Settings,
) -> bool {
    let narrowest = decisions
        .iter()
        .copied()
        .reduce(Decision::narrowest)
        .unwrap_or(PLACEHOLDER);
    if let Some((rule, r)) = reported {
        match &mut status.current_limit {
            // Kept from the last request of the same rule: no name to copy.
            Some(c) if c.name == rule.name => c.reported = r,
            slot => *slot = Some(current(rule, r)),
        }
    }
    if status.negative {
        return settle_refund(status, narrowest, reported, settings);
    }
    let over = narrowest.is_denied();
    let delayed = matches!(narrowest.outcome, floodgate::Outcome::Delayed(x) if !x.is_zero());
    status.decision = Some(narrowest);
    status.duration_until_reset = narrowest.reset_after;
    status.limit_remaining = if over {
        0
    } else {
        narrowest.remaining.min(u64::from(u32::MAX)) as u32
    };
    if let Some((rule, _)) = reported {
        count(rule, status, &narrowest, delayed, settings.near_limit_ratio);
        if settings.envoy_stats {
            let hits = status.hits.saturating_mul(rule.cost).min(1 << 32);
            let ratio = settings.near_limit_ratio;
            rule.envoy_stats()
                .count(hits, &narrowest, status.shadow, ratio);
        }
    }
    if over && !status.shadow {
        status.code = Code::OverLimit;
    }
    over || delayed
}

/// The status of a descriptor whose hits were given back (as
/// envoyproxy/ratelimit's `GetResponseDescriptorStatusForNegativeHits`
/// answers them): OK, with what remains after the refund, whatever the
/// count; counted as negative hits, never as a verdict. Limits nothing.
fn settle_refund(
    status: &mut Status,
    narrowest: Decision,
    reported: Option<(&Rule, Reported)>,
    settings: &Settings,
) -> bool {
    let admitted = Decision {
        outcome: floodgate::Outcome::Allowed,
        retry_after: None,
        ..narrowest
    };
    status.decision = Some(admitted);
    status.duration_until_reset = narrowest.reset_after;
    status.limit_remaining = narrowest.remaining.min(u64::from(u32::MAX)) as u32;
    if let Some((rule, _)) = reported {
        let hits = status.hits.saturating_mul(rule.cost).min(1 << 32);
        rule.metrics().negative_hits.increment(hits);
        rule.metrics().refunded.increment(1);
        if settings.envoy_stats {
            rule.envoy_stats().negative(hits);
        }
    }
    false
}

/// Counts one descriptor's decision `narrowest` (delayed or not) in its
/// rule's metrics.
// Always inlined: it is `settle`'s own tail, on every decision's path.
#[inline(always)]
fn count(rule: &Rule, status: &Status, narrowest: &Decision, delayed: bool, ratio: f64) {
    // A counter must never wrap (Prometheus would read a reset):
    // one request adds at most 2³².
    rule.metrics()
        .hits
        .increment(status.hits.saturating_mul(rule.cost).min(1 << 32));
    if narrowest.is_denied() {
        if status.shadow {
            rule.metrics().shadow_mode.increment(1);
        } else {
            rule.metrics().over_limit.increment(1);
        }
        return;
    }
    if near_limit(narrowest, ratio) {
        rule.metrics().near_limit.increment(1);
    }
    rule.metrics().within_limit.increment(1);
    if delayed {
        rule.metrics().delayed.increment(1);
    }
}

/// Whether an admitting decision used more than ⌊limit × `ratio`⌋, in
/// integers (no call to `floor`): truncation is the floor of a
/// non-negative product; a negative one is below any count, NaN above
/// every count.
#[inline]
fn near_limit(narrowest: &Decision, ratio: f64) -> bool {
    let used = narrowest.limit.saturating_sub(narrowest.remaining);
    let threshold = narrowest.limit as f64 * ratio;
    if threshold >= 0.0 {
        used > threshold as u64
    } else {
        threshold < 0.0
    }
}
