//! [`RedisBackend`]: [`Backend`] on Redis, one script call per decision
//! (per hash slot on a cluster).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floodgate::{Apply, Decision, Outcome, Timestamp};
use floodgate_policy::{Backend, BackendError, Item, Permit, Released};
use futures_util::future::try_join_all;
use redis::{Cmd, Value};

use crate::batch::{Call, CallArgs, Plan};
use crate::cache::OverLimitCache;
use crate::encode::permit_arg;
use crate::error::{is_memory_full, map_error};
use crate::keys::KeyLayout;
use crate::pool::{Pool, PoolError};
use crate::script::{DECIDE, DECIDE_READ_ONLY, RELEASE, Script};
use crate::stats::RedisStats;
use crate::{ConfigError, MemoryPolicy, Mode, RedisConfig, TimeSource, UnsupportedLimit, reply};

/// Rate limiting state in Redis (a single server, a Sentinel-managed
/// primary or a cluster).
///
/// Every decision is one atomic Lua script call (`EVALSHA`, re-sent as
/// `EVAL` after `NOSCRIPT`) over all the batch's keys of one hash slot, with
/// exactly the in-memory algorithms' semantics. Items of one group always
/// share a slot; a batch over several slots is decided in two phases (see
/// `docs/redis.md`). Every call is bounded by the configured timeout.
pub struct RedisBackend {
    /// The connections.
    pool: Pool,
    /// How counters' keys are laid out.
    layout: KeyLayout,
    /// The decision script.
    decide: Script,
    /// The decision script for dry runs (runs on a full server).
    read_only: Script,
    /// The script giving concurrency permits back.
    release: Script,
    /// Redis is a cluster.
    cluster: bool,
    /// How long a call may take.
    timeout: Duration,
    /// Whose clock decisions use.
    time: TimeSource,
    /// The expiry argument of every script call (see [`CallArgs::slack`]).
    slack: String,
    /// Concurrency permits' lease in ms (0: none).
    lease_ms: u64,
    /// Denials known ahead, answered without Redis (when configured).
    cache: Option<OverLimitCache>,
    /// Calls, errors and timeouts, for metrics.
    stats: Arc<RedisStats>,
    /// The start of the over-limit cache's monotonic clock.
    epoch: Instant,
    /// With [`TimeSource::Server`]: Redis's clock minus the cache clock
    /// (`epoch`'s), in ns, as of the last decision Redis made (wrapping; 0:
    /// none yet, and should it ever be the offset, the wall clock is as
    /// good an estimate). Dates the decisions the over-limit cache answers.
    server_offset: AtomicU64,
    /// The last call reached Redis (or none failed yet).
    ready: AtomicBool,
}

/// Why [`RedisBackend::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The servers could not be reached.
    #[error("cannot connect to Redis: {0}")]
    Connect(BackendError),
}

/// A failed decision: a limit Redis cannot decide, or a backend failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecideError {
    /// A limit the scripts cannot decide: a configuration error.
    Unsupported(UnsupportedLimit),
    /// Redis failed or could not be reached.
    Backend(BackendError),
}

impl From<DecideError> for BackendError {
    fn from(e: DecideError) -> Self {
        match e {
            DecideError::Unsupported(u) => u.into(),
            DecideError::Backend(b) => b,
        }
    }
}

/// The decision of an item that was not evaluated (a batch answered from
/// the over-limit cache because another item is known to be denied).
pub(crate) fn unevaluated(quota: u64) -> Decision {
    Decision {
        outcome: Outcome::Allowed,
        limit: quota,
        remaining: quota,
        reset_after: Duration::ZERO,
        retry_after: None,
    }
}

/// The second phase of a batch over several slot groups, once every
/// group was peeked at: `apply` if `all` admit it, its rejected (or forced)
/// form otherwise; the dry forms for a check.
fn second_phase(all: bool, apply: Apply) -> Call {
    match (all, apply) {
        (true, Apply::Check) => Call::DryCommit,
        (false, Apply::Check) => Call::DryRejected,
        (true, a) => Call::of(a),
        (false, Apply::Force) => Call::Force,
        (false, _) => Call::Rejected,
    }
}

impl RedisBackend {
    /// Connects to the servers of `config` (failing if they cannot be
    /// reached) and returns the backend.
    pub async fn connect(config: &RedisConfig) -> Result<Self, ConnectError> {
        Self::build(config, false).await
    }

    /// Builds the backend without dialling: connections are made on first
    /// use (decisions fail until Redis answers), so an application can
    /// start while Redis is down.
    pub async fn connect_lazy(config: &RedisConfig) -> Result<Self, ConnectError> {
        Self::build(config, true).await
    }

    /// Checks `config` and opens the pool (`lazy`: dialled on first use),
    /// giving up after a few connection rounds' time.
    async fn build(config: &RedisConfig, lazy: bool) -> Result<Self, ConnectError> {
        config.check()?;
        // Sentinel takes two exchanges more: the sentinels, then `ROLE`.
        let rounds = match config.mode {
            Mode::Sentinel { .. } => 8,
            _ => 4,
        };
        let stats = Arc::new(RedisStats::default());
        let pool = tokio::time::timeout(
            config
                .connect_timeout
                .max(config.timeout)
                .saturating_mul(rounds),
            Pool::open(config, lazy, stats.clone()),
        )
        .await
        .map_err(|_| ConnectError::Connect(BackendError::Timeout(config.connect_timeout)))?
        .map_err(|e| match e {
            PoolError::Config(c) => ConnectError::Config(c),
            PoolError::Connect(e) => ConnectError::Connect(map_error(&e, config.timeout)),
        })?;
        let slack = match config.time_source {
            TimeSource::Server => String::new(),
            // Capped so that the script's expiry arithmetic stays exact.
            TimeSource::Client { expiry_slack } => {
                expiry_slack.as_millis().min(1 << 40).to_string()
            }
        };
        Ok(RedisBackend {
            pool,
            layout: KeyLayout::new(&config.key_prefix),
            decide: Script::new(DECIDE),
            read_only: Script::new(DECIDE_READ_ONLY),
            release: Script::new(RELEASE),
            cluster: config.mode == Mode::Cluster,
            timeout: config.timeout,
            time: config.time_source,
            slack,
            // Capped (about 35 years) so that every lease's end stays exact
            // in the scripts.
            lease_ms: config
                .concurrency_lease
                .map_or(0, |d| d.as_millis().clamp(1, 1 << 40) as u64),
            cache: (config.local_cache_capacity > 0)
                .then(|| OverLimitCache::new(config.local_cache_capacity)),
            stats,
            epoch: Instant::now(),
            server_offset: AtomicU64::new(0),
            ready: AtomicBool::new(true),
        })
    }

    /// The counters.
    pub fn stats(&self) -> &RedisStats {
        &self.stats
    }

    /// The Redis key holding `item`'s state (for operations and tests).
    pub fn state_key(&self, item: &Item<'_>) -> Vec<u8> {
        self.layout.key(item.group, item.key).name
    }

    /// The decision script's source and SHA-1 (e.g. to preload it with
    /// `SCRIPT LOAD`, or to benchmark it).
    pub fn decide_script(&self) -> (&'static str, &str) {
        (self.decide.code(), self.decide.sha())
    }

    /// As [`Backend::decide`], also returning the time the decision was
    /// made at: the Redis server's clock (µs precision) with
    /// [`TimeSource::Server`], `now` otherwise. On a cluster batch spanning
    /// several slots, the latest of the nodes' clocks.
    ///
    /// A decision answered by the over-limit cache (no call to Redis) is
    /// dated, with [`TimeSource::Server`], by an estimate of Redis's clock:
    /// the time of the last decision Redis made (on any key) plus the time
    /// elapsed since that request was sent, on this process's monotonic
    /// clock (ns precision). It runs ahead of Redis's clock by at most the
    /// time that request took to reach Redis (plus the two clocks' drift
    /// since), and with the denial it dates, it names the instant Redis
    /// gave: `at + retry_after` is the denial's own. Should no decision
    /// have come from Redis yet, which the cache needs first, this
    /// process's wall clock is used.
    pub async fn decide_timed(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Result<(Decision, Timestamp), BackendError> {
        self.decide_inner(items, now, apply, out)
            .await
            .map_err(Into::into)
    }

    /// [`decide_timed`](Self::decide_timed), telling a limit Redis cannot
    /// decide ([`DecideError::Unsupported`]) from a failure to reach it.
    pub(crate) async fn decide_inner(
        &self,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Result<(Decision, Timestamp), DecideError> {
        let plan = self.plan(items, out)?;
        if let Some(hit) = self.cached_timed(&plan, items, now, apply, out) {
            return Ok(hit);
        }
        self.remote(&plan, items, now, apply, out)
            .await
            .map_err(DecideError::Backend)
    }

    /// Validates and merges a batch.
    pub(crate) fn plan(&self, items: &[Item<'_>], out: &[Decision]) -> Result<Plan, DecideError> {
        if items.is_empty() || out.len() < items.len() {
            return Err(DecideError::Backend(BackendError::Protocol(format!(
                "a batch needs at least one item and as many outputs ({} items, {} outputs)",
                items.len(),
                out.len()
            ))));
        }
        Plan::new(items, &self.layout).map_err(DecideError::Unsupported)
    }

    /// The batch's answer from the over-limit cache, if one of its keys is
    /// known to be denied and answering here changes nothing Redis would
    /// decide later: the denied keys' entries say it for them (see
    /// `cache::skipping_is_harmless`), and every other key must be one that
    /// a request denied by another limit leaves as it is (no penalty, no
    /// block). Forced charges always go to Redis.
    pub(crate) fn cached(
        &self,
        plan: &Plan,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Option<Decision> {
        self.cached_timed(plan, items, now, apply, out)
            .map(|(d, _)| d)
    }

    /// As [`cached`](Self::cached), with the time the decision is dated at
    /// (see [`decide_timed`](Self::decide_timed)).
    fn cached_timed(
        &self,
        plan: &Plan,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Option<(Decision, Timestamp)> {
        // A refund must reach Redis: it changes the count whatever it is.
        let cache = self
            .cache
            .as_ref()
            .filter(|_| !matches!(apply, Apply::Force | Apply::Refund))?;
        let t = self.cache_clock(now);
        let hits: Vec<Option<Decision>> = plan
            .leads
            .iter()
            .map(|l| cache.get(items[l.item].key, items[l.item].limit, l.cost, t))
            .collect();
        if hits.iter().all(Option::is_none) {
            return None;
        }
        let rest_unchanged = plan
            .leads
            .iter()
            .zip(&hits)
            .all(|(l, hit)| hit.is_some() || !l.acts_when_rejected());
        if !rest_unchanged {
            return None;
        }
        let mut combined: Option<Decision> = None;
        for (i, &lead) in plan.lead_of.iter().enumerate() {
            let d = hits[lead].unwrap_or_else(|| unevaluated(plan.leads[lead].params.quota()));
            out[i] = d;
            combined = Some(combined.map_or(d, |c| c.narrowest(d)));
        }
        self.stats.decisions.inc();
        self.stats.cache_hits.inc();
        let at = match self.time {
            TimeSource::Server => self.server_clock(t),
            TimeSource::Client { .. } => now,
        };
        combined.map(|d| (d, at))
    }

    /// The batch decided by Redis, within the timeout.
    pub(crate) async fn remote(
        &self,
        plan: &Plan,
        items: &[Item<'_>],
        now: Timestamp,
        apply: Apply,
        out: &mut [Decision],
    ) -> Result<(Decision, Timestamp), BackendError> {
        let sent = self.cache_clock(now);
        let run = tokio::time::timeout(self.timeout, self.run(plan, now, apply)).await;
        let (decided, now_us) = match run {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => return Err(self.failed(e)),
            Err(_) => return Err(self.failed(BackendError::Timeout(self.timeout))),
        };
        self.ready.store(true, Ordering::Relaxed);
        self.stats.decisions.inc();
        let mut combined: Option<Decision> = None;
        for (i, &d) in decided.iter().enumerate() {
            out[i] = d;
            combined = Some(combined.map_or(d, |c| c.narrowest(d)));
        }
        if let Some(cache) = self.cache.as_ref().filter(|_| apply == Apply::Refund) {
            // Units given back: a denial remembered here may not hold.
            for l in &plan.leads {
                cache.forget(items[l.item].key);
            }
        } else if let Some(cache) = self.cache.as_ref().filter(|_| apply != Apply::Force) {
            let charged = apply != Apply::Check;
            for l in &plan.leads {
                let item = &items[l.item];
                // A key's last item reports what all of them leave.
                let last = l.members.last().map_or(l.item, |&(i, _)| i);
                if cache.insert(item.key, item.limit, l.cost, sent, &decided[last], charged) {
                    self.stats.cache_inserts.inc();
                }
            }
        }
        let at = match self.time {
            TimeSource::Server if self.cache.is_some() => {
                let at = Timestamp::from_micros(now_us);
                // Paired with the instant the request left: an entry made
                // from this decision expires at `sent + retry_after` on the
                // cache clock, which the estimate turns into `at +
                // retry_after` (Redis read its clock later: the estimate
                // runs ahead by at most the request's way there).
                self.server_offset
                    .store(at.as_nanos().wrapping_sub(sent), Ordering::Relaxed);
                at
            }
            // Without the cache nothing is dated by the estimate.
            TimeSource::Server => Timestamp::from_micros(now_us),
            TimeSource::Client { .. } => now,
        };
        // `items` is not empty, so neither is the combination.
        Ok((combined.unwrap_or(decided[0]), at))
    }

    /// Runs a call of `script` (the lease and sync scripts), within the
    /// timeout; a failure counts as any decision's does.
    pub(crate) async fn run_script(
        &self,
        script: &Script,
        cmd: &Cmd,
    ) -> Result<Value, BackendError> {
        let run = tokio::time::timeout(self.timeout, script.run(&self.pool, cmd, &self.stats));
        match run.await {
            Ok(Ok(v)) => {
                self.ready.store(true, Ordering::Relaxed);
                Ok(v)
            }
            Ok(Err(e)) => Err(self.failed(map_error(&e, self.timeout))),
            Err(_) => Err(self.failed(BackendError::Timeout(self.timeout))),
        }
    }

    /// The `now` argument of a script call: the caller's time in µs, or
    /// `""` for the server's clock.
    pub(crate) fn now_arg(&self, now: Timestamp) -> String {
        match self.time {
            TimeSource::Server => String::new(),
            TimeSource::Client { .. } => now.as_micros().to_string(),
        }
    }

    /// The expiry argument of a script call (see [`CallArgs::slack`]).
    pub(crate) fn slack(&self) -> &str {
        &self.slack
    }

    /// Concurrency permits' lease in ms (0: none).
    pub(crate) fn permit_lease_ms(&self) -> u64 {
        self.lease_ms
    }

    /// How counters' keys are laid out in Redis.
    pub(crate) fn layout(&self) -> &KeyLayout {
        &self.layout
    }

    /// Whether Redis is a cluster (keys of a batch may be in several slots).
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// How long a call to Redis may take.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether decisions use the caller's time.
    pub(crate) fn client_time(&self) -> bool {
        matches!(self.time, TimeSource::Client { .. })
    }

    /// Counts the failure `e` and, unless Redis answered (a protocol error,
    /// a full server), marks the backend not ready and the pool's
    /// connections suspect; returns `e`.
    fn failed(&self, e: BackendError) -> BackendError {
        self.stats.errors.inc();
        if matches!(e, BackendError::Timeout(_)) {
            self.stats.timeouts.inc();
        }
        // A full server still answers: its connections are sound.
        if !matches!(e, BackendError::Protocol(_)) && !is_memory_full(&e) {
            self.ready.store(false, Ordering::Relaxed);
            self.pool.suspect();
        }
        e
    }

    /// Nanoseconds on the over-limit cache's clock: the caller's time when
    /// decisions use it, otherwise this process's monotonic clock.
    fn cache_clock(&self, now: Timestamp) -> u64 {
        match self.time {
            TimeSource::Client { .. } => now.as_nanos(),
            TimeSource::Server => {
                u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
            }
        }
    }

    /// An estimate of Redis's clock at `t` on the cache clock (see
    /// [`decide_timed`](Self::decide_timed)).
    fn server_clock(&self, t: u64) -> Timestamp {
        match self.server_offset.load(Ordering::Relaxed) {
            0 => Timestamp::from_nanos(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            ),
            offset => Timestamp::from_nanos(t.wrapping_add(offset)),
        }
    }

    /// Decides the plan: one call per slot group; several groups in two
    /// phases. Returns the decisions per item and the decision time (µs).
    async fn run(
        &self,
        plan: &Plan,
        now: Timestamp,
        apply: Apply,
    ) -> Result<(Vec<Decision>, u64), BackendError> {
        let now_arg = match self.time {
            TimeSource::Server => String::new(),
            TimeSource::Client { .. } => now.as_micros().to_string(),
        };
        let args = CallArgs {
            now: &now_arg,
            slack: &self.slack,
            lease: self.lease_ms,
        };
        let groups = plan.groups(self.cluster);
        let mut decided = vec![unevaluated(0); plan.items()];
        let mut latest = 0;
        let mut keep = |group: &[usize], (ds, now_us): (Vec<Decision>, u64)| {
            for (i, d) in plan.answered(group).zip(ds) {
                decided[i] = d;
            }
            latest = latest.max(now_us);
        };
        // Refunds, like rejections, need no check across groups: each key
        // gives its units back whatever the others do.
        if groups.len() == 1 || matches!(apply, Apply::Rejected | Apply::Refund) {
            let call = Call::of(apply);
            let all = try_join_all(groups.iter().map(|g| self.call(plan, g, call, &args))).await?;
            for (g, r) in groups.iter().zip(all) {
                keep(g, r);
            }
            return Ok((decided, latest));
        }
        self.stats.cross_slot.inc();
        let phase1 =
            try_join_all(groups.iter().map(|g| self.call(plan, g, Call::Peek, &args))).await?;
        let all = phase1
            .iter()
            .all(|(ds, _)| ds.iter().all(Decision::is_allowed));
        for (g, r) in groups.iter().zip(phase1) {
            keep(g, r);
        }
        let second = second_phase(all, apply);
        // A rejected group without penalty-mode or blocking limits would
        // change nothing and decide as its check did.
        let todo: Vec<&Vec<usize>> = groups
            .iter()
            .filter(|g| {
                second != Call::Rejected || g.iter().any(|&i| plan.leads[i].acts_when_rejected())
            })
            .collect();
        let phase2 = try_join_all(todo.iter().map(|g| self.call(plan, g, second, &args))).await?;
        for (g, r) in todo.into_iter().zip(phase2) {
            keep(g, r);
        }
        Ok((decided, latest))
    }

    /// Runs one group's script as `call`; its decisions (per answered item)
    /// and the decision time (µs).
    async fn call(
        &self,
        plan: &Plan,
        group: &[usize],
        call: Call,
        args: &CallArgs<'_>,
    ) -> Result<(Vec<Decision>, u64), BackendError> {
        // Dry runs only read: the read-only script, which a full server
        // still runs.
        let script = match call {
            Call::DryCommit | Call::DryRejected => &self.read_only,
            _ => &self.decide,
        };
        let cmd = plan.command(script, group, call, args);
        let value = script
            .run(&self.pool, &cmd, &self.stats)
            .await
            .map_err(|e| map_error(&e, self.timeout))?;
        let r = reply::parse(value, plan.answered(group).count())?;
        if r.expired > 0 {
            self.stats.lease_expired.add(r.expired);
        }
        if r.resets > 0 {
            self.stats.state_resets.add(r.resets);
        }
        Ok((r.decisions, r.now_us))
    }

    /// The server's `maxmemory-policy` and `maxmemory` (`CONFIG GET`,
    /// within the decision timeout), and whether they can evict counters:
    /// see [`MemoryPolicy`]. With a cluster, the node that answers speaks
    /// for all.
    pub async fn memory_policy(&self) -> MemoryPolicy {
        let mut cmd = redis::cmd("CONFIG");
        // One pattern, which every version reads (several names in one
        // `CONFIG GET` need Redis 7).
        cmd.arg("GET").arg("maxmemory*");
        let value = match tokio::time::timeout(self.timeout, self.pool.query(&cmd)).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return MemoryPolicy::Unknown(e.to_string()),
            Err(_) => return MemoryPolicy::Unknown("no answer within the timeout".into()),
        };
        // A flat array of name, value (RESP2) or a map (RESP3).
        let shown = format!("unexpected reply {value:?}");
        let pairs: Result<std::collections::HashMap<String, String>, _> =
            redis::from_redis_value(value);
        let pairs = pairs.unwrap_or_default();
        let maxmemory = pairs.get("maxmemory").and_then(|m| m.trim().parse().ok());
        match (pairs.get("maxmemory-policy"), maxmemory) {
            (Some(policy), Some(max)) => MemoryPolicy::of(policy, max),
            _ => MemoryPolicy::Unknown(shown),
        }
    }

    /// Whether the server answers on every connection (`PING`, within the
    /// decision timeout): after an outage, a connection that still holds
    /// its failure is made to connect again and must answer too.
    pub async fn ping(&self) -> Result<(), BackendError> {
        let cmd = redis::cmd("PING");
        match tokio::time::timeout(self.timeout, self.pool.query_every(&cmd)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                self.pool.suspect();
                Err(map_error(&e, self.timeout))
            }
            Err(_) => Err(BackendError::Timeout(self.timeout)),
        }
    }

    /// Gives back up to `units` of `item.permit` (see `lua/release.lua`),
    /// at `now` with client-supplied time.
    pub(crate) async fn release_inner(
        &self,
        item: Item<'_>,
        units: u64,
        now: Timestamp,
    ) -> Result<Released, BackendError> {
        if !item.limit.is_concurrency() {
            return Ok(Released::NotHeld);
        }
        if units == 0 {
            return Ok(Released::Given(0));
        }
        let given = self
            .release_key(&self.state_key(&item), units, item.permit, now)
            .await?;
        Ok(if given == 0 {
            Released::NotHeld
        } else {
            Released::Given(given)
        })
    }

    /// Gives back up to `units` of `permit` under the concurrency state
    /// `key` (a [`state_key`](Self::state_key)); the units given back (0:
    /// the key holds no such permit).
    pub(crate) async fn release_key(
        &self,
        key: &[u8],
        units: u64,
        permit: Permit,
        now: Timestamp,
    ) -> Result<u64, BackendError> {
        let now_arg = match self.time {
            TimeSource::Server => String::new(),
            TimeSource::Client { .. } => now.as_micros().to_string(),
        };
        let mut cmd = self.release.call(1);
        cmd.arg(key)
            .arg(units.min(1 << 52))
            .arg(permit_arg(permit))
            .arg(now_arg)
            .arg(&self.slack);
        let run = tokio::time::timeout(
            self.timeout,
            self.release.run(&self.pool, &cmd, &self.stats),
        );
        match run.await {
            Ok(Ok(Value::Int(given))) => Ok(u64::try_from(given).unwrap_or(0)),
            Ok(Ok(other)) => Err(self.failed(BackendError::Protocol(format!(
                "unexpected release reply: {other:?}"
            )))),
            Ok(Err(e)) => Err(self.failed(map_error(&e, self.timeout))),
            Err(_) => Err(self.failed(BackendError::Timeout(self.timeout))),
        }
    }
}

impl Backend for RedisBackend {
    #[allow(clippy::manual_async_fn)] // the trait requires the future to be `Send`
    fn decide<'a>(
        &'a self,
        items: &'a [Item<'a>],
        now: Timestamp,
        apply: Apply,
        out: &'a mut [Decision],
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send + 'a {
        async move {
            self.decide_timed(items, now, apply, out)
                .await
                .map(|(d, _)| d)
        }
    }

    fn release<'a>(
        &'a self,
        item: Item<'a>,
        units: u64,
        now: Timestamp,
    ) -> impl Future<Output = Result<Released, BackendError>> + Send + 'a {
        self.release_inner(item, units, now)
    }

    /// False after a decision failed for lack of Redis, until one succeeds.
    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    fn name(&self) -> &'static str {
        "redis"
    }
}
