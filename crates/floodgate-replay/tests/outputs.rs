//! The outputs: JSON, CSV, the terminal summary and the HTML report's
//! content (a real browser opens it in `browser.rs`).

use floodgate_replay::report;

use crate::common::*;

const CONFIG: &str = r#"
http:
  domain: d
  descriptors: [[client_ip]]
domains:
  - domain: d
    descriptors:
      - key: remote_address
        rate_limit: {name: "per<ip>", algorithm: sliding_log, requests_per_unit: 2, unit: second}
"#;

fn replayed() -> floodgate_replay::Replay {
    let d = Dir::new();
    let c = d.write("c.yaml", CONFIG);
    let mut text = String::new();
    for i in 0..300u64 {
        let ip = if i % 3 == 0 {
            "203.0.113.9"
        } else {
            "192.0.2.1"
        };
        text.push_str(&format!("{} {ip}\n", msec(i * 100)));
    }
    text.push_str("broken\n");
    let l = d.write("a.log", &text);
    run(&[&c], &[&l], "nginx:$msec $remote_addr")
}

#[test]
fn json_csv_and_summary() {
    let r = replayed();
    let mut json = Vec::new();
    report::write_json(&r, &mut json).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let c = &v["candidates"][0];
    assert_eq!(c["requests"], 300);
    assert_eq!(c["rules"][0]["name"], "per<ip>");
    let timeline = c["timeline"]["requests"].as_array().unwrap();
    assert_eq!(
        timeline.iter().map(|n| n.as_u64().unwrap()).sum::<u64>(),
        300
    );
    assert_eq!(c["timeline"]["bucket_secs"], 1.0);
    assert_eq!(
        c["timeline"]["rules"]["per<ip>"]["denied"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .sum::<u64>(),
        c["denied"].as_u64().unwrap()
    );
    assert_eq!(v["input"]["malformed"], 1);
    assert!(v["input"]["issues"][0].as_str().unwrap().contains(":301: "));

    let mut csv = Vec::new();
    report::write_csv(&r, &mut csv).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 3);
    assert!(rows[0].starts_with("candidate,rule,"));
    assert!(rows[1].starts_with("c,*,,,,300,"), "{}", rows[1]);
    assert!(
        rows[2].starts_with("c,per<ip>,d,sliding_log 2/1s,false,300,"),
        "{}",
        rows[2]
    );

    let mut text = Vec::new();
    report::write_summary(&r, &mut text, 5).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("1 malformed"), "{text}");
    assert!(text.contains("remote_address=192.0.2.1"), "{text}");
}

#[test]
fn html_is_one_self_contained_page() {
    let r = replayed();
    let html = report::html(&r);
    assert!(html.starts_with("<!DOCTYPE html>"));
    // Plots are inline SVG; nothing is loaded from anywhere.
    assert!(html.matches("<svg").count() >= 3, "plots missing");
    for outside in [
        "http://",
        "https://",
        "<script src",
        "<link",
        "@import",
        "url(",
    ] {
        let svg_ns = html.matches("http://www.w3.org/").count();
        if outside == "http://" {
            assert_eq!(
                html.matches(outside).count(),
                svg_ns,
                "a reference outside the page"
            );
        } else {
            assert!(!html.contains(outside), "{outside}");
        }
    }
    // Names are escaped.
    assert!(html.contains("per&lt;ip&gt;"));
    assert!(!html.contains("per<ip>"));
}

/// A store too small for the keys a log holds says so: the requests of new
/// keys it decided without state when full are counted in every output.
#[test]
fn a_full_store_is_reported() {
    let d = Dir::new();
    let c = d.write("c.yaml", CONFIG);
    let mut text = String::new();
    // 2 000 addresses, three requests each within a second: each one's
    // log restricts it until its second has passed.
    for i in 0..6_000u64 {
        let ip = format!("10.0.{}.{}", (i / 3) / 256, (i / 3) % 256);
        text.push_str(&format!("{} {ip}\n", msec(i / 10)));
    }
    let l = d.write("a.log", &text);
    let mut o = options(&[&c], &[&l], "nginx:$msec $remote_addr");
    o.capacity = 64;
    let r = floodgate_replay::replay(&o).unwrap();
    let mut json = Vec::new();
    report::write_json(&r, &mut json).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let full = v["candidates"][0]["admitted_full"].as_u64().unwrap();
    assert!(full > 0, "{}", v["candidates"][0]);
    assert!(v["candidates"][0]["keys_held"].as_u64().unwrap() <= 64);
    let mut text = Vec::new();
    report::write_summary(&r, &mut text, 5).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains(&format!(
            "{full} requests of new keys decided without state"
        )),
        "{text}"
    );
}
