//! Configuration errors: every problem reported at once, with file, line,
//! column and the offending value.

use crate::common;

use std::sync::Arc;

use common::errors;
use floodgate_http::identity::{Action, IdentityConfig, IdentityError};
use floodgate_http::{HttpIdentity, HttpSection};
use floodgate_policy::yaml::Document;

/// Asserts `report` has a line `test.yaml:LINE:COL: ...` containing `text`.
#[track_caller]
fn has(report: &str, line: usize, column: usize, text: &str) {
    let prefix = format!("test.yaml:{line}:{column}: ");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with(&prefix) && l.contains(text)),
        "no `{prefix}...{text}` in:\n{report}"
    );
}

#[test]
fn unknown_keys_everywhere() {
    let r = errors(
        "domain: api
bogus: 1
client_ip: {trusted_hop: 1}
cost: {header: x-cost, max: 5, maxi: 6}
descriptors:
  - [{client_ip: {key: ip, name: x}}]",
    );
    has(
        &r,
        3,
        3,
        "unknown key 'bogus' (expected one of: domain, client_ip",
    );
    has(&r, 4, 15, "unknown key 'trusted_hop'");
    has(&r, 5, 34, "unknown key 'maxi'");
    has(
        &r,
        7,
        30,
        "unknown key 'name' for client_ip (expected one of: key)",
    );
    assert_eq!(r.lines().count(), 4, "{r}");
}

#[test]
fn client_ip_values() {
    let r = errors(
        "domain: api
client_ip:
  trusted_hops: 99
  trusted_proxies: [10.0.0.0/8, 10.0.0.0/33, nonsense]
  ipv4_prefix: 0
  ipv6_prefix: 200
descriptors: [[client_ip]]",
    );
    has(&r, 4, 19, "trusted_hops must be from 0 to 16 (got `99`)");
    has(&r, 5, 35, "invalid network '10.0.0.0/33'");
    has(&r, 5, 48, "invalid network 'nonsense'");
    has(&r, 6, 18, "ipv4_prefix must be from 1 to 32 (got `0`)");
    has(&r, 7, 18, "ipv6_prefix must be from 1 to 128 (got `200`)");
}

#[test]
fn a_header_without_trusted_proxies_is_an_error() {
    let r = errors("domain: api\nclient_ip: {header: forwarded}\ndescriptors: [[client_ip]]");
    has(
        &r,
        3,
        23,
        "the header `forwarded` is read only through trusted proxies",
    );
    let r = errors(
        "domain: api\nclient_ip: {header: 'bad header', trusted_hops: 1}\ndescriptors: [[method]]",
    );
    has(&r, 3, 23, "invalid header name `bad header`");
}

#[test]
fn actions() {
    let r = errors(
        "domain: api
descriptors:
  - [frobnicate]
  - [{header: {name: x-a}, method: {}}]
  - [header]
  - [{header: {name: 'x y'}}]
  - [user]
  - [{tenant: {key: t}}]
  - [{user: {header: x-u, extension: u}}]
  - [{generic: {key: g}}]
  - [{client_ip: {key: ''}}]
  - [route]
  - []
  - [{api_key: {hash: maybe}}]
  - [{method: [1]}]",
    );
    has(
        &r,
        4,
        8,
        "unknown action `frobnicate` (expected one of: client_ip, header",
    );
    has(
        &r,
        5,
        8,
        "an action is one name (optionally with options), found 2 keys: header, method",
    );
    has(&r, 6, 8, "header needs 'name'");
    has(&r, 7, 24, "invalid header name `x y`");
    has(&r, 8, 8, "user needs 'header' or 'extension'");
    has(&r, 9, 17, "tenant needs 'header' or 'extension'");
    has(
        &r,
        10,
        40,
        "user takes either 'header' or 'extension', not both",
    );
    has(&r, 11, 8, "generic needs 'value'");
    has(&r, 12, 8, "an entry key must not be empty");
    has(&r, 13, 8, "route needs route templates under 'routes'");
    has(&r, 14, 7, "a descriptor needs 1 to 64 actions (found 0)");
    has(&r, 15, 25, "expected true or false, found `maybe`");
    has(&r, 16, 17, "expected a mapping, found a list");
}

#[test]
fn tiers() {
    let r = errors(
        "domain: api
descriptors:
  - [{tier: {header: x-plan, values: [free, pro], default: gold}}]
  - [{tier: {header: x-plan, values: [free, FREE]}}]
  - [{tier: {header: x-plan}}]
  - [tier]",
    );
    has(
        &r,
        4,
        62,
        "the default tier `gold` is not one of the values (free, pro)",
    );
    has(&r, 5, 47, "duplicate tier `FREE`");
    has(&r, 6, 8, "tier needs 'values'");
    has(
        &r,
        7,
        8,
        "tier needs 'header' (or 'extension') and 'values'",
    );
}

#[test]
fn routes_and_costs() {
    let r = errors(
        r#"domain: api
routes: ["/users/{id}", "/users/{name}", "files/{f}", "/a/{b}.png"]
cost: {header: x-cost, max: 0, default: 5}
descriptors: [[route]]"#,
    );
    has(
        &r,
        3,
        27,
        "invalid route template `/users/{name}`: it matches the same paths as `/users/{id}`",
    );
    has(&r, 3, 44, "a route template starts with '/'");
    has(&r, 3, 57, "a parameter must be a whole segment");
    has(&r, 4, 31, "cost max must be from 1 to 1000000 (got `0`)");
    let r = errors("domain: api\ncost: {max: 5, default: 6}\ndescriptors: [[method]]");
    has(&r, 3, 9, "cost needs 'header' or 'extension'");
    has(&r, 3, 27, "cost default must be from 1 to 5 (got `6`)");
    let r = errors("domain: api\ncost: {header: x-cost}\ndescriptors: [[method]]");
    has(&r, 3, 9, "missing required key 'max'");
}

#[test]
fn section_level() {
    let r = errors("client_ip: {}\nmax_value_len: 8");
    has(&r, 2, 3, "missing required key 'domain'");
    has(&r, 2, 3, "missing required key 'descriptors'");
    has(
        &r,
        3,
        18,
        "max_value_len must be from 32 to 16384 (got `8`)",
    );
    let r = errors("domain: ''\ndescriptors: []");
    has(&r, 2, 3, "domain must not be empty");
    has(&r, 3, 16, "descriptors needs 1 to 64 descriptors (found 0)");

    let e = HttpIdentity::from_yaml_str("test.yaml", "domains: []\n").unwrap_err();
    assert_eq!(e.to_string(), "test.yaml:1:1: missing required key 'http'");
    let e = HttpIdentity::from_yaml_str("test.yaml", "http: {domain: [\n").unwrap_err();
    assert!(e.to_string().starts_with("test.yaml:"), "{e}");
    let e = HttpIdentity::from_yaml_str("test.yaml", "http: 5\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "test.yaml:1:7: expected a mapping, found a scalar"
    );
}

#[test]
fn read_from_loaded_documents() {
    let doc = |text: &str| Document::parse(&Arc::from("f.yaml"), text).unwrap();
    let with = "http: {domain: api, descriptors: [[method]]}\n";
    let docs = [doc("domains: []\n"), doc(with)];
    let section = HttpSection::from_documents(&docs).unwrap().unwrap();
    assert_eq!(section.identity.domain(), "api");
    assert!(HttpSection::from_documents(&docs[..1]).unwrap().is_none());
    let e = HttpSection::from_documents(&[doc(with), doc(with)]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "f.yaml:1:7: 'http' is already given in f.yaml:1:7"
    );
}

#[test]
fn configuration_in_code() {
    let mut c = IdentityConfig {
        domain: "api".into(),
        descriptors: vec![vec![Action::client_ip(), Action::generic("scope", "all")]],
        ..Default::default()
    };
    assert!(HttpIdentity::new(c.clone()).is_ok());
    c.routes = vec!["/a/{x}".into(), "/a/{y}".into()];
    assert!(matches!(
        HttpIdentity::new(c.clone()),
        Err(IdentityError::Route { .. })
    ));
    c.routes.clear();
    c.client_ip.trusted_hops = 17;
    let e = HttpIdentity::new(c.clone()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "client_ip: trusted_hops must be from 0 to 16 (got `17`)"
    );
    c.client_ip.trusted_hops = 1;
    c.descriptors.push(vec![]);
    let e = HttpIdentity::new(c.clone()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "descriptor 1: a descriptor needs 1 to 64 actions (found 0)"
    );
    c.descriptors.pop();
    c.domain.clear();
    assert!(HttpIdentity::new(c).is_err());
}

#[test]
fn the_documented_example_is_valid() {
    let docs = include_str!("../src/identity/mod.rs");
    let yaml: String = docs
        .lines()
        .map(|l| l.strip_prefix("//!").unwrap_or(l))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .skip_while(|l| *l != "```yaml")
        .skip(1)
        .take_while(|l| *l != "```")
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(yaml.starts_with("http:\n"), "{yaml}");
    let id = HttpIdentity::from_yaml_str("doc.yaml", &yaml).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((id.domain(), id.descriptor_count()), ("api", 5));
}

#[test]
fn layer_settings_errors_name_the_setting() {
    let r = |layer: &str| {
        let text = format!("http:\n  domain: api\n  descriptors: [[client_ip]]\n  layer:\n{layer}");
        HttpSection::from_yaml_str("test.yaml", &text)
            .unwrap_err()
            .to_string()
    };
    let e = r("    on_error: maybe\n    max_delayed: 9999999999999\n");
    has(&e, 5, 15, "on_error must be allow or reject (got 'maybe')");
    has(&e, 6, 18, "max_delayed is too large (got 9999999999999)");
    let e = r("    shedding: {max_in_flight: 5, low_priority: {header: {name: x-p}}}\n");
    has(&e, 5, 15, "missing required key 'low_priority_above'");
    has(&e, 5, 57, "the low-priority header needs 'values'");
    let e = r(
        "    shedding: {low_priority_above: 1, low_priority: {header: {name: x y, values: [a]}}}\n",
    );
    has(&e, 5, 69, "invalid header name `x y`");
    let e = r("    concurrency:\n      global: {max: 0, key: user}\n      per_key: {max: 2}\n");
    has(&e, 6, 15, "max must be at least 1");
    has(&e, 6, 29, "only per_key takes 'key'");
    has(
        &e,
        7,
        16,
        "per_key needs 'key': the descriptor entry key (e.g. user)",
    );
    let e = r("    concurrency: {global: {queue: 3}, per_key: {max: 1, key: ''}}\n");
    has(&e, 5, 27, "missing required key 'max'");
    has(&e, 5, 48, "per_key needs 'key'");
}

/// The errors of an `http.layer` section `layer` (indented under it).
fn layer_errors(layer: &str) -> String {
    let text = format!("http:\n  domain: api\n  descriptors: [[client_ip]]\n  layer:\n{layer}");
    HttpSection::from_yaml_str("test.yaml", &text)
        .unwrap_err()
        .to_string()
}

#[test]
fn adaptive_settings_are_read_with_their_defaults() {
    let text = "http:\n  domain: api\n  descriptors: [[client_ip]]\n  layer:\n    shedding:\n      critical: {routes: ['/pay']}\n      adaptive: {min: 2, max: 50, tolerance: 1, shares: {sheddable: 0.25}}\n";
    let s = HttpSection::from_yaml_str("test.yaml", text).unwrap_or_else(|e| panic!("{e}"));
    let shedding = s.layer.shedding.unwrap();
    assert_eq!(shedding.low_priority_above, usize::MAX);
    assert_eq!(shedding.critical.routes, ["/pay"]);
    let expected = floodgate_http::layer::Adaptive {
        min: 2,
        max: 50,
        tolerance: 1.0,
        sheddable_share: 0.25,
        ..Default::default()
    };
    assert_eq!(shedding.adaptive, Some(expected));
}

#[test]
fn the_documented_adaptive_settings_read_as_their_defaults() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/http-contract.md"
    ))
    .unwrap();
    let section = &doc[doc.find("### Adaptive concurrency").unwrap()..];
    let start = section.find("```yaml\n").unwrap() + 8;
    let block = &section[start..start + section[start..].find("```").unwrap()];
    let layer: String = block.lines().map(|l| format!("    {l}\n")).collect();
    let text = format!("http:\n  domain: api\n  descriptors: [[client_ip]]\n  layer:\n{layer}");
    let s = HttpSection::from_yaml_str("test.yaml", &text).unwrap_or_else(|e| panic!("{e}"));
    let shedding = s.layer.shedding.unwrap();
    assert_eq!(shedding.adaptive, Some(Default::default()));
    assert_eq!(shedding.critical.routes, ["/checkout"]);
}

#[test]
fn the_adaptive_queue_is_read_with_its_defaults() {
    let text = "http:\n  domain: api\n  descriptors: [[client_ip]]\n  layer:\n    shedding:\n      adaptive: {queue: {order: lifo, timeout: 50ms}}\n";
    let s = HttpSection::from_yaml_str("test.yaml", text).unwrap_or_else(|e| panic!("{e}"));
    let adaptive = s.layer.shedding.unwrap().adaptive.unwrap();
    let expected = floodgate_http::layer::AdaptiveQueue {
        order: floodgate_http::layer::QueueOrder::Lifo,
        timeout: std::time::Duration::from_millis(50),
        ..Default::default()
    };
    assert_eq!(adaptive.queue, Some(expected));
}

#[test]
fn the_documented_queue_settings_read_as_their_defaults() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/http-contract.md"
    ))
    .unwrap();
    let section = &doc[doc.find("#### The queue").unwrap()..];
    let start = section.find("```yaml\n").unwrap() + 8;
    let block = &section[start..start + section[start..].find("```").unwrap()];
    let queue: String = block.lines().map(|l| format!("        {l}\n")).collect();
    let text = format!(
        "http:\n  domain: api\n  descriptors: [[client_ip]]\n  layer:\n    shedding:\n      adaptive:\n{queue}"
    );
    let s = HttpSection::from_yaml_str("test.yaml", &text).unwrap_or_else(|e| panic!("{e}"));
    let adaptive = s.layer.shedding.unwrap().adaptive.unwrap();
    assert_eq!(adaptive.queue, Some(Default::default()));
}

#[test]
fn bad_adaptive_queue_settings_are_refused_with_the_reason() {
    let e = layer_errors(
        "    shedding:\n      adaptive: {queue: {max_waiting: 0, timeout: 0s, interval: 2m, order: random}}\n",
    );
    has(&e, 6, 39, "max_waiting must be in 1..=16777216 (got 0)");
    has(&e, 6, 51, "expected a duration above zero, found `0s`");
    has(&e, 6, 65, "interval must be at most 60s");
    has(
        &e,
        6,
        76,
        "order must be codel, lifo or fifo (got 'random')",
    );
    let e = layer_errors(
        "    shedding:\n      adaptive: {queue: {timeout: 10ms, target: 20ms, colour: red}}\n",
    );
    has(&e, 6, 49, "target (20ms) must not be above timeout (10ms)");
    has(&e, 6, 55, "unknown key 'colour'");
    let e = layer_errors("    shedding:\n      adaptive: {queue: 5}\n");
    assert!(e.contains("6:"), "{e}");
}

#[test]
fn bad_adaptive_settings_are_refused_with_the_reason() {
    let e = layer_errors("    shedding:\n      adaptive: {min: 10, max: 5}\n");
    has(&e, 6, 23, "min (10) is above max (5)");
    let e = layer_errors("    shedding:\n      adaptive: {min: 0, max: 0, initial: -3}\n");
    has(&e, 6, 23, "min must be in 1..=16777216 (got 0)");
    has(&e, 6, 31, "max must be in 1..=16777216 (got 0)");
    has(&e, 6, 43, "expected a non-negative integer, found `-3`");
    let e = layer_errors("    shedding:\n      adaptive: {min: 5, max: 9, initial: 20}\n");
    has(&e, 6, 43, "initial (20) must be within min..=max (5..=9)");
    let e = layer_errors(
        "    shedding:\n      adaptive: {tolerance: 0, smoothing: 1.5, interval: 0s, min_samples: 0}\n",
    );
    has(
        &e,
        6,
        29,
        "tolerance must be a number above 0, at most 10 (got `0`)",
    );
    has(
        &e,
        6,
        43,
        "smoothing must be a number above 0, at most 1 (got `1.5`)",
    );
    has(&e, 6, 58, "expected a duration above zero, found `0s`");
    has(&e, 6, 75, "min_samples must be in 1..=1000000 (got 0)");
    let e = layer_errors(
        "    shedding:\n      adaptive: {tolerance: lots, interval: 2h, shares: {sheddable: 0.9, default: 0.5}}\n",
    );
    has(
        &e,
        6,
        29,
        "tolerance must be a number above 0, at most 10 (got `lots`)",
    );
    has(&e, 6, 45, "interval must be at most 60s");
    has(
        &e,
        6,
        57,
        "shares: sheddable (0.9) must not be above default (0.5)",
    );
    let e = layer_errors("    shedding:\n      adaptive: {max: 99999999999, colour: red}\n");
    has(&e, 6, 23, "max must be in 1..=16777216 (got 99999999999)");
    has(&e, 6, 36, "unknown key 'colour'");
    let e = layer_errors("    shedding: {critical: {header: {name: x-p}}}\n");
    has(&e, 5, 15, "missing required key 'low_priority_above'");
    has(&e, 5, 35, "the critical header needs 'values'");
}

#[test]
fn response_settings_errors_name_the_setting() {
    let text = "http:\n  domain: api\n  descriptors: [[client_ip]]\n  responses:\n    headers: [ietf, x-rate]\n    status: 200\n    error_status: 700\n    hide_headers: maybe\n    rules: {per-ip: {status: 302, color: red}}\n";
    let e = HttpSection::from_yaml_str("test.yaml", text)
        .unwrap_err()
        .to_string();
    has(
        &e,
        5,
        21,
        "unknown header form 'x-rate' (expected ietf, x-ratelimit, x-ratelimit-epoch, draft-03 or none)",
    );
    has(
        &e,
        6,
        13,
        "status must be an HTTP error status from 400 to 599 (got `200`)",
    );
    has(
        &e,
        7,
        19,
        "status must be an HTTP error status from 400 to 599 (got `700`)",
    );
    has(&e, 8, 19, "expected true or false, found `maybe`");
    has(
        &e,
        9,
        30,
        "status must be an HTTP error status from 400 to 599 (got `302`)",
    );
    has(
        &e,
        9,
        35,
        "unknown key 'color' (expected one of: status, hide, policy_name)",
    );
}
