//! Reading logs: files or standard input, plain or gzip (told by the
//! first bytes), in large chunks of whole lines, parsed line by line and
//! put in arrival order.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::read::MultiGzDecoder;

use floodgate_http::HttpIdentity;
use floodgate_http::identity::{NoExtensions, RequestDescriptors};
use floodgate_policy::Descriptor;

use crate::format::{Fields, LineError, Parser};
use crate::printable::printable;
use crate::record::{Built, BuiltSet, HeaderSet, Parsed, Rec, RecView, Span};
use crate::reorder::{Late, Ordered, Reorder};

/// The client address of a line that logs none.
const NO_PEER: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

/// Bytes read at a time (whole lines are kept; the rest waits).
const CHUNK: usize = 1 << 20;
/// Lines longer than this are reported and skipped.
pub const MAX_LINE: usize = 1 << 20;
/// Lines per batch handed to the deciders.
const BATCH: usize = 8192;

/// A log to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogSource {
    /// A file (`-`: standard input).
    File(PathBuf),
    /// Standard input.
    Stdin,
}

impl LogSource {
    /// `-` is standard input; anything else a file.
    pub fn parse(s: &str) -> LogSource {
        if s == "-" {
            LogSource::Stdin
        } else {
            LogSource::File(PathBuf::from(s))
        }
    }

    /// The name used in reports.
    pub fn name(&self) -> String {
        match self {
            LogSource::File(p) => p.display().to_string(),
            LogSource::Stdin => "<stdin>".into(),
        }
    }

    /// Its size in bytes, when known (for the progress bar).
    pub(crate) fn size(&self) -> Option<u64> {
        match self {
            LogSource::File(p) => std::fs::metadata(p).ok().map(|m| m.len()),
            LogSource::Stdin => None,
        }
    }
}

/// Why a line was not decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IssueKind {
    /// The line does not match the format.
    Malformed(LineError),
    /// Longer than [`MAX_LINE`] bytes.
    TooLong,
    /// More than the reordering window out of order.
    Late {
        /// How far behind, in nanoseconds.
        behind: u64,
    },
}

/// A line not decided, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    /// The input it is in (its name).
    pub source: String,
    /// Its line number (from 1).
    pub line: u64,
    /// Why.
    pub kind: IssueKind,
    /// Its first bytes.
    pub excerpt: String,
}

impl std::fmt::Display for Issue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: ", printable(&self.source), self.line)?;
        match &self.kind {
            IssueKind::Malformed(e) => write!(f, "{e}")?,
            IssueKind::TooLong => write!(f, "the line is longer than {MAX_LINE} bytes")?,
            IssueKind::Late { behind } => write!(
                f,
                "{:.3} s earlier than a line already replayed (beyond the reordering window)",
                *behind as f64 / 1e9
            )?,
        }
        if !self.excerpt.is_empty() {
            write!(f, ": {}", printable(&self.excerpt))?;
        }
        Ok(())
    }
}

/// What reading found, besides the lines.
#[derive(Debug, Default)]
pub(crate) struct InputSummary {
    /// Lines read (blank ones included).
    pub lines: u64,
    /// Blank lines (not requests).
    pub blank: u64,
    /// Lines that do not match the format (or are too long).
    pub malformed: u64,
    /// Lines too far out of order.
    pub late: u64,
    /// The first issues, in the order found.
    pub issues: Vec<Issue>,
    /// Most lines held by the reordering window at once.
    pub held_peak: usize,
    /// Bytes read (compressed, for gzip).
    pub bytes: u64,
}

/// Issues kept in the summary (all are counted).
pub const KEPT_ISSUES: usize = 1000;

/// Where issues go: the summary keeps the first, a sink gets all.
pub(crate) struct Issues<'a> {
    /// Counts every issue and keeps the first [`KEPT_ISSUES`].
    pub summary: &'a mut InputSummary,
    /// Gets every issue (`--rejected FILE`).
    pub sink: Option<&'a mut dyn FnMut(&Issue)>,
}

impl Issues<'_> {
    /// Counts `issue`, hands it to the sink, and keeps it among the first.
    fn add(&mut self, issue: Issue) {
        match issue.kind {
            IssueKind::Late { .. } => self.summary.late += 1,
            _ => self.summary.malformed += 1,
        }
        if let Some(sink) = self.sink.as_mut() {
            sink(&issue);
        }
        if self.summary.issues.len() < KEPT_ISSUES {
            self.summary.issues.push(issue);
        }
    }
}

/// The start of a line, printable, to show in an issue.
fn excerpt(line: &[u8]) -> String {
    const MAX: usize = 120;
    let cut = &line[..line.len().min(MAX)];
    let mut s = printable(&String::from_utf8_lossy(cut)).into_owned();
    if line.len() > MAX {
        s.push('…');
    }
    s
}

/// What reading carries from chunk to chunk (and file to file).
struct Stream {
    /// Lines held until they are in arrival order.
    reorder: Reorder,
    /// One per identity.
    outs: Vec<RequestDescriptors>,
    /// Buffers reused from line to line.
    scratch: Scratch,
    /// The last chunk's size and what its lines needed, to reserve as
    /// much per byte for the next (no regrowing, no copies).
    last: Sizes,
}

/// A chunk's bytes and the lengths of its [`Parsed`] buffers.
#[derive(Clone, Copy, Default)]
struct Sizes {
    bytes: usize,
    recs: usize,
    dtext: usize,
    entries: usize,
    built: usize,
    sets: usize,
}

impl Sizes {
    /// The sizes of a chunk of `bytes` parsed into `p`.
    fn of(bytes: usize, p: &Parsed) -> Sizes {
        Sizes {
            bytes,
            recs: p.recs.len(),
            dtext: p.dtext.len(),
            entries: p.entries.len(),
            built: p.built.len(),
            sets: p.sets.len(),
        }
    }

    /// Reserves in `p`, for a chunk of `bytes`, what the last chunk
    /// needed per byte, and a little more.
    fn reserve(&self, bytes: usize, p: &mut Parsed) {
        if self.bytes == 0 {
            p.recs.reserve(bytes / 128);
            return;
        }
        let scale =
            |n: usize| (n as u128 * bytes as u128 / self.bytes as u128) as usize * 9 / 8 + 16;
        p.recs.reserve(scale(self.recs));
        p.dtext.reserve(scale(self.dtext));
        p.entries.reserve(scale(self.entries));
        p.built.reserve(scale(self.built));
        p.sets.reserve(scale(self.sets));
    }
}

/// Buffers reused from line to line.
#[derive(Default)]
struct Scratch {
    /// Values that had to be unescaped.
    extra: Vec<u8>,
    /// The current line's header spans.
    spans: Vec<Span>,
}

/// Counts the bytes read through it.
struct Counted<R> {
    /// The source.
    inner: R,
    /// Bytes read so far (shared with the progress report).
    counter: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counter.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Opens `source`, decompressing it when it starts like gzip.
fn open(source: &LogSource, counter: Arc<AtomicU64>) -> io::Result<Box<dyn Read + Send>> {
    let raw: Box<dyn Read + Send> = match source {
        LogSource::File(p) => Box::new(File::open(p)?),
        LogSource::Stdin => Box::new(io::stdin()),
    };
    let mut buffered = BufReader::with_capacity(
        1 << 16,
        Counted {
            inner: raw,
            counter,
        },
    );
    let gzip = buffered.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    Ok(if gzip {
        Box::new(MultiGzDecoder::new(buffered))
    } else {
        Box::new(buffered)
    })
}

/// Reads every source in order, parses each line, puts them in arrival
/// order and hands them over in batches to `deliver`.
pub(crate) struct Reader<'a> {
    /// The log's format.
    pub parser: &'a Parser,
    /// The headers the identities read, kept from each line.
    pub headers: &'a HeaderSet,
    /// The identities the candidates use: each line's descriptors are
    /// built here, once per identity, beside the parsing.
    pub identities: &'a [HttpIdentity],
    /// The reordering window: a line later than this behind the latest
    /// is not decided.
    pub window: u64,
    /// Bytes read so far, for a progress report.
    pub progress: Arc<AtomicU64>,
}

impl Reader<'_> {
    /// Reads `sources` in order, reporting lines not decided to `issues`.
    pub(crate) fn run(
        &self,
        sources: &[LogSource],
        issues: &mut Issues<'_>,
        deliver: &mut dyn FnMut(Ordered),
    ) -> io::Result<()> {
        let mut stream = Stream {
            reorder: Reorder::new(self.window),
            outs: self
                .identities
                .iter()
                .map(HttpIdentity::new_output)
                .collect(),
            scratch: Scratch::default(),
            last: Sizes::default(),
        };
        for (file, source) in sources.iter().enumerate() {
            let mut reader = open(source, self.progress.clone())
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", source.name())))?;
            let name = source.name();
            self.read_one(
                &mut *reader,
                file as u32,
                &name,
                &mut stream,
                issues,
                deliver,
            )
            .map_err(|e| io::Error::new(e.kind(), format!("{name}: {e}")))?;
        }
        let reorder = &mut stream.reorder;
        reorder.release(true);
        let rest = reorder.take();
        if rest.len() > 0 {
            deliver(rest);
        }
        issues.summary.held_peak = reorder.peak;
        issues.summary.bytes = self.progress.load(Ordering::Relaxed);
        Ok(())
    }

    /// Reads one log to its end, chunk by chunk, delivering its records
    /// in time order as the reordering window releases them.
    fn read_one(
        &self,
        reader: &mut dyn Read,
        file: u32,
        name: &str,
        stream: &mut Stream,
        issues: &mut Issues<'_>,
        deliver: &mut dyn FnMut(Ordered),
    ) -> io::Result<()> {
        // Whole lines are parsed; a partial last line stays for the next
        // read. The buffer is reused from chunk to chunk.
        let mut text: Vec<u8> = Vec::with_capacity(2 * CHUNK);
        let mut line_no: u64 = 0;
        // Skipping the rest of a line too long to keep.
        let mut skipping = false;
        loop {
            let read = reader.take(CHUNK as u64).read_to_end(&mut text)?;
            let eof = read == 0;
            if skipping {
                match memchr::memchr(b'\n', &text) {
                    Some(i) => {
                        text.drain(..=i);
                        skipping = false;
                    }
                    None if eof => break,
                    None => {
                        text.clear();
                        continue;
                    }
                }
            }
            let whole = match memchr::memrchr(b'\n', &text) {
                Some(i) => i + 1,
                None if eof => text.len(),
                None => 0,
            };
            if whole == 0 {
                if eof {
                    break;
                }
                skipping = too_long(&mut text, name, &mut line_no, issues);
                continue;
            }
            let parsed = self.parse_chunk(&text[..whole], file, name, &mut line_no, stream, issues);
            text.drain(..whole);
            reorder(&mut stream.reorder, parsed, name, issues, deliver);
            if eof {
                break;
            }
        }
        Ok(())
    }

    /// Parses the whole lines of `text`, building each line's
    /// descriptors; the chunk itself is not kept.
    fn parse_chunk(
        &self,
        text: &[u8],
        file: u32,
        name: &str,
        line_no: &mut u64,
        stream: &mut Stream,
        issues: &mut Issues<'_>,
    ) -> Parsed {
        let mut p = Parsed::default();
        stream.last.reserve(text.len(), &mut p);
        stream.scratch.extra.clear();
        let mut start = 0;
        while start < text.len() {
            let nl = memchr::memchr(b'\n', &text[start..]).map_or(text.len(), |i| start + i);
            let mut end = nl;
            if end > start && text[end - 1] == b'\r' {
                end -= 1;
            }
            *line_no += 1;
            issues.summary.lines += 1;
            let issue = |kind| Issue {
                source: name.to_owned(),
                line: *line_no,
                kind,
                excerpt: excerpt(&text[start..end]),
            };
            if text[start..end].iter().all(u8::is_ascii_whitespace) {
                issues.summary.blank += 1;
            } else if end - start > MAX_LINE {
                issues.add(issue(IssueKind::TooLong));
            } else {
                let first_set = p.sets.len() as u32;
                match self.parse_line(text, start, end, stream, &mut p) {
                    Ok(f) => p.recs.push(Rec {
                        file,
                        line: *line_no,
                        time: f.time,
                        duration: f.duration,
                        status: f.status,
                        sets: first_set,
                    }),
                    Err(e) => issues.add(issue(IssueKind::Malformed(e))),
                }
            }
            start = nl + 1;
        }
        stream.last = Sizes::of(text.len(), &p);
        p
    }

    /// Parses the line `text[start..end]` and builds every identity's
    /// descriptors of it into `p`; the line's fields.
    fn parse_line(
        &self,
        text: &[u8],
        start: usize,
        end: usize,
        stream: &mut Stream,
        p: &mut Parsed,
    ) -> Result<Fields, LineError> {
        let Stream { outs, scratch, .. } = stream;
        let Scratch { extra, spans } = scratch;
        spans.clear();
        spans.resize(self.headers.len(), Span::NONE);
        let f = self.parser.parse(text, start, end, extra, spans)?;
        let view = RecView {
            text,
            extra,
            spans,
            method: f.method,
            path: f.path,
            headers: self.headers,
        };
        let peer = f.peer.unwrap_or(NO_PEER);
        for (identity, out) in self.identities.iter().zip(outs.iter_mut()) {
            identity.build(&view, peer, &NoExtensions, out);
            keep_descriptors(p, out);
        }
        Ok(f)
    }
}

/// Hands a chunk's records to the reordering window (those too late for it
/// are reported as issues of `name`), delivering a batch once one is ready.
fn reorder(
    reorder: &mut Reorder,
    parsed: Parsed,
    name: &str,
    issues: &mut Issues<'_>,
    deliver: &mut dyn FnMut(Ordered),
) {
    reorder.push(parsed, |l: Late| {
        issues.add(Issue {
            source: name.to_owned(),
            line: l.line,
            kind: IssueKind::Late { behind: l.behind },
            excerpt: String::new(),
        });
    });
    if reorder.ready() >= BATCH {
        deliver(reorder.take());
    }
}

/// Whether `text`, a line not ended yet, is too long to keep: if so, it is
/// reported (as line `line_no` + 1 of `name`) and dropped, and the rest of
/// the line is to be skipped.
fn too_long(text: &mut Vec<u8>, name: &str, line_no: &mut u64, issues: &mut Issues<'_>) -> bool {
    if text.len() <= MAX_LINE {
        return false;
    }
    *line_no += 1;
    issues.add(Issue {
        source: name.to_owned(),
        line: *line_no,
        kind: IssueKind::TooLong,
        excerpt: excerpt(text),
    });
    text.clear();
    true
}

/// Copies one identity's descriptors of a line into `p`'s buffers, as one
/// set.
fn keep_descriptors(p: &mut Parsed, out: &RequestDescriptors) {
    let first_built = p.built.len() as u32;
    for d in out.as_slice() {
        let first_entry = p.entries.len() as u32;
        for (k, v) in d.entries() {
            let a = p.dtext.len() as u32;
            p.dtext.push_str(k);
            let b = p.dtext.len() as u32;
            p.dtext.push_str(v);
            p.entries.push([a, b, p.dtext.len() as u32]);
        }
        p.built.push(Built {
            first: first_entry,
            len: p.entries.len() as u32 - first_entry,
            hits: d.hits_addend(),
        });
    }
    p.sets.push(BuiltSet {
        first: first_built,
        len: p.built.len() as u32 - first_built,
        hits: out.hits_addend(),
    });
}
