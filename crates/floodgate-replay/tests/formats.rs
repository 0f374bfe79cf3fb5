//! Every supported log format read end to end: the same requests written
//! in each format give the same decisions; malformed lines are reported
//! by line number; gzip is recognised.

use crate::common::*;

/// Two requests a minute per API key (a header) and per client address.
const CONFIG: &str = r#"
http:
  domain: api
  routes: ["/users/{id}"]
  descriptors:
    - [{header: {name: x-api-key, key: key}}]
    - [client_ip, route]
domains:
  - domain: api
    descriptors:
      - key: key
        rate_limit: {name: per-key, algorithm: fixed_window, requests_per_unit: 2, unit: minute}
      - key: remote_address
        descriptors:
          - key: route
            rate_limit: {name: per-ip-route, algorithm: sliding_log, requests_per_unit: 3, unit: minute}
"#;

/// (ms after T0, client, key, path) of the requests every format writes.
const REQUESTS: [(u64, &str, &str, &str); 7] = [
    (0, "192.0.2.1", "k1", "/users/1"),
    (100, "192.0.2.1", "k1", "/users/2"),
    (200, "192.0.2.1", "k1", "/users/3"),
    (300, "192.0.2.2", "k2", "/users/1"),
    (400, "192.0.2.1", "-", "/users/4"),
    (500, "192.0.2.1", "-", "/users/5?x=1"),
    (600, "2001:db8::7", "k2", "/other"),
];
/// Their decisions: the third k1 is over per-key (and, denied, charges
/// nothing); the sixth is the client's fourth on /users/{id}; the last is
/// k2's second.
const EXPECTED: [&str; 7] = [
    "allowed", "allowed", "denied", "allowed", "allowed", "denied", "allowed",
];

fn check(r: &floodgate_replay::Replay, decisions: &str, lines: &[u64]) {
    assert_eq!(r.input.malformed, 0, "{:?}", r.input.issues);
    let got = outcomes(decisions);
    let want: Vec<(u64, String)> = lines
        .iter()
        .zip(EXPECTED)
        .map(|(l, o)| (*l, o.to_owned()))
        .collect();
    assert_eq!(got, want);
    let c = &r.candidates[0];
    assert_eq!((c.requests, c.allowed, c.denied), (7, 5, 2));
    let per_key = c.rules.iter().find(|r| r.name == "per-key").unwrap();
    assert_eq!((per_key.requests, per_key.denied), (5, 1));
}

fn replay_with(d: &Dir, log: &std::path::Path, format: &str) -> floodgate_replay::Replay {
    let config = d.write("api.yaml", CONFIG);
    let mut o = options(&[&config], &[&log.to_path_buf()], format);
    o.decisions = Some(d.path("decisions.jsonl"));
    floodgate_replay::replay(&o).unwrap()
}

#[test]
fn nginx_log_format_with_msec() {
    let d = Dir::new();
    let mut text = String::new();
    for (ms, ip, key, path) in REQUESTS {
        // Logged at the end of a 5 ms request.
        text.push_str(&format!(
            "{ip} [{}] {} \"GET {path} HTTP/1.1\" 200 \"{key}\"\n",
            msec(ms + 5),
            "0.005"
        ));
    }
    let log = d.write("access.log", &text);
    let r = replay_with(
        &d,
        &log,
        r#"nginx:$remote_addr [$msec] $request_time "$request" $status "$http_x_api_key""#,
    );
    check(&r, &d.read("decisions.jsonl"), &[1, 2, 3, 4, 5, 6, 7]);
    let first = &decisions(&d.read("decisions.jsonl"))[0];
    // The arrival: $msec minus $request_time.
    assert_eq!(first["time"], "2024-05-01T12:00:00.000000Z");
    assert_eq!(first["descriptors"][0]["key"], "k1");
    assert_eq!(first["descriptors"][1]["route"], "/users/{id}");
    assert_eq!(first["logged_status"], 200);
}

#[test]
fn nginx_combined_gzip_and_malformed_lines() {
    let d = Dir::new();
    let mut text = String::new();
    for (i, (_, ip, _, path)) in REQUESTS.iter().enumerate() {
        if i == 2 {
            text.push_str("this is not a log line\n\n");
        }
        // `combined` has whole seconds: all in one second, in order.
        text.push_str(&format!(
            "{ip} - - [01/May/2024:12:00:00 +0000] \"GET {path} HTTP/1.1\" 200 5 \"-\" \"ua\"\n"
        ));
    }
    let log = d.write_gz("access.log.gz", &text);
    let config = d.write(
        "api.yaml",
        &CONFIG.replace(
            "[{header: {name: x-api-key, key: key}}]",
            "[{generic: {key: key, value: all}}]",
        ),
    );
    let mut o = options(&[&config], &[&log], "nginx");
    o.decisions = Some(d.path("decisions.jsonl"));
    let r = floodgate_replay::replay(&o).unwrap();
    assert_eq!(r.input.malformed, 1);
    assert_eq!(r.input.blank, 1);
    assert_eq!(r.input.lines, 9);
    assert!(
        r.input.issues[0].starts_with(&format!("{}:3: column 1", log.display())),
        "{:?}",
        r.input.issues
    );
    let got: Vec<u64> = outcomes(&d.read("decisions.jsonl"))
        .iter()
        .map(|o| o.0)
        .collect();
    assert_eq!(got, [1, 2, 5, 6, 7, 8, 9]);
    // One key for all: two pass.
    assert_eq!(r.candidates[0].allowed, 2);
}

#[test]
fn envoy_json_with_its_dictionary_and_by_usual_names() {
    let d = Dir::new();
    let mut dict = String::new();
    let mut usual = String::new();
    for (ms, ip, key, path) in REQUESTS {
        let t = format!("2024-05-01T12:00:00.{ms:03}Z");
        dict.push_str(&format!(
            "{{\"when\":\"{t}\",\"m\":\"GET\",\"p\":\"{path}\",\"ip\":\"{}\",\"k\":\"{key}\",\"d\":3}}\n",
            if ip.contains(':') { format!("[{ip}]:4000") } else { format!("{ip}:4000") }
        ));
        usual.push_str(&format!(
            "{{\"start_time\":\"{t}\",\"method\":\"GET\",\"path\":\"{path}\",\"downstream_remote_address\":\"{ip}\",\"x-api-key\":\"{key}\",\"response_code\":200}}\n"
        ));
    }
    let log = d.write("envoy.log", &dict);
    let r = replay_with(
        &d,
        &log,
        r#"envoy:{"when": "%START_TIME%", "m": "%REQ(:METHOD)%", "p": "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", "ip": "%DOWNSTREAM_REMOTE_ADDRESS%", "k": "%REQ(X-API-KEY)%", "d": "%DURATION%"}"#,
    );
    check(&r, &d.read("decisions.jsonl"), &[1, 2, 3, 4, 5, 6, 7]);
    let log = d.write("envoy2.log", &usual);
    let r = replay_with(&d, &log, "envoy");
    check(&r, &d.read("decisions.jsonl"), &[1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn json_lines_named_fields_and_the_gateways_access_log() {
    let d = Dir::new();
    let mut named = String::new();
    let mut gateway = String::new();
    for (ms, ip, key, path) in REQUESTS {
        named.push_str(&format!(
            "{{\"ts\":{},\"ip\":\"{ip}\",\"verb\":\"GET\",\"url\":\"{path}\",\"headers\":{{\"X-Api-Key\":\"{key}\"}}}}\n",
            T0 * 1000 + ms
        ));
        // The gateway logs at the response: 250 µs after the arrival.
        let end = format!("2024-05-01T12:00:00.{:06}Z", ms * 1000 + 250);
        gateway.push_str(&format!(
            "{{\"timestamp\":\"{end}\",\"level\":\"INFO\",\"method\":\"GET\",\"path\":\"{}\",\"version\":\"HTTP/1.1\",\"status\":200,\"limited\":false,\"micros\":250,\"peer\":\"127.0.0.1:5000\",\"client\":\"{ip}\",\"http_x_api_key\":\"{key}\",\"target\":\"floodgate::access\"}}\n",
            path.split('?').next().unwrap()
        ));
    }
    let log = d.write("app.jsonl", &named);
    let r = replay_with(
        &d,
        &log,
        "jsonl:time=ts,client=ip,method=verb,path=url,headers=headers",
    );
    check(&r, &d.read("decisions.jsonl"), &[1, 2, 3, 4, 5, 6, 7]);
    let log = d.write("gateway.jsonl", &gateway);
    let r = replay_with(&d, &log, "jsonl");
    check(&r, &d.read("decisions.jsonl"), &[1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(
        decisions(&d.read("decisions.jsonl"))[0]["time"],
        "2024-05-01T12:00:00.000000Z"
    );
}

#[test]
fn malformed_lines_of_every_kind_are_reported_never_skipped_silently() {
    let d = Dir::new();
    let bad = [
        "{\"ts\": 1714564800, \"client\": \"not-an-ip\"}",
        "{\"ts\": \"noon\"}",
        "{\"client\": \"192.0.2.1\"}",
        "[1, 2, 3]",
        "{\"ts\": 1714564800",
        "\u{0}\u{1}binary",
        "{\"ts\": 1714564800, \"status\": \"teapot\"}",
    ];
    let mut text = String::from("{\"ts\": 1714564800, \"client\": \"192.0.2.1\"}\n");
    for b in bad {
        text.push_str(b);
        text.push('\n');
    }
    text.push_str(&"x".repeat(floodgate_replay::MAX_LINE + 10));
    text.push_str("\n{\"ts\": 1714564801, \"client\": \"192.0.2.1\"}");
    let log = d.write("bad.jsonl", &text);
    let config = d.write("api.yaml", CONFIG);
    let mut o = options(&[&config], &[&log], "jsonl");
    o.rejected = Some(d.path("rejected.txt"));
    o.decisions = Some(d.path("decisions.jsonl"));
    let r = floodgate_replay::replay(&o).unwrap();
    assert_eq!(r.input.lines, 10);
    assert_eq!(r.input.malformed, 8);
    let lines: Vec<u64> = outcomes(&d.read("decisions.jsonl"))
        .iter()
        .map(|o| o.0)
        .collect();
    assert_eq!(lines, [1, 10]);
    let rejected = d.read("rejected.txt");
    for n in 2..=9 {
        assert!(
            rejected.contains(&format!("bad.jsonl:{n}: ")),
            "line {n} not reported:\n{rejected}"
        );
    }
    assert!(rejected.contains("longer than"), "{rejected}");
    assert!(
        rejected.contains("`client` is not an address"),
        "{rejected}"
    );
}

#[test]
fn formats_that_cannot_date_a_line_are_refused() {
    let d = Dir::new();
    let config = d.write("api.yaml", CONFIG);
    let log = d.write("x.log", "");
    for f in [
        "nginx:$remote_addr $status",
        "jsonl:client=ip",
        "envoy:{\"m\": \"%REQ(:METHOD)%\"}",
    ] {
        let e = floodgate_replay::replay(&options(&[&config], &[&log], f)).unwrap_err();
        assert!(e.to_string().contains("time"), "{f}: {e}");
    }
}
