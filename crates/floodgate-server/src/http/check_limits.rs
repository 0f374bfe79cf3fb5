//! The per-limit detail of `/v1/check`: every limit a descriptor was
//! decided against (a rule with several `limits:` has one entry each), with
//! its own decision, next to the narrowest one the status reports.

use floodgate::algorithms::AnyLimit;
use floodgate_policy::engine::LimitEntry;
use floodgate_policy::{Held, PolicySet, Response, Status, SyncMode};
use serde::Serialize;

use super::check::{DecisionJson, Limit, decision};

/// One limit of a descriptor and its decision.
#[derive(Serialize)]
pub(super) struct LimitJson<'a> {
    /// The limit's position in the rule's `limits:` (0 for a single limit
    /// or an override).
    index: usize,
    /// `fixed_window`, `token_bucket` (also `gcra` and `leaky_bucket`),
    /// `sliding_window`, `sliding_log`, `shaper` or `concurrency`.
    algorithm: &'static str,
    /// The limit as reported in Envoy's terms, with the rule's name.
    current_limit: Option<Limit<'a>>,
    /// Whether this limit admitted the request.
    allowed: bool,
    /// Its decision: outcome, limit, remaining, reset, retry-after, delay.
    #[serde(flatten)]
    decision: DecisionJson,
    /// With a shared store: how its counter is shared between instances,
    /// and what this instance holds of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    sync: Option<SyncJson>,
}

/// A counter's synchronisation mode and what this instance holds of it.
#[derive(Serialize)]
pub(super) struct SyncJson {
    /// `exact`, `lease` or `sync`.
    mode: &'static str,
    /// `lease`: units of this instance's lease not used yet (for an
    /// in-flight limit, permits leased and not taken).
    #[serde(skip_serializing_if = "Option::is_none")]
    leased: Option<u64>,
    /// `sync`: units admitted here and not pushed yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    unsynced: Option<u64>,
}

fn sync_json(h: &Held) -> SyncJson {
    SyncJson {
        mode: h.mode.name(),
        leased: matches!(h.mode, SyncMode::Lease { .. }).then_some(h.leased),
        unsynced: matches!(h.mode, SyncMode::Sync { .. }).then_some(h.unsynced),
    }
}

/// The name of a limit's algorithm.
pub(super) fn algorithm(limit: &AnyLimit) -> &'static str {
    limit.name()
}

/// The limits of descriptor `index` (whose status is `status`), in their
/// configured order; `held` is what the store holds of each limit of the
/// response ([`Engine::held`](floodgate_policy::Engine::held)).
pub(super) fn limits<'a>(
    response: &Response,
    index: usize,
    status: &'a Status,
    policy: &'a PolicySet,
    held: &[Option<Held>],
) -> Vec<LimitJson<'a>> {
    response
        .limits()
        .enumerate()
        .filter(|(_, l)| l.descriptor == index)
        .filter_map(|(k, l)| {
            let mut j = entry(&l, status, policy)?;
            j.sync = held.get(k).copied().flatten().as_ref().map(sync_json);
            Some(j)
        })
        .collect()
}

fn entry<'a>(l: &LimitEntry, status: &'a Status, policy: &'a PolicySet) -> Option<LimitJson<'a>> {
    let d = l.decision?;
    let (algorithm, current_limit) = match l.rule {
        // A rule's limit: looked up in the policy it was decided on (a
        // reload in between may have removed it: then it is left out).
        Some(id) => {
            let rule = policy.rules().get(id as usize)?;
            let limit = rule.limits().get(l.index)?;
            let current = Limit::new(&limit.reported, rule.name.as_deref());
            (algorithm(&limit.limit), Some(current))
        }
        // A limit override: a fixed window, reported as the status's.
        None => (
            "fixed_window",
            status.current_limit.as_ref().map(Limit::current),
        ),
    };
    Some(LimitJson {
        index: l.index,
        algorithm,
        current_limit,
        allowed: d.is_allowed(),
        decision: decision(&d),
        sync: None,
    })
}
