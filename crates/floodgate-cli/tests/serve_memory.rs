//! The service's resident memory with a rule per tenant: reading a file
//! takes several times what its compiled policy keeps, and all of it is
//! given back once the policy is compiled, at start-up and after each
//! reload; a reload of unchanged files compiles nothing.
//!
//! Resident sizes are compared with a one-rule service's, with a bound
//! twice what a rule's policy holds (about 500 bytes, counted by the
//! policy's `memory` test): what reading takes (about 3 KB a rule) left
//! resident, or a replaced policy kept, exceeds it several times over.

use std::path::Path;
use std::time::Duration;

use floodgate_testkit::{Floodgate, wait_until};

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
