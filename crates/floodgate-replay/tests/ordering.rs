//! Timestamps out of order: put back in arrival order within the window,
//! reported (and not decided) beyond it.

use crate::common::*;

const ONE_PER_MINUTE: &str = r#"
http:
  domain: api
  descriptors:
    - [{header: {name: x-api-key, key: key}}]
domains:
  - domain: api
    descriptors:
      - key: key
        rate_limit: {algorithm: fixed_window, requests_per_unit: 1, unit: minute}
"#;

#[test]
fn sorted_within_the_window_and_late_lines_reported() {
    let d = Dir::new();
    let config = d.write("c.yaml", ONE_PER_MINUTE);
    // nginx logs at the end: a slow request's line comes after a quick
    // one that arrived later.
    let lines = [
        // (logged at, took, key)
        (1_000, "0.010", "a"), // arrived 990
        (1_005, "0.500", "a"), // arrived 505: first
        (3_000, "0.001", "b"),
        (25_000, "0.001", "b"),
        // Arrived at 2001, after line 3 (2999) was decided: too late.
        (25_001, "23.000", "c"),
        (26_000, "0.001", "c"),
    ];
    let text: String = lines
        .iter()
        .map(|(at, took, key)| format!("{} {took} {key}\n", msec(*at)))
        .collect();
    let log = d.write("access.log", &text);
    let mut o = options(
        &[&config],
        &[&log],
        "nginx:$msec $request_time $http_x_api_key",
    );
    o.decisions = Some(d.path("d.jsonl"));
    let r = floodgate_replay::replay(&o).unwrap();
    assert_eq!(r.input.late, 1);
    assert!(
        r.input.issues[0].contains(":5: ") && r.input.issues[0].contains("reordering window"),
        "{:?}",
        r.input.issues
    );
    let got = outcomes(&d.read("d.jsonl"));
    assert_eq!(
        got,
        [
            (2, "allowed".to_owned()),
            (1, "denied".to_owned()),
            (3, "allowed".to_owned()),
            (4, "denied".to_owned()),
            (6, "allowed".to_owned()),
        ]
    );
    assert_eq!(r.candidates[0].requests, 5);
}

#[test]
fn a_zero_window_takes_lines_as_they_come() {
    let d = Dir::new();
    let config = d.write("c.yaml", ONE_PER_MINUTE);
    let text = format!("{} 0.010 a\n{} 0.500 a\n", msec(1_000), msec(1_005));
    let log = d.write("access.log", &text);
    let mut o = options(
        &[&config],
        &[&log],
        "nginx:$msec $request_time $http_x_api_key",
    );
    o.window = std::time::Duration::ZERO;
    o.decisions = Some(d.path("d.jsonl"));
    let r = floodgate_replay::replay(&o).unwrap();
    // The second line arrived before the first: too late with no window.
    assert_eq!(r.input.late, 1);
    assert_eq!(outcomes(&d.read("d.jsonl")), [(1, "allowed".to_owned())]);
}

#[test]
fn several_logs_are_one_stream() {
    let d = Dir::new();
    let config = d.write("c.yaml", ONE_PER_MINUTE);
    let a = d.write("a.log", &format!("{} 0.000 k\n", msec(2_000)));
    let b = d.write_gz("b.log.gz", &format!("{} 0.000 k\n", msec(1_000)));
    let mut o = options(
        &[&config],
        &[&a, &b],
        "nginx:$msec $request_time $http_x_api_key",
    );
    o.decisions = Some(d.path("d.jsonl"));
    floodgate_replay::replay(&o).unwrap();
    let ds = decisions(&d.read("d.jsonl"));
    // b's line arrived first.
    assert_eq!(ds[0]["source"], b.display().to_string());
    assert_eq!(ds[0]["outcome"], "allowed");
    assert_eq!(ds[1]["source"], a.display().to_string());
    assert_eq!(ds[1]["outcome"], "denied");
}
