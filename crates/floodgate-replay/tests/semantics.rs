//! The gateway's semantics, replayed: shaper delays, shadow mode, the
//! bound on delayed requests, concurrency limits held for the logged
//! duration; and replayed decisions equal to the engine's own, request by
//! request, on random logs.

use std::sync::Arc;

use floodgate::{ManualClock, Timestamp};
use floodgate_http::contract::{Report, Verdict};
use floodgate_http::{Contract, HttpIdentity, HttpSection};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Engine, MemoryBackend, PolicySet, Response};
use proptest::prelude::*;

use crate::common::*;

const FORMAT: &str = "nginx:$msec $request_time $http_x_key \"$request\"";

fn log(lines: &[(u64, &str)]) -> String {
    lines
        .iter()
        .map(|(ms, key)| format!("{} 0.000 {key} \"GET / HTTP/1.1\"\n", msec(*ms)))
        .collect()
}

fn config(rule: &str, layer: &str) -> String {
    format!(
        "http:\n  domain: d\n  descriptors: [[{{header: {{name: x-key, key: k}}}}]]\n{layer}domains:\n  - domain: d\n    descriptors:\n      - key: k\n{rule}"
    )
}

#[test]
fn shaper_delays_as_nginx_and_the_bound_on_waiting_requests() {
    let d = Dir::new();
    // 10r/s burst 3: every 100 ms one more; the burst waits in line.
    let c = d.write(
        "c.yaml",
        &config(
            "        rate_limit: {name: shape, algorithm: shaper, rate: 10r/s, burst: 3}\n",
            "  layer: {max_delayed: 2}\n",
        ),
    );
    let l = d.write(
        "a.log",
        &log(&[(0, "a"), (0, "a"), (0, "a"), (0, "a"), (0, "a"), (350, "a")]),
    );
    let mut o = options(&[&c], &[&l], FORMAT);
    o.decisions = Some(d.path("d.jsonl"));
    let r = floodgate_replay::replay(&o).unwrap();
    let ds = decisions(&d.read("d.jsonl"));
    let got: Vec<(String, f64)> = ds
        .iter()
        .map(|d| {
            (
                d["outcome"].as_str().unwrap().to_owned(),
                d["delay_ms"].as_f64().unwrap(),
            )
        })
        .collect();
    // Passed; delayed 100 and 200 ms; the fourth and the fifth find both
    // delay slots taken and are rejected (charging nothing); at 350 ms
    // both delayed requests have gone and the excess has drained.
    assert_eq!(got[0], ("allowed".into(), 0.0));
    assert_eq!(got[1], ("delayed".into(), 100.0));
    assert_eq!(got[2], ("delayed".into(), 200.0));
    assert_eq!(got[3].0, "denied");
    assert_eq!(got[4].0, "denied");
    assert_eq!(got[5], ("allowed".into(), 0.0));
    let c = &r.candidates[0];
    assert_eq!(c.delay_queue_full, 2);
    assert_eq!((c.delay.count, c.delay.max_ms), (2, 200.0));
    assert_eq!(ds[3]["rule"], "shape");
}

#[test]
fn shadow_mode_is_counted_never_enforced() {
    let d = Dir::new();
    let c = d.write(
        "c.yaml",
        &config(
            "        shadow_mode: true\n        rate_limit: {name: dry, algorithm: fixed_window, requests_per_unit: 1, unit: minute}\n",
            "",
        ),
    );
    let l = d.write("a.log", &log(&[(0, "a"), (10, "a"), (20, "a"), (30, "b")]));
    let r = run(&[&c], &[&l], FORMAT);
    let cand = &r.candidates[0];
    assert_eq!((cand.allowed, cand.denied), (4, 0));
    let rule = &cand.rules[0];
    assert!(rule.shadow);
    assert_eq!(rule.shadow_hits, 2);
    assert_eq!(cand.top_denied[0].key, "k=a");
    assert!(cand.top_denied[0].shadow);
    assert_eq!(cand.top_denied[0].count, 2);
}

#[test]
fn concurrency_limits_are_held_for_the_logged_duration() {
    let d = Dir::new();
    let c = d.write(
        "c.yaml",
        &config(
            "        rate_limit: {name: inflight, algorithm: concurrency, max: 1}\n",
            "",
        ),
    );
    // (logged at end, took): arrivals 0 (until 500), 100 (denied), 600
    // (allowed: the first ended at 500).
    let text = format!(
        "{} 0.500 a \"GET / HTTP/1.1\"\n{} 0.050 a \"GET / HTTP/1.1\"\n{} 0.010 a \"GET / HTTP/1.1\"\n",
        msec(500),
        msec(150),
        msec(610)
    );
    let l = d.write("a.log", &text);
    let mut o = options(&[&c], &[&l], FORMAT);
    o.decisions = Some(d.path("d.jsonl"));
    floodgate_replay::replay(&o).unwrap();
    let got: Vec<String> = outcomes(&d.read("d.jsonl"))
        .into_iter()
        .map(|o| o.1)
        .collect();
    assert_eq!(got, ["allowed", "denied", "allowed"]);
}

/// The gateway's decision function (as its nginx parity test drives it):
/// the identity on an `http::Request`, the engine on a manual clock, the
/// contract's verdict.
struct Live {
    engine: Engine<MemoryBackend, Arc<ManualClock>>,
    clock: Arc<ManualClock>,
    identity: HttpIdentity,
    contract: Contract,
}

impl Live {
    fn new(text: &str) -> Self {
        let options = LoadOptions {
            other_sections: vec![floodgate_http::identity::SECTION],
            ..Default::default()
        };
        let spec = load_str("c.yaml", text, &options).unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1)));
        let http = HttpSection::from_yaml_str("c.yaml", text).unwrap();
        Live {
            engine: Engine::with_clock(
                PolicySet::compile(&spec).unwrap(),
                MemoryBackend::new(Default::default()).unwrap(),
                clock.clone(),
            ),
            clock,
            identity: http.identity,
            contract: http.contract,
        }
    }

    fn decide(&self, ms: u64, ip: &str, path: &str, key: Option<&str>) -> (String, u64) {
        self.clock.set(Timestamp::from_millis(T0 * 1000 + ms));
        let mut b = http::Request::get(path);
        if let Some(k) = key {
            b = b.header("x-key", k);
        }
        let (parts, ()) = b.body(()).unwrap().into_parts();
        let mut out = self.identity.new_output();
        self.identity.build(
            &parts,
            ip.parse().unwrap(),
            &floodgate_http::identity::NoExtensions,
            &mut out,
        );
        if out.is_empty() {
            return ("allowed".into(), 0);
        }
        let mut response = Response::default();
        self.engine
            .evaluate_now(
                self.identity.domain(),
                out.as_slice(),
                out.hits_addend(),
                floodgate::Apply::Commit,
                &mut response,
            )
            .unwrap()
            .unwrap();
        let mut report = Report::new();
        report.fill(&response, &self.engine.policy(), &self.contract);
        match report.verdict() {
            Verdict::Allowed => ("allowed".into(), 0),
            Verdict::Delayed(d) => ("delayed".into(), d.as_millis() as u64),
            Verdict::Denied => ("denied".into(), 0),
        }
    }
}

const MIXED: &str = r#"
http:
  domain: d
  routes: ["/a/{id}", "/b"]
  descriptors:
    - [client_ip]
    - [{header: {name: x-key, key: k}}, route]
domains:
  - domain: d
    descriptors:
      - key: remote_address
        rate_limit: {name: ip, algorithm: sliding_window, requests_per_unit: 6, unit: second}
      - key: k
        descriptors:
          - key: route
            value: /b
            rate_limit: {name: b, algorithm: shaper, rate: 5r/s, burst: 2}
          - key: route
            rate_limit: {name: a, algorithm: token_bucket, requests_per_unit: 3, unit: second, burst: 4}
"#;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn replayed_decisions_are_the_engines(
        reqs in prop::collection::vec(
            (0u64..40, 0usize..3, 0usize..3, prop::option::of(0usize..2)),
            1..80,
        )
    ) {
        let ips = ["192.0.2.1", "192.0.2.2", "2001:db8::9"];
        let paths = ["/a/1", "/b", "/c"];
        let keys = ["k1", "k2"];
        let d = Dir::new();
        let c = d.write("c.yaml", MIXED);
        let mut text = String::new();
        let mut t = 0;
        let mut schedule = Vec::new();
        for (gap, ip, path, key) in &reqs {
            t += gap * 7;
            schedule.push((t, ips[*ip], paths[*path], key.map(|k| keys[k])));
            text.push_str(&format!(
                "{} 0.000 {} {} \"GET {}?q HTTP/1.1\"\n",
                msec(t), ips[*ip], key.map_or("-", |k| keys[k]), paths[*path]
            ));
        }
        let l = d.write("a.log", &text);
        let mut o = options(&[&c], &[&l], "nginx:$msec $request_time $remote_addr $http_x_key \"$request\"");
        o.decisions = Some(d.path("d.jsonl"));
        floodgate_replay::replay(&o).unwrap();
        let live = Live::new(MIXED);
        let ds = decisions(&d.read("d.jsonl"));
        prop_assert_eq!(ds.len(), schedule.len());
        for (i, ((ms, ip, path, key), d)) in schedule.iter().zip(&ds).enumerate() {
            let (outcome, delay) = live.decide(*ms, ip, path, *key);
            prop_assert_eq!(d["line"].as_u64(), Some(i as u64 + 1));
            prop_assert_eq!(d["outcome"].as_str(), Some(outcome.as_str()), "line {}", i + 1);
            prop_assert_eq!(d["delay_ms"].as_f64(), Some(delay as f64), "line {}", i + 1);
        }
    }
}
