//! The report's legends in a real headless Chromium: every plot of
//! several series names each of them in a legend, and no legend covers
//! the plotted area (a legend drawn over the plot hid its data).

use floodgate_replay::report;
use floodgate_testkit::browser::Browser;

use crate::common::*;

/// Two rules that deny, so that every plot with a legend is drawn.
const CONFIG: &str = r#"
http:
  domain: d
  descriptors:
    - [client_ip]
    - [client_ip, path]
domains:
  - domain: d
    descriptors:
      - key: remote_address
        rate_limit: {name: per-ip, algorithm: fixed_window, requests_per_unit: 5, unit: second}
        descriptors:
          - key: path
            rate_limit: {name: per-path, algorithm: sliding_log, requests: 2, per: 1s}
"#;

#[test]
fn no_legend_covers_the_plotted_area() {
    let d = Dir::new();
    let c = d.write("c.yaml", CONFIG);
    let stricter = d.write(
        "stricter.yaml",
        &CONFIG.replace("requests: 2", "requests: 1"),
    );
    let mut text = String::new();
    for i in 0..600u64 {
        let ip = ["192.0.2.1", "192.0.2.2"][(i % 2) as usize];
        let path = ["/a", "/b", "/c"][(i % 3) as usize];
        text.push_str(&format!("{} {ip} \"GET {path} HTTP/1.1\"\n", msec(i * 20)));
    }
    let l = d.write("a.log", &text);
    let r = run(
        &[&c, &stricter],
        &[&l],
        "nginx:$msec $remote_addr \"$request\"",
    );
    let html = d.path("report.html");
    std::fs::write(&html, report::html(&r)).unwrap();
    let names: Vec<&str> = r.candidates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");

    let browser = Browser::start();
    let page = browser.open(&format!("file://{}", html.display()));
    // Each plot of several series, and the names its legend must give.
    let plots = [
        ("side-by-side", vec!["allowed", "delayed", "denied"]),
        ("denials-by-candidate", names.clone()),
        ("over-time-0", vec!["requests", "delayed", "denied"]),
        ("rule-denials-0", vec!["per-ip", "per-path"]),
    ];
    for (id, names) in plots {
        let legend = page.eval(&format!(
            "JSON.stringify([...document.querySelectorAll('#{id} .legend li')].map(li => li.textContent))"
        ));
        let legend: Vec<String> = serde_json::from_str(legend.as_str().unwrap()).unwrap();
        assert!(!legend.is_empty(), "{id}: no legend");
        for name in &names {
            assert!(
                legend.iter().any(|l| l == name),
                "{id}: {name} not in {legend:?}"
            );
        }
        // The legend's box and the plot's (its SVG, plotted area within)
        // meet nowhere.
        let overlap = page.eval(&format!(
            "(() => {{ const f = document.getElementById('{id}'); \
               const a = f.querySelector('svg').getBoundingClientRect(); \
               const b = f.querySelector('.legend').getBoundingClientRect(); \
               return b.width > 0 && b.height > 0 && !(b.right <= a.left || b.left >= a.right \
                 || b.bottom <= a.top || b.top >= a.bottom); }})()"
        ));
        assert_eq!(overlap, false, "{id}: the legend covers the plot");
        let shown = page.eval(&format!(
            "document.getElementById('{id}').querySelector('.legend').getBoundingClientRect().height"
        ));
        assert!(shown.as_f64().unwrap() > 0.0, "{id}: legend not shown");
    }
    assert_eq!(page.problems(), Vec::<String>::new());
}
