//! `floodgate replay`: access logs run through policies, as the gateway
//! would have decided them.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use floodgate_replay::{CandidateSpec, LogFormat, LogSource, ReplayOptions, Variant, report};

/// Flags of `floodgate replay`.
#[derive(Args, Debug)]
pub(crate) struct ReplayArgs {
    /// A candidate configuration: `[NAME=]PATH[,PATH...]` (Floodgate files
    /// or directories with the policies and the `http:` section), repeatable
    /// to compare several side by side.
    #[arg(short, long = "config", value_name = "CANDIDATE", required = true, value_parser = CandidateSpec::parse)]
    pub config: Vec<CandidateSpec>,
    /// Logs to replay, in order (`-` or none: standard input); gzip is
    /// recognised by its first bytes.
    #[arg(short, long = "log", value_name = "FILE")]
    pub log: Vec<String>,
    /// `nginx` (the combined format), `nginx:'<log_format>'`, `envoy`,
    /// `envoy:'<json_format>'`, `jsonl` or `jsonl:<role>=<field>,...`.
    #[arg(long, value_name = "FORMAT", default_value = "nginx", value_parser = |s: &str| s.parse::<LogFormat>())]
    pub format: LogFormat,
    /// Replay each candidate with each of these algorithms swapped into
    /// every rate limit at the same nominal rate (no value: all of
    /// fixed_window, sliding_window, sliding_log, token_bucket, shaper).
    #[arg(long, value_name = "ALGORITHMS", num_args = 0..=1, require_equals = true, default_missing_value = "all")]
    pub compare_algorithms: Option<String>,
    /// Lines out of order by up to this much are put back in order; later
    /// ones are reported and not decided.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = floodgate_runtime::settings::duration)]
    pub reorder_window: Duration,
    /// The in-memory store's capacity (as `store.capacity`).
    #[arg(long, value_name = "KEYS", default_value_t = floodgate_runtime::Settings::default().store.capacity)]
    pub capacity: usize,
    /// Writes one JSON line per request (with several candidates, one file
    /// each, named after the candidate).
    #[arg(long, value_name = "FILE")]
    pub decisions: Option<PathBuf>,
    /// Writes the self-contained HTML report.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Writes the results as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Writes the results as CSV (a row per candidate and rule).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Writes every line not decided (malformed, too late), with its line
    /// number and why.
    #[arg(long, value_name = "FILE")]
    pub rejected: Option<PathBuf>,
    /// Keys listed among those denied most.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

fn write_file(
    path: &PathBuf,
    f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let file = File::create(path).with_context(|| path.display().to_string())?;
    let mut w = BufWriter::new(file);
    f(&mut w)
        .and_then(|()| w.flush())
        .with_context(|| path.display().to_string())
}

/// Runs the replay and writes what was asked.
pub(crate) fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let variants = match args.compare_algorithms.as_deref() {
        None => Vec::new(),
        Some("all") => Variant::ALL.to_vec(),
        Some(list) => list
            .split(',')
            .map(|s| Variant::parse(s.trim()))
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)?,
    };
    let options = ReplayOptions {
        candidates: args.config,
        variants,
        logs: args.log.iter().map(|l| LogSource::parse(l)).collect(),
        format: args.format,
        window: args.reorder_window,
        capacity: args.capacity,
        decisions: args.decisions,
        rejected: args.rejected,
        top: args.top,
        progress: !args.quiet,
        sections: floodgate_runtime::host::sections(&crate::flags::sections()),
    };
    let result = floodgate_replay::replay(&options)?;
    report::write_summary(&result, &mut std::io::stdout().lock(), 10)?;
    if let Some(p) = &args.report {
        write_file(p, |w| w.write_all(report::html(&result).as_bytes()))?;
    }
    if let Some(p) = &args.json {
        write_file(p, |w| report::write_json(&result, w))?;
    }
    if let Some(p) = &args.csv {
        write_file(p, |w| report::write_csv(&result, w))?;
    }
    Ok(())
}
