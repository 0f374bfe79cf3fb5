//! `floodgate replay`'s throughput on a large nginx log: a generated
//! `combined` log (10 million lines by default, 100 000 clients of
//! skewed popularity, 1 000 lines per second of log time) replayed through
//! a two-rule policy (`benches/two-rules.yaml`), parsing included.
//!
//! ```sh
//! cargo bench -p floodgate-replay --bench replay -- --lines 10000000 --runs 3
//! ```
//!
//! The log is written once to `target/replay-bench/access-<lines>.log`
//! (about 1.4 GB for 10 million lines) and reused. Each run prints lines
//! per second and the process's peak resident memory; the memory does not
//! grow with the log (compare `--lines 1000000` with `--lines 10000000`).
//! `--generate-only` writes the log and stops, for timing the binary:
//! `floodgate replay --config crates/floodgate-replay/benches/two-rules.yaml --log <it> --quiet`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use floodgate_replay::{CandidateSpec, LogSource, ReplayOptions, replay};

const CLIENTS: u64 = 100_000;
const PATHS: [&str; 6] = [
    "/api/orders",
    "/api/orders/42",
    "/api/users/7/items",
    "/login",
    "/static/app.js",
    "/",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// xorshift64*: deterministic, fast.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn generate(path: &Path, lines: u64) -> std::io::Result<()> {
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
    let tmp = path.with_extension("tmp");
    let mut w = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // 2024-05-01T00:00:00Z.
    let start = 1_714_521_600u64;
    let mut stamp = String::new();
    let mut stamp_sec = u64::MAX;
    for i in 0..lines {
        let sec = start + i / 1000;
        if sec != stamp_sec {
            stamp_sec = sec;
            let s = sec - start;
            // Within May 2024 for up to 31 days of log time.
            stamp = format!(
                "{:02}/{}/2024:{:02}:{:02}:{:02} +0000",
                1 + s / 86_400,
                MONTHS[4],
                s / 3600 % 24,
                s / 60 % 60,
                s % 60
            );
        }
        let r = rng.next();
        // Skewed: a few clients send much of the traffic.
        let client = (r % CLIENTS) * (r >> 40 & 7) / 7 + (r >> 20) % 4;
        let ip = client % CLIENTS;
        let path = PATHS[(r >> 33) as usize % PATHS.len()];
        writeln!(
            w,
            "10.{}.{}.{} - - [{stamp}] \"GET {path}?page={} HTTP/1.1\" 200 {} \"-\" \"Mozilla/5.0 (X11; Linux x86_64) bench/1.0\"",
            ip >> 16 & 255,
            ip >> 8 & 255,
            ip & 255,
            r >> 50 & 63,
            512 + (r >> 44 & 4095),
        )?;
    }
    w.flush()?;
    drop(w);
    std::fs::rename(&tmp, path)
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let lines: u64 = value("--lines").map_or(10_000_000, |v| v.parse().expect("--lines N"));
    let runs: usize = value("--runs").map_or(3, |v| v.parse().expect("--runs N"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let log: PathBuf = value("--log")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(format!("target/replay-bench/access-{lines}.log")));
    if !log.exists() {
        eprintln!("writing {} ({lines} lines)", log.display());
        generate(&log, lines).expect("write the log");
    }
    if args.iter().any(|a| a == "--generate-only") {
        return;
    }
    // `cargo bench` passes `--bench`; nothing else is read.
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/two-rules.yaml");
    let options = ReplayOptions {
        candidates: vec![CandidateSpec::parse(&config.display().to_string()).expect("config")],
        logs: vec![LogSource::File(log.clone())],
        window: Duration::from_secs(10),
        ..Default::default()
    };
    for run in 1..=runs {
        let started = Instant::now();
        let r = replay(&options).expect("replay");
        let secs = started.elapsed().as_secs_f64();
        let c = &r.candidates[0];
        println!(
            "run {run}: {} lines in {secs:.2} s = {:.0} lines/s; {} denied; {} keys held; peak RSS {} MiB; {} malformed",
            r.input.lines,
            r.input.lines as f64 / secs,
            c.denied,
            c.keys_held,
            peak_rss_kib().unwrap_or(0) / 1024,
            r.input.malformed,
        );
    }
}
