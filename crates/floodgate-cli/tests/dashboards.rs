//! The Grafana dashboards read what the binaries write: every PromQL
//! expression of deploy/grafana's dashboards, and of Envoy Gateway's rate
//! limit dashboard (`tests/dashboards/`, unchanged), names metrics and
//! labels (and, where a matcher names one, label values) found on
//! `/metrics` of a running `floodgate serve` (with `USE_PROMETHEUS=true`)
//! or `floodgate gateway` after some traffic. Labels Prometheus attaches
//! when it scrapes (`job`, `instance`, Kubernetes pod labels) are not the
//! binaries' to write.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use floodgate_testkit::prometheus::{Sample, scrape};
use floodgate_testkit::{Floodgate, Gateway, free_port, http_request, wait_until, workspace_root};
use serde_json::Value;

/// Labels the scrape adds: Prometheus's target labels, and the pod label
/// Envoy Gateway's dashboard selects its rate limit service by
/// (`app.kubernetes.io/component: ratelimit`, on the Deployment it runs).
const SCRAPE_LABELS: [&str; 5] = [
    "job",
    "instance",
    "namespace",
    "pod",
    "app_kubernetes_io_component",
];

/// PromQL words that are not metric names: keywords, and the
/// aggregations (which a grouping may separate from their `(`).
const KEYWORDS: [&str; 23] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "group",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
];

/// One selector of an expression: a metric name and its matchers
/// (label, operator, value).
#[derive(Debug)]
struct Selector {
    name: String,
    matchers: Vec<(String, String, String)>,
}

/// What an expression reads: its selectors, and the labels it groups by.
#[derive(Debug, Default)]
struct Reads {
    selectors: Vec<Selector>,
    grouping: Vec<String>,
}

/// The selectors and grouping labels of `expr` (a function's name is
/// followed by `(`; a range `[…]` and a string outside braces are skipped).
fn reads(expr: &str) -> Reads {
    let b = expr.as_bytes();
    let mut out = Reads::default();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'[' || c == b'"' {
            let close = if c == b'[' { b']' } else { b'"' };
            i += 1
                + expr[i + 1..]
                    .find(close as char)
                    .unwrap_or(expr.len() - i - 1)
                + 1;
        } else if c.is_ascii_digit() {
            // A number (or a duration): digits, dots, letters.
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            i = word(expr, &expr[start..i], i, &mut out);
        } else {
            i += 1;
        }
    }
    out
}

/// Reads what follows the word `w` ending at `i`; where to go on.
fn word(expr: &str, w: &str, i: usize, out: &mut Reads) -> usize {
    let rest = &expr[i..];
    let next = i + (rest.len() - rest.trim_start().len());
    let after = expr[next..].chars().next();
    if w == "by" || w == "without" {
        let close = next + expr[next..].find(')').unwrap();
        out.grouping.extend(
            expr[next + 1..close]
                .split(',')
                .map(|l| l.trim().to_owned())
                .filter(|l| !l.is_empty()),
        );
        return close + 1;
    }
    if KEYWORDS.contains(&w) || after == Some('(') {
        return i;
    }
    let mut selector = Selector {
        name: w.to_owned(),
        matchers: vec![],
    };
    if after != Some('{') {
        out.selectors.push(selector);
        return i;
    }
    let close = next + expr[next..].find('}').unwrap();
    for m in expr[next + 1..close]
        .split(',')
        .filter(|m| !m.trim().is_empty())
    {
        let at = m.find(['=', '!']).unwrap();
        let op_len = if m[at + 1..].starts_with(['=', '~']) {
            2
        } else {
            1
        };
        let value = m[at + op_len..].trim().trim_matches('"');
        selector.matchers.push((
            m[..at].trim().to_owned(),
            m[at..at + op_len].to_owned(),
            value.to_owned(),
        ));
    }
    out.selectors.push(selector);
    close + 1
}

/// Every panel's expressions of a dashboard (nested rows included), its
/// variables replaced by their current values (a multi-valued or `All`
/// one stays as written and matches anything).
fn expressions(dashboard: &Value) -> Vec<String> {
    let mut vars = BTreeMap::new();
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(value) = v["current"]["value"]
            .as_str()
            .filter(|v| !v.starts_with('$'))
        {
            vars.insert(
                format!("${}", v["name"].as_str().unwrap()),
                value.to_owned(),
            );
        }
    }
    let mut out = vec![];
    collect(&dashboard["panels"], &mut out);
    out.into_iter()
        .map(|e| {
            vars.iter()
                .fold(e, |e, (k, v)| e.replace(k, v))
                .replace("$__rate_interval", "5m")
        })
        .collect()
}

fn collect(panels: &Value, out: &mut Vec<String>) {
    for p in panels.as_array().into_iter().flatten() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.extend(t["expr"].as_str().map(str::to_owned));
        }
        collect(&p["panels"], out);
    }
}

/// What of `expr` the samples lack (empty: it resolves).
fn missing(expr: &str, samples: &[Sample]) -> Vec<String> {
    let r = reads(expr);
    let mut lacks = vec![];
    let mut read = vec![];
    for s in &r.selectors {
        let of: Vec<&Sample> = samples.iter().filter(|x| x.name == s.name).collect();
        if of.is_empty() {
            lacks.push(format!("no metric {}", s.name));
            continue;
        }
        for (label, op, value) in &s.matchers {
            if SCRAPE_LABELS.contains(&label.as_str()) {
                continue;
            }
            let exact = op == "=" && !value.contains('$');
            let found = of
                .iter()
                .any(|x| x.labels.get(label).is_some_and(|v| !exact || v == value));
            if !found {
                lacks.push(format!("{} has no {label}{op}{value:?}", s.name));
            }
        }
        read.extend(of);
    }
    for g in &r.grouping {
        if !SCRAPE_LABELS.contains(&g.as_str()) && !read.iter().any(|x| x.labels.contains_key(g)) {
            lacks.push(format!("nothing to group by {g}"));
        }
    }
    lacks
}

/// Checks every expression of the dashboard at `path` (from the
/// workspace root) against `samples`.
fn check(path: &str, samples: &[Sample]) {
    let text = std::fs::read_to_string(workspace_root().join(path)).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let exprs = expressions(&dashboard);
    assert!(!exprs.is_empty(), "{path}: no expression");
    let lacks: Vec<String> = exprs
        .iter()
        .flat_map(|e| {
            missing(e, samples)
                .into_iter()
                .map(move |m| format!("{e}: {m}"))
        })
        .collect();
    assert!(lacks.is_empty(), "{path}:\n{}", lacks.join("\n"));
}

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// Envoy Gateway's rule, as its translator writes it for the rate limit
/// service of an HTTPRoute (the keys its dashboard selects).
const EG_RULE: &str = "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example";
const EG_MATCH: &str = "rule-0-match-0";

fn eg_config() -> String {
    format!(
        "domain: default/eg/http\ndescriptors:\n  - key: {EG_RULE}\n    value: {EG_RULE}\n    descriptors:\n      - key: {EG_MATCH}\n        value: {EG_MATCH}\n        rate_limit: {{unit: minute, requests_per_unit: 3}}\n"
    )
}

/// Five calls of Envoy Gateway's descriptor over `/json`: within, near and
/// over its limit.
fn eg_traffic(http: u16) {
    let body = format!(
        r#"{{"domain":"default/eg/http","descriptors":[{{"entries":[{{"key":"{EG_RULE}","value":"{EG_RULE}"}},{{"key":"{EG_MATCH}","value":"{EG_MATCH}"}}]}}]}}"#
    );
    for _ in 0..5 {
        let (status, _) = http_request(
            http,
            "POST",
            "/json",
            Some("application/json"),
            body.as_bytes(),
        )
        .unwrap();
        assert!(status == 200 || status == 429, "{status}");
    }
}

/// Rewrites the configuration of `p` and waits for its reload to be
/// counted.
fn reload(p: &floodgate_testkit::Process, config: &str, admin: u16) {
    p.write_config(&format!("{config}\n# reloaded\n"));
    let reloaded = wait_until(Duration::from_secs(10), || {
        floodgate_testkit::metric(admin, "floodgate_config_reloads_total") > 0.0
    });
    assert!(reloaded, "no reload counted:\n{}", p.log());
}

#[test]
fn the_dashboards_read_what_serve_writes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("eg.yaml"), eg_config()).unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let config = crate::serve_support::envoy_directory(dir.path());
    let serve = Floodgate::start_polling(
        bin(),
        &config,
        "100ms",
        &[],
        &[("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", &addr)],
    );
    eg_traffic(serve.http);
    reload(&serve, &config, serve.admin);
    let samples = scrape(port, "/metrics");
    check(
        "crates/floodgate-cli/tests/dashboards/envoy-gateway-global-ratelimit.json",
        &samples,
    );
    check("deploy/grafana/floodgate-serve.json", &samples);
}

#[test]
fn the_gateway_dashboard_reads_what_the_gateway_writes() {
    let up = crate::gateway_lifecycle::upstream();
    let config = format!(
        "gateway:\n  upstream: http://{}\nserver: {{reload_interval: 100ms}}\nhttp:\n  domain: gw\n  routes: [\"/api/{{*rest}}\"]\n  descriptors:\n    - [route]\ndomains:\n  - domain: gw\n    descriptors:\n      - key: route\n        rate_limit: {{requests: 2, per: 1h}}\n",
        up.addr
    );
    let gw = Gateway::start(bin(), &config, &[], &[]);
    for _ in 0..3 {
        http_request(gw.port, "GET", "/api/x", None, b"").unwrap();
    }
    reload(&gw, &config, gw.admin);
    check(
        "deploy/grafana/floodgate-gateway.json",
        &scrape(gw.admin, "/metrics"),
    );
}

#[test]
fn the_reader_finds_names_labels_and_groupings() {
    let r = reads(
        r#"histogram_quantile(0.99, sum by (api, le) (rate(x_bucket{a="1", b=~"$v"}[5m]))) / 1e6 + y"#,
    );
    let names: Vec<&str> = r.selectors.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["x_bucket", "y"]);
    assert_eq!(r.grouping, ["api", "le"]);
    assert_eq!(
        r.selectors[0].matchers[1],
        ("b".into(), "=~".into(), "$v".into())
    );
}
