//! Parsed log lines: a chunk of the input as read, and per line the
//! ranges of its fields in it — no allocation per line.

use std::net::IpAddr;

use floodgate_http::identity::RequestHead;
use http::HeaderName;

/// Marks a span in [`Parsed::extra`] (a value that had to be unescaped)
/// rather than in [`Parsed::text`].
const EXTRA: u32 = 1 << 31;

/// A field's bytes: a range of a chunk, or of its unescaped values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: u32,
    pub len: u32,
}

impl Span {
    /// No value (an absent header).
    pub(crate) const NONE: Span = Span {
        start: u32::MAX,
        len: 0,
    };

    pub(crate) fn is_none(self) -> bool {
        self.start == u32::MAX
    }
}

/// The request headers a replay reads from logs (those the identities
/// read), by position.
#[derive(Clone, Debug, Default)]
pub(crate) struct HeaderSet {
    names: Vec<HeaderName>,
}

impl HeaderSet {
    pub(crate) fn new(mut names: Vec<HeaderName>) -> Self {
        names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        names.dedup();
        HeaderSet { names }
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    pub(crate) fn names(&self) -> &[HeaderName] {
        &self.names
    }

    /// The position of header `name` (any case).
    pub(crate) fn position(&self, name: &[u8]) -> Option<usize> {
        self.names
            .iter()
            .position(|n| n.as_str().as_bytes().eq_ignore_ascii_case(name))
    }

    fn index(&self, name: &HeaderName) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }
}

/// One parsed line.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rec {
    /// The input (file) it came from, by position.
    pub file: u32,
    /// Its line number in that input (from 1).
    pub line: u64,
    /// Arrival, in nanoseconds since the Unix epoch.
    pub time: u64,
    /// How long the request took, when logged (nanoseconds).
    pub duration: Option<u64>,
    /// The response status logged (0: none).
    pub status: u16,
    /// The client address logged.
    pub peer: Option<IpAddr>,
    pub method: Span,
    pub path: Span,
    /// Index of its first header span in [`Parsed::headers`].
    pub headers: u32,
}

/// A chunk of the input and the lines parsed from it.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    /// The chunk: whole lines as read.
    pub text: Vec<u8>,
    /// Values that had to be unescaped.
    pub extra: Vec<u8>,
    pub recs: Vec<Rec>,
    /// [`HeaderSet::len`] spans per record.
    pub headers: Vec<Span>,
}

impl Parsed {
    pub(crate) fn bytes(&self, s: Span) -> &[u8] {
        if s.is_none() {
            return &[];
        }
        let (buf, start) = if s.start & EXTRA != 0 {
            (&self.extra, s.start & !EXTRA)
        } else {
            (&self.text, s.start)
        };
        buf.get(start as usize..(start + s.len) as usize)
            .unwrap_or_default()
    }

    /// A span of `text` (`start..end` are offsets in it).
    pub(crate) fn span(start: usize, end: usize) -> Span {
        Span {
            start: start as u32,
            len: (end - start) as u32,
        }
    }

    /// Appends `value` to `extra`, returning its span.
    pub(crate) fn push_extra(extra: &mut Vec<u8>, value: impl FnOnce(&mut Vec<u8>)) -> Span {
        let start = extra.len();
        value(extra);
        Span {
            start: start as u32 | EXTRA,
            len: (extra.len() - start) as u32,
        }
    }
}

/// A parsed line as the identity reads it.
pub(crate) struct RecView<'a> {
    pub parsed: &'a Parsed,
    pub rec: &'a Rec,
    pub headers: &'a HeaderSet,
}

fn text(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or_default()
}

impl RecView<'_> {
    fn header_span(&self, name: &HeaderName) -> Option<Span> {
        let i = self.headers.index(name)?;
        let s = *self.parsed.headers.get(self.rec.headers as usize + i)?;
        (!s.is_none()).then_some(s)
    }
}

impl RequestHead for RecView<'_> {
    fn method(&self) -> &str {
        text(self.parsed.bytes(self.rec.method))
    }

    fn path(&self) -> &str {
        text(self.parsed.bytes(self.rec.path))
    }

    fn header_lines(&self, name: &HeaderName) -> impl Iterator<Item = &[u8]> {
        self.header_span(name)
            .map(|s| self.parsed.bytes(s))
            .into_iter()
    }
}
