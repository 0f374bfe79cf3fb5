//! Deciding one candidate's requests as the gateway would: the same
//! identity builds the descriptors, the same engine decides them on the
//! in-memory store, on a clock set to each line's arrival; the layer's own
//! admission step ([`floodgate_http::layer::admission`]) turns the answer
//! into a verdict (shadow mode, shaper delays, the bound on requests
//! waiting out a delay, `http.layer.max_delayed`) and tells whether the
//! request holds concurrency units. Those are given back when the request
//! ends: its arrival plus its logged duration (or its delay, when the log
//! has no duration).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::io::Write;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use floodgate::{Apply, ManualClock, StoreConfig, Timestamp};
use floodgate_http::contract::{Report, Verdict};
use floodgate_http::layer::{OnError, admission};
use floodgate_policy::engine::Reason;
use floodgate_policy::{Code, Descriptor, Engine, MemoryBackend, PolicySet, Response, Status};

use crate::candidate::Candidate;
use crate::format::time::write_rfc3339;
use crate::record::{DescView, Rec};
use crate::reorder::Ordered;
use crate::stats::{Acc, CandidateReport, Outcome, RuleOutcome};

/// Polls a future of the in-memory engine, which never waits.
fn ready<F: Future>(f: F) -> Option<F::Output> {
    match pin!(f)
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// One candidate's decisions.
pub(crate) struct Decider<'a> {
    candidate: &'a Candidate,
    engine: Engine<MemoryBackend, Arc<ManualClock>>,
    clock: Arc<ManualClock>,
    policy: Arc<PolicySet>,
    /// Which of the reader's identities builds this candidate's
    /// descriptors.
    identity: usize,
    response: Response,
    report: Report,
    /// When each request waiting out a delay is let go.
    delayed: BinaryHeap<Reverse<u64>>,
    /// Responses holding concurrency units, by release time.
    holds: BinaryHeap<Reverse<(u64, u64, usize)>>,
    held: Vec<Response>,
    free: Vec<usize>,
    hold_seq: u64,
    has_concurrency: bool,
    acc: Acc,
    /// Rule labels, by rule id.
    labels: Vec<String>,
    decisions: Option<Box<dyn Write + Send + 'a>>,
    sources: &'a [String],
    line: String,
    scratch: Vec<u8>,
    pub(crate) write_error: Option<std::io::Error>,
}

impl<'a> Decider<'a> {
    pub(crate) fn new(
        candidate: &'a Candidate,
        policy: PolicySet,
        identity: usize,
        capacity: usize,
        decisions: Option<Box<dyn Write + Send + 'a>>,
        sources: &'a [String],
    ) -> Result<Self, floodgate::ConfigError> {
        let clock = Arc::new(ManualClock::new(Timestamp::from_nanos(0)));
        let engine = Engine::with_clock(
            policy,
            MemoryBackend::new(StoreConfig::with_capacity(capacity))?,
            clock.clone(),
        );
        let policy = engine.policy();
        let has_concurrency = policy
            .rules()
            .iter()
            .any(|r| r.limits().iter().any(|l| l.limit.is_concurrency()));
        let labels = policy
            .rules()
            .iter()
            .map(|r| r.label().to_owned())
            .collect();
        let rules = policy.rules().len();
        Ok(Decider {
            candidate,
            engine,
            clock,
            policy,
            identity,
            response: Response::default(),
            report: Report::new(),
            delayed: BinaryHeap::new(),
            holds: BinaryHeap::new(),
            held: Vec::new(),
            free: Vec::new(),
            hold_seq: 0,
            has_concurrency,
            acc: Acc::new(rules),
            labels,
            decisions,
            sources,
            line: String::new(),
            scratch: Vec::new(),
            write_error: None,
        })
    }

    /// Decides a batch of lines, in order.
    pub(crate) fn batch(&mut self, batch: &Ordered) {
        let mut views = Vec::new();
        for &(p, i) in &batch.items {
            let parsed = &batch.parsed[p as usize];
            let rec = &parsed.recs[i as usize];
            let hits = parsed.descriptors(rec, self.identity, &mut views);
            self.decide(rec, &views, hits);
        }
    }

    /// Lets go of delayed requests and concurrency holds due by `t`.
    fn settle(&mut self, t: u64) {
        while self.delayed.peek().is_some_and(|Reverse(end)| *end <= t) {
            self.delayed.pop();
        }
        while let Some(&Reverse((at, _, slot))) = self.holds.peek() {
            if at > t {
                break;
            }
            self.holds.pop();
            self.clock.set(Timestamp::from_nanos(at));
            let _ = ready(self.engine.release(&self.held[slot]));
            self.free.push(slot);
        }
    }

    fn evaluate(&mut self, views: &[DescView<'_>], hits: u32, apply: Apply) -> Result<(), String> {
        let domain = self.candidate.identity.domain();
        match self
            .engine
            .evaluate_now(domain, views, hits, apply, &mut self.response)
        {
            Some(Ok(())) => {
                let contract = &self.candidate.contract;
                admission::judge(
                    &mut self.report,
                    &self.response,
                    Some(&self.policy),
                    contract,
                    false,
                );
                Ok(())
            }
            Some(Err(e)) => Err(e.to_string()),
            None => Err("the store did not decide at once".into()),
        }
    }

    fn decide(&mut self, rec: &Rec, views: &[DescView<'_>], hits: u32) {
        let t = rec.time;
        self.settle(t);
        self.clock.set(Timestamp::from_nanos(t));
        self.acc.begin(t);
        if views.is_empty() {
            self.acc.unlimited += 1;
            self.acc.outcome(Outcome::Allowed, Duration::ZERO);
            self.write(rec, views, Outcome::Allowed, Duration::ZERO, None, None);
            return;
        }
        let queue_full = self.refused_for_want_of_slot(views, hits);
        let mut error = None;
        if !queue_full && let Err(e) = self.evaluate(views, hits, Apply::Commit) {
            error = Some(e);
        }
        let (outcome, delay) = match (&error, self.report.verdict()) {
            (Some(_), _) => match self.candidate.on_error {
                OnError::Allow => (Outcome::Allowed, Duration::ZERO),
                OnError::Reject => (Outcome::Denied, Duration::ZERO),
            },
            (None, Verdict::Allowed) => (Outcome::Allowed, Duration::ZERO),
            (None, Verdict::Delayed(d)) => (Outcome::Delayed, d),
            (None, Verdict::Denied) => (Outcome::Denied, Duration::ZERO),
        };
        if error.is_some() {
            self.acc.errors += 1;
            self.acc.outcome(outcome, delay);
            self.write(rec, views, outcome, delay, None, error.as_deref());
            return;
        }
        if queue_full {
            self.acc.delay_queue_full += 1;
        }
        self.acc.outcome(outcome, delay);
        let deciding = self.count_rules(views, outcome, queue_full);
        if outcome == Outcome::Delayed {
            self.delayed.push(Reverse(t.saturating_add(nanos(delay))));
        }
        if self.has_concurrency
            && outcome != Outcome::Denied
            && !queue_full
            && admission::holds_units(&self.response, &self.policy)
        {
            let end = t.saturating_add(rec.duration.unwrap_or_else(|| nanos(delay)));
            self.hold(end);
        }
        self.write(rec, views, outcome, delay, deciding, None);
    }

    /// As the layer does: with every delay slot taken, a request the
    /// shaper would delay is decided without charging and rejected.
    fn refused_for_want_of_slot(&mut self, views: &[DescView<'_>], hits: u32) -> bool {
        admission::slots_full(self.delayed.len(), self.candidate.max_delayed)
            && self.evaluate(views, hits, Apply::Check).is_ok()
            && admission::refused_for_want_of_slot(&mut self.report)
    }

    /// Keeps the response holding concurrency units until `end`.
    fn hold(&mut self, end: u64) {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.held.push(Response::default());
            self.held.len() - 1
        });
        std::mem::swap(&mut self.held[slot], &mut self.response);
        self.hold_seq += 1;
        self.holds.push(Reverse((end, self.hold_seq, slot)));
    }

    /// Counts each rule's part; returns the rule that decided (the
    /// denying one, or the one imposing the longest delay).
    fn count_rules(
        &mut self,
        views: &[DescView<'_>],
        outcome: Outcome,
        queue_full: bool,
    ) -> Option<u32> {
        let mut any_rule = false;
        let mut deciding = Deciding {
            outcome,
            queue_full,
            rule: None,
            longest: Duration::ZERO,
        };
        let Decider {
            response,
            acc,
            labels,
            scratch,
            ..
        } = self;
        for (i, s) in response.statuses.iter().enumerate() {
            let Some(rule) = s.rule else {
                if s.code == Code::OverLimit
                    && deciding.rule.is_none()
                    && outcome == Outcome::Denied
                {
                    // A deny list.
                    deciding.rule = Some(u32::MAX);
                }
                continue;
            };
            any_rule = true;
            let delay = match s.decision.map(|d| d.outcome) {
                Some(floodgate::Outcome::Delayed(x)) if x > Duration::ZERO => Some(x),
                _ => None,
            };
            let o = deciding.classify(s, rule, delay);
            let label = labels.get(rule as usize).map_or("", String::as_str);
            let desc = views.get(i);
            acc.rule(rule, o, label, |buf| push_entries(desc, buf), scratch);
        }
        if !any_rule {
            acc.unlimited += 1;
        }
        deciding.rule
    }

    /// Writes the request's decision line, if asked to.
    fn write(
        &mut self,
        rec: &Rec,
        views: &[DescView<'_>],
        outcome: Outcome,
        delay: Duration,
        rule: Option<u32>,
        error: Option<&str>,
    ) {
        if self.decisions.is_none() || self.write_error.is_some() {
            return;
        }
        let l = &mut self.line;
        l.clear();
        l.push_str("{\"line\":");
        push_u64(l, rec.line);
        if self.sources.len() > 1 {
            l.push_str(",\"source\":");
            push_json(
                l,
                self.sources
                    .get(rec.file as usize)
                    .map_or("", String::as_str),
            );
        }
        l.push_str(",\"time\":\"");
        write_rfc3339(rec.time, l);
        l.push_str("\",\"descriptors\":[");
        push_descriptors(l, views);
        l.push_str("],\"outcome\":\"");
        l.push_str(outcome.name());
        l.push_str("\",\"delay_ms\":");
        push_millis(l, delay);
        l.push_str(",\"rule\":");
        match rule {
            Some(u32::MAX) => l.push_str("\"(deny list)\""),
            Some(r) => push_json(l, self.labels.get(r as usize).map_or("", String::as_str)),
            None => l.push_str("null"),
        }
        if rec.status != 0 {
            l.push_str(",\"logged_status\":");
            push_u64(l, u64::from(rec.status));
        }
        if let Some(e) = error {
            l.push_str(",\"error\":");
            push_json(l, e);
        }
        l.push_str("}\n");
        if let Some(w) = self.decisions.as_mut()
            && let Err(e) = w.write_all(l.as_bytes())
        {
            self.write_error = Some(e);
        }
    }

    /// The candidate's report.
    pub(crate) fn finish(mut self, top: usize) -> (CandidateReport, Option<std::io::Error>) {
        if let Some(w) = self.decisions.as_mut()
            && let Err(e) = w.flush()
            && self.write_error.is_none()
        {
            self.write_error = Some(e);
        }
        let rules: Vec<(String, String, String, bool)> = self
            .policy
            .rules()
            .iter()
            .map(|r| {
                (
                    r.label().to_owned(),
                    r.domain.to_string(),
                    describe_limits(r),
                    r.shadow,
                )
            })
            .collect();
        let store = self.engine.backend().store().stats();
        let report = self.acc.finish(
            self.candidate.name.clone(),
            self.candidate.notes.clone(),
            &rules,
            top,
            (store.keys as u64, store.evictions, store.admitted_full),
        );
        (report, self.write_error)
    }
}

/// Which rule decided a request, as its statuses are counted: the first
/// denying one, or the one imposing the longest delay.
struct Deciding {
    /// The request's outcome.
    outcome: Outcome,
    /// Whether it was rejected for want of a delay slot.
    queue_full: bool,
    /// The deciding rule so far (`u32::MAX`: a deny list).
    rule: Option<u32>,
    /// The longest delay so far.
    longest: Duration,
}

impl Deciding {
    /// The part of `rule` (status `s`, delaying by `delay`), noting
    /// whether it decided.
    fn classify(&mut self, s: &Status, rule: u32, delay: Option<Duration>) -> RuleOutcome {
        let would_deny = s.decision.is_some_and(|d| d.is_denied()) || s.reason == Reason::Blocked;
        if s.shadow {
            if would_deny {
                RuleOutcome::ShadowHit
            } else {
                RuleOutcome::Allowed
            }
        } else if s.code == Code::OverLimit {
            if self.rule.is_none() && self.outcome == Outcome::Denied && !self.queue_full {
                self.rule = Some(rule);
            }
            RuleOutcome::Denied
        } else if let Some(x) = delay {
            if x > self.longest && (self.outcome == Outcome::Delayed || self.queue_full) {
                self.longest = x;
                self.rule = Some(rule);
            }
            RuleOutcome::Delayed(x)
        } else {
            RuleOutcome::Allowed
        }
    }
}

/// A descriptor's entries as `k=v, k=v` (the top keys' text).
fn push_entries(desc: Option<&DescView<'_>>, buf: &mut Vec<u8>) {
    if let Some(d) = desc {
        for j in 0..d.len() {
            let (k, v) = d.entry(j);
            if j > 0 {
                buf.extend_from_slice(b", ");
            }
            buf.extend_from_slice(k.as_bytes());
            buf.push(b'=');
            buf.extend_from_slice(v.as_bytes());
        }
    }
}

/// The descriptors as JSON objects, comma-separated.
fn push_descriptors(l: &mut String, views: &[DescView<'_>]) {
    for (i, d) in views.iter().enumerate() {
        if i > 0 {
            l.push(',');
        }
        l.push('{');
        for j in 0..d.len() {
            let (k, v) = d.entry(j);
            if j > 0 {
                l.push(',');
            }
            push_json(l, k);
            l.push(':');
            push_json(l, v);
        }
        l.push('}');
    }
}

/// `delay` in milliseconds, to the microsecond.
fn push_millis(l: &mut String, delay: Duration) {
    let micros = delay.as_micros();
    push_u64(l, (micros / 1000) as u64);
    if micros % 1000 != 0 {
        use std::fmt::Write;
        let _ = write!(l, ".{:03}", micros % 1000);
    }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

fn push_u64(s: &mut String, n: u64) {
    let mut buf = itoa::Buffer::new();
    s.push_str(buf.format(n));
}

fn push_json(s: &mut String, v: &str) {
    // serde_json's escaping of one string.
    match serde_json::to_string(v) {
        Ok(q) => s.push_str(&q),
        Err(_) => s.push_str("\"\""),
    }
}

/// A rule's limits in words: `sliding_log 100/60s`, `shaper 10r/s burst 5`.
pub(crate) fn describe_limits(rule: &floodgate_policy::compile::Rule) -> String {
    use floodgate_policy::compile::Action;
    match &rule.action {
        Action::Unlimited => "unlimited".into(),
        Action::Block { .. } => "blocks every request".into(),
        Action::Limit(limits) => limits
            .iter()
            .map(|l| l.limit.describe().to_string())
            .collect::<Vec<_>>()
            .join(" + "),
    }
}
