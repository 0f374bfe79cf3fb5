//! The service's resident memory with a rule per tenant: reading a file
//! takes several times what its compiled policy keeps, and all of it is
//! given back once the policy is compiled, at start-up and after each
//! reload; a reload of unchanged files compiles nothing.
//!
//! Resident sizes are compared with a one-rule service's, with a bound
//! twice what a rule's policy holds (about 500 bytes, counted by the
//! policy's `memory` test): what reading takes (about 3 KB a rule) left
//! resident, or a replaced policy kept, exceeds it several times over.
//!
//! Counters: each key held takes at most 60 bytes of the store's tables
//! and 96 of the process (see the test).

use crate::serve_support;

use std::path::Path;
use std::time::Duration;

use floodgate_testkit::{Floodgate, wait_until};
use serde_json::{Value, json};
use serve_support::json_api::post_json;

const RULES: u64 = 20_000;

/// The resident size a rule may add.
const PER_RULE: u64 = 1024;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// One domain with a rule per tenant; `generation` changes every limit
/// (each reload then compiles and replaces every rule).
fn tenants(n: u64, generation: u64) -> String {
    let mut s = String::from("domains:\n  - domain: tenants\n    descriptors:\n");
    for i in 0..n {
        s.push_str(&format!(
            "      - key: tenant\n        value: tenant-{i}\n        rate_limit: {{requests_per_unit: {}, unit: second}}\n",
            100 + (i + generation) % 50
        ));
    }
    s
}

/// Bytes a rule adds to the resident size of `s`, over `baseline`.
fn per_rule(s: &Floodgate, baseline: u64) -> u64 {
    s.resident_bytes().saturating_sub(baseline) / RULES
}

#[test]
fn reading_many_rules_leaves_only_their_policy_resident() {
    let baseline = {
        let one = Floodgate::start_polling(bin(), &tenants(1, 0), "0", &[], &[]);
        one.resident_bytes()
    };
    assert!(baseline > 0, "no resident size in /proc");
    let s = Floodgate::start_polling(bin(), &tenants(RULES, 0), "0", &[], &[]);
    let started = per_rule(&s, baseline);
    eprintln!("{RULES} rules: {started} bytes a rule resident after start-up");
    assert!(
        started <= PER_RULE,
        "after start-up: {started} bytes a rule over a one-rule service ({baseline} bytes)"
    );
    for generation in 1..=3u64 {
        s.write_config(&tenants(RULES, generation));
        s.signal("HUP");
        assert!(
            wait_until(Duration::from_secs(120), || s
                .metric("floodgate_config_reloads_total{result=\"ok\"}")
                == generation as f64),
            "reload {generation} not applied; log:\n{}",
            s.log()
        );
        let reloaded = per_rule(&s, baseline);
        eprintln!("after reload {generation}: {reloaded} bytes a rule");
        assert!(
            reloaded <= PER_RULE,
            "after reload {generation}: {reloaded} bytes a rule (after start-up: {started})"
        );
    }
}

#[test]
fn a_reload_of_unchanged_files_is_counted_as_unchanged() {
    let s = Floodgate::start_polling(bin(), &tenants(100, 0), "0", &[], &[]);
    s.signal("HUP");
    assert!(
        wait_until(Duration::from_secs(30), || s
            .metric("floodgate_config_reloads_total{result=\"unchanged\"}")
            == 1.0),
        "{}",
        s.log()
    );
    // The same bytes written anew (a new file, a new modification time).
    s.write_config(&tenants(100, 0));
    s.signal("HUP");
    assert!(
        wait_until(Duration::from_secs(30), || s
            .metric("floodgate_config_reloads_total{result=\"unchanged\"}")
            == 2.0),
        "{}",
        s.log()
    );
    assert_eq!(
        s.metric("floodgate_config_reloads_total{result=\"ok\"}"),
        0.0
    );
    assert!(s.log().contains("the configuration is unchanged"));
}

/// Distinct users sent, 256 a request (the API's most).
const USERS: usize = 200_000;

fn users_request(r: usize) -> Value {
    let descriptors: Vec<Value> = (0..256)
        .map(|i| json!({"entries": [{"key": "user", "value": format!("u{r}-{i}")}]}))
        .collect();
    json!({"domain": "users", "descriptors": descriptors})
}

/// 200 000 distinct users through `/json`, each kept an hour in a store
/// sized for two million: the store's tables take at most 60 bytes a key
/// (`floodgate_store_bytes`: 32-byte entries about 63 % full, 52–56; 40-byte
/// entries took 65–69), and the process grows by at most 96 bytes a key
/// (a generous margin over the tables for the allocator's and the
/// connections' own; 58 measured at 1 000 000 keys, docs/benchmarks.md).
#[tokio::test]
async fn a_counter_takes_at_most_60_bytes_of_the_store() {
    let config = "domain: users\ndescriptors:\n  - key: user\n    rate_limit: {requests_per_unit: 1000, unit: hour}\n";
    let s = Floodgate::start(bin(), config, &["--memory-capacity", "2000000"], &[]);
    let client = reqwest::Client::new();
    let (status, _, body) = post_json(&client, s.http, "/json", &users_request(0)).await;
    assert_eq!(status, 200, "{body}");
    let before = s.resident_bytes();
    for r in 1..USERS / 256 {
        let (status, _, body) = post_json(&client, s.http, "/json", &users_request(r)).await;
        assert_eq!(status, 200, "{body}");
    }
    let keys = s.metric("floodgate_store_keys");
    assert_eq!(keys, (USERS / 256 * 256) as f64, "log:\n{}", s.log());
    let store = s.metric("floodgate_store_bytes") / keys;
    let resident = s.resident_bytes().saturating_sub(before) as f64 / (keys - 256.0);
    eprintln!("{keys} keys: {store:.1} bytes a key in the store, {resident:.1} resident");
    assert!(store <= 60.0, "{store:.1} bytes a key in the store");
    assert!(resident <= 96.0, "{resident:.1} bytes a key resident");
}
