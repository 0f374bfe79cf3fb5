//! Running a replay: one thread reads, parses and orders the lines; one
//! thread per candidate decides them, in arrival order, on its own engine.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;

use floodgate_http::HttpIdentity;
use floodgate_policy::PolicySet;

use crate::candidate::{self, Candidate, CandidateSpec};
use crate::decide::Decider;
use crate::error::ReplayError;
use crate::format::{LogFormat, Parser};
use crate::input::{InputSummary, Issue, Issues, LogSource, Reader};
use crate::record::HeaderSet;
use crate::reorder::Ordered;
use crate::stats::CandidateReport;
use crate::variants::Variant;

/// Batches in flight between the reader and each decider.
const IN_FLIGHT: usize = 8;

/// What to replay, through what, and what to write.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// The configurations (at least one).
    pub candidates: Vec<CandidateSpec>,
    /// Algorithms to swap into every candidate (none: as configured).
    pub variants: Vec<Variant>,
    /// The logs, in order (none: standard input).
    pub logs: Vec<LogSource>,
    /// Their format.
    pub format: LogFormat,
    /// How far out of order lines are put back in order.
    pub window: Duration,
    /// The in-memory store's capacity (`store.capacity`).
    pub capacity: usize,
    /// Where to write one JSON line per request (with several candidates,
    /// one file each, the candidate's name before the extension).
    pub decisions: Option<PathBuf>,
    /// Where to write every line not decided.
    pub rejected: Option<PathBuf>,
    /// How many top keys to report.
    pub top: usize,
    /// Show a progress bar on standard error (when it is a terminal).
    pub progress: bool,
    /// The top-level sections besides the policies' that a candidate's
    /// files may hold: those of the binary that runs the configuration
    /// (the default, `http` only, refuses a file with a `server:` section;
    /// `floodgate replay` accepts every section `floodgate` reads).
    pub sections: Vec<&'static str>,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            candidates: Vec::new(),
            variants: Vec::new(),
            logs: Vec::new(),
            format: LogFormat::default(),
            window: Duration::from_secs(10),
            capacity: 1_000_000,
            decisions: None,
            rejected: None,
            top: 20,
            progress: false,
            sections: vec![floodgate_http::identity::SECTION],
        }
    }
}

/// A replay's results.
#[derive(Clone, Debug, Serialize)]
pub struct Replay {
    /// The logs read.
    pub sources: Vec<String>,
    /// The log format, as given.
    pub format: String,
    /// What reading found: lines, malformed and late lines.
    pub input: InputStats,
    /// Problems with the configuration or the log that do not stop a
    /// replay (a header the log lacks, a layer feature not replayed).
    pub warnings: Vec<String>,
    /// Each candidate's results, in order.
    pub candidates: Vec<CandidateReport>,
    /// Wall-clock time the replay took.
    pub elapsed_secs: f64,
}

/// Reading's counts, and the first lines not decided.
#[derive(Clone, Debug, Serialize)]
pub struct InputStats {
    /// Lines read.
    pub lines: u64,
    /// Blank lines.
    pub blank: u64,
    /// Lines that do not match the format.
    pub malformed: u64,
    /// Lines beyond the reordering window.
    pub late: u64,
    /// The reordering window, in seconds.
    pub window_secs: f64,
    /// Most lines held by it at once.
    pub held_peak: usize,
    /// Bytes read.
    pub bytes: u64,
    /// The first lines not decided, `source:line: why`.
    pub issues: Vec<String>,
}

impl InputStats {
    fn from(s: &InputSummary, window: Duration) -> Self {
        InputStats {
            lines: s.lines,
            blank: s.blank,
            malformed: s.malformed,
            late: s.late,
            window_secs: window.as_secs_f64(),
            held_peak: s.held_peak,
            bytes: s.bytes,
            issues: s.issues.iter().map(Issue::to_string).collect(),
        }
    }
}

/// The file for candidate `name` when several write decisions.
fn per_candidate(path: &Path, name: &str, several: bool) -> PathBuf {
    if !several {
        return path.to_path_buf();
    }
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file = match path.extension() {
        Some(ext) => format!("{stem}.{safe}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{safe}"),
    };
    path.with_file_name(file)
}

fn create(path: &Path) -> Result<Box<dyn Write + Send>, ReplayError> {
    let f = File::create(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    Ok(Box::new(BufWriter::with_capacity(1 << 20, f)))
}

/// Where a candidate's decisions are written, if asked.
type Output = Option<Box<dyn Write + Send>>;

/// Replays `options.logs` through every candidate.
pub fn replay(options: &ReplayOptions) -> Result<Replay, ReplayError> {
    let started = Instant::now();
    if options.candidates.is_empty() {
        return Err(ReplayError::Usage(
            "no configuration to replay (--config)".into(),
        ));
    }
    let (loaded, policies): (Vec<_>, Vec<_>) =
        candidate::load_all(&options.candidates, &options.variants, &options.sections)?
            .into_iter()
            .unzip();
    let mut names = Vec::new();
    for c in &loaded {
        names.extend(candidate::headers_read(c.identity.config()));
    }
    let headers = HeaderSet::new(names);
    let (identities, identity_of) = distinct_identities(&loaded);
    let parser = Parser::new(&options.format, &headers).map_err(ReplayError::Format)?;
    let warnings = warnings(&parser, &headers, &loaded, &policies);
    let logs = if options.logs.is_empty() {
        vec![LogSource::Stdin]
    } else {
        options.logs.clone()
    };
    let sources: Vec<String> = logs.iter().map(LogSource::name).collect();
    let (writers, rejected) = outputs(options, &loaded)?;
    let reader = Reader {
        parser: &parser,
        headers: &headers,
        identities: &identities,
        window: options.window.as_nanos().min(u128::from(u64::MAX)) as u64,
        progress: Arc::new(AtomicU64::new(0)),
    };
    let deciders = loaded.iter().zip(policies).zip(writers).zip(identity_of);
    let deciders = deciders.map(|(((c, p), w), i)| (c, p, w, i));
    let run = Run {
        options,
        sources: &sources,
        logs: &logs,
    };
    let (summary, candidates) = run.threads(reader, rejected, deciders)?;
    Ok(Replay {
        sources,
        format: format_name(&options.format),
        input: InputStats::from(&summary, options.window),
        warnings,
        candidates,
        elapsed_secs: started.elapsed().as_secs_f64(),
    })
}

/// Each distinct identity (they build descriptors once per line), and
/// which of them each candidate uses.
fn distinct_identities(loaded: &[Candidate]) -> (Vec<HttpIdentity>, Vec<usize>) {
    let mut identities: Vec<HttpIdentity> = Vec::new();
    let mut identity_of = Vec::new();
    for c in loaded {
        let same = |id: &HttpIdentity| id.config() == c.identity.config();
        let k = match identities.iter().position(same) {
            Some(k) => k,
            None => {
                identities.push(c.identity.clone());
                identities.len() - 1
            }
        };
        identity_of.push(k);
    }
    (identities, identity_of)
}

/// What the log lacks for the candidates, then each candidate's notes.
fn warnings(
    parser: &Parser,
    headers: &HeaderSet,
    loaded: &[Candidate],
    policies: &[PolicySet],
) -> Vec<String> {
    let concurrency = policies.iter().any(|p| {
        p.rules()
            .iter()
            .any(|r| r.limits().iter().any(|l| l.limit.is_concurrency()))
    });
    let mut warnings = check_format(parser, headers, loaded, concurrency);
    for c in loaded {
        for n in &c.notes {
            warnings.push(format!("{}: {n}", c.name));
        }
    }
    warnings
}

/// The decisions' file of each candidate, and the rejected lines' file.
fn outputs(
    options: &ReplayOptions,
    loaded: &[Candidate],
) -> Result<(Vec<Output>, Output), ReplayError> {
    let several = loaded.len() > 1;
    let mut writers = Vec::new();
    for c in loaded {
        writers.push(match &options.decisions {
            Some(p) => Some(create(&per_candidate(p, &c.name, several))?),
            None => None,
        });
    }
    let rejected = match &options.rejected {
        Some(p) => Some(create(p)?),
        None => None,
    };
    Ok((writers, rejected))
}

/// What the threads of a replay share.
struct Run<'a> {
    options: &'a ReplayOptions,
    sources: &'a [String],
    logs: &'a [LogSource],
}

impl Run<'_> {
    /// Runs the reader and a decider per candidate; what reading found,
    /// and each candidate's report.
    fn threads<'c>(
        &self,
        reader: Reader<'_>,
        rejected: Output,
        candidates: impl Iterator<Item = (&'c Candidate, PolicySet, Output, usize)>,
    ) -> Result<(InputSummary, Vec<CandidateReport>), ReplayError> {
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let mut senders = Vec::new();
            let mut deciders = Vec::new();
            for (candidate, policy, writer, identity) in candidates {
                let (tx, rx) = mpsc::sync_channel::<Arc<Ordered>>(IN_FLIGHT);
                senders.push(tx);
                let decide = move || self.decide(candidate, policy, writer, identity, rx);
                let name = format!("replay-decide-{}", deciders.len());
                let thread = std::thread::Builder::new().name(name);
                deciders.push(thread.spawn_scoped(scope, decide)?);
            }
            let progress = reader.progress.clone();
            let read = || self.read(&reader, senders, rejected, &done);
            let reading = (std::thread::Builder::new().name("replay-read".into()))
                .spawn_scoped(scope, read)?;
            if self.options.progress {
                show_progress(self.total_bytes(), &done, &progress);
            }
            let summary = reading
                .join()
                .map_err(|_| ReplayError::Usage("the reader stopped unexpectedly".into()))??;
            let mut reports = Vec::new();
            for d in deciders {
                let report = d
                    .join()
                    .map_err(|_| ReplayError::Usage("a decider stopped unexpectedly".into()))??;
                reports.push(report);
            }
            Ok((summary, reports))
        })
    }

    /// The size of the logs, when every one is known.
    fn total_bytes(&self) -> Option<u64> {
        self.logs.iter().map(LogSource::size).sum()
    }

    /// One candidate's thread: decides every batch `rx` brings.
    fn decide(
        &self,
        candidate: &Candidate,
        policy: PolicySet,
        writer: Output,
        identity: usize,
        rx: mpsc::Receiver<Arc<Ordered>>,
    ) -> Result<CandidateReport, ReplayError> {
        let capacity = self.options.capacity;
        let mut d = Decider::new(candidate, policy, identity, capacity, writer, self.sources)
            .map_err(|e| ReplayError::Usage(format!("store: {e}")))?;
        for batch in rx {
            d.batch(&batch);
            if d.write_error.is_some() {
                break;
            }
        }
        let (report, err) = d.finish(self.options.top);
        match err {
            Some(e) => Err(ReplayError::Io(e)),
            None => Ok(report),
        }
    }

    /// The reader's thread: reads, parses and orders the logs, sends each
    /// batch to every decider, and writes the lines not decided to
    /// `rejected`.
    fn read(
        &self,
        reader: &Reader<'_>,
        senders: Vec<mpsc::SyncSender<Arc<Ordered>>>,
        mut rejected: Output,
        done: &AtomicBool,
    ) -> Result<InputSummary, ReplayError> {
        let mut summary = InputSummary::default();
        let mut sink_error: Option<io::Error> = None;
        let mut sink = |issue: &Issue| {
            if let Some(w) = rejected.as_mut()
                && sink_error.is_none()
                && let Err(e) = writeln!(w, "{issue}")
            {
                sink_error = Some(e);
            }
        };
        let mut issues = Issues {
            summary: &mut summary,
            sink: Some(&mut sink),
        };
        let mut deliver = |batch: Ordered| {
            let batch = Arc::new(batch);
            for tx in &senders {
                // A decider that stopped (an output error) reports it.
                let _ = tx.send(Arc::clone(&batch));
            }
        };
        let read = reader.run(self.logs, &mut issues, &mut deliver);
        drop(senders);
        done.store(true, Ordering::Release);
        read?;
        if let Some(e) = sink_error {
            return Err(ReplayError::Io(e));
        }
        if let Some(w) = rejected.as_mut() {
            w.flush()?;
        }
        Ok(summary)
    }
}

/// A progress bar on standard error, updated until reading is `done`.
fn show_progress(total: Option<u64>, done: &AtomicBool, progress: &AtomicU64) {
    let bar = progress_bar(total);
    while !done.load(Ordering::Acquire) {
        bar.set_position(progress.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(100));
    }
    bar.finish_and_clear();
}

fn format_name(f: &LogFormat) -> String {
    match f {
        LogFormat::Nginx(s) if s == crate::format::COMBINED => "nginx (combined)".into(),
        LogFormat::Nginx(s) => format!("nginx: {s}"),
        LogFormat::Envoy(None) => "envoy (JSON)".into(),
        LogFormat::Envoy(Some(s)) => format!("envoy: {s}"),
        LogFormat::Jsonl(None) => "jsonl".into(),
        LogFormat::Jsonl(Some(s)) => format!("jsonl: {s}"),
    }
}

fn progress_bar(total: Option<u64>) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let bar = match total {
        Some(t) => ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr()),
        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
    };
    let style = match total {
        Some(_) => ProgressStyle::with_template(
            "{spinner} replaying [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        ),
        None => ProgressStyle::with_template("{spinner} replaying {bytes} ({bytes_per_sec})"),
    };
    if let Ok(s) = style {
        bar.set_style(s.progress_chars("=> "));
    }
    bar
}

/// Warnings about what the identities read and the log does not give.
fn check_format(
    parser: &Parser,
    headers: &HeaderSet,
    loaded: &[candidate::Candidate],
    concurrency: bool,
) -> Vec<String> {
    let given = parser.provides(headers);
    let mut w = Vec::new();
    let (mut address, mut path, mut method) = (false, false, false);
    for c in loaded {
        let (a, p, m) = candidate::needs(c.identity.config());
        address |= a;
        path |= p;
        method |= m;
    }
    if address && !given.address {
        w.push("the log has no client address: every client_ip is 0.0.0.0".into());
    }
    if path && !given.path {
        w.push("the log has no path: route and path descriptors are never built".into());
    }
    if concurrency && !given.duration {
        w.push(
            "the log has no request duration: concurrency limits are given back when a request is decided (or its delay ends)".into(),
        );
    }
    if method && !given.method {
        w.push("the log has no method: method descriptors are empty".into());
    }
    for h in headers.names() {
        if !given.headers.iter().any(|g| g == h.as_str()) {
            w.push(format!(
                "the log has no `{h}` header: descriptors that read it are built as if it were absent"
            ));
        }
    }
    w
}
