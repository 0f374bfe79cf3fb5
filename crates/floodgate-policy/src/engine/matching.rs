//! Matching a request's descriptors against the domain's rule tree: lists,
//! overrides, rules, and the layout of the counters to decide.

use floodgate::Timestamp;
use floodgate::algorithms::{AnyLimit, FixedWindow, Penalty as CorePenalty};
use smallvec::SmallVec;

use crate::backend::Backend;
use crate::compile::{Action, Domain, PolicySet, Rule, RuleId, RuleLimit};
use crate::permit::Permit;
use crate::spec::{Dialect, Reported};

use super::request::Descriptor;
use super::response::{Code, CurrentLimit, Reason, Response, Status};
use super::scratch::{self, Batch, LimitRef, Slot};
use super::{Engine, current, keys, until_window_end};
use crate::unit::Unit;

impl<B: Backend, C: floodgate::Clock> Engine<B, C> {
    /// Matches every descriptor, fills the statuses that need no counter,
    /// and lays out the counters of the others.
    pub(super) fn match_descriptors<D: Descriptor>(
        &self,
        policy: &PolicySet,
        dom: &Domain,
        descriptors: &[D],
        hits_addend: u32,
        now: Timestamp,
        response: &mut Response,
    ) {
        let Response {
            statuses, scratch, ..
        } = response;
        let default_hits = u64::from(hits_addend).max(1);
        for (i, d) in descriptors.iter().enumerate() {
            let status = &mut statuses[i];
            status.negative = d.is_negative_hits();
            // Negative hits ignored: nothing is given back.
            let ignored = status.negative && self.limits.negative_hits == super::Honour::Ignore;
            let hits = if ignored {
                0
            } else {
                d.hits_addend().unwrap_or(default_hits)
            };
            status.hits = hits;
            if settle_by_lists(dom, d, status) {
                continue;
            }
            // Its unit was checked with the request.
            if let Some(ov) = d
                .limit_override()
                .filter(|_| self.limits.overrides == super::Honour::Allow)
                && let Some(unit) = ov.unit()
            {
                let ov = (ov.requests_per_unit, unit);
                self.layout_override(dom, d, ov, i, hits, now, policy, scratch, status);
                continue;
            }
            let entries = (0..d.len()).map(|j| d.entry(j));
            let Some(id) = dom.tree.lookup(entries, &mut scratch.path) else {
                continue;
            };
            let rule = policy.rule(id);
            if !rule.enabled {
                continue;
            }
            apply_rule(dom, d, i, (id, rule), hits, now, scratch, status);
        }
        apply_replaces(policy, statuses, scratch);
        refund_negative(statuses, scratch);
    }

    #[allow(clippy::too_many_arguments)]
    fn layout_override<D: Descriptor>(
        &self,
        dom: &Domain,
        d: &D,
        (requests_per_unit, unit): (u32, Unit),
        i: usize,
        hits: u64,
        now: Timestamp,
        policy: &PolicySet,
        scratch: &mut scratch::Scratch,
        status: &mut Status,
    ) {
        let reported = Reported {
            requests_per_unit,
            unit,
        };
        status.current_limit = Some(CurrentLimit {
            reported,
            name: None,
        });
        let window = unit.duration();
        // requests_per_unit 0 admits nothing, and counts what a penalty
        // charges (as envoyproxy/ratelimit's counter does).
        let limit = match requests_per_unit {
            0 => FixedWindow::closed(window),
            n => FixedWindow::new(u64::from(n), window),
        };
        let Ok(limit) = limit else {
            // Unreachable: a unit's window and a u32 count are valid.
            block(status, now, window, hits);
            return;
        };
        let penalty = if dom.dialect == Dialect::Envoy && policy.settings.envoy_increment_all {
            CorePenalty::AllDenials
        } else {
            CorePenalty::OwnDenials
        };
        status.reason = if requests_per_unit == 0 {
            Reason::Blocked
        } else {
            Reason::Limited
        };
        let index = scratch.overrides.len() as u32;
        scratch
            .overrides
            .push(AnyLimit::from(limit).with_penalty_mode(penalty));
        let key = override_key(dom, unit, d, scratch);
        scratch.slots.push(Slot {
            descriptor: i as u32,
            key,
            limit: LimitRef::Override(index),
            cost: hits,
            batch: Batch::Enforced,
            holder: floodgate::algorithms::ANONYMOUS,
        });
    }
}

/// Settles descriptor `d`'s status when it is on the domain's deny list
/// (denied) or allow list (unlimited); false when on neither.
fn settle_by_lists<D: Descriptor>(dom: &Domain, d: &D, status: &mut Status) -> bool {
    if on_list(&dom.deny, d) {
        status.code = Code::OverLimit;
        status.reason = Reason::Denied;
        return true;
    }
    if on_list(&dom.allow, d) {
        status.reason = Reason::Unlimited;
        status.limit_remaining = u32::MAX;
        return true;
    }
    false
}

/// Whether descriptor `d` has an entry on `list`.
fn on_list<D: Descriptor>(list: &crate::compile::List, d: &D) -> bool {
    !list.is_empty()
        && (0..d.len()).any(|j| {
            let (k, v) = d.entry(j);
            list.contains(k, v)
        })
}

/// Moves the counters of descriptors whose hits are given back to the
/// refund batch.
fn refund_negative(statuses: &[Status], scratch: &mut scratch::Scratch) {
    scratch.refunds = statuses.iter().any(|s| s.negative);
    if !scratch.refunds {
        return;
    }
    for slot in &mut scratch.slots {
        if statuses[slot.descriptor as usize].negative {
            slot.batch = Batch::Refund;
        }
    }
}

/// `status` blocked: denied when it charges (negative hits charge
/// nothing), reset at the end of the current `window`.
fn block(status: &mut Status, now: Timestamp, window: std::time::Duration, hits: u64) {
    status.reason = Reason::Blocked;
    status.duration_until_reset = until_window_end(now, window);
    if hits > 0 && !status.negative {
        status.code = Code::OverLimit;
    }
}

/// Descriptor `i` (`d`) matched rule `id`: its status says what the rule
/// does, and the rule's limits get their counters.
#[allow(clippy::too_many_arguments)]
#[inline]
fn apply_rule<D: Descriptor>(
    dom: &Domain,
    d: &D,
    i: usize,
    (id, rule): (RuleId, &Rule),
    hits: u64,
    now: Timestamp,
    scratch: &mut scratch::Scratch,
    status: &mut Status,
) {
    status.rule = Some(id);
    status.shadow = rule.shadow;
    status.quota = rule.quota;
    match &rule.action {
        Action::Unlimited => {
            status.reason = Reason::Unlimited;
            status.limit_remaining = u32::MAX;
        }
        Action::Block { window, reported } => {
            status.current_limit = Some(current(rule, *reported));
            block(status, now, *window, hits);
        }
        Action::Limit(limits) => {
            // A window admitting nothing (envoyproxy/ratelimit's
            // `requests_per_unit: 0`) blocks; it still counts.
            status.reason = if limits.iter().all(|l| is_closed(&l.limit)) {
                Reason::Blocked
            } else {
                Reason::Limited
            };
            lay_out_rule(dom, d, i, (id, rule), limits, hits, scratch);
        }
    }
}

/// Lays out a counter per limit of rule `id` for descriptor `i`, in the
/// rule's batch, drawing a permit when one of them is in flight.
#[inline]
fn lay_out_rule<D: Descriptor>(
    dom: &Domain,
    d: &D,
    i: usize,
    (id, rule): (RuleId, &Rule),
    limits: &[RuleLimit],
    hits: u64,
    scratch: &mut scratch::Scratch,
) {
    let batch = if rule.quota {
        Batch::Own
    } else if rule.shadow {
        Batch::Shadow
    } else {
        Batch::Enforced
    };
    let (entries, holder) = keys::holder(rule.holder, d);
    let (start, end) = keys::group(
        &mut scratch.keys,
        rule.fingerprint,
        (d, entries),
        &scratch.path,
        &dom.tree,
    );
    for (idx, l) in limits.iter().enumerate() {
        if l.limit.is_concurrency() && scratch.permit.is_none() {
            scratch.permit = Permit::random();
        }
        let key = keys::member(&mut scratch.keys, (start, end), idx as u8);
        scratch.slots.push(Slot {
            descriptor: i as u32,
            key,
            limit: LimitRef::Rule(id, idx as u8),
            cost: hits.saturating_mul(rule.cost),
            batch,
            holder,
        });
    }
}

/// The key of descriptor `d`'s override counter: one counter per domain,
/// unit and entries, whatever the limit sent (as envoyproxy/ratelimit keys
/// it), so a limit changed from one request to the next keeps the count of
/// the window.
fn override_key<D: Descriptor>(
    dom: &Domain,
    unit: Unit,
    d: &D,
    scratch: &mut scratch::Scratch,
) -> (u32, u32) {
    let mut fp = crate::compile::StableHasher::default();
    fp.field(b"override")
        .field(dom.name.as_bytes())
        .u64(unit as u64);
    let (start, end) = keys::group_plain(&mut scratch.keys, fp.finish(), d);
    keys::member(&mut scratch.keys, (start, end), 0)
}

/// Whether `limit` admits nothing (only a closed window has a quota of 0).
fn is_closed(limit: &AnyLimit) -> bool {
    limit.quota().limit == 0
}

/// Drops the counters of rules replaced by another matched rule.
fn apply_replaces(policy: &PolicySet, statuses: &mut [Status], scratch: &mut scratch::Scratch) {
    let replaces_any = statuses
        .iter()
        .filter_map(|s| s.rule)
        .any(|id| !policy.rule(id).replaces.is_empty());
    if !replaces_any {
        return;
    }
    let replaced = |name: &str| {
        statuses
            .iter()
            .filter_map(|s| s.rule)
            .any(|id| policy.rule(id).replaces.iter().any(|r| &**r == name))
    };
    let mut drop_desc: SmallVec<[bool; 16]> = SmallVec::from_elem(false, statuses.len());
    for (i, s) in statuses.iter().enumerate() {
        // An unlimited rule stays unlimited (its `replaces` still apply).
        if s.reason == Reason::Unlimited {
            continue;
        }
        if let Some(name) = s.rule.and_then(|id| policy.rule(id).name.as_deref()) {
            drop_desc[i] = replaced(name);
        }
    }
    for (i, s) in statuses.iter_mut().enumerate() {
        if drop_desc[i] {
            *s = Status {
                reason: Reason::Replaced,
                hits: s.hits,
                ..Status::default()
            };
        }
    }
    scratch
        .slots
        .retain(|slot| !drop_desc[slot.descriptor as usize]);
}
