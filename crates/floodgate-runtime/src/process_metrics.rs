//! The process's own metrics, as Prometheus clients name them
//! (`process_resident_memory_bytes`, `process_cpu_seconds_total`,
//! `process_open_fds`, …: read before each scrape), and the build's
//! (`floodgate_build_info`, set once).

use std::sync::LazyLock;

use metrics_process::Collector;

/// The collector of the `process_*` metrics, its names described once.
static PROCESS: LazyLock<Collector> = LazyLock::new(|| {
    let c = Collector::default();
    c.describe();
    c
});

/// Describes the process metrics and sets the build's.
pub(crate) fn install() {
    LazyLock::force(&PROCESS);
    build_info();
}

/// Reads the process's figures into the registry (before a scrape).
pub(crate) fn collect() {
    PROCESS.collect();
}

/// `floodgate_build_info{version,profile}` = 1: which build answers.
fn build_info() {
    metrics::describe_gauge!(
        "floodgate_build_info",
        "1, labelled with the build: version (the crate's) and profile (release or debug)."
    );
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    metrics::gauge!("floodgate_build_info",
        "version" => env!("CARGO_PKG_VERSION"), "profile" => profile)
    .set(1.0);
}

/// envoyproxy/ratelimit's runtime figure that Envoy Gateway's rate limit
/// dashboard plots, `go_memstats_gc_cpu_fraction`: the share of CPU time
/// spent collecting garbage, 0 here (no garbage collector). Only with its
/// names on (`settings.envoy_stats`).
pub(crate) fn collect_envoy() {
    metrics::describe_gauge!(
        "go_memstats_gc_cpu_fraction",
        "With settings.envoy_stats: the share of CPU time spent collecting garbage, as Go's runtime reports it for envoyproxy/ratelimit; always 0 (Floodgate has no garbage collector)."
    );
    metrics::gauge!("go_memstats_gc_cpu_fraction").set(0.0);
}
