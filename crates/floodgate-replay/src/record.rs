//! Parsed log lines: a chunk of the input as read, and per line the
//! ranges of its fields in it — no allocation per line.

use floodgate_http::identity::RequestHead;
use floodgate_policy::Descriptor;
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
    /// Index of its first descriptor set in [`Parsed::sets`] (one per
    /// identity).
    pub sets: u32,
}

/// A descriptor an identity built: its entries in [`Parsed::entries`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Built {
    pub first: u32,
    pub len: u32,
    pub hits: Option<u64>,
}

/// A line's descriptors under one identity: in [`Parsed::built`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct BuiltSet {
    pub first: u32,
    pub len: u32,
    /// The request's hits addend.
    pub hits: u32,
}

/// The lines parsed from a chunk of the input, with their descriptors
/// (the chunk itself is not kept).
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub recs: Vec<Rec>,
    /// The descriptors' keys and values, back to back.
    pub dtext: String,
    /// Entries: (key start, key end = value start, value end) in `dtext`.
    pub entries: Vec<[u32; 3]>,
    pub built: Vec<Built>,
    pub sets: Vec<BuiltSet>,
}

/// The bytes of span `s` of a chunk's `text` or its `extra`.
pub(crate) fn bytes<'a>(text: &'a [u8], extra: &'a [u8], s: Span) -> &'a [u8] {
    if s.is_none() {
        return &[];
    }
    let (buf, start) = if s.start & EXTRA != 0 {
        (extra, s.start & !EXTRA)
    } else {
        (text, s.start)
    };
    buf.get(start as usize..(start + s.len) as usize)
        .unwrap_or_default()
}

impl Parsed {
    /// The descriptors of record `rec` under identity `identity`.
    pub(crate) fn descriptors<'a>(
        &'a self,
        rec: &Rec,
        identity: usize,
        out: &mut Vec<DescView<'a>>,
    ) -> u32 {
        out.clear();
        let Some(set) = self.sets.get(rec.sets as usize + identity) else {
            return 1;
        };
        let built = &self.built[set.first as usize..(set.first + set.len) as usize];
        for b in built {
            out.push(DescView {
                text: &self.dtext,
                entries: &self.entries[b.first as usize..(b.first + b.len) as usize],
                hits: b.hits,
            });
        }
        set.hits
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
    pub text: &'a [u8],
    pub extra: &'a [u8],
    /// The line's header spans, one per header of the set.
    pub spans: &'a [Span],
    pub method: Span,
    pub path: Span,
    pub headers: &'a HeaderSet,
}

fn text(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or_default()
}

impl RequestHead for RecView<'_> {
    fn method(&self) -> &str {
        text(bytes(self.text, self.extra, self.method))
    }

    fn path(&self) -> &str {
        text(bytes(self.text, self.extra, self.path))
    }

    fn header_lines(&self, name: &HeaderName) -> impl Iterator<Item = &[u8]> {
        self.headers
            .index(name)
            .and_then(|i| self.spans.get(i))
            .filter(|s| !s.is_none())
            .map(|s| bytes(self.text, self.extra, *s))
            .into_iter()
    }
}

/// A descriptor built from a line, as the engine reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DescView<'a> {
    text: &'a str,
    entries: &'a [[u32; 3]],
    hits: Option<u64>,
}

impl Descriptor for DescView<'_> {
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn entry(&self, i: usize) -> (&str, &str) {
        match self.entries.get(i) {
            Some(&[a, b, c]) => (
                self.text.get(a as usize..b as usize).unwrap_or_default(),
                self.text.get(b as usize..c as usize).unwrap_or_default(),
            ),
            None => ("", ""),
        }
    }

    fn hits_addend(&self) -> Option<u64> {
        self.hits
    }
}
