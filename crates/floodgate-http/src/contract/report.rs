//! What a response tells a client: the policies that applied, where each
//! stands, and the verdict. Built from an engine [`Response`] (or by hand),
//! reused from request to request.

use std::ops::Range;
use std::time::Duration;

use floodgate::algorithms::AnyLimit;
use floodgate::{Decision, Outcome};
use floodgate_policy::compile::{Action, PolicySet, RuleId, RuleLimit};
use floodgate_policy::engine::Reason;
use floodgate_policy::{Code, Response, Status};
use http::StatusCode;

use super::config::Contract;
use super::sf::ceil_secs;

/// What a policy's quota counts (the draft's `qu` parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuotaUnit {
    /// Requests (the default, not written).
    Requests,
    /// Requests in flight (`qu="concurrent-requests"`).
    ConcurrentRequests,
}

/// One quota policy: a line of `RateLimit-Policy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyLine {
    name: Range<u32>,
    /// The quota (`q`): requests admissible at once from idle.
    pub quota: u64,
    /// The window in whole seconds (`w`), when the policy has one.
    pub window: Option<u64>,
    /// What the quota counts.
    pub unit: QuotaUnit,
}

/// Where a client stands under one policy: a line of `RateLimit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CurrentLine {
    /// Index of the policy in [`Report::policies`].
    pub policy: usize,
    /// Available quota (`r`).
    pub remaining: u64,
    /// Exact time until the quota is whole again (allowed), or until this
    /// request would pass (denied, when known).
    pub reset: Duration,
    /// Whether this policy denied the request.
    pub denied: bool,
    /// Whether a time is known at all (in-flight limits have none).
    pub timed: bool,
}

/// The verdict on a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Verdict {
    /// Proceed now.
    #[default]
    Allowed,
    /// Proceed after this delay (a shaper).
    Delayed(Duration),
    /// Rejected.
    Denied,
}

/// Where the policy lines of a report come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Source {
    /// No line yet.
    #[default]
    Empty,
    /// Every line is of this rule (its lines depend on the rule and the
    /// contract only, so their rendering can be reused).
    Rule(RuleId),
    /// Several rules, or lines added by hand.
    Mixed,
}

/// The policies, positions and verdict of one request.
#[derive(Clone, Debug, Default)]
pub struct Report {
    names: String,
    source: Source,
    policies: Vec<PolicyLine>,
    current: Vec<CurrentLine>,
    verdict: Verdict,
    retry_after: Option<Duration>,
    status: Option<StatusCode>,
    never: bool,
    /// Lines of shaping policies that delay the request: (index in
    /// `current`, the delay).
    delaying: Vec<(usize, Duration)>,
}

impl Report {
    /// An empty report (an admitted request under no policy).
    pub fn new() -> Self {
        Self::default()
    }

    /// Clears it for the next request (keeping its buffers).
    pub fn clear(&mut self) {
        self.names.clear();
        self.source = Source::Empty;
        self.policies.clear();
        self.current.clear();
        self.verdict = Verdict::Allowed;
        self.retry_after = None;
        self.status = None;
        self.never = false;
        self.delaying.clear();
    }

    /// Turns a delay into a rejection (no room to wait): the shaping
    /// policies that delayed the request become the denying ones, each
    /// with its own delay as the time until the request would pass
    /// (their `t`), and the longest is the wait (`Retry-After`). Nothing
    /// changes unless the verdict is a delay.
    pub fn deny_delayed(&mut self) {
        let Verdict::Delayed(delay) = self.verdict else {
            return;
        };
        for &(i, wait) in &self.delaying {
            if let Some(c) = self.current.get_mut(i) {
                c.denied = true;
                c.timed = true;
                c.remaining = 0;
                c.reset = wait;
            }
        }
        self.set_verdict(Verdict::Denied, Some(delay));
    }

    /// Adds a policy; returns its index.
    pub fn add_policy(
        &mut self,
        name: &str,
        quota: u64,
        window: Option<u64>,
        unit: QuotaUnit,
    ) -> usize {
        self.source = Source::Mixed;
        self.add_policy_with(|s| s.push_str(name), quota, window, unit)
    }

    /// The rule every policy line comes from, when there is exactly one:
    /// then `RateLimit-Policy` is the same for every request of that rule
    /// (under one contract), and can be rendered once.
    pub fn single_rule(&self) -> Option<RuleId> {
        match self.source {
            Source::Rule(id) => Some(id),
            _ => None,
        }
    }

    /// Records that rule `id` added policy lines.
    fn note_rule(&mut self, id: RuleId) {
        // A rule matched twice has its lines twice: not the rule's own.
        self.source = match self.source {
            Source::Empty => Source::Rule(id),
            _ => Source::Mixed,
        };
    }

    fn add_policy_with(
        &mut self,
        name: impl FnOnce(&mut String),
        quota: u64,
        window: Option<u64>,
        unit: QuotaUnit,
    ) -> usize {
        let start = self.names.len() as u32;
        name(&mut self.names);
        let end = self.names.len() as u32;
        self.policies.push(PolicyLine {
            name: start..end,
            quota,
            window: window.map(|w| w.max(1)),
            unit,
        });
        self.policies.len() - 1
    }

    /// Adds where the client stands under policy `policy` after `decision`
    /// (a [`Decision`] of the core, exact).
    pub fn add_current(&mut self, policy: usize, decision: &Decision) {
        let denied = decision.is_denied();
        let (reset, timed) = match (decision.outcome, decision.retry_after) {
            (Outcome::Denied, Some(r)) => (r, true),
            (Outcome::Denied | Outcome::Never, None) => (decision.reset_after, false),
            _ => (decision.reset_after, true),
        };
        self.current.push(CurrentLine {
            policy,
            remaining: decision.remaining,
            reset,
            denied,
            timed,
        });
    }

    /// Sets the verdict and, for a denial, the exact wait after which the
    /// request would pass (`None`: unknown or never).
    pub fn set_verdict(&mut self, verdict: Verdict, retry_after: Option<Duration>) {
        self.verdict = verdict;
        self.retry_after = match verdict {
            Verdict::Denied => retry_after,
            _ => None,
        };
    }

    /// The verdict.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    /// The exact wait of a denial, when known.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The status chosen by a rule for this denial, if any.
    pub fn status(&self) -> Option<StatusCode> {
        self.status
    }

    /// True when the request can never pass (its cost exceeds a limit, or a
    /// rule blocks everything): retrying is pointless.
    pub fn is_never(&self) -> bool {
        self.never
    }

    /// The policies (`RateLimit-Policy`).
    pub fn policies(&self) -> &[PolicyLine] {
        &self.policies
    }

    /// The positions (`RateLimit`).
    pub fn current(&self) -> &[CurrentLine] {
        &self.current
    }

    /// The name of policy `i`.
    pub fn name(&self, i: usize) -> &str {
        self.policies
            .get(i)
            .and_then(|p| self.names.get(p.name.start as usize..p.name.end as usize))
            .unwrap_or("")
    }

    /// The names of the policies that denied the request.
    pub fn violated(&self) -> impl Iterator<Item = &str> + '_ {
        self.current
            .iter()
            .filter(|c| c.denied)
            .map(|c| self.name(c.policy))
    }

    /// Fills the report from an engine `response` under `policy` (the one
    /// the response was decided on) and `config`. Shadow-mode rules are
    /// left out (they are not enforced); hidden rules are left out of the
    /// lines but still decide the verdict, status and wait.
    pub fn fill(&mut self, response: &Response, policy: &PolicySet, config: &Contract) {
        self.clear();
        let mut tally = Tally {
            delay: Duration::ZERO,
            wait: Some(Duration::ZERO),
        };
        for status in &response.statuses {
            if !status.shadow {
                self.fill_status(status, policy, config, &mut tally);
            }
        }
        if response.overall == Code::OverLimit {
            self.set_verdict(Verdict::Denied, tally.wait.filter(|w| !w.is_zero()));
        } else if tally.delay > Duration::ZERO && !response.shadowed && !policy.settings.shadow_mode
        {
            // Global shadow mode enforces nothing: not even a shaper's delay
            // (as nginx's dry run serves a delayed request at once).
            self.set_verdict(Verdict::Delayed(tally.delay), None);
        }
    }

    /// Adds what the enforced `status` tells: its lines, unless hidden,
    /// and its part of the verdict, status and wait.
    fn fill_status(
        &mut self,
        status: &Status,
        policy: &PolicySet,
        config: &Contract,
        tally: &mut Tally,
    ) {
        let over = status.code == Code::OverLimit;
        let Some(id) = status.rule else {
            if over {
                // A deny list: no policy to name, no time to wait.
                tally.wait = None;
                self.never = true;
            }
            return;
        };
        let rule = policy.rule(id);
        let settings = config
            .rule(rule.label())
            .or_else(|| config.rule(&rule.path));
        if over {
            if let Some(s) = settings.and_then(|s| s.status) {
                self.status.get_or_insert(s);
            }
        }
        let hidden = config.hide_headers || settings.is_some_and(|s| s.hide);
        let base = settings
            .and_then(|s| s.policy_name.as_deref())
            .unwrap_or(rule.label());
        match &rule.action {
            Action::Unlimited => {}
            Action::Block { window, .. } => {
                if over {
                    tally.wait = None;
                    self.never = true;
                }
                if !hidden {
                    self.add_block(id, status, *window, base);
                }
            }
            Action::Limit(limits) => {
                let Some(d) = status.decision else { return };
                self.tally_limit(d, over, tally);
                if hidden {
                    return;
                }
                self.add_limit(id, status, d, limits, base);
            }
        }
        if status.reason == Reason::Denied && over {
            tally.wait = None;
        }
    }

    /// The lines of rule `id`, blocking everything for `window`.
    fn add_block(&mut self, id: RuleId, status: &Status, window: Duration, base: &str) {
        self.note_rule(id);
        let p = self.add_policy_with(
            |s| s.push_str(base),
            0,
            Some(ceil_secs(window)),
            QuotaUnit::Requests,
        );
        self.current.push(CurrentLine {
            policy: p,
            remaining: 0,
            reset: status.duration_until_reset,
            denied: status.code == Code::OverLimit,
            timed: false,
        });
    }

    /// The part of a limit's decision `d` in the verdict: its delay, and
    /// when `over`, its wait (none: unknown, or never).
    fn tally_limit(&mut self, d: Decision, over: bool, tally: &mut Tally) {
        if let Outcome::Delayed(x) = d.outcome {
            tally.delay = tally.delay.max(x);
        }
        if over {
            match (d.outcome, d.retry_after) {
                (Outcome::Denied, Some(r)) => tally.wait = tally.wait.map(|w| w.max(r)),
                (outcome, _) => {
                    tally.wait = None;
                    self.never |= outcome == Outcome::Never;
                }
            }
        }
    }

    /// The lines of rule `id` limiting by `limits`: a policy per limit,
    /// and where the client stands under the one that decided (`d`).
    fn add_limit(
        &mut self,
        id: RuleId,
        status: &Status,
        d: Decision,
        limits: &[RuleLimit],
        base: &str,
    ) {
        self.note_rule(id);
        let first = self.add_limit_policies(limits, base);
        let pick = deciding_limit(limits, status, d);
        let mut shown = d;
        if status.code != Code::OverLimit && shown.is_denied() {
            // Quota mode: over, but the request passed.
            shown.outcome = Outcome::Allowed;
        }
        self.add_current(first + pick, &shown);
        if let Outcome::Delayed(x) = d.outcome
            && x > Duration::ZERO
        {
            self.delaying.push((self.current.len() - 1, x));
        }
        if self.policies[first + pick].unit == QuotaUnit::ConcurrentRequests {
            // Units free up when a holder finishes, not at a time.
            if let Some(c) = self.current.last_mut() {
                c.timed = false;
            }
        }
    }

    /// A policy line per limit of a rule, named `base` (with a suffix
    /// when there are several); returns the index of the first.
    fn add_limit_policies(&mut self, limits: &[RuleLimit], base: &str) -> usize {
        let first = self.policies.len();
        let many = limits.len() > 1;
        for (i, l) in limits.iter().enumerate() {
            let (quota, window, unit) = shape(&l.limit);
            // Two limits of one window are told apart by position.
            let shared = many
                && limits
                    .iter()
                    .enumerate()
                    .any(|(j, m)| j != i && shape(&m.limit).1 == window);
            self.add_policy_with(
                |s| {
                    s.push_str(base);
                    if many {
                        suffix(s, i, window.filter(|_| !shared));
                    }
                },
                quota,
                window,
                unit,
            );
        }
        first
    }
}

/// What the statuses of a response add up to, as a report is filled: the
/// longest delay, and the longest known wait of a denial (none: unknown or
/// never).
struct Tally {
    delay: Duration,
    wait: Option<Duration>,
}

/// Which of a rule's `limits` decided `d` (reported in `status`).
fn deciding_limit(limits: &[RuleLimit], status: &Status, d: Decision) -> usize {
    if limits.len() <= 1 {
        return 0;
    }
    let reported = status.current_limit.as_ref().map(|c| c.reported);
    limits
        .iter()
        .position(|l| Some(l.reported) == reported && shape(&l.limit).0 == d.limit)
        .or_else(|| limits.iter().position(|l| shape(&l.limit).0 == d.limit))
        .unwrap_or(0)
}

/// The name suffix of limit `i` of a rule with several: its window
/// (`/1s`, `/1h`), or its position when it has no window or shares it with
/// another limit of the rule (every policy name of a response is unique).
fn suffix(s: &mut String, i: usize, window: Option<u64>) {
    use std::fmt::Write;
    let _ = match window {
        Some(w) if w % 86_400 == 0 => write!(s, "/{}d", w / 86_400),
        Some(w) if w % 3600 == 0 => write!(s, "/{}h", w / 3600),
        Some(w) if w % 60 == 0 => write!(s, "/{}m", w / 60),
        Some(w) => write!(s, "/{w}s"),
        None => write!(s, "/{i}"),
    };
}

/// A limit's quota, window (whole seconds, rounded up) and unit, as the
/// contract reports them.
pub fn shape(limit: &AnyLimit) -> (u64, Option<u64>, QuotaUnit) {
    let quota = limit.quota();
    match quota.window {
        Some(w) => (quota.limit, Some(ceil_secs(w).max(1)), QuotaUnit::Requests),
        None => (quota.limit, None, QuotaUnit::ConcurrentRequests),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(remaining: u64, secs: u64, outcome: Outcome) -> Decision {
        Decision {
            outcome,
            limit: 10,
            remaining,
            reset_after: Duration::from_secs(secs),
            retry_after: (outcome == Outcome::Denied && secs > 0)
                .then(|| Duration::from_secs(secs)),
        }
    }

    #[test]
    fn the_primary_line_is_the_first_of_equals() {
        let mut r = Report::new();
        for (name, quota) in [("a", 10), ("b", 5), ("c", 5)] {
            let p = r.add_policy(name, quota, Some(1), QuotaUnit::Requests);
            r.add_current(p, &line(2, 1, Outcome::Allowed));
        }
        // Least remaining, then the smaller quota, then the first.
        assert_eq!(r.primary().map(|c| c.policy), Some(1));
        r.clear();
        for (name, secs) in [("x", 0), ("y", 3), ("z", 3)] {
            let p = r.add_policy(name, 10, Some(1), QuotaUnit::Requests);
            r.add_current(p, &line(0, secs, Outcome::Denied));
        }
        let p = r.add_policy("w", 10, Some(1), QuotaUnit::Requests);
        r.add_current(p, &line(0, 1, Outcome::Allowed));
        // A denying one, the longest known wait, then the first.
        assert_eq!(r.primary().map(|c| c.policy), Some(1));
    }
}
