//! The `server:` and `store:` sections of Floodgate files, read with the
//! policy crate's positioned YAML (errors carry file, line and column);
//! the `server:` section here, `store:` in its own module.

use std::time::Duration;

use floodgate_policy::error::{ConfigError, ConfigErrors, Errors};
use floodgate_policy::yaml::{Document, Map, Node};

use super::env::parse_log_format;
use super::{HeaderSettings, Settings, parse_listen, parse_setting_duration, parse_size};

/// The top-level sections this crate reads.
pub const SECTIONS: &[&str] = &["server", "store"];

const SERVER_KEYS: &[&str] = &[
    "grpc",
    "http",
    "admin",
    "body_limit",
    "max_descriptors",
    "max_value_bytes",
    "response_headers",
    "reload_interval",
    "shutdown_grace",
    "shutdown_delay",
    "log",
];
const HEADER_KEYS: &[&str] = &["enabled", "limit", "remaining", "reset", "x_ratelimit"];
const LOG_KEYS: &[&str] = &["level", "format"];

/// Reads the sections from the loaded Floodgate documents (each section
/// may appear in one file only). Absent sections keep their defaults.
pub fn read_sections(documents: &[Document]) -> Result<Settings, ConfigErrors> {
    let mut errors = Errors::default();
    let mut settings = Settings::default();
    let mut seen: [Option<String>; 2] = [None, None];
    for doc in documents {
        let Some(root) = errors.take(doc.root().map()) else {
            continue;
        };
        for (i, name) in SECTIONS.iter().enumerate() {
            let Some(node) = root.get(name) else {
                continue;
            };
            if let Some(first) = &seen[i] {
                errors.push(node.error(format!("'{name}' is already given in {first}")));
                continue;
            }
            seen[i] = Some(node.at().to_string());
            match i {
                0 => read_server(node, &mut settings, &mut errors),
                _ => super::store::read_store(node, &mut settings, &mut errors),
            }
        }
    }
    errors.finish(settings)
}

fn read_server(node: Node<'_>, settings: &mut Settings, errors: &mut Errors) {
    let Some(map) = errors.take(node.map()) else {
        return;
    };
    let s = &mut settings.server;
    for (key, field) in [
        ("grpc", &mut s.grpc),
        ("http", &mut s.http),
        ("admin", &mut s.admin),
    ] {
        if let Some(n) = map.get(key)
            && let Some(a) = errors.take(
                n.str()
                    .and_then(|t| parse_listen(t).map_err(|m| n.error(m))),
            )
        {
            *field = a;
        }
    }
    size(&map, "body_limit", &mut s.body_limit, errors);
    count(&map, "max_descriptors", &mut s.max_descriptors, errors);
    size(&map, "max_value_bytes", &mut s.max_value_bytes, errors);
    duration(
        &map,
        "reload_interval",
        &mut s.reload_interval,
        true,
        errors,
    );
    duration(&map, "shutdown_grace", &mut s.shutdown_grace, true, errors);
    duration(&map, "shutdown_delay", &mut s.shutdown_delay, true, errors);
    if let Some(n) = map.get("response_headers") {
        read_headers(n, &mut s.headers, errors);
    }
    if let Some(n) = map.get("log")
        && let Some(m) = errors.take(n.map())
    {
        if let Some(l) = m.get("level")
            && let Some(t) = errors.take(l.str())
        {
            s.log.level = t.to_owned();
        }
        if let Some(f) = m.get("format")
            && let Some(t) = errors.take(
                f.str()
                    .and_then(|t| parse_log_format(t).map_err(|m| f.error(m))),
            )
        {
            s.log.format = t;
        }
        deny(&m, LOG_KEYS, errors);
    }
    deny(&map, SERVER_KEYS, errors);
}

fn read_headers(node: Node<'_>, h: &mut HeaderSettings, errors: &mut Errors) {
    let Some(map) = errors.take(node.map()) else {
        return;
    };
    if let Some(n) = map.get("enabled")
        && let Some(b) = errors.take(n.bool())
    {
        h.enabled = b;
    }
    if let Some(n) = map.get("x_ratelimit")
        && let Some(b) = errors.take(n.bool())
    {
        h.x_ratelimit = b;
    }
    for (key, field) in [
        ("limit", &mut h.limit),
        ("remaining", &mut h.remaining),
        ("reset", &mut h.reset),
    ] {
        if let Some(n) = map.get(key)
            && let Some(t) = errors.take(n.str())
        {
            if http::HeaderName::from_bytes(t.as_bytes()).is_err() {
                errors.push(n.error(format!("`{t}` is not a valid header name")));
            } else {
                *field = t.to_owned();
            }
        }
    }
    deny(&map, HEADER_KEYS, errors);
}

pub(super) fn deny(map: &Map<'_>, allowed: &[&str], errors: &mut Errors) {
    for e in map.deny_unknown(allowed) {
        errors.push(e);
    }
}

pub(super) fn size(map: &Map<'_>, key: &str, field: &mut usize, errors: &mut Errors) {
    if let Some(n) = map.get(key) {
        let parsed = n.scalar_text().and_then(parse_size).filter(|s| *s > 0);
        match parsed {
            Some(s) => *field = s,
            None => errors.push(n.error(format!(
                "{key}: expected a size such as 1MiB or 65536, found {}",
                n.describe()
            ))),
        }
    }
}

pub(super) fn count(map: &Map<'_>, key: &str, field: &mut usize, errors: &mut Errors) {
    if let Some(n) = map.get(key) {
        match errors.take(n.u64()) {
            Some(0) => errors.push(n.error(format!("{key} must be at least 1"))),
            Some(v) => *field = v.min(usize::MAX as u64) as usize,
            None => {}
        }
    }
}

pub(super) fn duration(
    map: &Map<'_>,
    key: &str,
    field: &mut Duration,
    zero_ok: bool,
    errors: &mut Errors,
) {
    if let Some(n) = map.get(key) {
        let text = n.scalar_text().unwrap_or("");
        match parse_setting_duration(text) {
            Some(d) if zero_ok || !d.is_zero() => *field = d,
            _ => errors.push(ConfigError::new(
                n.at(),
                format!(
                    "{key}: expected a duration such as 500ms, 1.5s or 1m30s, found {}",
                    n.describe()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::StoreSettings;
    use super::*;
    use floodgate_redis::FailurePolicy;
    use std::sync::Arc;

    fn read(text: &str) -> Result<Settings, ConfigErrors> {
        let doc = Document::parse(&Arc::from("f.yaml"), text).unwrap();
        read_sections(&[doc])
    }

    #[test]
    fn full_sections() {
        let s = read(
            "server:\n  grpc: 127.0.0.1:9001\n  http: off\n  body_limit: 64KiB\n  response_headers: {enabled: true, limit: X-Limit, x_ratelimit: yes}\n  log: {level: debug, format: json}\nstore:\n  backend: redis\n  url: [a:1, b:2]\n  mode: cluster\n  timeout: 20ms\n  failure_policy: local\n  divide_by: 3\n  breaker: {failures: 2, cool_down: 5s}\n",
        )
        .unwrap();
        assert_eq!(s.server.grpc, Some("127.0.0.1:9001".parse().unwrap()));
        assert_eq!(s.server.http, None);
        assert_eq!(s.server.body_limit, 64 << 10);
        assert!(s.server.headers.enabled && s.server.headers.x_ratelimit);
        assert_eq!(s.server.headers.limit, "X-Limit");
        let StoreSettings::Redis(r) = s.store else {
            panic!()
        };
        assert_eq!(r.urls, ["redis://a:1", "redis://b:2"]);
        assert_eq!(r.timeout, Duration::from_millis(20));
        assert_eq!(r.failure_policy, FailurePolicy::Local { divide_by: 3 });
        assert_eq!(r.breaker.failure_threshold, 2);
    }

    #[test]
    fn shutdown_and_reload_durations() {
        let s = read(
            "server:\n  shutdown_delay: 1.5s\n  shutdown_grace: 1m30s\n  reload_interval: 0\n",
        )
        .unwrap();
        assert_eq!(s.server.shutdown_delay, Duration::from_millis(1500));
        assert_eq!(s.server.shutdown_grace, Duration::from_secs(90));
        assert_eq!(s.server.reload_interval, Duration::ZERO);
        assert_eq!(
            read("server: {}\n").unwrap().server.shutdown_delay,
            Duration::ZERO
        );
        let e = read("server:\n  shutdown_delay: soon\n").unwrap_err();
        assert!(e.to_string().contains("shutdown_delay"), "{e}");
    }

    #[test]
    fn errors_have_positions() {
        let e = read("server:\n  grpc: nowhere\n  colour: blue\nstore:\n  backend: etcd\n")
            .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("f.yaml:2:"), "{text}");
        assert!(text.contains("unknown key 'colour'"), "{text}");
        assert!(text.contains("unknown backend `etcd`"), "{text}");
    }
}
