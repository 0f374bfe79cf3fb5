//! The settings of the runtime, read from flags, the environment and
//! files: one precedence for every setting, the documented table, and the
//! readings teams migrating from envoyproxy/ratelimit rely on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use floodgate_policy::yaml::Document;
use floodgate_redis::{FailurePolicy, Mode};

use floodgate_policy::error::ConfigErrors;
use floodgate_runtime::settings::{
    Declared, Env, Flags, LogFormat, Settings, StoreKind, UNSUPPORTED_ENVOY_VARIABLES, Value,
    redact, unsupported,
};
use floodgate_testkit::settings::{
    check_declared_once, check_defaults, check_docs, check_precedence,
};

/// One order for every setting: flags, environment (Floodgate's variable,
/// then envoyproxy/ratelimit's), file, default (see [`check_precedence`]).
#[test]
fn every_setting_follows_one_precedence() {
    let checked = check_precedence::<Settings>();
    assert!(checked > 100, "{checked} comparisons");
}

#[test]
fn documented_defaults_are_the_defaults() {
    check_defaults::<Settings>();
}

/// docs/service.md's table of settings is the declarations' (regenerate
/// with `FLOODGATE_BLESS=1 cargo test -p floodgate-runtime`).
#[test]
fn the_documented_settings_are_the_declared_ones() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/service.md");
    check_docs::<Settings>(&path, "runtime");
}

#[test]
fn every_setting_is_declared_once() {
    check_declared_once::<Settings>();
}

fn env_only(pairs: &[(&str, &str)]) -> Result<Settings, ConfigErrors> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let lookup = move |k: &str| map.get(k).cloned();
    Settings::resolve(&Flags::new(), &Env::new(&lookup), &[], &[])
}

fn file(text: &str) -> Result<Settings, ConfigErrors> {
    let doc = Document::parse(&Arc::from("f.yaml"), text).unwrap();
    Settings::from_documents(&[doc])
}

#[test]
fn envoy_names() {
    let s = env_only(&[
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", ":9090"),
        ("REDIS_URL", "r:6379"),
        ("REDIS_TYPE", "cluster"),
        ("REDIS_POOL_SIZE", "4"),
        ("SHADOW_MODE", "true"),
        ("NEAR_LIMIT_RATIO", "0.9"),
        ("LOG_LEVEL", "debug"),
        ("LOG_FORMAT", "json"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
        ("MERGE_DOMAIN_CONFIG", "true"),
        ("RUNTIME_ROOT", "/srv/runtime"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ])
    .unwrap();
    assert_eq!(s.policy.envoy_increment_all, Some(true));
    assert_eq!(s.store.redis.local_cache_capacity, 16_384);
    // Go's `:port`: the metrics listener on every interface; the admin
    // listener stays on loopback.
    assert_eq!(s.server.metrics, Some("[::]:9090".parse().unwrap()));
    assert_eq!(s.server.admin, Some("127.0.0.1:6070".parse().unwrap()));
    assert_eq!(s.store.backend, StoreKind::Redis);
    assert_eq!(s.store.redis.mode, Mode::Cluster);
    assert_eq!(s.store.redis.urls, ["redis://r:6379"]);
    assert_eq!(s.store.redis.connections, 4);
    assert_eq!(s.policy.shadow_mode, Some(true));
    assert_eq!(s.policy.near_limit_ratio, Some(0.9));
    assert_eq!(s.server.log.format, LogFormat::Json);
    assert_eq!(s.server.log.level, "debug");
    assert!(s.config.merge_domains);
    assert_eq!(
        s.config.paths,
        [std::path::PathBuf::from("/srv/runtime/ratelimit/config")]
    );
    // envoyproxy/ratelimit's zeros keep the defaults.
    let s = env_only(&[("REDIS_POOL_SIZE", "0"), ("REDIS_TIMEOUT", "0")]).unwrap();
    assert_eq!(s.store.redis.connections, 2);
    assert_eq!(s.store.redis.timeout, Duration::from_millis(50));
}

#[test]
fn a_bare_admin_port_is_loopback_everywhere() {
    for s in [
        env_only(&[("DEBUG_PORT", "7000")]).unwrap(),
        env_only(&[("FLOODGATE_ADMIN_ADDR", ":7000")]).unwrap(),
        env_only(&[("FLOODGATE_ADMIN_ADDR", "7000")]).unwrap(),
        file("server: {admin: ':7000'}\n").unwrap(),
    ] {
        assert_eq!(s.server.admin, Some("127.0.0.1:7000".parse().unwrap()));
    }
    // An address, any address, is taken as given.
    let s = env_only(&[("DEBUG_HOST", "0.0.0.0"), ("DEBUG_PORT", "7000")]).unwrap();
    assert_eq!(s.server.admin, Some("0.0.0.0:7000".parse().unwrap()));
    // A host alone: envoyproxy/ratelimit's port.
    let s = env_only(&[("DEBUG_HOST", "::")]).unwrap();
    assert_eq!(s.server.admin, Some("[::]:6070".parse().unwrap()));
}

/// The metrics listener: off unless asked for; a port alone on every
/// IPv4 interface, as Floodgate's public listeners, and
/// envoyproxy/ratelimit's `PROMETHEUS_ADDR=:port` on every interface,
/// IPv4 and IPv6, as Go's empty host; with a host, exactly there; never
/// moving the admin listener.
#[test]
fn the_metrics_listener_takes_a_port_on_every_interface() {
    let off = env_only(&[]).unwrap();
    assert_eq!(off.server.metrics, None);
    for s in [
        env_only(&[("FLOODGATE_METRICS_ADDR", ":9901")]).unwrap(),
        env_only(&[("FLOODGATE_METRICS_ADDR", "9901")]).unwrap(),
        file("server: {metrics: ':9901'}\n").unwrap(),
    ] {
        assert_eq!(s.server.metrics, Some("0.0.0.0:9901".parse().unwrap()));
        assert_eq!(s.server.admin, off.server.admin);
    }
    let at = |env: &[(&str, &str)]| env_only(env).unwrap().server.metrics;
    let addr = |a: &str| Some(a.parse().unwrap());
    let go = [("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", " :9901")];
    assert_eq!(at(&go), addr("[::]:9901"));
    assert_eq!(env_only(&go).unwrap().server.admin, off.server.admin);
    // envoyproxy/ratelimit's default address, and its switch.
    assert_eq!(at(&[("USE_PROMETHEUS", "TRUE")]), addr("[::]:9090"));
    assert_eq!(
        at(&[("USE_PROMETHEUS", "false"), ("PROMETHEUS_ADDR", ":1")]),
        None
    );
    assert_eq!(at(&[("PROMETHEUS_ADDR", ":1")]), None);
    let local = [
        ("USE_PROMETHEUS", "1"),
        ("PROMETHEUS_ADDR", "127.0.0.1:19001"),
    ];
    assert_eq!(at(&local), addr("127.0.0.1:19001"));
    let both = [("USE_PROMETHEUS", "1"), ("PROMETHEUS_ADDR", "[::]:19001")];
    assert_eq!(at(&both), addr("[::]:19001"));
    // Floodgate's own setting first.
    let over = [("FLOODGATE_METRICS_ADDR", "off"), ("USE_PROMETHEUS", "1")];
    assert_eq!(at(&over), None);
    let e = env_only(&[("USE_PROMETHEUS", "sometimes")]).unwrap_err();
    assert!(e.to_string().starts_with("USE_PROMETHEUS: "), "{e}");
    // Its path: envoyproxy/ratelimit's PROMETHEUS_PATH, never a probe's.
    assert_eq!(off.server.metrics_path, "/metrics");
    let s = env_only(&[("PROMETHEUS_PATH", "/stats/prometheus")]).unwrap();
    assert_eq!(s.server.metrics_path, "/stats/prometheus");
    for bad in [
        "/ready",
        "/healthcheck",
        "metrics",
        "/{x}",
        "/a b",
        "/m?x=1",
    ] {
        let e = env_only(&[("PROMETHEUS_PATH", bad)])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("PROMETHEUS_PATH: "), "{bad}: {e}");
    }
}

/// `LOG_LEVEL` takes logrus' level names, any case, as envoyproxy/ratelimit
/// does; `FLOODGATE_LOG` stays a `tracing` filter.
#[test]
fn log_level_takes_logrus_names() {
    for (given, level) in [
        ("trace", "trace"),
        ("DEBUG", "debug"),
        ("Info", "info"),
        ("warning", "warn"),
        ("WARN", "warn"),
        ("error", "error"),
        ("fatal", "error"),
        ("panic", "error"),
    ] {
        let s = env_only(&[("LOG_LEVEL", given)]).unwrap();
        assert_eq!(s.server.log.level, level, "{given}");
    }
    let e = env_only(&[("LOG_LEVEL", "verbose")])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("LOG_LEVEL: ") && e.contains("logrus"), "{e}");
    let s = env_only(&[
        ("FLOODGATE_LOG", "floodgate=debug,warn"),
        ("LOG_LEVEL", "x"),
    ])
    .unwrap();
    assert_eq!(s.server.log.level, "floodgate=debug,warn");
}

#[test]
fn bad_values_name_where_they_came_from() {
    let e = env_only(&[("FLOODGATE_ADMIN_ADDR", "eighty")])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("FLOODGATE_ADMIN_ADDR: "), "{e}");
    let e = env_only(&[("REDIS_TYPE", "sentinal")])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("REDIS_TYPE: "), "{e}");
    assert!(e.contains("single, cluster or sentinel"), "{e}");
    let e = env_only(&[("REDIS_PIPELINE_WINDOW", "a bit")])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("REDIS_PIPELINE_WINDOW: "), "{e}");
    // envoyproxy/ratelimit's variables read together: the one at fault.
    for (env, var) in [
        (
            &[("DEBUG_HOST", "0.0.0.0"), ("DEBUG_PORT", "x")][..],
            "DEBUG_PORT",
        ),
        (
            &[("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", "nowhere")][..],
            "PROMETHEUS_ADDR",
        ),
        (
            &[("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "maybe")][..],
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
        ),
        (
            &[("LOCAL_CACHE_SIZE_IN_BYTES", "lots")][..],
            "LOCAL_CACHE_SIZE_IN_BYTES",
        ),
    ] {
        let e = env_only(env).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{var}: ")), "{env:?}: {e}");
    }
    let mut flags = Flags::new();
    flags.set("server.shutdown_delay", Value::one("soon"));
    let e = Settings::resolve(&flags, &Env::new(&|_| None), &[], &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("--shutdown-delay: expected a duration"),
        "{e}"
    );
}

#[test]
fn sentinel_the_envoy_way() {
    let s = env_only(&[
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
        ("REDIS_AUTH", "primary-secret"),
        ("REDIS_SENTINEL_AUTH", "sentinel-secret"),
    ])
    .unwrap();
    let r = &s.store.redis;
    assert_eq!(r.mode, Mode::sentinel("mymaster").unwrap());
    assert_eq!(
        r.urls,
        [
            "redis://:sentinel-secret@s1:26379",
            "redis://:sentinel-secret@s2:26379"
        ]
    );
    assert_eq!(r.primary_auth.as_deref(), Some("primary-secret"));
}

#[test]
fn the_environment_mode_keeps_the_files_master_name() {
    let text = "store:\n  backend: redis\n  mode: sentinel\n  master: from-file\n  url: s1:26379\n";
    let doc = Document::parse(&Arc::from("f.yaml"), text).unwrap();
    let env = |k: &str| (k == "REDIS_TYPE").then(|| "sentinel".to_owned());
    let s = Settings::resolve(&Flags::new(), &Env::new(&env), &[doc], &[]).unwrap();
    assert_eq!(s.store.redis.mode, Mode::sentinel("from-file").unwrap());
    assert_eq!(s.store.redis.urls, ["redis://s1:26379"]);
}

/// A store chosen by a flag over a file that says otherwise keeps every
/// Redis setting the environment gives.
#[test]
fn a_store_flag_keeps_the_environments_redis_settings() {
    let text = "store: {backend: memory}\n";
    let doc = Document::parse(&Arc::from("f.yaml"), text).unwrap();
    let env: HashMap<&str, &str> = [
        ("LOCAL_CACHE_SIZE_IN_BYTES", "6400"),
        ("REDIS_TIMEOUT", "75ms"),
        ("REDIS_AUTH", "secret"),
        ("CACHE_KEY_PREFIX", "app:"),
        ("FLOODGATE_FAILURE_POLICY", "fail_closed"),
    ]
    .into_iter()
    .collect();
    let lookup = |k: &str| env.get(k).map(std::string::ToString::to_string);
    let mut flags = Flags::new();
    flags.set("store.backend", Value::one("redis"));
    let s = Settings::resolve(&flags, &Env::new(&lookup), &[doc], &[]).unwrap();
    let r = &s.store.redis;
    assert_eq!(s.store.backend, StoreKind::Redis);
    assert_eq!(r.local_cache_capacity, 100);
    assert_eq!(r.timeout, Duration::from_millis(75));
    assert_eq!(r.urls, ["redis://:secret@127.0.0.1:6379"]);
    assert_eq!(r.key_prefix, "app:");
    assert_eq!(r.failure_policy, FailurePolicy::FailClosed);
}

#[test]
fn full_sections() {
    let s = file(
        "server:\n  log: {level: debug, format: json}\nstore:\n  backend: redis\n  url: [a:1, b:2]\n  mode: cluster\n  timeout: 20ms\n  failure_policy: local\n  divide_by: 3\n  breaker: {failures: 2, cool_down: 5s}\n",
    )
    .unwrap();
    assert_eq!(s.server.log.format, LogFormat::Json);
    let r = &s.store.redis;
    assert_eq!(r.urls, ["redis://a:1", "redis://b:2"]);
    assert_eq!(r.timeout, Duration::from_millis(20));
    assert_eq!(r.failure_policy, FailurePolicy::Local { divide_by: 3 });
    assert_eq!(r.breaker.failure_threshold, 2);
    assert_eq!(r.breaker.cool_down, Duration::from_secs(5));
}

#[test]
fn one_duration_grammar() {
    let s =
        file("server:\n  shutdown_delay: 1.5s\n  shutdown_grace: 1m30s\n  reload_interval: 0\n")
            .unwrap();
    assert_eq!(s.server.shutdown_delay, Duration::from_millis(1500));
    assert_eq!(s.server.shutdown_grace, Duration::from_secs(90));
    assert_eq!(s.server.reload_interval, Duration::ZERO);
    let e = file("server:\n  shutdown_delay: soon\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("f.yaml:2:19: shutdown_delay: expected a duration"),
        "{e}"
    );
}

#[test]
fn file_errors_have_positions() {
    let e = file("server:\n  admin: nowhere\n  colour: blue\nstore:\n  backend: etcd\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("f.yaml:2:10: admin: expected host:port"), "{e}");
    assert!(e.contains("f.yaml:3:11: unknown key 'colour'"), "{e}");
    assert!(
        e.contains("expected one of: admin, tls, admin_hosts,"),
        "{e}"
    );
    assert!(
        e.contains("f.yaml:5:12: backend: expected memory or redis, found `etcd`"),
        "{e}"
    );
    let e = file("store:\n  backend: memory\n  url: a:1\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("f.yaml:3:8: url only applies to backend: redis"),
        "{e}"
    );
}

/// What a full in-memory store does with new keys: `admit` by default, a
/// choice of three, refused with its name otherwise, and not a Redis
/// store's setting.
#[test]
fn the_full_store_rule() {
    use floodgate::store::WhenFull;
    assert_eq!(file("").unwrap().store.when_full, WhenFull::Admit);
    let s = file("store:\n  when_full: deny\n").unwrap();
    assert_eq!(s.store.when_full, WhenFull::Deny);
    let s = env_only(&[("FLOODGATE_MEMORY_WHEN_FULL", "evict")]).unwrap();
    assert_eq!(s.store.when_full, WhenFull::Evict);
    let e = file("store:\n  when_full: drop\n").unwrap_err().to_string();
    assert!(
        e.contains("f.yaml:2:14: when_full: expected admit, deny or evict, found `drop`"),
        "{e}"
    );
    let e = file("store:\n  backend: redis\n  when_full: deny\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("when_full only applies to backend: memory"),
        "{e}"
    );
}

#[test]
fn pipelining_window() {
    let s =
        file("store:\n  backend: redis\n  pipeline_window: 150us\n  pipeline_limit: 8\n").unwrap();
    assert_eq!(s.store.redis.pipeline_window, Duration::from_micros(150));
    assert_eq!(s.store.redis.pipeline_limit, 8);
    let e = file("store:\n  backend: redis\n  timeout: 10ms\n  pipeline_window: 10ms\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("f.yaml:4:20: pipeline_window must be shorter than the timeout (10ms)"),
        "{e}"
    );
}

#[test]
fn sentinel_store() {
    let s = file(
        "store:\n  backend: redis\n  mode: sentinel\n  master: mymaster\n  url: [s1:26379, s2:26379]\n  master_auth: secret\n",
    )
    .unwrap();
    let r = &s.store.redis;
    assert_eq!(r.mode, Mode::sentinel("mymaster").unwrap());
    assert_eq!(r.urls, ["redis://s1:26379", "redis://s2:26379"]);
    assert_eq!(r.primary_auth.as_deref(), Some("secret"));
    // envoyproxy/ratelimit's REDIS_URL format works in the file too.
    let s = file("store:\n  backend: redis\n  mode: sentinel\n  url: mymaster,s1:26379\n").unwrap();
    assert_eq!(s.store.redis.mode, Mode::sentinel("mymaster").unwrap());
    assert_eq!(s.store.redis.urls, ["redis://s1:26379"]);
}

#[test]
fn sentinel_errors_have_positions() {
    let cases = [
        (
            "  mode: sentinel\n  url: s1:26379\n",
            "f.yaml:4:8: invalid Redis URL \"s1:26379\": a Sentinel URL starts with the master name",
        ),
        (
            "  mode: sentinel\n",
            "f.yaml:3:9: mode: sentinel needs `master`",
        ),
        (
            "  mode: sentinel\n  master: my master\n  url: s1:1\n",
            "f.yaml:4:11: invalid Sentinel master name",
        ),
        (
            "  mode: single\n  master: mymaster\n",
            "f.yaml:4:11: master only applies to mode: sentinel",
        ),
        (
            "  mode: sentinal\n",
            "f.yaml:3:9: mode: expected single, cluster or sentinel",
        ),
    ];
    for (text, expect) in cases {
        let e = file(&format!("store:\n  backend: redis\n{text}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(expect), "{expect}\nin: {e}");
    }
}

#[test]
fn concurrency_permits_have_a_lease_by_default() {
    let lease = |extra: &str| {
        file(&format!("store:\n  backend: redis\n{extra}"))
            .unwrap()
            .store
            .redis
            .concurrency_lease
    };
    assert_eq!(lease(""), Some(floodgate_redis::DEFAULT_CONCURRENCY_LEASE));
    assert_eq!(
        lease("  concurrency_lease: 30s\n"),
        Some(Duration::from_secs(30))
    );
    // 0 turns the lease off: permits live until released.
    assert_eq!(lease("  concurrency_lease: 0s\n"), None);
}

#[test]
fn unsupported_envoy_variables_are_named() {
    let env = |k: &str| match k {
        "USE_STATSD" => Some("true".to_owned()),
        "REDIS_PERSECOND" => Some(" ".to_owned()),
        _ => None,
    };
    let found = unsupported(env);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, "USE_STATSD");
    // The Istio sample's values ask for what Floodgate does: no warning;
    // the others are named.
    let istio = |k: &str| match k {
        "RUNTIME_IGNOREDOTFILES" => Some("true".to_owned()),
        "RUNTIME_WATCH_ROOT" => Some("False".to_owned()),
        "USE_STATSD" | "DISABLE_STATS" => Some("false".to_owned()),
        _ => None,
    };
    assert_eq!(unsupported(istio), []);
    let other = |k: &str| match k {
        "RUNTIME_IGNOREDOTFILES" => Some("false".to_owned()),
        "RUNTIME_WATCH_ROOT" => Some("true".to_owned()),
        _ => None,
    };
    let named: Vec<&str> = unsupported(other).iter().map(|(n, _)| *n).collect();
    assert_eq!(named, ["RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT"]);
    // Every variable a setting reads is supported.
    for s in Settings::table() {
        for name in UNSUPPORTED_ENVOY_VARIABLES
            .iter()
            .flat_map(|(names, _)| *names)
        {
            assert_ne!(*name, s.env, "{}", s.key);
            if let Some(e) = &s.envoy {
                assert!(!e.names().contains(&format!("`{name}`")), "{}", s.key);
            }
        }
    }
}

#[test]
fn credentials_never_reach_the_logs() {
    assert_eq!(
        redact("redis://user:s3cret@10.0.0.1:6379/0"),
        "redis://***@10.0.0.1:6379/0"
    );
    assert_eq!(redact("rediss://:pw@host:6380"), "rediss://***@host:6380");
    assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    assert_eq!(redact("host:6379"), "host:6379");
    assert_eq!(redact("redis://host/path@x"), "redis://host/path@x");
}

#[test]
fn the_store_wide_sync_mode() {
    use floodgate_policy::SyncMode;
    let sync =
        |text: &str| file(&format!("store:\n  backend: redis\n{text}")).map(|s| s.store.redis.sync);
    assert_eq!(sync(""), Ok(SyncMode::Exact));
    assert_eq!(
        sync("  sync: lease\n"),
        Ok(SyncMode::Lease {
            duration: SyncMode::DEFAULT_LEASE
        })
    );
    assert_eq!(
        sync("  sync: {mode: sync, interval: 20ms}\n"),
        Ok(SyncMode::Sync {
            interval: Duration::from_millis(20)
        })
    );
    assert_eq!(
        sync("  sync:\n    mode: lease\n    duration: 3s\n"),
        Ok(SyncMode::Lease {
            duration: Duration::from_secs(3)
        })
    );
    let s = env_only(&[
        ("FLOODGATE_STORE", "redis"),
        ("FLOODGATE_SYNC", "sync"),
        ("FLOODGATE_SYNC_INTERVAL", "250ms"),
        ("FLOODGATE_INSTANCES", "4"),
    ])
    .unwrap();
    assert_eq!(
        s.store.redis.sync,
        SyncMode::Sync {
            interval: Duration::from_millis(250)
        }
    );
    assert_eq!(s.store.instances, 4);
    for (text, expect) in [
        (
            "  sync: eventual\n",
            "f.yaml:3:9: mode: unknown sync mode `eventual`",
        ),
        (
            "  sync: {mode: lease, interval: 1s}\n",
            "interval does not apply to sync mode lease",
        ),
        ("  sync: {mode: sync, interval: 2h}\n", "expected 1ms to 1h"),
        ("  sync: {mode: sync, every: 1s}\n", "unknown key 'every'"),
    ] {
        let e = sync(text).unwrap_err().to_string();
        assert!(e.contains(expect), "{text}: {e}");
    }
    // A memory store has no sync mode to set.
    let e = file("store:\n  sync: lease\n").unwrap_err().to_string();
    assert!(e.contains("only applies to backend: redis"), "{e}");
}

/// The store's declared defaults are the Redis library's own
/// (`RedisConfig::default`), so a program embedding the library and the
/// binaries start from the same store.
#[test]
fn the_redis_defaults_are_the_librarys() {
    let redis = file("store:\n  backend: redis\n").unwrap().store.redis;
    assert_eq!(redis, floodgate_redis::RedisConfig::default());
}

/// A setting of a Sentinel store or of the local failure policy is refused
/// wherever it is given to a store without it; a setting of the Redis
/// store or of a sync mode is refused only in the file (the environment
/// may configure a Redis store a flag then does not choose, or a sync mode
/// the file does not use).
#[test]
fn settings_of_another_store_or_mode_are_refused_where_they_mislead() {
    let mut flags = Flags::new();
    flags.set("store.backend", Value::one("redis"));
    let with_env = |pairs: &[(&str, &str)], text: &str| {
        let env: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| env.get(k).cloned();
        let doc = Document::parse(&Arc::from("f.yaml"), text).unwrap();
        Settings::resolve(&flags, &Env::new(&lookup), &[doc], &[]).map_err(|e| e.to_string())
    };
    let e = with_env(&[("FLOODGATE_REDIS_MASTER", "mymaster")], "").unwrap_err();
    assert!(
        e.contains("FLOODGATE_REDIS_MASTER: master only applies to mode: sentinel"),
        "{e}"
    );
    let e = with_env(
        &[("FLOODGATE_DIVIDE_BY", "3")],
        "store: {failure_policy: fail_open}\n",
    )
    .unwrap_err();
    assert!(
        e.contains("FLOODGATE_DIVIDE_BY: divide_by only applies to failure_policy: local"),
        "{e}"
    );
    with_env(
        &[("FLOODGATE_SYNC_INTERVAL", "250ms")],
        "store: {sync: lease}\n",
    )
    .unwrap();
    with_env(&[("FLOODGATE_LEASE_DURATION", "2s")], "").unwrap();
    let e = with_env(&[], "store: {sync: {interval: 1s, duration: 1s}}\n").unwrap_err();
    for key in ["interval", "duration"] {
        assert!(
            e.contains(&format!("{key} does not apply to sync mode exact")),
            "{e}"
        );
    }
    let memory = env_only(&[
        ("FLOODGATE_STORE", "memory"),
        ("FLOODGATE_REDIS_TIMEOUT", "1s"),
    ]);
    assert_eq!(memory.unwrap().store.backend, StoreKind::Memory);
}

/// The admin listener's TLS: the certificate and key both or neither,
/// the files read and checked where they were given, paths relative to
/// the file naming them (the service's listeners: its own tests).
#[test]
fn listener_tls_is_checked_where_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
    let file = dir.path().join("floodgate.yaml").display().to_string();
    let read = |text: &str| {
        let doc = Document::parse(&Arc::from(file.as_str()), text).unwrap();
        Settings::from_documents(&[doc])
    };

    let s = read("server: {tls: {admin: {cert: tls.crt, key: tls.key}}}").unwrap();
    let admin = s
        .server
        .admin_tls
        .files()
        .expect("TLS on the admin listener");
    assert_eq!(admin.cert, dir.path().join("tls.crt"));

    let e = read("server: {tls: {admin: {cert: tls.crt}}}")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("missing required key 'key'") && e.contains(":1:"),
        "{e}"
    );
    let e = read("server: {tls: {admin: {cert: tls.crt, key: tls.crt}}}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("tls.crt"), "{e}");
    let e = read("server: {tls: {admin: {cert: tls.crt, key: tls.key, client_ca: none.pem}}}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("none.pem"), "{e}");
}

/// A file may hold the sections of the frontends a binary runs, and no
/// other: the host names none but its own.
#[test]
fn the_sections_a_file_may_hold_are_the_frontends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("floodgate.yaml");
    std::fs::write(
        &path,
        "server: {workers: 1}\nproxy: {to: here}\ndomains:\n  - domain: api\n    descriptors:\n      - key: user\n        rate_limit: {requests: 1, per: 1s}\n",
    )
    .unwrap();
    let flags = Flags::new().with("config", path.display().to_string());
    let env = Env::new(&|_| None);
    let loaded = floodgate_runtime::host::load(&flags, &env, &["proxy"], &[]).unwrap();
    assert_eq!(loaded.settings.server.workers, Some(1));
    let refused = floodgate_runtime::host::load(&flags, &env, &[], &[]).unwrap_err();
    assert!(refused.to_string().contains("proxy"), "{refused}");
}

#[test]
fn a_misspelt_setting_is_named_with_the_one_meant() {
    let e = file("server:\n  admn: 127.0.0.1:1\n  limits: {max_header_byte: 5}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("f.yaml:2:9: unknown key 'admn' (did you mean 'admin'? expected one of:"),
        "{e}"
    );
    assert!(
        e.contains("unknown key 'max_header_byte' (did you mean 'max_header_bytes'?"),
        "{e}"
    );
}

/// The keys of the host's sections a frontend reads are left to it: read
/// with them, a file may give them; a key neither declares is refused,
/// the frontend's among those it might have meant.
#[test]
fn the_keys_a_frontend_reads_are_left_to_it() {
    let doc = |text: &str| Document::parse(&Arc::from("f.yaml"), text).unwrap();
    let frontend = [
        "server.grpc",
        "server.tls.grpc.cert",
        "server.limits.max_requests",
    ];
    let read = |text: &str, keys: &[&'static str]| {
        Settings::resolve(&Flags::new(), &Env::new(&|_| None), &[doc(text)], keys)
    };
    let text = "server:\n  grpc: here\n  tls: {grpc: {cert: x}}\n  limits: {max_requests: 3, max_headers: 7}\n  workers: 2\n";
    let s = read(text, &frontend).unwrap();
    assert_eq!(s.server.workers, Some(2));
    assert_eq!(s.server.limits.max_headers, 7);
    let e = read(text, &[]).unwrap_err().to_string();
    assert!(e.contains("unknown key 'grpc'"), "{e}");
    let e = read("server:\n  grcp: here\n", &frontend)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown key 'grcp' (did you mean 'grpc'?"),
        "{e}"
    );
}

/// envoyproxy/ratelimit's tracing variables, read as it reads them: a
/// protocol of `grpc` or `http` (empty: `http`), a sampling rate whose
/// values beyond 0 and 1 mean never and always, the collector's base URL
/// from `OTEL_EXPORTER_OTLP_ENDPOINT`; off by default.
#[test]
fn tracing_takes_envoys_variables() {
    use floodgate_runtime::settings::OtlpProtocol;
    let off = env_only(&[]).unwrap().server.tracing;
    assert!(!off.enabled);
    assert_eq!(off.protocol, OtlpProtocol::Http);
    assert_eq!(off.sampling_ratio, 1.0);
    let on = env_only(&[
        ("TRACING_ENABLED", "true"),
        ("TRACING_EXPORTER_PROTOCOL", "grpc"),
        ("TRACING_SAMPLING_RATE", "2.5"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ("TRACING_SERVICE_NAME", "RateLimit"),
    ])
    .unwrap()
    .server
    .tracing;
    assert!(on.enabled);
    assert_eq!(on.protocol, OtlpProtocol::Grpc);
    assert_eq!(on.sampling_ratio, 1.0, "above 1: always");
    assert_eq!(on.endpoint, "http://collector:4317");
    assert_eq!(on.service_name, "RateLimit");
    let never = env_only(&[
        ("TRACING_SAMPLING_RATE", "-1"),
        ("TRACING_EXPORTER_PROTOCOL", ""),
    ]);
    let never = never.unwrap().server.tracing;
    assert_eq!(never.sampling_ratio, 0.0, "below 0: never");
    assert_eq!(never.protocol, OtlpProtocol::Http);
    let bad = env_only(&[("TRACING_EXPORTER_PROTOCOL", "thrift")]).unwrap_err();
    assert!(
        bad.to_string().contains("TRACING_EXPORTER_PROTOCOL"),
        "{bad}"
    );
}
