//! The HTML report in a real headless Chromium: it loads without console
//! errors or failed loads, fetches nothing, and its plots are drawn.

use floodgate_replay::{Variant, report};
use floodgate_testkit::browser::Browser;

use crate::common::*;

const CONFIG: &str = r#"
http:
  domain: d
  routes: ["/api/{*rest}"]
  descriptors:
    - [client_ip]
    - [client_ip, route]
domains:
  - domain: d
    descriptors:
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: fixed_window, requests_per_unit: 5, unit: second}
        descriptors:
          - key: route
            rate_limit: {name: api, algorithm: shaper, rate: 2r/s, burst: 3}
"#;

#[test]
fn the_report_loads_cleanly_with_its_plots() {
    let d = Dir::new();
    let c = d.write("c.yaml", CONFIG);
    let mut text = String::new();
    for i in 0..400u64 {
        let ip = ["192.0.2.1", "192.0.2.2", "198.51.100.7"][(i % 3) as usize];
        let path = if i % 2 == 0 { "/api/x" } else { "/" };
        text.push_str(&format!("{} {ip} \"GET {path} HTTP/1.1\"\n", msec(i * 40)));
    }
    text.push_str("oops\n");
    let l = d.write("a.log", &text);
    let r = with_variants(
        options(&[&c], &[&l], "nginx:$msec $remote_addr \"$request\""),
        &Variant::ALL,
    );
    let html = d.path("report.html");
    std::fs::write(&html, report::html(&r)).unwrap();

    let browser = Browser::start();
    let page = browser.open(&format!("file://{}", html.display()));
    assert_eq!(page.eval("document.title"), "Floodgate replay");
    // Every plot drawn: the side-by-side views and, per candidate, the
    // counts over time; denials per rule, top keys and delays where any.
    let plots = page.eval("document.querySelectorAll('figure.plot svg').length");
    assert!(plots.as_u64().unwrap() >= 2 + 5 * 2, "{plots}");
    let empty = page.eval(
        "[...document.querySelectorAll('figure.plot svg')].filter(s => \
           s.querySelectorAll('polyline, rect, path, line').length < 3).length",
    );
    assert_eq!(empty, 0, "plots without drawing");
    assert_eq!(
        page.eval("document.querySelectorAll('.plot-error').length"),
        0,
        "a plot failed to draw"
    );
    // Laid out: each plot has a size on the page.
    let sized = page.eval(
        "[...document.querySelectorAll('figure.plot svg')].every(s => { \
           const r = s.getBoundingClientRect(); return r.width > 200 && r.height > 100; })",
    );
    assert_eq!(sized, true);
    let text = page
        .eval("document.body.innerText")
        .as_str()
        .unwrap()
        .to_owned();
    for name in [
        "sliding_log",
        "token_bucket",
        "shaper",
        "Keys denied most",
        "Delay distribution",
    ] {
        assert!(text.contains(name), "{name} missing");
    }
    // Self-contained: nothing was loaded besides the page itself.
    assert_eq!(
        page.eval("performance.getEntriesByType('resource').length"),
        0
    );
    assert_eq!(page.problems(), Vec::<String>::new());
}

/// The harness itself: a page with a console error, an uncaught exception
/// and a failed load is reported as such.
#[test]
fn the_browser_reports_what_goes_wrong() {
    let d = Dir::new();
    let page_path = d.write(
        "bad.html",
        "<!DOCTYPE html><html><body><img src=\"missing.png\"><script>console.error('broken'); undefinedFunction();</script></body></html>",
    );
    let browser = Browser::start();
    let page = browser.open(&format!("file://{}", page_path.display()));
    let problems = page.problems().join("\n");
    assert!(problems.contains("broken"), "{problems}");
    assert!(problems.contains("undefinedFunction"), "{problems}");
    assert!(problems.contains("missing.png"), "{problems}");
}
