use super::*;
use std::collections::HashMap;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

#[test]
fn envoy_names() {
    let o = overrides_from_env(env(&[
        ("GRPC_PORT", "9001"),
        ("PORT", "9002"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", ":9090"),
        ("REDIS_URL", "r:6379"),
        ("REDIS_TYPE", "cluster"),
        ("REDIS_POOL_SIZE", "4"),
        ("SHADOW_MODE", "true"),
        ("NEAR_LIMIT_RATIO", "0.9"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LOG_LEVEL", "debug"),
        ("LOG_FORMAT", "json"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
    ]))
    .unwrap();
    assert_eq!(o.envoy_increment_all, Some(true));
    assert_eq!(o.local_cache_entries, Some(16_384));
    assert_eq!(o.grpc, Some(Some("0.0.0.0:9001".parse().unwrap())));
    assert_eq!(o.http, Some(Some("0.0.0.0:9002".parse().unwrap())));
    assert_eq!(o.admin, Some(Some("0.0.0.0:9090".parse().unwrap())));
    assert_eq!(o.redis_mode, Some(Mode::Cluster));
    assert_eq!(o.redis_connections, Some(4));
    assert_eq!(o.shadow_mode, Some(true));
    assert_eq!(o.near_limit_ratio, Some(0.9));
    assert_eq!(o.headers_enabled, Some(true));
    assert_eq!(o.log_format, Some(LogFormat::Json));
    assert_eq!(o.log_level.as_deref(), Some("debug"));
}

#[test]
fn pipelining_window_the_envoy_way() {
    let o = overrides_from_env(env(&[
        ("REDIS_PIPELINE_WINDOW", "150us"),
        ("REDIS_PIPELINE_LIMIT", "8"),
    ]))
    .unwrap();
    assert_eq!(o.redis_pipeline_window, Some(Duration::from_micros(150)));
    assert_eq!(o.redis_pipeline_limit, Some(8));
    let e = overrides_from_env(env(&[("REDIS_PIPELINE_WINDOW", "a bit")])).unwrap_err();
    assert_eq!(e.name, "REDIS_PIPELINE_WINDOW");
}

#[test]
fn bad_values_name_the_variable() {
    let e = overrides_from_env(env(&[("GRPC_PORT", "eighty")])).unwrap_err();
    assert_eq!(e.name, "GRPC_PORT");
    let e = overrides_from_env(env(&[("REDIS_TYPE", "sentinal")])).unwrap_err();
    assert_eq!(e.name, "REDIS_TYPE");
    assert!(e.message.contains("single, cluster or sentinel"), "{e}");
}

#[test]
fn sentinel_the_envoy_way() {
    let o = overrides_from_env(env(&[
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
        ("REDIS_AUTH", "primary-secret"),
        ("REDIS_SENTINEL_AUTH", "sentinel-secret"),
    ]))
    .unwrap();
    assert_eq!(
        o.redis_mode,
        Some(Mode::Sentinel {
            master_name: String::new()
        })
    );
    assert_eq!(o.redis_sentinel_auth.as_deref(), Some("sentinel-secret"));
    let mut s = super::super::Settings::default();
    o.apply(&mut s).unwrap();
    let super::super::StoreSettings::Redis(r) = &s.store else {
        panic!("{:?}", s.store)
    };
    assert_eq!(r.mode, Mode::sentinel("mymaster").unwrap());
    assert_eq!(
        r.urls,
        [
            "redis://:sentinel-secret@s1:26379",
            "redis://:sentinel-secret@s2:26379"
        ]
    );
    assert_eq!(r.primary_auth.as_deref(), Some("primary-secret"));
    // Envoy's format starts with the master name.
    let e = overrides_from_env(env(&[
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "s1:26379,s2:26379"),
    ]))
    .unwrap()
    .apply(&mut super::super::Settings::default())
    .unwrap_err();
    assert_eq!(e.name, "REDIS_URL");
    assert!(e.message.contains("master name"), "{e}");
}

#[test]
fn envoy_zeros_are_accepted() {
    // envoyproxy/ratelimit's default: the local cache off.
    let o = overrides_from_env(env(&[("LOCAL_CACHE_SIZE_IN_BYTES", "0")])).unwrap();
    assert_eq!(o.local_cache_entries, Some(0));
    let mut s = super::super::Settings::default();
    overrides_from_env(env(&[
        ("REDIS_URL", "r:6379"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "0"),
    ]))
    .unwrap()
    .apply(&mut s)
    .unwrap();
    let super::super::StoreSettings::Redis(r) = &s.store else {
        panic!("{:?}", s.store)
    };
    assert_eq!(r.local_cache_capacity, 0);
    // A budget smaller than an entry still holds one.
    let o = overrides_from_env(env(&[("LOCAL_CACHE_SIZE_IN_BYTES", "10")])).unwrap();
    assert_eq!(o.local_cache_entries, Some(1));
    // Pool size and timeout 0: the defaults.
    let o = overrides_from_env(env(&[("REDIS_POOL_SIZE", "0"), ("REDIS_TIMEOUT", "0")])).unwrap();
    assert_eq!((o.redis_connections, o.redis_timeout), (None, None));
    // 0 as the file and the flags accept it.
    let o = overrides_from_env(env(&[
        ("FLOODGATE_RELOAD_INTERVAL", "0"),
        ("FLOODGATE_SHUTDOWN_GRACE", "0"),
        ("FLOODGATE_SHUTDOWN_DELAY", "0"),
    ]))
    .unwrap();
    assert_eq!(o.reload_interval, Some(Duration::ZERO));
    assert_eq!(o.shutdown_grace, Some(Duration::ZERO));
    assert_eq!(o.shutdown_delay, Some(Duration::ZERO));
    let e = overrides_from_env(env(&[("REDIS_POOL_SIZE", "-1")])).unwrap_err();
    assert_eq!(e.name, "REDIS_POOL_SIZE");
    let e = overrides_from_env(env(&[("LOCAL_CACHE_SIZE_IN_BYTES", "lots")])).unwrap_err();
    assert_eq!(e.name, "LOCAL_CACHE_SIZE_IN_BYTES");
}

#[test]
fn go_durations_with_fractions() {
    for (text, ms) in [
        ("1.5s", 1500),
        ("1m30s", 90_000),
        ("250ms", 250),
        ("0.5s", 500),
    ] {
        let o = overrides_from_env(env(&[
            ("REDIS_TIMEOUT", text),
            ("FLOODGATE_SHUTDOWN_GRACE", text),
            ("FLOODGATE_SHUTDOWN_DELAY", text),
        ]))
        .unwrap();
        let d = Some(Duration::from_millis(ms));
        assert_eq!(o.redis_timeout, d, "{text}");
        assert_eq!(o.shutdown_grace, d, "{text}");
        assert_eq!(o.shutdown_delay, d, "{text}");
    }
    let e = overrides_from_env(env(&[("REDIS_TIMEOUT", "1.5")])).unwrap_err();
    assert_eq!(e.name, "REDIS_TIMEOUT");
    assert!(e.message.contains("1.5s"), "{e}");
}

#[test]
fn unsupported_envoy_variables_are_named() {
    let found = unsupported_from_env(env(&[
        ("GRPC_SERVER_USE_TLS", "true"),
        ("REDIS_PERSECOND_URL", "r2:6379"),
        ("REDIS_URL", "r:6379"),
        ("USE_STATSD", " "),
    ]));
    let names: Vec<&str> = found.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["GRPC_SERVER_USE_TLS", "REDIS_PERSECOND_URL"]);
    // Every supported variable is absent from the list.
    for supported in [
        "REDIS_URL",
        "REDIS_POOL_SIZE",
        "REDIS_TIMEOUT",
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "USE_PROMETHEUS",
        "PROMETHEUS_ADDR",
        "SHADOW_MODE",
    ] {
        assert!(
            UNSUPPORTED_ENVOY_VARIABLES
                .iter()
                .all(|(n, _)| *n != supported),
            "{supported}"
        );
    }
}

#[test]
fn runtime_root_names_the_config_directory() {
    assert_eq!(
        config_path_from_env(env(&[
            ("RUNTIME_ROOT", "/srv/rt"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit")
        ])),
        Some(PathBuf::from("/srv/rt/ratelimit/config"))
    );
    assert_eq!(config_path_from_env(env(&[])), None);
}
