//! envoyproxy/ratelimit's Prometheus names on `floodgate serve` with
//! `USE_PROMETHEUS=true`, on the metrics listener at `PROMETHEUS_ADDR`:
//! after a scripted sequence over gRPC (hits of several units at once,
//! near the limit, over it, a shadow-mode rule, keys of one and two
//! levels), each rule's `ratelimit_service_rate_limit_*{domain,key1,key2}`
//! equals the statistics of the reference model of envoyproxy/ratelimit
//! (`floodgate_testkit::envoy_reference`) for the same sequence, labelled
//! as its statsd exporter's default mapper labels them; its service
//! counters count the calls, their times and a refused call, and each
//! configuration load, the first included.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use floodgate_testkit::envoy_reference::{
    Config, Descriptor, File, Node, RateLimit, Request, Service, Settings, Stats,
};
use floodgate_testkit::prometheus::{Sample, scrape};
use floodgate_testkit::{Floodgate, free_port, python, wait_until, workspace_root};
use serde_json::{Value, json};

/// A rule of `requests_per_unit` a minute.
fn node(key: &str, value: &str, rpu: u32, children: Vec<Node>) -> Node {
    Node {
        key: key.into(),
        value: value.into(),
        rate_limit: Some(RateLimit {
            requests_per_unit: Some(rpu),
            unit: Some("minute".into()),
            ..RateLimit::default()
        }),
        descriptors: children,
        ..Node::default()
    }
}

/// Keys of one and two levels, a rule without a value, one in shadow mode.
fn files() -> Vec<File> {
    let shadow = Node {
        shadow_mode: true,
        ..node("shadow", "", 3, vec![])
    };
    vec![File {
        domain: "dash".into(),
        descriptors: vec![
            node("k1", "a", 10, vec![]),
            node("k2", "", 5, vec![node("sub", "x", 4, vec![])]),
            shadow,
        ],
    }]
}

/// A request for one descriptor of `entries` with `hits` hits.
fn request(entries: &[(&str, &str)], hits: u64) -> Request {
    Request {
        domain: "dash".into(),
        descriptors: vec![Descriptor {
            entries: entries
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            hits_addend: Some(hits),
            ..Descriptor::default()
        }],
        hits_addend: 0,
    }
}

/// Hits within, near and over each limit. A request's hits never take a
/// counter from below its limit to above it (see docs/service.md: there
/// all of them count over the limit).
fn script() -> Vec<Request> {
    let k1 = [("k1", "a")];
    let nested = [("k2", "y"), ("sub", "x")];
    let mut out = vec![];
    // Near from 8 on: the fourth request's two hits are both near.
    for hits in [4, 3, 1, 2, 3, 1] {
        out.push(request(&k1, hits));
    }
    // Near from 3 on: one of the second request's three hits is.
    for hits in [1, 3, 1, 3] {
        out.push(request(&nested, hits));
    }
    out.push(request(&[("k2", "z")], 2));
    for hits in [1, 1, 1, 2, 1] {
        out.push(request(&[("shadow", "v")], hits));
    }
    out
}

fn request_json(r: &Request) -> Value {
    json!({
        "domain": r.domain,
        "hits_addend": r.hits_addend,
        "descriptors": r.descriptors.iter().map(|d| json!({
            "entries": d.entries.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
            "limit": null,
            "hits_addend": d.hits_addend,
        })).collect::<Vec<_>>(),
    })
}

/// Sends `requests` through Envoy's generated client: whether they all
/// ran within one minute (one window of every limit).
fn send(grpc: &str, requests: &[Request]) -> bool {
    let mut driver = Command::new(python())
        .arg(workspace_root().join("crates/floodgate-cli/tests/python/rls_replay.py"))
        .arg(grpc)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run python");
    let mut input = driver.stdin.take().unwrap();
    let mut output = BufReader::new(driver.stdout.take().unwrap());
    let mut minutes = Vec::new();
    for r in requests {
        writeln!(input, "{}", request_json(r)).unwrap();
        input.flush().unwrap();
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        let refused = r.domain.is_empty();
        assert_eq!(answer.get("error").is_some(), refused, "{answer}");
        for t in ["before", "after"] {
            minutes.push((answer[t].as_f64().unwrap() / 60.0) as i64);
        }
    }
    drop(input);
    let _ = driver.wait();
    minutes.windows(2).all(|w| w[0] == w[1])
}

/// The compatible counters of `samples`, by stats key (their labels
/// joined back with dots) and statistic.
fn compatible(samples: &[Sample]) -> BTreeMap<String, Stats> {
    let mut out: BTreeMap<String, Stats> = BTreeMap::new();
    for s in samples {
        let Some(stat) = s.name.strip_prefix("ratelimit_service_rate_limit_") else {
            continue;
        };
        let key = ["domain", "key1", "key2"]
            .iter()
            .filter_map(|l| s.labels.get(*l).cloned())
            .collect::<Vec<_>>()
            .join(".");
        let e = out.entry(key).or_default();
        let v = s.value as u64;
        match stat {
            "total_hits" => e.total_hits = v,
            "over_limit" => e.over_limit = v,
            "near_limit" => e.near_limit = v,
            "within_limit" => e.within_limit = v,
            "shadow_mode" => e.shadow_mode = v,
            "total_negative_hits" => e.total_negative_hits = v,
            other => panic!("unexpected statistic {other}"),
        }
    }
    out
}

/// The value of the sample `name` whose label `label` is `value`.
fn sample(samples: &[Sample], name: &str, (label, value): (&str, &str)) -> f64 {
    samples
        .iter()
        .find(|s| s.name == name && s.labels.get(label).is_some_and(|v| v == value))
        .map_or(0.0, |s| s.value)
}

/// The service's own counters after `calls` calls, the last one refused
/// (an empty domain): counted calls and times, one `service_error`.
fn service_counters(samples: &[Sample], calls: usize) {
    let method = ("grpc_method", "ShouldRateLimit");
    let count = |name| sample(samples, name, method);
    assert_eq!(count("ratelimit_service_total_requests"), calls as f64);
    assert_eq!(
        count("ratelimit_service_response_time_seconds_count"),
        calls as f64
    );
    let error = |t| {
        sample(
            samples,
            "ratelimit_service_should_rate_limit_error",
            ("err_type", t),
        )
    };
    assert_eq!(error("service_error"), 1.0);
    assert_eq!(error("redis_error"), 0.0);
}

/// `floodgate serve` on the rules of `files()[0]`, written to `dir`, with
/// `env`.
fn serve_rules(dir: &Path, env: &[(&str, &str)]) -> Floodgate {
    std::fs::write(dir.join("dash.yaml"), files()[0].to_yaml()).unwrap();
    Floodgate::start(
        Path::new(env!("CARGO_BIN_EXE_floodgate")),
        &crate::serve_support::envoy_directory(dir),
        &[],
        env,
    )
}

/// One run of the script: `None` when a minute ended during it.
fn run() -> Option<(BTreeMap<String, Stats>, BTreeMap<String, Stats>)> {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let env = [("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", &addr)];
    let server = serve_rules(dir.path(), &env);
    let mut script = script();
    script.push(Request::default());
    if !send(&server.grpc_addr(), &script) {
        return None;
    }
    let samples = scrape(port, "/metrics");
    service_counters(&samples, script.len());
    script.pop();
    let mut reference = Service::new(Config::load(&files(), false).unwrap(), Settings::default());
    for r in &script {
        reference.should_rate_limit(r, 0).unwrap();
    }
    let want = reference.stats.into_iter().collect();
    Some((want, compatible(&samples)))
}

#[test]
fn the_compatible_counters_count_hits_as_envoyproxy_ratelimit() {
    for _ in 0..3 {
        if let Some((want, got)) = run() {
            assert_eq!(got, want);
            assert_eq!(want.len(), 4, "every rule of the script counted: {want:?}");
            return;
        }
    }
    panic!("three runs each crossed a minute");
}

#[test]
fn without_use_prometheus_no_compatible_name_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_rules(dir.path(), &[]);
    send(&server.grpc_addr(), &script()[..3]);
    let samples = scrape(server.admin, "/metrics");
    assert!(
        samples
            .iter()
            .any(|s| s.name == "floodgate_rule_hits_total")
    );
    assert!(
        !samples
            .iter()
            .any(|s| s.name.starts_with("ratelimit_") || s.name.starts_with("go_")),
        "compatible names without USE_PROMETHEUS"
    );
}

#[test]
fn configuration_loads_are_counted_under_its_names() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dash.yaml");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let env = [("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", &addr)];
    let _server = serve_rules(dir.path(), &env);
    let loads = || {
        let s = scrape(port, "/metrics");
        let v = |name| s.iter().find(|x| x.name == name).map_or(0.0, |x| x.value);
        (
            v("ratelimit_service_config_load_success"),
            v("ratelimit_service_config_load_error"),
        )
    };
    assert_eq!(loads(), (1.0, 0.0), "the first load");
    std::fs::write(
        &file,
        "domain: dash\ndescriptors: [{key: k, rate_limit: {unit: fortnight}}]\n",
    )
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || loads() == (1.0, 1.0)),
        "{:?}",
        loads()
    );
    std::fs::write(&file, files()[0].to_yaml().replace("10", "11")).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || loads() == (2.0, 1.0)),
        "{:?}",
        loads()
    );
}
