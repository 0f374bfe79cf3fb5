//! The service's own settings (`server.grpc`, `server.body_limit`, ...):
//! one precedence for every setting, the documented table, the readings
//! teams migrating from envoyproxy/ratelimit rely on, and the `server:`
//! section shared with the host, each reading its own keys.

use std::collections::HashMap;
use std::sync::Arc;

use floodgate_policy::error::ConfigErrors;
use floodgate_policy::yaml::Document;
use floodgate_runtime::Settings;
use floodgate_runtime::host::Frontend;
use floodgate_runtime::settings::{Declared, Env, Flags};
use floodgate_server::{Rls, RlsSettings};
use floodgate_testkit::settings::{
    check_declared_once, check_defaults, check_docs, check_precedence,
};
use floodgate_testkit::tls::Pki;

#[test]
fn every_setting_follows_one_precedence() {
    let checked = check_precedence::<RlsSettings>();
    assert!(checked > 30, "{checked} comparisons");
}

#[test]
fn documented_defaults_are_the_defaults() {
    check_defaults::<RlsSettings>();
}

/// docs/service.md's table of the service's settings is the declarations'
/// (regenerate with `FLOODGATE_BLESS=1 cargo test -p floodgate-server
/// --test suite settings`).
#[test]
fn the_documented_settings_are_the_declared_ones() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/service.md");
    check_docs::<RlsSettings>(&path, "service");
}

/// Once each, and none the host declares too.
#[test]
fn every_setting_is_declared_once() {
    check_declared_once::<RlsSettings>();
    let host: Vec<&str> = Settings::table().iter().map(|s| s.key).collect();
    for s in RlsSettings::table() {
        assert!(!host.contains(&s.key), "{} declared by the host too", s.key);
    }
}

fn env_only(pairs: &[(&str, &str)]) -> Result<RlsSettings, ConfigErrors> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let lookup = move |k: &str| map.get(k).cloned();
    RlsSettings::resolve(&Flags::new(), &Env::new(&lookup), &[])
}

fn doc(name: &str, text: &str) -> Document {
    Document::parse(&Arc::from(name), text).unwrap()
}

fn file(text: &str) -> Result<RlsSettings, ConfigErrors> {
    RlsSettings::resolve(&Flags::new(), &Env::new(&|_| None), &[doc("f.yaml", text)])
}

#[test]
fn envoy_names() {
    let s = env_only(&[
        ("GRPC_PORT", "9001"),
        ("PORT", "9002"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
    ])
    .unwrap();
    assert_eq!(s.grpc, Some("0.0.0.0:9001".parse().unwrap()));
    assert_eq!(s.http, Some("0.0.0.0:9002".parse().unwrap()));
    assert!(s.headers.enabled);
    // The public listeners: all interfaces, as envoyproxy/ratelimit.
    let s = env_only(&[("FLOODGATE_HTTP_ADDR", ":7001")]).unwrap();
    assert_eq!(s.http, Some("0.0.0.0:7001".parse().unwrap()));
    let e = env_only(&[("GRPC_PORT", "eighty")])
        .unwrap_err()
        .to_string();
    assert_eq!(e, "GRPC_PORT: expected a port number, found `eighty`");
}

/// envoyproxy/ratelimit joins each host and port, each half defaulting on
/// its own (`HOST` 0.0.0.0, `PORT` 8080, `GRPC_PORT` 8081).
#[test]
fn a_host_or_a_port_alone_takes_the_other_half_s_default() {
    let s = env_only(&[("HOST", "::"), ("GRPC_HOST", "127.0.0.1")]).unwrap();
    assert_eq!(s.http, Some("[::]:8080".parse().unwrap()));
    assert_eq!(s.grpc, Some("127.0.0.1:8081".parse().unwrap()));
    let s = env_only(&[("GRPC_HOST", "::1"), ("PORT", "9002")]).unwrap();
    assert_eq!(s.grpc, Some("[::1]:8081".parse().unwrap()));
    assert_eq!(s.http, Some("0.0.0.0:9002".parse().unwrap()));
    // A bad host is named as the variable that gave it.
    let e = env_only(&[("HOST", "no such host")])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("HOST: "), "{e}");
}

/// One `server:` section, two readers: the service's keys and the host's
/// beside them, each reading its own; a key neither reads is refused,
/// with the one meant.
#[test]
fn the_server_section_is_shared_with_the_host() {
    let text = "server:\n  grpc: 127.0.0.1:9001\n  http: off\n  body_limit: 64KiB\n  response_headers: {enabled: true, limit: X-Limit, x_ratelimit: yes}\n  limits: {max_requests: 5, max_connections: 7, max_headers: 9}\n  log: {level: debug, format: json}\n";
    let s = file(text).unwrap();
    assert_eq!(s.grpc, Some("127.0.0.1:9001".parse().unwrap()));
    assert_eq!(s.http, None);
    assert_eq!(s.body_limit, 64 << 10);
    assert!(s.headers.enabled && s.headers.x_ratelimit);
    assert_eq!(s.headers.limit, "X-Limit");
    assert_eq!((s.max_requests, s.max_connections), (5, Some(7)));
    let host = Settings::resolve(
        &Flags::new(),
        &Env::new(&|_| None),
        &[doc("f.yaml", text)],
        &Rls::sections(),
    )
    .unwrap();
    assert_eq!(host.server.limits.max_headers, 9);
    assert_eq!(host.server.log.level, "debug");
    let e = file("server:\n  grcp: 127.0.0.1:1\n  limits: {max_conections: 5}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("f.yaml:2:9: unknown key 'grcp' (did you mean 'grpc'? expected one of:"),
        "{e}"
    );
    assert!(
        e.contains("unknown key 'max_conections' (did you mean 'max_connections'?"),
        "{e}"
    );
}

/// TLS on the gRPC and HTTP listeners: the certificate and key both or
/// neither, the files read and checked where they were given;
/// envoyproxy/ratelimit's gRPC TLS variables.
#[test]
fn listener_tls_is_checked_where_it_is_given() {
    let pki = Pki::new("settings");
    let leaf = pki.leaf("tls");
    let name = pki.dir.path().join("floodgate.yaml").display().to_string();
    let read =
        |text: &str| RlsSettings::resolve(&Flags::new(), &Env::new(&|_| None), &[doc(&name, text)]);
    let s = read("server: {tls: {grpc: {cert: tls.crt, key: tls.key}}}").unwrap();
    assert_eq!(s.grpc_tls.files().expect("TLS on gRPC").cert, leaf.cert);
    assert_eq!(s.http_tls.files(), None);
    let e = read("server: {tls: {http: {cert: tls.crt}}}")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("missing required key 'key'") && e.contains(":1:"),
        "{e}"
    );
    let e = read("server: {tls: {grpc: {cert: tls.crt, key: tls.crt}}}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("tls.crt"), "{e}");

    let (crt, key) = (
        leaf.cert.display().to_string(),
        leaf.key.display().to_string(),
    );
    let s = env_only(&[
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", &crt),
        ("GRPC_SERVER_TLS_KEY", &key),
    ])
    .unwrap();
    assert!(s.grpc_tls.files().is_some());
    // Without GRPC_SERVER_USE_TLS the files are not read, as envoyproxy/ratelimit does.
    let s = env_only(&[("GRPC_SERVER_TLS_CERT", &crt)]).unwrap();
    assert_eq!(s.grpc_tls.files(), None);
    let e = env_only(&[("GRPC_SERVER_USE_TLS", "true")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("GRPC_SERVER_TLS_CERT"), "{e}");
    assert!(e.starts_with("GRPC_SERVER_USE_TLS: "), "{e}");
    let e = env_only(&[("GRPC_SERVER_USE_TLS", "yes please")])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("GRPC_SERVER_USE_TLS: "), "{e}");
    let e = env_only(&[
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/nowhere/tls.crt"),
        ("GRPC_SERVER_TLS_KEY", "/nowhere/tls.key"),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("GRPC_SERVER_TLS_CERT"), "{e}");
}

/// Every variable of envoyproxy/ratelimit's `src/settings/settings.go`
/// (kept in `envoy_variables.txt`) is read by a setting of the runtime or
/// the service, or named in a warning at start-up when set: never
/// silently ignored.
#[test]
fn every_envoy_variable_is_read_or_warned_about() {
    use floodgate_runtime::settings::UNSUPPORTED_ENVOY_VARIABLES;
    let list = include_str!("../../floodgate-runtime/src/settings/envoy_variables.txt");
    let names: Vec<&str> = list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(names.len() > 100, "{} names", names.len());
    let host = Settings::table().iter().filter_map(|s| s.envoy);
    let service = RlsSettings::table().iter().filter_map(|s| s.envoy);
    let read: Vec<&str> = host.chain(service).flat_map(|e| e.variables()).collect();
    let warned: Vec<&str> = UNSUPPORTED_ENVOY_VARIABLES
        .iter()
        .flat_map(|(names, _)| names.iter().copied())
        .collect();
    let neither: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !read.contains(n) && !warned.contains(n))
        .collect();
    assert!(
        neither.is_empty(),
        "neither read nor warned about: {neither:?}"
    );
    let both: Vec<&str> = read
        .iter()
        .copied()
        .filter(|n| warned.contains(n))
        .collect();
    assert!(
        both.is_empty(),
        "read and warned about as ignored: {both:?}"
    );
}
