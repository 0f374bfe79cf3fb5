//! A compiled rule: its limits as core algorithms, its reporting, its
//! switches, and its metric handles (resolved on the rule's first
//! decision).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use floodgate::algorithms::{
    AnyLimit, Concurrency, FixedWindow, Gcra, Penalty as CorePenalty, Shaper, SlidingLog,
    SlidingWindow, SubWindowCounter,
};
use metrics::Counter;

use super::envoy_stats::EnvoyStats;
use crate::failure::OnFailure;
use crate::spec::{LimitSpec, Penalty, Reported};
use crate::sync_mode::SyncMode;

/// Index of a rule in its [`PolicySet`](crate::PolicySet).
pub type RuleId = u32;

/// One limit of a rule.
#[derive(Debug)]
pub struct RuleLimit {
    /// The algorithm and its numbers.
    pub limit: AnyLimit,
    /// What Envoy responses report for it.
    pub reported: Reported,
    /// The nginx zone of the limit's counters (a `limit_req_zone`: one per
    /// limit of a rule, the same across reloads for an unchanged rule),
    /// for a shaper on its own whose node expiry can change a decision
    /// ([`Shaper::expiry_shows`](floodgate::algorithms::Shaper::expiry_shows));
    /// `None` for every other limit, whose counters each decide on their
    /// own.
    pub zone: Option<u64>,
}

/// What a rule does when matched.
#[derive(Debug)]
pub enum Action {
    /// Count with these limits (all checked atomically).
    Limit(Box<[RuleLimit]>),
    /// Deny every request (`requests_per_unit: 0`); the window sets the
    /// reported reset.
    Block {
        /// The reporting window.
        window: Duration,
        /// What Envoy responses report.
        reported: Reported,
    },
    /// Count nothing, never limit.
    Unlimited,
}

/// A compiled rule.
#[derive(Debug)]
pub struct Rule {
    /// Its index.
    pub id: RuleId,
    /// The domain it belongs to.
    pub domain: Arc<str>,
    /// Its path in the tree, as envoyproxy/ratelimit names it in statistics
    /// (`domain.key_value.key`); also the metrics label.
    pub path: Box<str>,
    /// Its name, if given.
    pub name: Option<std::sync::Arc<str>>,
    /// Names of rules it replaces.
    pub replaces: Box<[Box<str>]>,
    /// What it does.
    pub action: Action,
    /// Dark launch: counted and reported, never enforced.
    pub shadow: bool,
    /// A soft limit (envoyproxy/ratelimit's quota mode).
    pub quota: bool,
    /// The per-rule kill switch.
    pub enabled: bool,
    /// Units each hit costs.
    pub cost: u64,
    /// What a shared store does with the rule's counters when it cannot
    /// decide (`None`: the store's global failure policy). Carried on every
    /// backend item of the rule; not part of the fingerprint (it does not
    /// change the counters).
    pub on_failure: Option<OnFailure>,
    /// How a shared store shares the rule's counters between instances
    /// (`None`: the store's default). Carried on every backend item of the
    /// rule; not part of the fingerprint (every mode keeps the same
    /// counters, so instances in different modes share them).
    pub sync: Option<SyncMode>,
    /// The descriptor's last entry names the holder of the units of its
    /// leased concurrency limits and is left out of their counters' keys
    /// (`holder: true`).
    pub holder: bool,
    /// A fingerprint of everything that defines the rule's counters: equal
    /// across processes and reloads for an unchanged rule.
    pub fingerprint: u64,
    /// Metric handles, resolved on the rule's first decision: a rule that
    /// never decides holds no series in the recorder (a configuration of a
    /// rule per tenant pays for the tenants that send traffic).
    pub(crate) metrics: OnceLock<Box<RuleMetrics>>,
    /// Its statistics under envoyproxy/ratelimit's names, resolved on its
    /// first decision with `Settings::envoy_stats` on.
    pub(crate) envoy_stats: OnceLock<Box<EnvoyStats>>,
}

impl Rule {
    /// The label used for this rule in metrics and logs: its name, or its
    /// path.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.path)
    }

    /// Its metric handles, from the installed recorder on first use.
    pub fn metrics(&self) -> &RuleMetrics {
        self.metrics
            .get_or_init(|| Box::new(RuleMetrics::new(&self.domain, self.label())))
    }

    /// Its statistics under envoyproxy/ratelimit's names, from the
    /// installed recorder on first use.
    pub(crate) fn envoy_stats(&self) -> &EnvoyStats {
        self.envoy_stats
            .get_or_init(|| Box::new(EnvoyStats::new(&self.path)))
    }

    /// The limits, if it counts.
    pub fn limits(&self) -> &[RuleLimit] {
        match &self.action {
            Action::Limit(l) => l,
            _ => &[],
        }
    }
}

/// Counters of one rule, labelled by domain and rule (bounded: one set per
/// configured rule, never per request value).
#[derive(Debug, Clone)]
pub struct RuleMetrics {
    /// Hits (cost units) seen.
    pub hits: Counter,
    /// Requests this rule admitted (whatever the request's other rules
    /// decided: the request may still be denied).
    pub within_limit: Counter,
    /// Requests this rule admitted with more than the near-limit ratio used.
    pub near_limit: Counter,
    /// Requests this rule denied.
    pub over_limit: Counter,
    /// Requests this shadow-mode rule would have denied.
    pub shadow_mode: Counter,
    /// Requests admitted after a shaper's delay (counted in
    /// `within_limit` too).
    pub delayed: Counter,
    /// Requests whose hits this rule gave back (negative hits): counted in
    /// no other outcome.
    pub refunded: Counter,
    /// Hits (cost units) given back, never counted in `hits`.
    pub negative_hits: Counter,
}

impl RuleMetrics {
    /// Handles for `domain`/`rule` from the installed metrics recorder.
    pub fn new(domain: &str, rule: &str) -> Self {
        describe();
        let labels = [("domain", domain.to_owned()), ("rule", rule.to_owned())];
        let decision = |outcome: &'static str| {
            metrics::counter!("floodgate_rule_decisions_total",
                "domain" => labels[0].1.clone(), "rule" => labels[1].1.clone(), "outcome" => outcome)
        };
        RuleMetrics {
            hits: metrics::counter!("floodgate_rule_hits_total", &labels),
            within_limit: decision("within_limit"),
            near_limit: decision("near_limit"),
            over_limit: decision("over_limit"),
            shadow_mode: decision("shadow_mode"),
            delayed: decision("delayed"),
            refunded: decision("refunded"),
            negative_hits: metrics::counter!("floodgate_rule_negative_hits_total", &labels),
        }
    }
}

/// Says what the rule counters count (each rule's verdicts, not requests).
fn describe() {
    metrics::describe_counter!(
        "floodgate_rule_decisions_total",
        "A rule's verdict on each request it matched, by outcome (within_limit, near_limit, over_limit, shadow_mode, delayed; refunded for negative hits), whatever the request's other rules decided: a request one rule denies is within_limit for the rules that allowed it. floodgate_requests_total counts requests by final outcome."
    );
    metrics::describe_counter!(
        "floodgate_rule_hits_total",
        "The hits (units) each rule was asked for, over the requests it matched."
    );
    metrics::describe_counter!(
        "floodgate_rule_negative_hits_total",
        "The hits (units) each rule gave back: negative hits, which lower its counters."
    );
}

/// Builds the core limit of a spec, with the rule's penalty and block.
pub(crate) fn build_limit(
    spec: &LimitSpec,
    penalty: Penalty,
    block_for: Option<Duration>,
    lease: Option<Duration>,
) -> Result<Option<AnyLimit>, floodgate::ConfigError> {
    let limit: AnyLimit = match spec {
        LimitSpec::Block { .. } => return Ok(None),
        LimitSpec::FixedWindow { limit: 0, window } => FixedWindow::closed(*window)?.into(),
        LimitSpec::FixedWindow { limit, window } => FixedWindow::new(*limit, *window)?.into(),
        LimitSpec::Gcra {
            count,
            period,
            burst,
        } => Gcra::new(*count, *period, *burst)?.into(),
        LimitSpec::SlidingWindow {
            limit,
            window,
            sub_windows: 1,
        } if *limit <= u64::from(u32::MAX) => SlidingWindow::new(*limit, *window)?.into(),
        LimitSpec::SlidingWindow {
            limit,
            window,
            sub_windows,
        } => SubWindowCounter::new(*limit, *window, *sub_windows)?.into(),
        LimitSpec::SlidingLog { limit, window } => SlidingLog::new(*limit, *window)?.into(),
        LimitSpec::Shaper { rate, burst, delay } => Shaper::new(*rate, *burst, *delay)?.into(),
        LimitSpec::Concurrency { max } => match lease {
            Some(lease) => Concurrency::leased(*max, lease)?.into(),
            None => Concurrency::new(*max)?.into(),
        },
    };
    let penalty = match penalty {
        Penalty::None => CorePenalty::None,
        Penalty::OwnDenials => CorePenalty::OwnDenials,
        Penalty::AllDenials => CorePenalty::AllDenials,
    };
    Ok(Some(
        limit
            .with_penalty_mode(penalty)
            .with_block(block_for.unwrap_or_default()),
    ))
}
