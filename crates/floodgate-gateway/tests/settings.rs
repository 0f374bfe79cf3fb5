//! The gateway's settings: one precedence for every one of them, the
//! documented table, and the `gateway:` section as files write it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use floodgate_gateway::settings::Draft;
use floodgate_gateway::{GatewayConfig, HostHeader, UpstreamProtocol};
use floodgate_policy::error::ConfigErrors;
use floodgate_policy::yaml::Document;
use floodgate_runtime::Settings;
use floodgate_runtime::settings::Declared;
use floodgate_testkit::settings::{
    check_declared_once, check_defaults, check_docs, check_precedence,
};

/// Every setting as read ([`Draft`]: before the files named are checked,
/// which have tests of their own).
#[test]
fn every_setting_follows_one_precedence() {
    let checked = check_precedence::<Draft>();
    assert!(checked > 50, "{checked} comparisons");
}

#[test]
fn documented_defaults_are_the_defaults() {
    check_defaults::<Draft>();
}

/// docs/gateway.md's table of settings is the declarations' (regenerate
/// with `FLOODGATE_BLESS=1 cargo test -p floodgate-gateway --lib`).
#[test]
fn the_documented_settings_are_the_declared_ones() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/gateway.md");
    check_docs::<Draft>(&path, "gateway");
}

#[test]
fn every_setting_is_declared_once() {
    check_declared_once::<Draft>();
    // Nor does a flag or variable of the gateway repeat one of the
    // runtime's (the gateway's command takes both).
    for g in Draft::table() {
        for r in Settings::table() {
            assert_ne!(g.env, r.env);
            assert!(g.flag.is_none() || g.flag != r.flag, "{}", g.key);
        }
    }
}

fn read(text: &str) -> Result<Option<GatewayConfig>, ConfigErrors> {
    let doc = Document::parse(&Arc::from("g.yaml"), text).unwrap();
    GatewayConfig::from_documents(&[doc])
}

#[test]
fn full_section() {
    let c = read(
        "gateway:\n  listen: 127.0.0.1:8001\n  access_log: true\n  upstream:\n    url: [http://a:1, http://b:2/api]\n    protocol: http2\n    connect_timeout: 1s\n    response_timeout: 3.5s\n    host: upstream\n  limits:\n    header_read_timeout: 2s\n    max_header_bytes: 16KiB\n    max_body_bytes: 1MiB\n    max_connections: 5\n",
    )
    .unwrap()
    .unwrap();
    assert_eq!(c.listen, "127.0.0.1:8001".parse().unwrap());
    assert!(c.access_log);
    assert_eq!(c.upstream.urls.len(), 2);
    assert_eq!(c.upstream.urls[1].prefix, "/api");
    assert_eq!(c.upstream.protocol, UpstreamProtocol::Http2);
    assert_eq!(c.upstream.response_timeout, Duration::from_millis(3500));
    assert_eq!(c.upstream.host, HostHeader::Upstream);
    assert_eq!(
        c.limits.connection.header_read_timeout,
        Duration::from_secs(2)
    );
    assert_eq!(c.limits.connection.max_header_bytes, 16 << 10);
    assert_eq!(c.limits.max_connections, Some(5));
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
        "protocol: expected http1 or http2, found `spdy`",
        "header_read_timeout: expected a duration",
        "max_body_bytes: expected a size",
    ] {
        assert!(e.contains(want), "{want} not in {e}");
    }
    let e = read("gateway:\n  listen: :8000\n").unwrap_err().to_string();
    assert!(
        e.contains("g.yaml:2:3: missing required key 'upstream'"),
        "{e}"
    );
}

fn read_in(dir: &Path, text: &str) -> Result<Option<GatewayConfig>, ConfigErrors> {
    let file = dir.join("g.yaml");
    let name: Arc<str> = Arc::from(file.to_str().unwrap());
    let doc = Document::parse(&name, text).unwrap();
    GatewayConfig::from_documents(&[doc])
}

fn pair(dir: &Path, name: &str) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

#[test]
fn tls_files_are_resolved_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    pair(dir.path(), "a");
    pair(dir.path(), "b");
    let c = read_in(
        dir.path(),
        "gateway:\n  tls: {cert: a.crt, key: a.key}\n  upstream:\n    url: https://x\n    tls: {ca: b.crt, cert: b.crt, key: b.key}\n",
    )
    .unwrap()
    .unwrap();
    let tls = c.tls.unwrap();
    assert_eq!(tls.cert, dir.path().join("a.crt"), "relative to the file");
    assert_eq!(c.upstream.tls.ca, Some(dir.path().join("b.crt")));
    assert!(c.upstream.urls[0].tls);

    let e = read_in(
        dir.path(),
        "gateway:\n  tls: {cert: a.crt, key: b.key, colour: red}\n  upstream:\n    url: https://x\n    tls: {ca: nowhere.pem, cert: a.crt}\n",
    )
    .unwrap_err()
    .to_string();
    for want in [
        "g.yaml:2:",
        "unknown key 'colour'",
        "a.crt with key",
        "nowhere.pem",
        "g.yaml:5:",
        "needs both 'cert' and 'key'",
    ] {
        assert!(e.contains(want), "{want} not in {e}");
    }
    let e = read_in(
        dir.path(),
        "gateway:\n  tls: {cert: a.crt}\n  upstream: http://x\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("missing required key 'key'"), "{e}");
}
