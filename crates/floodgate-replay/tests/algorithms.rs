//! One policy, each algorithm swapped in at the same nominal rate, over
//! the same log: the boundary burst a fixed window lets through and the
//! sliding log refuses; several candidate files side by side.

use floodgate_replay::Variant;

use crate::common::*;

const TEN_PER_MINUTE: &str = r#"
http:
  domain: d
  descriptors: [[client_ip]]
domains:
  - domain: d
    descriptors:
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: fixed_window, requests_per_unit: 10, unit: minute}
"#;

/// Ten requests just before a minute ends and ten just after.
fn boundary_burst() -> String {
    let mut text = String::new();
    for i in 0..10 {
        text.push_str(&format!("{} 192.0.2.1\n", msec(59_000 + i * 50)));
    }
    for i in 0..10 {
        text.push_str(&format!("{} 192.0.2.1\n", msec(60_100 + i * 50)));
    }
    text
}

#[test]
fn every_algorithm_side_by_side() {
    let d = Dir::new();
    let c = d.write("policy.yaml", TEN_PER_MINUTE);
    let l = d.write("a.log", &boundary_burst());
    let mut o = options(&[&c], &[&l], "nginx:$msec $remote_addr");
    o.decisions = Some(d.path("d.jsonl"));
    let r = with_variants(o, &Variant::ALL);
    let by: std::collections::HashMap<&str, (u64, u64, u64)> = r
        .candidates
        .iter()
        .map(|c| (c.name.as_str(), (c.allowed, c.delayed, c.denied)))
        .collect();
    // The fixed window starts afresh at the minute: twice the rate passes.
    assert_eq!(by["fixed_window"], (20, 0, 0));
    // Any 60 s hold at most 10.
    assert_eq!(by["sliding_log"], (10, 0, 10));
    // The two-window estimate weighs the previous minute almost whole.
    assert_eq!(by["sliding_window"], (10, 0, 10));
    // A burst of 10, refilled at one per 6 s: nothing more within 2 s.
    assert_eq!(by["token_bucket"], (10, 0, 10));
    // nginx at 10r/m burst 9, delaying: one passes, nine wait in line,
    // the rest are over the burst.
    let (allowed, delayed, denied) = by["shaper"];
    assert_eq!((allowed, delayed), (1, 9));
    assert_eq!(denied, 10);
    let shaper = r.candidates.iter().find(|c| c.name == "shaper").unwrap();
    assert_eq!(shaper.delay.count, 9);
    assert!(
        shaper.delay.max_ms >= 9.0 * 6000.0 - 2000.0,
        "{:?}",
        shaper.delay
    );
    // One decisions file per candidate.
    for v in Variant::ALL {
        let text = d.read(&format!("d.{}.jsonl", v.name()));
        assert_eq!(text.lines().count(), 20, "{}", v.name());
    }
    assert!(
        r.candidates
            .iter()
            .all(|c| c.rules[0].limits.starts_with(c.name.as_str()))
    );
}

#[test]
fn candidate_files_side_by_side() {
    let d = Dir::new();
    let strict = d.write("strict.yaml", TEN_PER_MINUTE);
    // A second file of policies only: it uses the first one's http: section.
    let loose = d.write(
        "loose.yaml",
        "domains:\n  - domain: d\n    descriptors:\n      - key: remote_address\n        rate_limit: {algorithm: sliding_log, requests_per_unit: 15, unit: minute}\n",
    );
    let l = d.write("a.log", &boundary_burst());
    let mut o = options(&[&strict, &loose], &[&l], "nginx:$msec $remote_addr");
    o.candidates[1].name = "lenient".into();
    let r = floodgate_replay::replay(&o).unwrap();
    assert_eq!(r.candidates[0].name, "strict");
    assert_eq!(r.candidates[0].denied, 0);
    assert_eq!(r.candidates[1].name, "lenient");
    assert_eq!(r.candidates[1].denied, 5);
    let both = with_variants(
        options(&[&strict, &loose], &[&l], "nginx:$msec $remote_addr"),
        &[Variant::SlidingLog, Variant::FixedWindow],
    );
    let names: Vec<&str> = both.candidates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "strict/sliding_log",
            "strict/fixed_window",
            "loose/sliding_log",
            "loose/fixed_window"
        ]
    );
}

#[test]
fn a_configuration_without_an_http_section_is_refused() {
    let d = Dir::new();
    let c = d.write(
        "p.yaml",
        "domains:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit: {requests_per_unit: 1, unit: second}\n",
    );
    let l = d.write("a.log", "");
    let e = floodgate_replay::replay(&options(&[&c], &[&l], "nginx")).unwrap_err();
    assert!(e.to_string().contains("http"), "{e}");
    let bad = d.write(
        "bad.yaml",
        "http:\n  domain: d\n  descriptors: [[colour]]\ndomains: [{domain: d, deny: [{key: k, values: [v]}]}]\n",
    );
    let e = floodgate_replay::replay(&options(&[&bad], &[&l], "nginx")).unwrap_err();
    assert!(e.to_string().contains("bad.yaml:3"), "{e}");
}
