//! The configuration as written: domains, descriptor trees and limits, read
//! from envoyproxy/ratelimit files or Floodgate files, before compilation
//! into a [`PolicySet`](crate::PolicySet).

use std::net::IpAddr;
use std::time::Duration;

use floodgate::algorithms::{NginxRate, ShaperDelay};

use crate::error::Location;
use crate::failure::OnFailure;
use crate::sync_mode::SyncMode;
use crate::unit::Unit;

/// Global settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Dark launch everything: count and report, never enforce.
    pub shadow_mode: bool,
    /// The kill switch: `false` disables every rule at once (nothing is
    /// counted or limited).
    pub enforce: bool,
    /// Hits above `floor(limit × ratio)` but within the limit count as
    /// "near limit" (Envoy's `NEAR_LIMIT_RATIO`).
    pub near_limit_ratio: f64,
    /// envoyproxy/ratelimit's default accounting: every matched counter is
    /// incremented on every request, admitted or not
    /// (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`). Off by default:
    /// a denied request then only counts against the limits that denied it.
    /// Either way it applies to the fixed windows of envoyproxy/ratelimit
    /// files whose rules do not set `penalty` (see
    /// [`Penalty::default_for`]).
    pub envoy_increment_all: bool,
    /// Also counts each rule's hits under envoyproxy/ratelimit's
    /// Prometheus names (`ratelimit_service_rate_limit_*{domain,key1,key2}`),
    /// with its semantics: its `USE_PROMETHEUS`.
    pub envoy_stats: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            shadow_mode: false,
            enforce: true,
            near_limit_ratio: 0.8,
            envoy_increment_all: false,
            envoy_stats: false,
        }
    }
}

/// Which file format a domain came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// An envoyproxy/ratelimit file, read with that service's rules.
    Envoy,
    /// A Floodgate file (a superset).
    Floodgate,
}

/// A whole configuration.
#[derive(Clone, Debug, Default)]
pub struct PolicySpec {
    /// Global settings.
    pub settings: Settings,
    /// The domains, in file order.
    pub domains: Vec<DomainSpec>,
}

/// One domain: a tree of descriptor rules and allow/deny lists.
#[derive(Clone, Debug)]
pub struct DomainSpec {
    /// The domain's name.
    pub name: String,
    /// Where it was declared.
    pub at: Location,
    /// The file format.
    pub dialect: Dialect,
    /// The top level of the rule tree.
    pub descriptors: Vec<NodeSpec>,
    /// Entries never limited.
    pub allow: Vec<ListSpec>,
    /// Entries always denied.
    pub deny: Vec<ListSpec>,
}

impl DomainSpec {
    /// How many top-level rules and list entries it holds.
    pub fn held(&self) -> usize {
        self.descriptors.len() + self.allow.len() + self.deny.len()
    }
}

/// One node of a descriptor tree.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// The descriptor entry key.
    pub key: String,
    /// The value: exact, a wildcard pattern (`*`), or none (any value, each
    /// with its own counter).
    pub value: Option<String>,
    /// Where it was declared.
    pub at: Location,
    /// The limit applied when a descriptor ends at this node.
    pub rate_limit: Option<RateLimitSpec>,
    /// Count and report, never enforce.
    pub shadow_mode: bool,
    /// A soft ("quota") limit: it only fails a request when every quota
    /// descriptor of the request is over.
    pub quota_mode: bool,
    /// Accepted for compatibility; metrics never carry request values.
    pub detailed_metric: bool,
    /// Accepted for compatibility; metrics never carry request values.
    pub value_to_metric: bool,
    /// All values matching a wildcard share one counter.
    pub share_threshold: bool,
    /// The per-rule kill switch (`false`: as if the rule did not exist).
    pub enabled: bool,
    /// Each hit costs this many units (weighted endpoints).
    pub cost: u64,
    /// Nested nodes.
    pub children: Vec<NodeSpec>,
}

/// The limit of a rule.
#[derive(Clone, Debug)]
pub struct RateLimitSpec {
    /// Where it was declared.
    pub at: Location,
    /// Its name (for `replaces`, reporting and metrics).
    pub name: Option<String>,
    /// Names of rules this one replaces when both match.
    pub replaces: Vec<String>,
    /// Matches, counts nothing, never limits.
    pub unlimited: bool,
    /// The limits, checked atomically; empty when unlimited.
    pub limits: Vec<LimitSpec>,
    /// Who pays for a denied request, as the rule says (`penalty:`);
    /// `None` when it does not: each limit's default then applies (see
    /// [`Penalty::default_for`]).
    pub penalty: Option<Penalty>,
    /// After a denial, deny the key outright for this long.
    pub block_for: Option<Duration>,
    /// What a shared store does with this rule's counters when it cannot
    /// decide (`None`: the store's global failure policy).
    pub on_failure: Option<OnFailure>,
    /// How a shared store shares the rule's counters between instances
    /// (`None`: the store's default).
    pub sync: Option<SyncMode>,
    /// How long each unit its concurrency limits admit is held at most
    /// (`lease:`): units never given back return when it ends.
    pub lease: Option<Duration>,
    /// The descriptor's last entry names who holds the units of its
    /// concurrency limits (`holder: true`) instead of being part of their
    /// counter: negative hits give back that holder's units only.
    pub holder: bool,
    /// What to report as the current limit in Envoy responses.
    pub reported: Reported,
}

/// How denied requests are counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Penalty {
    /// Not at all (the default for Floodgate rules).
    #[default]
    None,
    /// Against the limit that denied it (envoyproxy/ratelimit with
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`).
    OwnDenials,
    /// Against this limit whenever the request is denied, by any limit
    /// (Kong and HAProxy's "denied requests still count"; envoyproxy/ratelimit
    /// by default).
    AllDenials,
}

impl Penalty {
    /// What a denied request is charged by `limit` of a rule of a
    /// `dialect` file that does not say. Nothing in a Floodgate file. In an
    /// envoyproxy/ratelimit file, a fixed window counts as that service's
    /// counters do ([`OwnDenials`](Penalty::OwnDenials), or
    /// [`AllDenials`](Penalty::AllDenials) with
    /// [`Settings::envoy_increment_all`]); any other algorithm charges
    /// nothing, as its usual implementations do (governor, redis-cell,
    /// nginx): a charged denial would keep a client calling steadily out
    /// for as long as it calls.
    pub fn default_for(dialect: Dialect, limit: &LimitSpec, settings: &Settings) -> Penalty {
        match (dialect, limit) {
            (Dialect::Envoy, LimitSpec::FixedWindow { .. }) if settings.envoy_increment_all => {
                Penalty::AllDenials
            }
            (Dialect::Envoy, LimitSpec::FixedWindow { .. }) => Penalty::OwnDenials,
            _ => Penalty::None,
        }
    }
}

/// The limit as an Envoy `RateLimit` message reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reported {
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// `unit`.
    pub unit: Unit,
}

impl Reported {
    /// How a limit of `count` per `period`, of which `quota` can be used at
    /// once, is reported in the protocol's units:
    ///
    /// * a period that is a unit: `count` per that unit;
    /// * any other period: the rate, rounded down, in the shortest unit at
    ///   least as long as the period (5 per 7 s is 42 per `MINUTE`, 10 per
    ///   2 minutes 300 per `HOUR`); a period longer than a year, per `YEAR`;
    ///
    /// and never less than `quota`, so that what remains (at most the
    /// quota) never exceeds the limit reported.
    ///
    /// ```
    /// use floodgate_policy::spec::Reported;
    /// use floodgate_policy::unit::Unit;
    /// use std::time::Duration;
    ///
    /// let r = Reported::of(5, Duration::from_secs(7), 5);
    /// assert_eq!((r.requests_per_unit, r.unit), (42, Unit::Minute));
    /// // A token bucket of 10/s with bursts of 20: the burst.
    /// let r = Reported::of(10, Duration::from_secs(1), 20);
    /// assert_eq!((r.requests_per_unit, r.unit), (20, Unit::Second));
    /// ```
    pub fn of(count: u64, period: Duration, quota: u64) -> Reported {
        let nanos = period.as_nanos().max(1);
        let unit = Unit::ALL
            .into_iter()
            .find(|u| u.duration().as_nanos() >= nanos)
            .unwrap_or(Unit::Year);
        let per_unit = if unit.duration().as_nanos() == nanos {
            u128::from(count)
        } else {
            u128::from(count) * unit.duration().as_nanos() / nanos
        };
        Reported {
            requests_per_unit: per_unit.max(u128::from(quota)).min(u128::from(u32::MAX)) as u32,
            unit,
        }
    }
}

/// One limit with its algorithm.
#[derive(Clone, Debug, PartialEq)]
pub enum LimitSpec {
    /// Every request is denied (`requests_per_unit: 0`); the window sets the
    /// reported reset time.
    Block {
        /// The reporting window.
        window: Duration,
    },
    /// Fixed window.
    FixedWindow {
        /// Requests per window (0, from an envoyproxy/ratelimit file: none,
        /// but what a penalty charges is counted).
        limit: u64,
        /// Window length.
        window: Duration,
    },
    /// Token bucket / GCRA / leaky-bucket meter.
    Gcra {
        /// Requests per period.
        count: u64,
        /// The period.
        period: Duration,
        /// Burst capacity.
        burst: u64,
    },
    /// Sliding window counter.
    SlidingWindow {
        /// Requests per window.
        limit: u64,
        /// Window length.
        window: Duration,
        /// Sub-windows (1 = the classic two-window estimate).
        sub_windows: u32,
    },
    /// Sliding log.
    SlidingLog {
        /// Requests per window.
        limit: u64,
        /// Window length.
        window: Duration,
    },
    /// nginx-compatible shaper.
    Shaper {
        /// The rate.
        rate: NginxRate,
        /// Burst in requests.
        burst: u64,
        /// Delay mode.
        delay: ShaperDelay,
    },
    /// In-flight limit.
    Concurrency {
        /// Maximum in flight.
        max: u64,
    },
}

/// An allow or deny list entry: a descriptor key and the values (exact
/// strings, or IP networks for address-valued keys) it applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListSpec {
    /// Where it was declared.
    pub at: Location,
    /// The descriptor entry key (e.g. `remote_address`, `api_key`).
    pub key: String,
    /// Exact values.
    pub values: Vec<String>,
    /// Networks: an entry matches when its value parses as an address
    /// inside one of them.
    pub networks: Vec<(IpAddr, u8)>,
}
