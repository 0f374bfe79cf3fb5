//! The `store:` section of Floodgate files: the in-memory store, or Redis
//! (single server, cluster, or a Sentinel-managed primary).

use std::time::Duration;

use floodgate_policy::error::Errors;
use floodgate_policy::yaml::{Map, Node};
use floodgate_redis::{
    BreakerConfig, FailurePolicy, Mode, RedisConfig, TimeSource, parse_redis_urls,
    parse_sentinel_url,
};

use super::env::{parse_failure_policy, parse_mode};
use super::file::{count, deny, duration};
use super::{Settings, StoreSettings};

const MEMORY_KEYS: &[&str] = &["backend", "capacity"];
const REDIS_KEYS: &[&str] = &[
    "backend",
    "url",
    "mode",
    "master",
    "master_auth",
    "prefix",
    "connections",
    "timeout",
    "connect_timeout",
    "pipeline_window",
    "pipeline_limit",
    "failure_policy",
    "divide_by",
    "local_cache",
    "fallback_capacity",
    "breaker",
    "clock",
    "concurrency_lease",
];
const BREAKER_KEYS: &[&str] = &["failures", "cool_down"];

pub(super) fn read_store(node: Node<'_>, settings: &mut Settings, errors: &mut Errors) {
    let Some(map) = errors.take(node.map()) else {
        return;
    };
    let backend = match map.get("backend") {
        None => "memory",
        Some(n) => match errors.take(n.str()) {
            Some(t) => t,
            None => return,
        },
    };
    match backend {
        "memory" => {
            let mut capacity = 1_000_000;
            count(&map, "capacity", &mut capacity, errors);
            settings.store = StoreSettings::Memory { capacity };
            deny(&map, MEMORY_KEYS, errors);
        }
        "redis" => {
            let mut r = RedisConfig::default();
            read_redis(&map, &mut r, errors);
            settings.store = StoreSettings::Redis(Box::new(r));
            deny(&map, REDIS_KEYS, errors);
        }
        other => errors.push(
            map.get("backend")
                .map(|n| {
                    n.error(format!(
                        "unknown backend `{other}` (expected memory or redis)"
                    ))
                })
                .unwrap_or_else(|| map.node().error("unknown backend")),
        ),
    }
}

fn read_redis(map: &Map<'_>, r: &mut RedisConfig, errors: &mut Errors) {
    if let Some(n) = map.get("mode")
        && let Some(m) = errors.take(n.str().and_then(|t| parse_mode(t).map_err(|m| n.error(m))))
    {
        r.mode = m;
    }
    let url = map.get("url").map(|n| {
        let text = match n.list() {
            Ok(items) if !items.is_empty() => {
                let parts: Vec<&str> = items.iter().filter_map(|i| errors.take(i.str())).collect();
                parts.join(",")
            }
            _ => errors.take(n.str()).unwrap_or_default().to_owned(),
        };
        (n, text)
    });
    if matches!(r.mode, Mode::Sentinel { .. }) {
        read_sentinel(map, url, r, errors);
    } else {
        if let Some((n, text)) = url
            && let Some(u) =
                errors.take(parse_redis_urls(&text).map_err(|e| n.error(e.to_string())))
        {
            r.urls = u;
        }
        for key in ["master", "master_auth"] {
            if let Some(n) = map.get(key) {
                errors.push(n.error(format!("{key} only applies to mode: sentinel")));
            }
        }
    }
    if let Some(n) = map.get("prefix")
        && let Some(t) = errors.take(n.str())
    {
        if t.contains(['{', '}']) {
            errors.push(n.error("the key prefix must not contain `{` or `}`"));
        } else {
            r.key_prefix = t.to_owned();
        }
    }
    count(map, "connections", &mut r.connections, errors);
    duration(map, "timeout", &mut r.timeout, false, errors);
    duration(
        map,
        "connect_timeout",
        &mut r.connect_timeout,
        false,
        errors,
    );
    duration(map, "pipeline_window", &mut r.pipeline_window, true, errors);
    if let Some(n) = map.get("pipeline_window")
        && !r.pipeline_window.is_zero()
        && r.pipeline_window >= r.timeout
    {
        errors.push(n.error(format!(
            "pipeline_window must be shorter than the timeout ({:?})",
            r.timeout
        )));
    }
    if let Some(n) = map.get("pipeline_limit")
        && let Some(c) = errors.take(n.u64())
    {
        r.pipeline_limit = c.min(usize::MAX as u64) as usize;
    }
    if let Some(n) = map.get("failure_policy")
        && let Some(p) = errors.take(
            n.str()
                .and_then(|t| parse_failure_policy(t).map_err(|m| n.error(m))),
        )
    {
        r.failure_policy = p;
    }
    if let Some(n) = map.get("divide_by") {
        let d = errors.take(n.u64()).unwrap_or(1);
        match r.failure_policy {
            FailurePolicy::Local { .. } if d >= 1 && d <= u32::MAX as u64 => {
                r.failure_policy = FailurePolicy::Local {
                    divide_by: d as u32,
                }
            }
            FailurePolicy::Local { .. } => errors.push(n.error("divide_by must be at least 1")),
            _ => errors.push(n.error("divide_by only applies to failure_policy: local")),
        }
    }
    if let Some(n) = map.get("local_cache")
        && let Some(c) = errors.take(n.u64())
    {
        r.local_cache_capacity = c.min(usize::MAX as u64) as usize;
    }
    count(map, "fallback_capacity", &mut r.fallback_capacity, errors);
    if let Some(n) = map.get("breaker")
        && let Some(m) = errors.take(n.map())
    {
        let mut b = BreakerConfig::default();
        let mut failures = b.failure_threshold as usize;
        count(&m, "failures", &mut failures, errors);
        b.failure_threshold = failures.min(u32::MAX as usize) as u32;
        duration(&m, "cool_down", &mut b.cool_down, false, errors);
        r.breaker = b;
        deny(&m, BREAKER_KEYS, errors);
    }
    if let Some(n) = map.get("clock") {
        match errors.take(n.str()) {
            Some("server") => r.time_source = TimeSource::Server,
            Some("client") => {
                r.time_source = TimeSource::Client {
                    expiry_slack: Duration::from_secs(1),
                }
            }
            Some(other) => {
                errors.push(n.error(format!("expected server or client, found `{other}`")))
            }
            None => {}
        }
    }
    if map.has("concurrency_lease") {
        let mut d = Duration::ZERO;
        duration(map, "concurrency_lease", &mut d, true, errors);
        r.concurrency_lease = (!d.is_zero()).then_some(d);
    }
}

/// `mode: sentinel`: the master's name (`master`, or first in the `url`
/// string as envoyproxy/ratelimit writes it), the sentinels (`url`), the
/// primary's credentials (`master_auth`).
fn read_sentinel(
    map: &Map<'_>,
    url: Option<(Node<'_>, String)>,
    r: &mut RedisConfig,
    errors: &mut Errors,
) {
    let master = map.get("master");
    match (master, url) {
        (Some(m), url) => {
            if let Some(mode) = errors.take(
                m.str()
                    .and_then(|t| Mode::sentinel(t).map_err(|e| m.error(e.to_string()))),
            ) {
                r.mode = mode;
            }
            if let Some((n, text)) = url
                && let Some(u) =
                    errors.take(parse_redis_urls(&text).map_err(|e| n.error(e.to_string())))
            {
                r.urls = u;
            }
        }
        (None, Some((n, text))) => {
            if let Some((name, urls)) =
                errors.take(parse_sentinel_url(&text).map_err(|e| n.error(e.to_string())))
            {
                r.mode = Mode::Sentinel { master_name: name };
                r.urls = urls;
            }
        }
        (None, None) => errors.push(map.node().error(
            "mode: sentinel needs `master` (the name the sentinels monitor) and `url` (the sentinels)",
        )),
    }
    if let Some(n) = map.get("master_auth")
        && let Some(t) = errors.take(n.str())
    {
        r.primary_auth = Some(t.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use floodgate_policy::ConfigErrors;
    use floodgate_policy::yaml::Document;

    fn read(text: &str) -> Result<Settings, ConfigErrors> {
        let doc = Document::parse(&Arc::from("f.yaml"), text).unwrap();
        super::super::read_sections(&[doc])
    }

    #[test]
    fn pipelining_window() {
        let s = read("store:\n  backend: redis\n  pipeline_window: 150us\n  pipeline_limit: 8\n")
            .unwrap();
        let StoreSettings::Redis(r) = s.store else {
            panic!()
        };
        assert_eq!(r.pipeline_window, Duration::from_micros(150));
        assert_eq!(r.pipeline_limit, 8);
        let e = read("store:\n  backend: redis\n  timeout: 10ms\n  pipeline_window: 10ms\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("f.yaml:4:20: pipeline_window must be shorter than the timeout (10ms)"),
            "{e}"
        );
        let e = read("store:\n  backend: redis\n  pipeline_window: soon\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pipeline_window: expected a duration"), "{e}");
    }

    #[test]
    fn sentinel_store() {
        let s = read(
            "store:\n  backend: redis\n  mode: sentinel\n  master: mymaster\n  url: [s1:26379, s2:26379]\n  master_auth: secret\n",
        )
        .unwrap();
        let StoreSettings::Redis(r) = s.store else {
            panic!()
        };
        assert_eq!(r.mode, Mode::sentinel("mymaster").unwrap());
        assert_eq!(r.urls, ["redis://s1:26379", "redis://s2:26379"]);
        assert_eq!(r.primary_auth.as_deref(), Some("secret"));
        // envoyproxy/ratelimit's REDIS_URL format works in the file too.
        let s =
            read("store:\n  backend: redis\n  mode: sentinel\n  url: mymaster,s1:26379\n").unwrap();
        let StoreSettings::Redis(r) = s.store else {
            panic!()
        };
        assert_eq!(r.mode, Mode::sentinel("mymaster").unwrap());
        assert_eq!(r.urls, ["redis://s1:26379"]);
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
                "f.yaml:2:3: mode: sentinel needs `master`",
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
                "f.yaml:3:9: expected single, cluster or sentinel",
            ),
        ];
        for (yaml, expect) in cases {
            let text = read(&format!("store:\n  backend: redis\n{yaml}"))
                .unwrap_err()
                .to_string();
            assert!(text.contains(expect), "{expect}\nin: {text}");
        }
    }
}
