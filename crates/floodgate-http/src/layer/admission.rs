//! The layer's admission step, pure: from the engine's answer on a request
//! and the contract, its verdict — admitted, delayed by a shaper, or
//! rejected — including the bound on requests waiting out a delay
//! (`max_delayed`), and whether it holds engine concurrency units to give
//! back when it ends. The layer calls it as requests arrive; an offline
//! replay calls it at each logged request's arrival on its own clock.
//!
//! A request arriving while every delay slot is taken is first decided
//! without charging anything ([`Apply::Check`](floodgate::Apply::Check)):
//! if the shaper would delay it, it is rejected ([`refused_for_want_of_slot`]),
//! the rejection costing it nothing, as a rejection over a full burst.
//! Otherwise it is decided charging ([`judge`]).

use std::time::Duration;

use floodgate::Outcome;
use floodgate_policy::{Code, PolicySet, Response};

use crate::contract::{Contract, Report, Verdict};

/// Whether a request is first decided without charging: every one of the
/// `max_delayed` delay slots is taken (`delayed` requests wait out a
/// delay).
pub fn slots_full(delayed: usize, max_delayed: usize) -> bool {
    delayed >= max_delayed
}

/// Whether `response` admits the request at once: nothing over the limit
/// and no enforced status delayed (the contract denies only an over-limit
/// response, and delays only by an enforced status's delay). Its report's
/// verdict is then "allowed" whatever else it holds.
pub fn plainly_allowed(response: &Response) -> bool {
    response.overall != Code::OverLimit
        && response.statuses.iter().all(|s| {
            s.shadow
                || !s
                    .decision
                    .is_some_and(|d| matches!(d.outcome, Outcome::Delayed(x) if x > Duration::ZERO))
        })
}

/// The contract's verdict on `response`, decided under `policy`, in
/// `report`; true when the report holds its lines too. They are left out
/// when not wanted (`lines` false) and the request is plainly allowed, or
/// when the response was decided under a policy a reload replaced since
/// (`policy` none: its rule ids do not index the new one) — then the
/// verdict alone.
pub fn judge(
    report: &mut Report,
    response: &Response,
    policy: Option<&PolicySet>,
    contract: &Contract,
    lines: bool,
) -> bool {
    match policy {
        Some(policy) if lines || !plainly_allowed(response) => {
            report.fill(response, policy, contract);
            true
        }
        _ => {
            report.clear();
            if policy.is_none() && response.overall == Code::OverLimit {
                report.set_verdict(Verdict::Denied, None);
            }
            false
        }
    }
}

/// Of a request decided without charging because every delay slot is
/// taken ([`slots_full`]), its `report` [judged](judge): whether it is
/// rejected, the shaper delaying it (the report then tells the denial:
/// see [`Report::deny_delayed`]).
pub fn refused_for_want_of_slot(report: &mut Report) -> bool {
    let delayed = matches!(report.verdict(), Verdict::Delayed(_));
    report.deny_delayed();
    delayed
}

/// Whether an admitted request holds engine concurrency units (to give
/// back when it ends): a status of `response` admitted by a rule of
/// `policy` with a concurrency limit.
pub fn holds_units(response: &Response, policy: &PolicySet) -> bool {
    response.statuses.iter().any(|s| {
        s.decision.is_some_and(|d| d.is_allowed())
            && s.rule.is_some_and(|id| {
                let limits = policy.rule(id).limits();
                limits.iter().any(|l| l.limit.is_concurrency())
            })
    })
}
