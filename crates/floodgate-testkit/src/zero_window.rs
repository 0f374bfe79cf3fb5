//! HTTP/2 clients whose receive window stays shut (Python's `h2`, from
//! `python/zero_window.py`): connections that announce an initial window
//! of 0 and never open it, each with streams of one request; what the
//! server does to them is read as the lines the script reports.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use crate::python;

const SCRIPT: &str = include_str!("../python/zero_window.py");

/// The request every stream of a [`ZeroWindow`] sends.
pub struct Stalled<'a> {
    /// Header fields, pseudo-headers first.
    pub headers: &'a [(&'a str, &'a str)],
    /// The request body (none: the headers end the stream).
    pub body: &'a [u8],
}

/// Running zero-window clients; killed on drop.
pub struct ZeroWindow {
    child: Child,
    _stdin: ChildStdin,
    lines: Receiver<String>,
    /// Lines reported so far, counted by their first word.
    seen: HashMap<String, Vec<String>>,
}

impl ZeroWindow {
    /// `connections` connections to `127.0.0.1:port`, each with `streams`
    /// streams of `request`.
    pub fn open(
        port: u16,
        connections: usize,
        streams: usize,
        request: &Stalled<'_>,
    ) -> ZeroWindow {
        Self::in_waves(port, 1, connections, streams, request)
    }

    /// [`open`](Self::open) `waves` times, each wave once every stream of
    /// the one before has its response headers (or was reset); all kept
    /// open.
    pub fn in_waves(
        port: u16,
        waves: usize,
        connections: usize,
        streams: usize,
        request: &Stalled<'_>,
    ) -> ZeroWindow {
        let headers: Vec<String> = (request.headers.iter())
            .map(|(k, v)| format!("[{},{}]", quoted(k), quoted(v)))
            .collect();
        let body: String = request.body.iter().map(|b| format!("{b:02x}")).collect();
        let spec = format!(
            r#"{{"port":{port},"waves":{waves},"connections":{connections},"streams":{streams},"headers":[{}],"body":"{body}"}}"#,
            headers.join(",")
        );
        let mut child = Command::new(python())
            .args(["-c", SCRIPT, &spec])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the zero-window client");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        ZeroWindow {
            child,
            _stdin: stdin,
            lines,
            seen: HashMap::new(),
        }
    }

    /// Waits until `n` lines starting with `word` have been reported, at
    /// most `within`; whether they were.
    pub fn wait_for(&mut self, word: &str, n: usize, within: Duration) -> bool {
        let end = Instant::now() + within;
        while self.count(word) < n {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.record(line),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return false,
            }
        }
        true
    }

    /// Reads what has been reported by now.
    pub fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.record(line);
        }
    }

    /// Lines starting with `word` reported so far (see [`drain`](Self::drain)).
    pub fn lines(&self, word: &str) -> &[String] {
        self.seen.get(word).map_or(&[], |v| v.as_slice())
    }

    /// How many lines starting with `word` were reported so far.
    pub fn count(&self, word: &str) -> usize {
        self.lines(word).len()
    }

    fn record(&mut self, line: String) {
        let word = line.split(' ').next().unwrap_or("").to_owned();
        self.seen.entry(word).or_default().push(line);
    }
}

impl Drop for ZeroWindow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `s` as a JSON string (test inputs: printable ASCII).
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}
