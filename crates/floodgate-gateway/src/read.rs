//! Reading the `gateway:` section of Floodgate files, reporting every
//! problem with its file, line and column.

use std::time::Duration;

use floodgate_policy::error::{ConfigErrors, Errors};
use floodgate_policy::unit::parse_duration;
use floodgate_policy::yaml::{Document, Map, Node, excerpt};
use floodgate_runtime::settings::{parse_listen, parse_size};

use crate::config::{GatewayConfig, HostHeader, UpstreamProtocol, UpstreamUrl};
use crate::read_tls::{read_listener_tls, read_upstream_tls};

/// The top-level key this crate reads.
pub const SECTION: &str = "gateway";

const KEYS: &[&str] = &[
    "listen",
    "tls",
    "upstream",
    "limits",
    "workers",
    "access_log",
];
const UPSTREAM_KEYS: &[&str] = &[
    "url",
    "protocol",
    "connect_timeout",
    "response_timeout",
    "pool_idle_timeout",
    "pool_max_idle",
    "host",
    "tls",
];
const LIMIT_KEYS: &[&str] = &[
    "header_read_timeout",
    "body_read_timeout",
    "max_header_bytes",
    "max_headers",
    "max_body_bytes",
    "max_connections",
    "max_concurrent_streams",
    "http2_idle_timeout",
];

impl GatewayConfig {
    /// Reads the `gateway:` section from the loaded Floodgate documents (it
    /// may appear in one file only). `Ok(None)` when no file has one.
    pub fn from_documents(documents: &[Document]) -> Result<Option<GatewayConfig>, ConfigErrors> {
        let mut errors = Errors::default();
        let mut found: Option<(GatewayConfig, String)> = None;
        for doc in documents {
            let Some(root) = errors.take(doc.root().map()) else {
                continue;
            };
            let Some(node) = root.get(SECTION) else {
                continue;
            };
            if let Some((_, first)) = &found {
                errors.push(node.error(format!("'{SECTION}' is already given in {first}")));
                continue;
            }
            let config = read_section(node, &mut errors);
            found = Some((config, node.at().to_string()));
        }
        errors.finish(found.map(|(c, _)| c))
    }

    /// Reads a `gateway:` section (the node under the key).
    pub fn from_yaml(node: Node<'_>) -> Result<GatewayConfig, ConfigErrors> {
        let mut errors = Errors::default();
        let config = read_section(node, &mut errors);
        errors.finish(config)
    }
}

fn read_section(node: Node<'_>, errors: &mut Errors) -> GatewayConfig {
    let mut c = GatewayConfig::default();
    let Some(map) = errors.take(node.map()) else {
        return c;
    };
    if let Some(n) = map.get("listen") {
        let parsed = n.str().and_then(|t| match parse_listen(t) {
            Ok(Some(a)) => Ok(a),
            Ok(None) => Err(n.error("the gateway needs a listen address")),
            Err(m) => Err(n.error(m)),
        });
        if let Some(a) = errors.take(parsed) {
            c.listen = a;
        }
    }
    if let Some(n) = map.get("tls") {
        c.tls = read_listener_tls(n, errors);
    }
    if let Some(n) = map.get("workers") {
        match errors.take(n.u64()) {
            Some(w @ 1..=1024) => c.workers = Some(w as usize),
            Some(_) => errors.push(n.error("workers must be from 1 to 1024")),
            None => {}
        }
    }
    if let Some(n) = map.get("access_log")
        && let Some(on) = errors.take(n.bool())
    {
        c.access_log = on;
    }
    match map.get("upstream") {
        Some(n) => read_upstream(n, &mut c, errors),
        None => errors.push(node.error("missing required key 'upstream'")),
    }
    if let Some(n) = map.get("limits") {
        read_limits(n, &mut c, errors);
    }
    for e in map.deny_unknown(KEYS) {
        errors.push(e);
    }
    c
}

fn read_upstream(node: Node<'_>, c: &mut GatewayConfig, errors: &mut Errors) {
    // `upstream: http://host:port` is the short form.
    if let Ok(text) = node.str() {
        match UpstreamUrl::parse(text) {
            Ok(u) => c.upstream.urls.push(u),
            Err(m) => errors.push(node.error(m)),
        }
        return;
    }
    let Some(map) = errors.take(node.map()) else {
        return;
    };
    match map.get("url") {
        None => errors.push(node.error("missing required key 'url'")),
        Some(n) => {
            let items = match n.list() {
                Ok(list) => list,
                Err(_) => vec![n],
            };
            for item in items {
                if let Some(text) = errors.take(item.str()) {
                    match UpstreamUrl::parse(text) {
                        Ok(u) => c.upstream.urls.push(u),
                        Err(m) => errors.push(item.error(m)),
                    }
                }
            }
            if c.upstream.urls.is_empty() {
                errors.push(n.error("at least one upstream URL is needed"));
            }
        }
    }
    if let Some(n) = map.get("protocol") {
        match errors.take(n.str()) {
            Some("http1" | "http/1.1" | "HTTP/1.1") => {
                c.upstream.protocol = UpstreamProtocol::Http1
            }
            Some("http2" | "h2c" | "http/2" | "HTTP/2") => {
                c.upstream.protocol = UpstreamProtocol::Http2
            }
            Some(other) => errors.push(n.error(format!(
                "protocol must be http1 or http2 (got '{}')",
                excerpt(other)
            ))),
            None => {}
        }
    }
    if let Some(n) = map.get("host") {
        match errors.take(n.str()) {
            Some("preserve") => c.upstream.host = HostHeader::Preserve,
            Some("upstream") => c.upstream.host = HostHeader::Upstream,
            Some(other) => errors.push(n.error(format!(
                "host must be preserve or upstream (got '{}')",
                excerpt(other)
            ))),
            None => {}
        }
    }
    if let Some(n) = map.get("tls") {
        c.upstream.tls = read_upstream_tls(n, errors);
    }
    let u = &mut c.upstream;
    duration(&map, "connect_timeout", &mut u.connect_timeout, errors);
    duration(&map, "response_timeout", &mut u.response_timeout, errors);
    duration(&map, "pool_idle_timeout", &mut u.pool_idle_timeout, errors);
    if let Some(n) = map.get("pool_max_idle")
        && let Some(v) = errors.take(n.u64())
    {
        u.pool_max_idle = v.min(1 << 20) as usize;
    }
    for e in map.deny_unknown(UPSTREAM_KEYS) {
        errors.push(e);
    }
}

fn read_limits(node: Node<'_>, c: &mut GatewayConfig, errors: &mut Errors) {
    let Some(map) = errors.take(node.map()) else {
        return;
    };
    let l = &mut c.limits;
    duration(
        &map,
        "header_read_timeout",
        &mut l.header_read_timeout,
        errors,
    );
    duration(&map, "body_read_timeout", &mut l.body_read_timeout, errors);
    duration(
        &map,
        "http2_idle_timeout",
        &mut l.http2_idle_timeout,
        errors,
    );
    if let Some(n) = map.get("max_header_bytes") {
        match n.scalar_text().and_then(parse_size) {
            Some(s @ 1024..=16_777_216) => l.max_header_bytes = s,
            _ => errors.push(n.error(format!(
                "max_header_bytes: expected a size from 1KiB to 16MiB, found {}",
                n.describe()
            ))),
        }
    }
    if let Some(n) = map.get("max_body_bytes") {
        // 0: no limit (as nginx's `client_max_body_size 0`).
        match n.scalar_text().and_then(parse_size) {
            Some(0) => l.max_body_bytes = None,
            Some(s) => l.max_body_bytes = Some(s as u64),
            None => errors.push(n.error(format!(
                "max_body_bytes: expected a size such as 10MiB (0: no limit), found {}",
                n.describe()
            ))),
        }
    }
    count(&map, "max_headers", 1, 10_000, errors, |v| {
        l.max_headers = v as usize
    });
    count(&map, "max_connections", 1, 10_000_000, errors, |v| {
        l.max_connections = v as usize
    });
    count(&map, "max_concurrent_streams", 1, 1 << 20, errors, |v| {
        l.max_concurrent_streams = v as u32
    });
    for e in map.deny_unknown(LIMIT_KEYS) {
        errors.push(e);
    }
}

fn count(map: &Map<'_>, key: &str, min: u64, max: u64, errors: &mut Errors, set: impl FnOnce(u64)) {
    if let Some(n) = map.get(key) {
        match errors.take(n.u64()) {
            Some(v) if (min..=max).contains(&v) => set(v),
            Some(_) => errors.push(n.error(format!("{key} must be from {min} to {max}"))),
            None => {}
        }
    }
}

fn duration(map: &Map<'_>, key: &str, field: &mut Duration, errors: &mut Errors) {
    if let Some(n) = map.get(key) {
        match n.scalar_text().and_then(parse_duration) {
            Some(d) if !d.is_zero() => *field = d,
            _ => errors.push(n.error(format!(
                "{key}: expected a duration such as 500ms or 10s, found {}",
                n.describe()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn read(text: &str) -> Result<Option<GatewayConfig>, ConfigErrors> {
        let doc = Document::parse(&Arc::from("g.yaml"), text).unwrap();
        GatewayConfig::from_documents(&[doc])
    }

    #[test]
    fn full_section() {
        let c = read(
            "gateway:\n  listen: 127.0.0.1:8001\n  workers: 2\n  access_log: true\n  upstream:\n    url: [http://a:1, http://b:2/api]\n    protocol: http2\n    connect_timeout: 1s\n    response_timeout: 3s\n    host: upstream\n  limits:\n    header_read_timeout: 2s\n    max_header_bytes: 16KiB\n    max_body_bytes: 1MiB\n    max_connections: 5\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.listen, "127.0.0.1:8001".parse().unwrap());
        assert_eq!(c.workers, Some(2));
        assert!(c.access_log);
        assert_eq!(c.upstream.urls.len(), 2);
        assert_eq!(c.upstream.urls[1].prefix, "/api");
        assert_eq!(c.upstream.protocol, UpstreamProtocol::Http2);
        assert_eq!(c.upstream.response_timeout, Duration::from_secs(3));
        assert_eq!(c.upstream.host, HostHeader::Upstream);
        assert_eq!(c.limits.header_read_timeout, Duration::from_secs(2));
        assert_eq!(c.limits.max_header_bytes, 16 << 10);
        assert_eq!(c.limits.max_connections, 5);
        assert_eq!(c.limits.max_body_bytes, Some(1 << 20));
    }

    #[test]
    fn short_form_and_absence() {
        let c = read("gateway:\n  upstream: http://127.0.0.1:9000\n")
            .unwrap()
            .unwrap();
        assert_eq!(c.upstream.urls[0].authority.as_str(), "127.0.0.1:9000");
        assert!(!c.access_log);
        assert_eq!(c.limits.max_body_bytes, None, "no limit by default");
        assert!(read("domains: []\n").unwrap().is_none());
        let c = read("gateway:\n  upstream: http://a:1\n  limits: {max_body_bytes: 0}\n")
            .unwrap()
            .unwrap();
        assert_eq!(c.limits.max_body_bytes, None, "0 is no limit");
    }

    #[test]
    fn errors_have_positions() {
        let e = read(
            "gateway:\n  listen: nowhere\n  colour: blue\n  access_log: sometimes\n  upstream:\n    url: ftp://x\n    protocol: spdy\n  limits: {header_read_timeout: soon, max_body_bytes: lots}\n",
        )
        .unwrap_err()
        .to_string();
        for want in [
            "g.yaml:2:",
            "unknown key 'colour'",
            "g.yaml:4:",
            "scheme `ftp`",
            "protocol must be http1 or http2",
            "header_read_timeout: expected a duration",
            "max_body_bytes: expected a size",
        ] {
            assert!(e.contains(want), "{want} not in {e}");
        }
        let e = read("gateway:\n  listen: :8000\n").unwrap_err().to_string();
        assert!(e.contains("missing required key 'upstream'"), "{e}");
    }
}
