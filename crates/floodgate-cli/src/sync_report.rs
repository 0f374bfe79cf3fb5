//! What `floodgate config check` says about the synchronisation modes of a
//! Redis store: for every rule decided in memory, its mode, and for `sync`
//! the worst case computed from the configuration (see `docs/redis.md`,
//! "Synchronisation modes").

use floodgate_policy::{PolicySet, SyncMode};
use floodgate_redis::FailurePolicy;

use floodgate_runtime::settings::{StoreKind, StoreSettings};

/// One line per limit decided in memory (none for the in-memory store, or
/// when every rule is exact).
pub(crate) fn sync_report(store: &StoreSettings, policy: &PolicySet) -> Vec<String> {
    if store.backend != StoreKind::Redis {
        return Vec::new();
    }
    let default = store.redis.sync;
    let instances = match (store.instances, store.redis.failure_policy) {
        (0, FailurePolicy::Local { divide_by }) if divide_by > 1 => divide_by,
        (n, _) => n,
    };
    let mut lines = Vec::new();
    for rule in policy.rules() {
        let mode = rule.sync.unwrap_or(default);
        for (i, l) in rule.limits().iter().enumerate() {
            if floodgate_redis::supports_mode(&l.limit, mode).is_err() || !mode.is_local() {
                continue;
            }
            let mut name = format!("rule '{}' of domain '{}'", rule.label(), rule.domain);
            if rule.limits().len() > 1 {
                name.push_str(&format!(", limit {i}"));
            }
            let line = match mode {
                SyncMode::Lease { duration } => {
                    format!("{name}: lease ({duration:?}): never admits past the limit")
                }
                SyncMode::Sync { interval } => {
                    let per = match l.limit.counting_window() {
                        Some(_) => "per window",
                        None => "over any span, past the burst plus the rate",
                    };
                    let worst =
                        floodgate_redis::over_admission(&l.limit, interval, rule.cost, instances);
                    match worst {
                        Some(w) if instances >= 1 => format!(
                            "{name}: sync (every {interval:?}): at most {} unit(s) past the limit {per} \
                             (the {} other instance(s) of {instances} × {} unit(s) slice, {:.1} % of {})",
                            w.units,
                            instances.saturating_sub(1),
                            w.slice.max(rule.cost),
                            w.units as f64 * 100.0 / w.quota.max(1) as f64,
                            w.quota
                        ),
                        Some(w) => format!(
                            "{name}: sync (every {interval:?}): at most (instances − 1) × {} unit(s) past \
                             the limit {per} (set store.sync.instances for the figure)",
                            w.slice.max(rule.cost)
                        ),
                        None => continue,
                    }
                }
                SyncMode::Exact => continue,
            };
            lines.push(line);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_redis::RedisConfig;

    fn policy_of(text: &str) -> PolicySet {
        let spec = floodgate_policy::read::load_str("f.yaml", text, &Default::default()).unwrap();
        PolicySet::compile(&spec).unwrap()
    }

    #[test]
    fn the_bound_of_every_synced_limit() {
        let policy = policy_of(
            "
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {name: per-user, requests: 1000, per: 1m}
      - key: login
        rate_limit: {name: login, requests: 5, per: 1m, sync: exact}
      - key: bucket
        rate_limit: {name: bucket, algorithm: token_bucket, requests: 100, per: 1s, burst: 50, sync: lease}
      - key: log
        rate_limit: {name: logged, algorithm: sliding_log, requests: 5, per: 1m}
",
        );
        let mut store = StoreSettings::redis(RedisConfig {
            sync: SyncMode::Sync {
                interval: std::time::Duration::from_millis(100),
            },
            ..RedisConfig::default()
        });
        store.instances = 4;
        let lines = sync_report(&store, &policy);
        assert_eq!(
            lines,
            [
                "rule 'per-user' of domain 'api': sync (every 100ms): at most 6 unit(s) past the limit per window (the 3 other instance(s) of 4 × 2 unit(s) slice, 0.6 % of 1000)",
                "rule 'bucket' of domain 'api': lease (1s): never admits past the limit",
            ]
        );
        store.instances = 0;
        let lines = sync_report(&store, &policy);
        assert!(
            lines[0].contains("at most (instances − 1) × 2 unit(s)"),
            "{lines:?}"
        );
        assert!(sync_report(&StoreSettings::memory(10), &policy).is_empty());
    }
}
