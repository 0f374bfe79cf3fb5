//! The process's metrics and the build's, on both binaries, on the admin
//! listener and the metrics listener: resident memory and open files of
//! the running process (plausible: above zero, the files within their
//! limit, the start within the last minutes), the version built.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use floodgate_testkit::prometheus::{Sample, scrape};
use floodgate_testkit::{Floodgate, Gateway, free_port};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

fn value(samples: &[Sample], name: &str) -> f64 {
    samples
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .value
}

/// Checks the figures of one scrape of the process `pid`.
fn plausible(samples: &[Sample], pid: u32) {
    let resident = value(samples, "process_resident_memory_bytes");
    // Within a factor of two of what the kernel says of the process.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let ratio = resident / (kb * 1024.0);
    assert!(
        resident > 1_000_000.0 && (0.5..2.0).contains(&ratio),
        "resident {resident}, VmRSS {kb} kB"
    );
    assert!(value(samples, "process_virtual_memory_bytes") >= resident);
    let open = value(samples, "process_open_fds");
    assert!(
        open > 2.0 && open <= value(samples, "process_max_fds"),
        "open {open}"
    );
    assert!(value(samples, "process_cpu_seconds_total") >= 0.0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let start = value(samples, "process_start_time_seconds");
    assert!(
        start <= now + 1.0 && start > now - 600.0,
        "start {start}, now {now}"
    );
    let build = samples
        .iter()
        .find(|s| s.name == "floodgate_build_info")
        .expect("floodgate_build_info");
    assert_eq!(build.value, 1.0);
    assert_eq!(build.labels["version"], env!("CARGO_PKG_VERSION"));
    assert!(["debug", "release"].contains(&build.labels["profile"].as_str()));
}

#[test]
fn serve_writes_its_process_and_build_on_both_listeners() {
    let port = free_port();
    let serve = Floodgate::start(
        bin(),
        "domains: []\n",
        &[
            "--allow-empty-config",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ],
        &[],
    );
    plausible(&scrape(serve.admin, "/metrics"), serve.pid());
    plausible(&scrape(port, "/metrics"), serve.pid());
}

#[test]
fn the_gateway_writes_its_process_and_build() {
    let up = crate::gateway_lifecycle::upstream();
    let gw = Gateway::start(
        bin(),
        &format!("gateway:\n  upstream: http://{}\n", up.addr),
        &["--allow-empty-config"],
        &[],
    );
    plausible(&scrape(gw.admin, "/metrics"), gw.pid());
}
