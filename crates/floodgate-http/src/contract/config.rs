//! What the contract says: which header forms, which statuses, what is
//! hidden. Read from the `http.responses` section or built in code.

use std::collections::HashMap;
use std::time::Duration;

use http::StatusCode;

/// One way of telling clients about their limits. Several can be sent at
/// once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeaderForm {
    /// `RateLimit-Policy` and `RateLimit` of draft-ietf-httpapi-ratelimit-headers-11
    /// (the default).
    Ietf,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` with
    /// the reset in seconds from now.
    XRateLimit,
    /// The same with the reset as Unix epoch seconds (GitHub's convention).
    XRateLimitEpoch,
    /// The draft-03 form Envoy emits (`DRAFT_VERSION_03`):
    /// `X-RateLimit-Limit: 10, 10;w=1;name="per-ip"`, remaining, reset.
    Draft03,
}

impl HeaderForm {
    /// The configuration name (`ietf`, `x-ratelimit`, `x-ratelimit-epoch`,
    /// `draft-03`).
    pub const fn name(self) -> &'static str {
        match self {
            HeaderForm::Ietf => "ietf",
            HeaderForm::XRateLimit => "x-ratelimit",
            HeaderForm::XRateLimitEpoch => "x-ratelimit-epoch",
            HeaderForm::Draft03 => "draft-03",
        }
    }

    /// Every form, in the order the documentation lists them.
    pub const ALL: [HeaderForm; 4] = [
        HeaderForm::Ietf,
        HeaderForm::XRateLimit,
        HeaderForm::XRateLimitEpoch,
        HeaderForm::Draft03,
    ];

    /// The form named `name` (see [`name`](Self::name)).
    pub fn parse(name: &str) -> Option<HeaderForm> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// Per-rule settings, keyed by the rule's name (or its path when unnamed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleResponse {
    /// The status of a denial by this rule (default: the contract's).
    pub status: Option<StatusCode>,
    /// Send no rate-limit headers for this rule and leave it out of problem
    /// bodies (operators who do not disclose their limits).
    pub hide: bool,
    /// The policy name clients see (default: the rule's name or path).
    pub policy_name: Option<String>,
}

/// The HTTP contract with clients: which headers every response carries and
/// what a rejection looks like (its settings, and what it writes).
///
/// ```
/// use floodgate::{Decision, Outcome, Timestamp};
/// use floodgate_http::contract::{Contract, HeaderBuf, QuotaUnit, Rejection, Report, Verdict};
/// use std::time::Duration;
///
/// let contract = Contract::default();
/// let mut report = Report::new();
/// let p = report.add_policy("per-ip", 10, Some(1), QuotaUnit::Requests);
/// let retry = Duration::from_millis(2300);
/// report.add_current(p, &Decision {
///     outcome: Outcome::Denied, limit: 10, remaining: 0,
///     reset_after: Duration::from_secs(1), retry_after: Some(retry),
/// });
/// report.set_verdict(Verdict::Denied, Some(retry));
///
/// let res = contract.reject(Rejection::Limited(&report), &http::HeaderMap::new(),
///     Timestamp::from_secs(1_700_000_000), &mut HeaderBuf::new());
/// assert_eq!(res.status(), 429);
/// assert_eq!(res.headers()["retry-after"], "3");
/// assert_eq!(res.headers()["ratelimit"], r#""per-ip";r=0;t=3"#);
/// assert_eq!(res.headers()["ratelimit-policy"], r#""per-ip";q=10;w=1"#);
/// assert_eq!(res.headers()["cache-control"], "no-store");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contract {
    /// Header forms sent, in order (default: [`HeaderForm::Ietf`]).
    pub forms: Vec<HeaderForm>,
    /// Hide every rate-limit header and the policy details of problem
    /// bodies (`Retry-After` and the status stay).
    pub hide_headers: bool,
    /// Send the headers on admitted responses too (default `true`); `false`
    /// sends them only on denials.
    pub on_success: bool,
    /// The status of a denial (default 429).
    pub status: StatusCode,
    /// `Retry-After` when no wait is known (an in-flight limit frees up when
    /// a holder finishes, not at a time): absent by default.
    pub retry_after_unknown: Option<Duration>,
    /// The status of a request rejected because the limiter failed, when it
    /// does not fail open (default 503).
    pub error_status: StatusCode,
    /// Per-rule settings by rule name or path.
    pub rules: HashMap<String, RuleResponse>,
}

impl Default for Contract {
    fn default() -> Self {
        Contract {
            forms: vec![HeaderForm::Ietf],
            hide_headers: false,
            on_success: true,
            status: StatusCode::TOO_MANY_REQUESTS,
            retry_after_unknown: None,
            error_status: StatusCode::SERVICE_UNAVAILABLE,
            rules: HashMap::new(),
        }
    }
}

impl Contract {
    /// The settings of rule `label`, if any.
    pub fn rule(&self, label: &str) -> Option<&RuleResponse> {
        if self.rules.is_empty() {
            return None;
        }
        self.rules.get(label)
    }

    /// With these header forms.
    pub fn with_forms(mut self, forms: impl IntoIterator<Item = HeaderForm>) -> Self {
        self.forms = forms.into_iter().collect();
        self
    }
}
