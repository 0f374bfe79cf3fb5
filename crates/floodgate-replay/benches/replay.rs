//! `floodgate replay`'s throughput on a large nginx log: a generated
//! `combined` log (10 million lines by default, 100 000 clients of
//! skewed popularity, 1 000 lines per second of log time) replayed through
//! a two-rule policy (`benches/two-rules.yaml`), parsing included.
//!
//! ```sh
//! cargo bench -p floodgate-replay --bench replay -- --lines 1000000,10000000 --runs 3
//! ```
//!
//! Each log is written once to `target/replay-bench/access-<lines>.log`
//! (about 1.4 GB for 10 million lines) and reused. Each run prints lines
//! per second, the CPU time per line (all threads) and the process's peak
//! resident memory. With several sizes (`--lines 1000000,10000000`) each
//! is replayed in a process of its own, so that each peak is its own, and
//! the peaks are compared at the end: memory is bounded by the live keys,
//! not the log's length. Without `--bench` or `--lines` (under
//! `cargo test`) it only replays a small log once. `--generate-only`
//! writes the logs and stops, for
//! timing the binary:
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

/// The CPU time this process used so far, all threads (user and system).
fn cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // After the command's name in parentheses: utime and stime are the
    // 12th and 13th fields, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<u64>() as f64 / 100.0
}

/// Under `cargo test` (no `--bench`, no `--lines`): a small log, replayed
/// once, each line decided.
fn smoke() {
    let log =
        std::env::temp_dir().join(format!("floodgate-replay-smoke-{}.log", std::process::id()));
    generate(&log, 20_000).expect("write the log");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/two-rules.yaml");
    let options = ReplayOptions {
        candidates: vec![CandidateSpec::parse(&config.display().to_string()).expect("config")],
        logs: vec![LogSource::File(log.clone())],
        ..Default::default()
    };
    let r = replay(&options);
    let _ = std::fs::remove_file(&log);
    let r = r.expect("replay");
    assert_eq!((r.input.lines, r.input.malformed), (20_000, 0));
    assert!(r.candidates[0].denied > 0, "nothing denied");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let sizes: Vec<u64> = value("--lines").map_or(vec![10_000_000], |v| {
        v.split(',')
            .map(|n| n.trim().parse().expect("--lines N[,N...]"))
            .collect()
    });
    if value("--lines").is_none() && !args.iter().any(|a| a == "--bench") {
        smoke();
        return;
    }
    let runs: usize = value("--runs").map_or(3, |v| v.parse().expect("--runs N"));
    let generate_only = args.iter().any(|a| a == "--generate-only");
    if sizes.len() > 1 {
        assert!(value("--log").is_none(), "--log takes one size");
        let exe = std::env::current_exe().expect("this program");
        let mut peaks = Vec::new();
        for lines in &sizes {
            let mut cmd = std::process::Command::new(&exe);
            cmd.args(["--lines", &lines.to_string(), "--runs", &runs.to_string()]);
            if generate_only {
                cmd.arg("--generate-only");
            }
            let out = cmd.output().expect("run one size");
            let text = String::from_utf8_lossy(&out.stdout);
            print!("{text}");
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "the {lines}-line run failed");
            let peak = text
                .lines()
                .filter_map(|l| l.split("peak RSS ").nth(1))
                .filter_map(|r| r.split_whitespace().next()?.parse::<u64>().ok())
                .max();
            peaks.push((lines, peak));
        }
        if !generate_only {
            println!("peak resident memory by log length:");
            for (lines, peak) in peaks {
                println!(
                    "  {lines:>12} lines: {} MiB",
                    peak.map_or("?".into(), |p| p.to_string())
                );
            }
        }
        return;
    }
    let lines = sizes[0];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let log: PathBuf = value("--log")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(format!("target/replay-bench/access-{lines}.log")));
    if !log.exists() {
        eprintln!("writing {} ({lines} lines)", log.display());
        generate(&log, lines).expect("write the log");
    }
    if generate_only {
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
        let cpu = cpu_secs();
        let r = replay(&options).expect("replay");
        let secs = started.elapsed().as_secs_f64();
        let cpu = cpu_secs() - cpu;
        let c = &r.candidates[0];
        println!(
            "run {run}: {} lines in {secs:.2} s = {:.0} lines/s ({:.2} µs of CPU per line, all threads); {} denied; {} keys held; peak RSS {} MiB; {} malformed",
            r.input.lines,
            r.input.lines as f64 / secs,
            cpu * 1e6 / r.input.lines.max(1) as f64,
            c.denied,
            c.keys_held,
            peak_rss_kib().unwrap_or(0) / 1024,
            r.input.malformed,
        );
    }
}
