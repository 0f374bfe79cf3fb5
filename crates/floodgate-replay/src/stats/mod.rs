//! What a replay counts, per candidate and per rule, in memory bounded by
//! the configuration (not by the log): counters, delay histograms, counts
//! over time in a bounded number of buckets, the keys denied most (a
//! Space-Saving sketch) and an estimate of the distinct keys limited.

mod timeline;

use std::time::Duration;

use cardinality_estimator::CardinalityEstimator;
use floodgate_policy::observe::{TopKey, TopKeys};
use hdrhistogram::Histogram;
use serde::Serialize;

pub use timeline::{MAX_BUCKETS, Timeline};

/// Keys tracked by the heavy-hitters sketch of a candidate.
pub const TRACKED_KEYS: usize = 4096;

/// Series of a candidate's timeline: requests, delayed, denied; then
/// two per rule (its requests and its denials).
pub(crate) const REQUESTS: usize = 0;
/// The series of delayed requests.
pub(crate) const DELAYED: usize = 1;
/// The series of denied requests.
pub(crate) const DENIED: usize = 2;
/// The first rule's first series.
const RULE_SERIES: usize = 3;

/// The verdict on one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Passed at once.
    Allowed,
    /// Passed after a delay (a shaper).
    Delayed,
    /// Rejected.
    Denied,
}

impl Outcome {
    /// Its name in outputs.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Delayed => "delayed",
            Outcome::Denied => "denied",
        }
    }
}

/// A delay distribution, in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DelayStats {
    /// Delays recorded.
    pub count: u64,
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Longest.
    pub max_ms: f64,
    /// (upper bound in ms, count) buckets, for plots.
    pub buckets: Vec<(f64, u64)>,
}

/// Per rule.
#[derive(Clone, Debug, Serialize)]
pub struct RuleReport {
    /// Its name (or its path).
    pub name: String,
    /// Its domain.
    pub domain: String,
    /// Its limits, described.
    pub limits: String,
    /// Whether it is in shadow mode.
    pub shadow: bool,
    /// Requests it matched.
    pub requests: u64,
    /// Within its limits.
    pub allowed: u64,
    /// Delayed by it (a shaper).
    pub delayed: u64,
    /// Over its limits.
    pub denied: u64,
    /// Over its limits in shadow mode (not enforced).
    pub shadow_hits: u64,
    /// Delays it imposed.
    pub delay: DelayStats,
    /// Distinct keys it denied or delayed (an estimate above a few
    /// thousand, within about 2 %).
    pub distinct_limited: u64,
}

/// A key denied often.
#[derive(Clone, Debug, Serialize)]
pub struct KeyCount {
    /// The rule.
    pub rule: String,
    /// The descriptor's entries, `key=value` joined by `, `.
    pub key: String,
    /// Denials counted (at most `error` more than the true number).
    pub count: u64,
    /// Possible overcount (the sketch's).
    pub error: u64,
    /// Whether these were shadow-mode hits.
    pub shadow: bool,
}

/// One candidate's results.
#[derive(Clone, Debug, Serialize)]
pub struct CandidateReport {
    /// Its name.
    pub name: String,
    /// What of its configuration is not replayed, and limits kept as they
    /// were by an algorithm swap.
    pub notes: Vec<String>,
    /// Requests decided.
    pub requests: u64,
    /// Requests no descriptor was built for, or no rule matched.
    pub unlimited: u64,
    /// Passed at once.
    pub allowed: u64,
    /// Passed after a delay.
    pub delayed: u64,
    /// Rejected.
    pub denied: u64,
    /// Rejected because `http.layer.max_delayed` requests were already
    /// waiting (counted in `denied`).
    pub delay_queue_full: u64,
    /// Requests the engine refused (counted per `http.layer.on_error`).
    pub errors: u64,
    /// Delays of delayed requests.
    pub delay: DelayStats,
    /// Distinct keys denied or delayed (estimate).
    pub distinct_limited: u64,
    /// Per rule (those that matched at least one request), in
    /// configuration order.
    pub rules: Vec<RuleReport>,
    /// The keys denied most.
    pub top_denied: Vec<KeyCount>,
    /// Counts over time, per bucket of the replayed span.
    pub timeline: Timeline,
    /// Decided time span: first and last arrival (ns since the epoch).
    pub first: u64,
    /// The last arrival.
    pub last: u64,
    /// Counters held by the store at the end (live keys).
    pub keys_held: u64,
    /// Keys the store evicted because it was full (its `capacity`): a
    /// replay with evictions may decide differently from one without.
    pub evictions: u64,
    /// Requests of new keys the full store decided without keeping their
    /// state (`store.when_full: admit`, the default): each was decided as
    /// a fresh key's, so a replay with some may decide differently from
    /// one with room for every key.
    pub admitted_full: u64,
    /// The index of each of `rules` among the policy's rules.
    #[serde(skip)]
    rule_index: Vec<usize>,
}

impl CandidateReport {
    /// Requests per bucket of [`timeline`](Self::timeline).
    pub fn requests_over_time(&self) -> Vec<u64> {
        self.timeline.get(REQUESTS)
    }

    /// Delayed requests per bucket.
    pub fn delayed_over_time(&self) -> Vec<u64> {
        self.timeline.get(DELAYED)
    }

    /// Denied requests per bucket.
    pub fn denied_over_time(&self) -> Vec<u64> {
        self.timeline.get(DENIED)
    }

    /// Requests matched by rule `i` (of [`rules`](Self::rules)) per bucket.
    pub fn rule_requests_over_time(&self, i: usize) -> Vec<u64> {
        self.timeline.get(RULE_SERIES + 2 * self.rule_index[i])
    }

    /// Denials by rule `i` per bucket.
    pub fn rule_denied_over_time(&self, i: usize) -> Vec<u64> {
        self.timeline.get(RULE_SERIES + 2 * self.rule_index[i] + 1)
    }
}

/// Per-rule accumulators.
struct RuleAcc {
    /// Requests the rule decided.
    requests: u64,
    /// Of them, allowed at once.
    allowed: u64,
    /// Allowed after a delay.
    delayed: u64,
    /// Denied.
    denied: u64,
    /// Over the limit of the rule in shadow mode.
    shadow_hits: u64,
    /// Delays (µs).
    delay: Histogram<u64>,
    /// The longest delay, exact.
    delay_max: Duration,
    /// The keys it delayed, denied or hit in shadow mode (an estimate of
    /// how many), once there is one.
    limited: Option<CardinalityEstimator<u64>>,
}

impl RuleAcc {
    /// Nothing counted yet.
    fn new() -> Self {
        RuleAcc {
            requests: 0,
            allowed: 0,
            delayed: 0,
            denied: 0,
            shadow_hits: 0,
            delay: new_histogram(),
            delay_max: Duration::ZERO,
            limited: None,
        }
    }
}

/// An empty histogram of delays (µs).
fn new_histogram() -> Histogram<u64> {
    // Microseconds, 3 significant digits, growing as needed.
    Histogram::new(3).expect("3 significant digits are valid")
}

/// What one rule did to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RuleOutcome {
    /// Allowed at once.
    Allowed,
    /// Allowed after this delay.
    Delayed(Duration),
    /// Denied.
    Denied,
    /// Over the limit of a shadow-mode rule: allowed, counted.
    ShadowHit,
}

/// A candidate's accumulators.
pub(crate) struct Acc {
    /// Requests decided.
    pub requests: u64,
    /// Requests no rule limited.
    pub unlimited: u64,
    /// Requests allowed at once.
    pub allowed: u64,
    /// Requests allowed after a delay.
    pub delayed: u64,
    /// Requests denied.
    pub denied: u64,
    /// Of the denied, those denied because the delay queue was full.
    pub delay_queue_full: u64,
    /// Requests the engine refused.
    pub errors: u64,
    /// Delays (µs).
    delay: Histogram<u64>,
    /// The longest delay, exact.
    delay_max: Duration,
    /// Per rule of the policy, once it decides a request.
    rules: Vec<Option<RuleAcc>>,
    /// Requests, delays and denials over time, in all and per rule.
    timeline: Timeline,
    /// The keys denied most (shadow-mode hits included).
    top: TopKeys,
    /// The keys delayed, denied or hit in shadow mode (an estimate of how
    /// many).
    limited: CardinalityEstimator<u64>,
    /// Hashes a limited key (with its rule) for the estimates.
    hasher: foldhash::fast::FixedState,
    /// When the first request arrived.
    first: Option<u64>,
    /// When the last request arrived.
    last: u64,
    /// The bucket of the request being counted.
    bucket: usize,
}

impl Acc {
    /// Empty accumulators for a candidate of `rules` rules.
    pub(crate) fn new(rules: usize) -> Self {
        Acc {
            requests: 0,
            unlimited: 0,
            allowed: 0,
            delayed: 0,
            denied: 0,
            delay_queue_full: 0,
            errors: 0,
            delay: new_histogram(),
            delay_max: Duration::ZERO,
            rules: (0..rules).map(|_| None).collect(),
            timeline: Timeline::new(RULE_SERIES),
            top: TopKeys::new(TRACKED_KEYS),
            limited: CardinalityEstimator::new(),
            hasher: foldhash::fast::FixedState::with_seed(0x6c696d69),
            first: None,
            last: 0,
            bucket: 0,
        }
    }

    /// Starts counting a request arrived at `t`.
    pub(crate) fn begin(&mut self, t: u64) {
        self.requests += 1;
        self.first.get_or_insert(t);
        self.last = t;
        self.bucket = self.timeline.bucket(t);
        self.timeline.add(REQUESTS, self.bucket, 1);
    }

    /// Counts the request's verdict.
    pub(crate) fn outcome(&mut self, o: Outcome, delay: Duration) {
        match o {
            Outcome::Allowed => self.allowed += 1,
            Outcome::Delayed => {
                self.delayed += 1;
                let _ = self.delay.record(micros(delay));
                self.delay_max = self.delay_max.max(delay);
                self.timeline.add(DELAYED, self.bucket, 1);
            }
            Outcome::Denied => {
                self.denied += 1;
                self.timeline.add(DENIED, self.bucket, 1);
            }
        }
    }

    /// Counts what rule `rule` did; `key` renders the descriptor's
    /// entries (called only for a denial or a delay).
    pub(crate) fn rule(
        &mut self,
        rule: u32,
        outcome: RuleOutcome,
        name: &str,
        key: impl FnOnce(&mut Vec<u8>),
        scratch: &mut Vec<u8>,
    ) {
        let i = rule as usize;
        if i >= self.rules.len() {
            self.rules.resize_with(i + 1, || None);
        }
        let acc = self.rules[i].get_or_insert_with(RuleAcc::new);
        acc.requests += 1;
        self.timeline.add(RULE_SERIES + 2 * i, self.bucket, 1);
        let limited = match outcome {
            RuleOutcome::Allowed => {
                acc.allowed += 1;
                return;
            }
            RuleOutcome::Delayed(d) => {
                acc.delayed += 1;
                let _ = acc.delay.record(micros(d));
                acc.delay_max = acc.delay_max.max(d);
                false
            }
            RuleOutcome::Denied => {
                acc.denied += 1;
                self.timeline.add(RULE_SERIES + 2 * i + 1, self.bucket, 1);
                true
            }
            RuleOutcome::ShadowHit => {
                acc.shadow_hits += 1;
                true
            }
        };
        scratch.clear();
        scratch.extend_from_slice(name.as_bytes());
        if outcome == RuleOutcome::ShadowHit {
            scratch.extend_from_slice(b" (shadow)");
        }
        scratch.push(0x1f);
        key(scratch);
        let h = std::hash::BuildHasher::hash_one(&self.hasher, &scratch[..]);
        self.limited.insert_hash(h);
        acc.limited
            .get_or_insert_with(CardinalityEstimator::new)
            .insert_hash(h);
        if limited {
            self.top.add(scratch, 1);
        }
    }

    /// The report.
    pub(crate) fn finish(
        self,
        name: String,
        notes: Vec<String>,
        rules: &[(String, String, String, bool)],
        top: usize,
        (keys_held, evictions, admitted_full): (u64, u64, u64),
    ) -> CandidateReport {
        let (reports, rule_index) = self.rule_reports(rules);
        let top_denied = self.top.top(top).into_iter().map(key_count).collect();
        CandidateReport {
            name,
            notes,
            requests: self.requests,
            unlimited: self.unlimited,
            allowed: self.allowed,
            delayed: self.delayed,
            denied: self.denied,
            delay_queue_full: self.delay_queue_full,
            errors: self.errors,
            delay: delay_stats(&self.delay, self.delay_max),
            distinct_limited: self.limited.estimate() as u64,
            rules: reports,
            top_denied,
            timeline: self.timeline,
            first: self.first.unwrap_or(0),
            last: self.last,
            keys_held,
            evictions,
            admitted_full,
            rule_index,
        }
    }

    /// A report per rule that decided at least one request (named by
    /// `rules`, by index), and the index of each.
    fn rule_reports(
        &self,
        rules: &[(String, String, String, bool)],
    ) -> (Vec<RuleReport>, Vec<usize>) {
        let mut reports = Vec::new();
        let mut rule_index = Vec::new();
        for (i, acc) in self.rules.iter().enumerate() {
            let Some(acc) = acc else { continue };
            let (rule, domain, limits, shadow) = rules
                .get(i)
                .cloned()
                .unwrap_or_else(|| (format!("#{i}"), String::new(), String::new(), false));
            rule_index.push(i);
            reports.push(RuleReport {
                name: rule,
                domain,
                limits,
                shadow,
                requests: acc.requests,
                allowed: acc.allowed,
                delayed: acc.delayed,
                denied: acc.denied,
                shadow_hits: acc.shadow_hits,
                delay: delay_stats(&acc.delay, acc.delay_max),
                distinct_limited: acc.limited.as_ref().map_or(0, |e| e.estimate() as u64),
            });
        }
        (reports, rule_index)
    }
}

/// A key denied often, from its tracked text: `rule\u{1f}key`, the rule
/// marked ` (shadow)` when in shadow mode.
fn key_count(t: TopKey<'_>) -> KeyCount {
    let text = String::from_utf8_lossy(t.key);
    let (rule, key) = text.split_once('\u{1f}').unwrap_or(("", &text));
    let (rule, shadow) = match rule.strip_suffix(" (shadow)") {
        Some(r) => (r, true),
        None => (rule, false),
    };
    KeyCount {
        rule: rule.to_owned(),
        key: key.to_owned(),
        count: t.count,
        error: t.error,
        shadow,
    }
}

/// `d` in whole microseconds (saturating).
fn micros(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

/// The distribution of `h` (microseconds; `max` exact: a histogram keeps
/// three significant digits).
fn delay_stats(h: &Histogram<u64>, max: Duration) -> DelayStats {
    if h.is_empty() {
        return DelayStats::default();
    }
    let ms = |us: u64| us as f64 / 1000.0;
    // About twenty buckets from 0 to the longest delay.
    let step = (h.max() / 20).max(1);
    let buckets = h
        .iter_linear(step)
        .map(|v| (ms(v.value_iterated_to()), v.count_since_last_iteration()))
        .collect();
    // A quantile is its bucket's highest value, which may pass the
    // longest delay kept exactly: never more than it.
    let max_us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    let at = |q: f64| ms(h.value_at_quantile(q).min(max_us));
    DelayStats {
        count: h.len(),
        mean_ms: h.mean() / 1000.0,
        p50_ms: at(0.5),
        p90_ms: at(0.9),
        p99_ms: at(0.99),
        max_ms: max.as_micros() as f64 / 1000.0,
        buckets,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_quantile_passes_the_longest_delay() {
        let mut h = new_histogram();
        // 100 001 µs falls in a bucket whose highest value is above it.
        h.record(100_001).unwrap();
        assert!(h.value_at_quantile(0.99) > 100_001);
        let d = delay_stats(&h, Duration::from_micros(100_001));
        assert_eq!(
            (d.p50_ms, d.p90_ms, d.p99_ms, d.max_ms),
            (100.001, 100.001, 100.001, 100.001)
        );
    }
}
