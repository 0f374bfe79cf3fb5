//! envoyproxy/ratelimit's decision, step by step as its Go source takes it:
//! `shouldRateLimitWorker` and `constructLimitsToCheck`
//! (`src/service/ratelimit.go`), `GetLimit` for overrides
//! (`src/config/config_impl.go`), `GenerateCacheKeys` and
//! `GetResponseDescriptorStatus` (`src/limiter/base_limiter.go`),
//! `GenerateCacheKey` (`src/limiter/cache_key.go`), `DoLimit` on Redis
//! (`src/redis/fixed_cache_impl.go`), `GetHitsAddends` and
//! `CalculateReset` (`src/utils/utilities.go`). Redis is a map of counters
//! (`INCRBY`'s 64-bit signed integers); expiry never matters, as every key
//! names its window's start.
//!
//! Negative hits (`is_negative_hits`) follow envoyproxy/ratelimit pull
//! request #1140 (commit 5a56d24, not on `main` when this was written):
//! `GetHitsAddends` (`src/utils/utilities.go`) marks them,
//! `GenerateCacheKeys` counts them in `total_negative_hits`,
//! `DoLimit` (`src/redis/fixed_cache_impl.go`) leaves them out of the
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` reads and runs
//! `DecrementScript` (`src/limiter/base_limiter.go`) on their keys, and
//! `GetResponseDescriptorStatusForNegativeHits` answers them.

use std::collections::HashMap;

use super::config::{Config, Limit, unit_seconds};

/// `RateLimitResponse_Code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// `OK` (1).
    Ok,
    /// `OVER_LIMIT` (2).
    OverLimit,
}

impl Code {
    /// The protocol number.
    pub fn number(self) -> i32 {
        match self {
            Code::Ok => 1,
            Code::OverLimit => 2,
        }
    }
}

/// `RateLimitResponse_RateLimit`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitMsg {
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// `unit` (its number).
    pub unit: i32,
    /// `name`.
    pub name: String,
}

/// `RateLimitResponse_DescriptorStatus`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// `code`.
    pub code: Code,
    /// `current_limit`.
    pub current_limit: Option<RateLimitMsg>,
    /// `limit_remaining`.
    pub limit_remaining: u32,
    /// `duration_until_reset`, in seconds (the reference never sets nanos).
    pub duration_until_reset: Option<i64>,
}

/// `RateLimitResponse` (dynamic metadata aside: off by default there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// `overall_code`.
    pub overall_code: Code,
    /// `statuses`.
    pub statuses: Vec<Status>,
    /// `response_headers_to_add`, in order.
    pub headers: Vec<(String, String)>,
}

/// One `RateLimitDescriptor` of a request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// `entries`.
    pub entries: Vec<(String, String)>,
    /// `limit`: (`requests_per_unit`, `unit` number).
    pub limit: Option<(u32, i32)>,
    /// `hits_addend` (the `UInt64Value` wrapper).
    pub hits_addend: Option<u64>,
    /// `is_negative_hits`.
    pub negative: bool,
}

/// A `RateLimitRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// `domain`.
    pub domain: String,
    /// `descriptors`.
    pub descriptors: Vec<Descriptor>,
    /// `hits_addend`.
    pub hits_addend: u32,
}

/// What the reference answers instead of a response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A `serviceError` (the gRPC status `UNKNOWN` with this message).
    Service(String),
    /// A `RedisError` (here: `INCRBY` refused an increment).
    Redis(String),
    /// A panic no handler recovers: the process exits.
    Crash(String),
}

/// The settings that shape answers.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (default false).
    pub stop_increment_when_over_limit: bool,
    /// `NEAR_LIMIT_RATIO` (default 0.8).
    pub near_limit_ratio: f32,
    /// `SHADOW_MODE`.
    pub global_shadow_mode: bool,
    /// `QUOTA_MODE`.
    pub global_quota_mode: bool,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`, with `LIMIT_LIMIT_HEADER`,
    /// `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`.
    pub headers: Option<(String, String, String)>,
    /// `CACHE_KEY_PREFIX`.
    pub cache_key_prefix: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            stop_increment_when_over_limit: false,
            near_limit_ratio: 0.8,
            global_shadow_mode: false,
            global_quota_mode: false,
            headers: None,
            cache_key_prefix: String::new(),
        }
    }
}

/// A limit's statistics (`stats.RateLimitStats`), by its key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// `total_hits`.
    pub total_hits: u64,
    /// `over_limit`.
    pub over_limit: u64,
    /// `near_limit`.
    pub near_limit: u64,
    /// `within_limit`.
    pub within_limit: u64,
    /// `shadow_mode`.
    pub shadow_mode: u64,
    /// `total_negative_hits`.
    pub total_negative_hits: u64,
}

/// Who a Redis counter belongs to: the entries it was made of (values
/// replaced by shared patterns), the unit, and whether an override or a
/// configured rule (its path) counts in it.
type Owner = (Vec<(String, String)>, i32, Option<String>);

/// The service: its configuration, settings and Redis.
#[derive(Clone, Debug)]
pub struct Service {
    /// The configuration.
    pub config: Config,
    /// The settings.
    pub settings: Settings,
    /// Redis: cache key to count.
    pub redis: HashMap<String, i64>,
    /// Statistics by stats key.
    pub stats: HashMap<String, Stats>,
    /// The first owner of each cache key, and every key that two owners
    /// share (a counter the reference shares between different limits or
    /// different entries: see [`Service::shared_keys`]).
    owners: HashMap<String, Owner>,
    shared: Vec<String>,
    texts: Vec<String>,
}

impl Service {
    /// A service on `config`.
    pub fn new(config: Config, settings: Settings) -> Self {
        Service {
            config,
            settings,
            redis: HashMap::new(),
            stats: HashMap::new(),
            owners: HashMap::new(),
            shared: Vec::new(),
            texts: Vec::new(),
        }
    }

    /// Counters the reference's `DecrementScript` left as text no later
    /// `INCRBY` takes: a count of 10¹⁴ or more after a decrement, which Lua
    /// 5.1 (Redis's) writes as `%.14g` (`1e+14`), so every later increment
    /// of the key fails with `ERR value is not an integer or out of range`.
    /// Empty unless a request met that case (where the model stops being
    /// exact: its count is kept as an integer).
    pub fn text_keys(&self) -> &[String] {
        &self.texts
    }

    /// Cache keys the reference shared between different owners (different
    /// entries joined into the same text, or an override and a rule, or
    /// two units, whose windows start at the same second): empty unless a
    /// request met one of those documented collisions.
    pub fn shared_keys(&self) -> &[String] {
        &self.shared
    }

    /// `ShouldRateLimit` at `now` (Unix seconds).
    pub fn should_rate_limit(&mut self, req: &Request, now: i64) -> Result<Response, Failure> {
        check_request(req)?;
        let (limits, unlimited) = self.limits_to_check(req);
        let statuses = self.do_limit(req, &limits, now)?;
        let mut response = Response {
            overall_code: Code::Ok,
            statuses: Vec::with_capacity(req.descriptors.len()),
            headers: Vec::new(),
        };
        let mut min_remaining = u32::MAX;
        let mut minimum: Option<usize> = None;
        let (mut failed_rate, mut failed_quota, mut total_quota) = (0, 0, 0);
        for (i, s) in statuses.iter().enumerate() {
            if self.settings.headers.is_some()
                && s.current_limit.is_some()
                && s.limit_remaining < min_remaining
            {
                minimum = Some(i);
                min_remaining = s.limit_remaining;
            }
            if unlimited[i] {
                response.statuses.push(Status {
                    code: Code::Ok,
                    current_limit: None,
                    limit_remaining: u32::MAX,
                    duration_until_reset: None,
                });
                continue;
            }
            response.statuses.push(s.clone());
            let quota =
                self.settings.global_quota_mode || limits[i].as_ref().is_some_and(|l| l.quota_mode);
            if s.code == Code::OverLimit {
                if quota {
                    failed_quota += 1;
                } else {
                    failed_rate += 1;
                    minimum = Some(i);
                    min_remaining = 0;
                }
            }
            if quota {
                total_quota += 1;
            }
        }
        if failed_rate > 0 || (total_quota > 0 && total_quota == failed_quota) {
            response.overall_code = Code::OverLimit;
        }
        if let (Some(names), Some(i)) = (&self.settings.headers, minimum) {
            response.headers = headers(names, &statuses[i], now);
        }
        if response.overall_code == Code::OverLimit && self.settings.global_shadow_mode {
            response.overall_code = Code::Ok;
        }
        Ok(response)
    }

    /// `constructLimitsToCheck`: each descriptor's limit (none when
    /// unlimited or replaced), and which are unlimited.
    fn limits_to_check(&self, req: &Request) -> (Vec<Option<Limit>>, Vec<bool>) {
        let mut limits = Vec::with_capacity(req.descriptors.len());
        let mut unlimited = vec![false; req.descriptors.len()];
        let mut replacing: Vec<String> = Vec::new();
        for (i, d) in req.descriptors.iter().enumerate() {
            let mut limit = self.get_limit(&req.domain, d);
            if let Some(l) = &limit {
                replacing.extend(l.replaces.iter().cloned());
                if l.unlimited {
                    unlimited[i] = true;
                    limit = None;
                }
            }
            limits.push(limit);
        }
        for l in &mut limits {
            if l.as_ref()
                .is_some_and(|l| !l.name.is_empty() && replacing.contains(&l.name))
            {
                *l = None;
            }
        }
        (limits, unlimited)
    }

    /// `GetLimit`.
    fn get_limit(&self, domain: &str, d: &Descriptor) -> Option<Limit> {
        if !self.config.has_domain(domain) {
            return None;
        }
        if let Some((rpu, unit)) = d.limit {
            return Some(Limit {
                full_key: descriptor_key(domain, d),
                requests_per_unit: rpu,
                unit,
                name: String::new(),
                unlimited: false,
                shadow_mode: false,
                quota_mode: false,
                replaces: Vec::new(),
                share_threshold: Vec::new(),
            });
        }
        self.config.get_limit(domain, &d.entries)
    }

    /// `GenerateCacheKey`; `None` for no limit.
    fn cache_key(
        &mut self,
        domain: &str,
        d: &Descriptor,
        limit: &Limit,
        now: i64,
    ) -> Result<String, Failure> {
        let divider = unit_seconds(limit.unit).ok_or_else(|| {
            Failure::Crash(format!(
                "UnitToDivider: unit {} (should not get here)",
                limit.unit
            ))
        })?;
        let mut key = format!("{}{}_", self.settings.cache_key_prefix, domain);
        let mut owned = Vec::with_capacity(d.entries.len());
        for (i, (k, v)) in d.entries.iter().enumerate() {
            let v = limit
                .share_threshold
                .get(i)
                .and_then(Option::as_ref)
                .unwrap_or(v);
            key.push_str(k);
            key.push('_');
            key.push_str(v);
            key.push('_');
            owned.push((k.clone(), v.clone()));
        }
        key.push_str(&((now / divider) * divider).to_string());
        let owner: Owner = (
            owned,
            limit.unit,
            d.limit.is_none().then(|| limit.full_key.clone()),
        );
        match self.owners.get(&key) {
            Some(first) if *first != owner => {
                if !self.shared.contains(&key) {
                    self.shared.push(key.clone());
                }
            }
            Some(_) => {}
            None => {
                self.owners.insert(key.clone(), owner);
            }
        }
        Ok(key)
    }

    /// `INCRBY key n`: Redis's 64-bit signed arithmetic.
    fn incrby(&mut self, key: &str, n: u64) -> Result<i64, Failure> {
        let n = i64::try_from(n)
            .map_err(|_| Failure::Redis("ERR value is not an integer or out of range".into()))?;
        let c = self.redis.entry(key.to_owned()).or_insert(0);
        *c = c
            .checked_add(n)
            .ok_or_else(|| Failure::Redis("ERR increment or decrement would overflow".into()))?;
        Ok(*c)
    }

    /// `DoLimit` (`fixed_cache_impl.go`, no local cache) and
    /// `GetResponseDescriptorStatus`.
    fn do_limit(
        &mut self,
        req: &Request,
        limits: &[Option<Limit>],
        now: i64,
    ) -> Result<Vec<Status>, Failure> {
        // GetHitsAddends.
        let hits: Vec<u64> = req
            .descriptors
            .iter()
            .map(|d| d.hits_addend.unwrap_or(u64::from(req.hits_addend).max(1)))
            .collect();
        let negative: Vec<bool> = req.descriptors.iter().map(|d| d.negative).collect();
        let keys = self.cache_keys(req, limits, &hits, now)?;
        // With STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: the keys this
        // request would take over their limit (read before incrementing;
        // negative hits are not read).
        let stop = self.settings.stop_increment_when_over_limit;
        let near = if stop {
            self.over_after(&keys, limits, &hits, &negative)
        } else {
            vec![false; limits.len()]
        };
        // What each key takes: every hit, unless some key goes over
        // while increments stop there (then only those keys' hits);
        // negative hits always decrement.
        let any_near = near.contains(&true);
        let adds: Vec<u64> = (0..limits.len())
            .map(|i| {
                let all = !stop || !any_near || near[i] || negative[i];
                if all { hits[i] } else { 0 }
            })
            .collect();
        let after = self.pipeline(&keys, &adds, &negative)?;
        let mut out = Vec::with_capacity(limits.len());
        for i in 0..limits.len() {
            let Some(l) = &limits[i] else {
                out.push(Status {
                    code: Code::Ok,
                    current_limit: None,
                    limit_remaining: 0,
                    duration_until_reset: None,
                });
                continue;
            };
            out.push(if negative[i] {
                negative_status(l, after[i], now)
            } else {
                self.status(l, after[i], hits[i], now)
            });
        }
        Ok(out)
    }

    /// The pipeline: `INCRBY` each key by `adds`, or the decrement script
    /// for negative hits, in order; the counts after, or the first error
    /// once the pipeline ran.
    fn pipeline(
        &mut self,
        keys: &[Option<String>],
        adds: &[u64],
        negative: &[bool],
    ) -> Result<Vec<u64>, Failure> {
        let mut after = vec![0u64; keys.len()];
        let mut failure = None;
        for (i, k) in keys.iter().enumerate() {
            let Some(k) = k else { continue };
            if negative[i] {
                after[i] = self.decrement(k, adds[i]);
                continue;
            }
            match self.incrby(k, adds[i]) {
                Ok(c) => after[i] = c as u64,
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        failure.map_or(Ok(after), Err)
    }

    /// `DecrementScript` on `key`: nothing for a key Redis does not hold
    /// (no key made), else the count less `hits`, floored at 0 (the Lua
    /// arithmetic is in doubles: exact below 2⁵³). The count after.
    fn decrement(&mut self, key: &str, hits: u64) -> u64 {
        let Some(c) = self.redis.get_mut(key) else {
            return 0;
        };
        let after = (i128::from(*c) - i128::from(hits)).max(0) as i64;
        *c = after;
        if after >= 100_000_000_000_000 && !self.texts.iter().any(|k| k == key) {
            self.texts.push(key.to_owned());
        }
        after as u64
    }

    /// `GenerateCacheKeys`: each limited descriptor's cache key, adding
    /// its hits to its limit's total.
    fn cache_keys(
        &mut self,
        req: &Request,
        limits: &[Option<Limit>],
        hits: &[u64],
        now: i64,
    ) -> Result<Vec<Option<String>>, Failure> {
        let mut keys: Vec<Option<String>> = Vec::with_capacity(limits.len());
        for (i, (d, l)) in req.descriptors.iter().zip(limits).enumerate() {
            match l {
                Some(l) => {
                    keys.push(Some(self.cache_key(&req.domain, d, l, now)?));
                    if d.negative {
                        self.stat(l).total_negative_hits += hits[i];
                    } else {
                        self.stat(l).total_hits += hits[i];
                    }
                }
                None => keys.push(None),
            }
        }
        Ok(keys)
    }

    /// Which keys the request's hits would take over their limit, read
    /// before incrementing.
    fn over_after(
        &self,
        keys: &[Option<String>],
        limits: &[Option<Limit>],
        hits: &[u64],
        negative: &[bool],
    ) -> Vec<bool> {
        let mut near = vec![false; limits.len()];
        for i in 0..limits.len() {
            if negative[i] {
                continue;
            }
            if let (Some(k), Some(l)) = (&keys[i], &limits[i]) {
                let before = self.redis.get(k).copied().unwrap_or(0) as u64;
                near[i] = before.wrapping_add(hits[i]) > u64::from(l.requests_per_unit);
            }
        }
        near
    }

    /// The statistics of limit `l`.
    fn stat(&mut self, l: &Limit) -> &mut Stats {
        self.stats.entry(l.full_key.clone()).or_default()
    }

    /// `GetResponseDescriptorStatus` with the counter after the increment.
    fn status(&mut self, l: &Limit, after: u64, hits: u64, now: i64) -> Status {
        let before = after.wrapping_sub(hits);
        let over_threshold = u64::from(l.requests_per_unit);
        let near_threshold =
            f64::from(over_threshold as f32 * self.settings.near_limit_ratio).floor() as u64;
        let secs = unit_seconds(l.unit).expect("a cache key was made");
        let limit = RateLimitMsg {
            requests_per_unit: l.requests_per_unit,
            unit: l.unit,
            name: l.name.clone(),
        };
        let reset = Some(secs - now % secs);
        let mut status;
        let over = after > over_threshold;
        let stats = *self.stat(l);
        let mut st = stats;
        if over {
            status = Status {
                code: Code::OverLimit,
                current_limit: Some(limit),
                limit_remaining: 0,
                duration_until_reset: reset,
            };
            if before >= over_threshold {
                st.over_limit += hits;
            } else {
                st.over_limit += after - over_threshold;
                st.near_limit += over_threshold - near_threshold.max(before);
            }
        } else {
            status = Status {
                code: Code::Ok,
                current_limit: Some(limit),
                limit_remaining: (over_threshold - after) as u32,
                duration_until_reset: reset,
            };
            if after > near_threshold {
                if before >= near_threshold {
                    st.near_limit += hits;
                } else {
                    st.near_limit += after - near_threshold;
                }
            }
            st.within_limit += hits;
        }
        if over && l.shadow_mode {
            status.code = Code::Ok;
            if before >= over_threshold {
                st.shadow_mode += hits;
            } else {
                st.shadow_mode += after - over_threshold;
            }
        }
        *self.stat(l) = st;
        status
    }
}

/// `GetResponseDescriptorStatusForNegativeHits` with the counter after the
/// decrement: OK, with what remains of the limit (0 when the count is still
/// above it), whatever the shadow mode; no statistic but
/// `total_negative_hits`.
fn negative_status(l: &Limit, after: u64, now: i64) -> Status {
    let secs = unit_seconds(l.unit).expect("a cache key was made");
    Status {
        code: Code::Ok,
        current_limit: Some(RateLimitMsg {
            requests_per_unit: l.requests_per_unit,
            unit: l.unit,
            name: l.name.clone(),
        }),
        limit_remaining: u64::from(l.requests_per_unit).saturating_sub(after) as u32,
        duration_until_reset: Some(secs - now % secs),
    }
}

/// `descriptorKey`: an override's stats key.
fn descriptor_key(domain: &str, d: &Descriptor) -> String {
    let mut key = String::new();
    for (k, v) in &d.entries {
        if !key.is_empty() {
            key.push('.');
        }
        key.push_str(k);
        if !v.is_empty() {
            key.push('_');
            key.push_str(v);
        }
    }
    format!("{domain}.{key}")
}

/// The request checks of `ShouldRateLimit`: a domain and descriptors.
fn check_request(req: &Request) -> Result<(), Failure> {
    if req.domain.is_empty() {
        return Err(Failure::Service(
            "rate limit domain must not be empty".into(),
        ));
    }
    if req.descriptors.is_empty() {
        return Err(Failure::Service(
            "rate limit descriptor list must not be empty".into(),
        ));
    }
    Ok(())
}

/// The rate-limit headers (named `limit`, `remaining`, `reset`) of the
/// status `s` that decides them, at `now`.
fn headers(
    (limit, remaining, reset): &(String, String, String),
    s: &Status,
    now: i64,
) -> Vec<(String, String)> {
    let cl = s.current_limit.as_ref().expect("a limit");
    let secs = unit_seconds(cl.unit).expect("a configured unit");
    vec![
        (limit.clone(), cl.requests_per_unit.to_string()),
        (remaining.clone(), s.limit_remaining.to_string()),
        (reset.clone(), (secs - now % secs).to_string()),
    ]
}
