//! Access log formats: which one a log is in, and reading a line of it.

mod envoy;
mod json;
mod jsonl;
pub(crate) mod nginx;
pub(crate) mod time;

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::record::{HeaderSet, Span};

pub use nginx::COMBINED;

/// The format of the logs to replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// An nginx `log_format` string (`nginx` alone: `combined`).
    Nginx(String),
    /// Envoy's JSON access log: with the `json_format` dictionary it was
    /// written with (JSON or YAML, its values Envoy command operators), or
    /// none for the usual field names (`start_time`, `method`, `path`,
    /// `downstream_remote_address`, `duration`, `response_code`, headers
    /// by name).
    Envoy(Option<String>),
    /// JSON lines: an object per line, its fields named by `role=field`
    /// pairs (see [`LogFormat::from_str`]), or the usual names.
    Jsonl(Option<String>),
}

impl Default for LogFormat {
    fn default() -> Self {
        LogFormat::Nginx(COMBINED.to_owned())
    }
}

impl FromStr for LogFormat {
    type Err = String;

    /// `nginx`, `nginx:<log_format>`, `envoy`, `envoy:<json_format>`,
    /// `jsonl`, `jsonl:<role>=<field>,...`.
    ///
    /// JSON lines roles: `time` (the arrival), `end` (the time the line was
    /// written: the arrival is `end` minus `elapsed`), `elapsed` and
    /// `duration` (with a unit: `field:ms`; `s` by default), `method`,
    /// `path`, `client`, `status`, `headers` (an object of request headers)
    /// and `header.<name>` (one header).
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, rest) = match s.split_once(':') {
            Some((k, r)) => (k, Some(r.to_owned())),
            None => (s, None),
        };
        match kind {
            "nginx" => Ok(LogFormat::Nginx(
                rest.unwrap_or_else(|| COMBINED.to_owned()),
            )),
            "envoy" => Ok(LogFormat::Envoy(rest)),
            "jsonl" | "json" => Ok(LogFormat::Jsonl(rest)),
            other => Err(format!(
                "unknown log format `{other}` (expected nginx, nginx:'<log_format>', envoy, envoy:'<json_format>' or jsonl)"
            )),
        }
    }
}

/// The fields of a line besides its headers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fields {
    /// When the request arrived (ns since the epoch).
    pub time: u64,
    /// How long it took (ns), if logged.
    pub duration: Option<u64>,
    /// The response status (0 if not logged).
    pub status: u16,
    /// The client's address, if logged.
    pub peer: Option<IpAddr>,
    /// The method, if logged.
    pub method: Span,
    /// The path (without its query), if logged.
    pub path: Span,
}

impl Default for Fields {
    fn default() -> Self {
        Fields {
            time: 0,
            duration: None,
            status: 0,
            peer: None,
            method: Span::NONE,
            path: Span::NONE,
        }
    }
}

/// Why a line could not be read, and where in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    /// The byte (from 0) where it went wrong.
    pub column: usize,
    /// What is wrong with the line.
    pub reason: String,
}

impl LineError {
    /// The line is wrong at byte `column` for `reason`.
    pub(crate) fn at(column: usize, reason: impl Into<String>) -> Self {
        LineError {
            column,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reason = crate::printable::printable(&self.reason);
        write!(f, "column {}: the line {reason}", self.column + 1)
    }
}

/// What a format gives a replay: checked against what the identities read.
#[derive(Clone, Debug, Default)]
pub(crate) struct Provides {
    /// The client's address.
    pub address: bool,
    /// The path.
    pub path: bool,
    /// The method.
    pub method: bool,
    /// How long requests took (concurrency limits hold their units that
    /// long).
    pub duration: bool,
    /// Header names given (lowercase).
    pub headers: Vec<String>,
}

/// A compiled format.
#[derive(Clone, Debug)]
pub(crate) enum Parser {
    Nginx(nginx::NginxFormat),
    Json(json::JsonFormat),
}

impl Parser {
    /// Compiles `format` for the headers in `headers`.
    pub(crate) fn new(format: &LogFormat, headers: &HeaderSet) -> Result<Parser, String> {
        match format {
            LogFormat::Nginx(f) => nginx::NginxFormat::new(f, headers).map(Parser::Nginx),
            LogFormat::Envoy(spec) => envoy::format(spec.as_deref(), headers).map(Parser::Json),
            LogFormat::Jsonl(spec) => jsonl::format(spec.as_deref(), headers).map(Parser::Json),
        }
    }

    /// What the format's lines give, of what a replay needs (`headers`:
    /// the headers the identities read).
    pub(crate) fn provides(&self, headers: &HeaderSet) -> Provides {
        match self {
            Parser::Nginx(n) => n.provides(headers),
            Parser::Json(j) => j.provides(headers),
        }
    }

    /// Parses the line `text[start..end]`; `hdrs` holds one span per header
    /// of the set, [`Span::NONE`] on entry.
    pub(crate) fn parse(
        &self,
        text: &[u8],
        start: usize,
        end: usize,
        extra: &mut Vec<u8>,
        hdrs: &mut [Span],
    ) -> Result<Fields, LineError> {
        match self {
            Parser::Nginx(n) => n.parse(text, start, end, extra, hdrs),
            Parser::Json(j) => j.parse(text, start, end, extra, hdrs),
        }
    }
}

/// Unescapes an nginx log value: `\xHH` (nginx's default escaping) and the
/// JSON escapes (`escape=json`); anything else is kept as it is.
pub(crate) fn unescape_into(v: &[u8], out: &mut Vec<u8>) {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut i = 0;
    while i < v.len() {
        if v[i] != b'\\' || i + 1 == v.len() {
            out.push(v[i]);
            i += 1;
            continue;
        }
        let simple = match v[i + 1] {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            b'/' => Some(b'/'),
            b'n' => Some(b'\n'),
            b't' => Some(b'\t'),
            b'r' => Some(b'\r'),
            b'b' => Some(8),
            b'f' => Some(12),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            i += 2;
            continue;
        }
        if v[i + 1] == b'x'
            && let (Some(h), Some(l)) = (
                v.get(i + 2).copied().and_then(hex),
                v.get(i + 3).copied().and_then(hex),
            )
        {
            out.push(h << 4 | l);
            i += 4;
            continue;
        }
        if v[i + 1] == b'u'
            && let Some(code) = v
                .get(i + 2..i + 6)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .and_then(char::from_u32)
        {
            let mut buf = [0u8; 4];
            out.extend_from_slice(code.encode_utf8(&mut buf).as_bytes());
            i += 6;
            continue;
        }
        out.push(v[i]);
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes() {
        let u = |s: &str| {
            let mut out = Vec::new();
            unescape_into(s.as_bytes(), &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(u(r"a\x22b\x5Cc"), "a\"b\\c");
        assert_eq!(u(r#"a\"b\\c\u00e9"#), "a\"b\\cé");
        assert_eq!(u(r"\xZZ\q\"), r"\xZZ\q\");
    }

    #[test]
    fn names() {
        assert_eq!("nginx".parse::<LogFormat>(), Ok(LogFormat::default()));
        assert_eq!(
            "nginx:$msec $status".parse::<LogFormat>(),
            Ok(LogFormat::Nginx("$msec $status".into()))
        );
        assert_eq!("envoy".parse::<LogFormat>(), Ok(LogFormat::Envoy(None)));
        assert_eq!(
            "jsonl:time=ts".parse::<LogFormat>(),
            Ok(LogFormat::Jsonl(Some("time=ts".into())))
        );
        assert!("apache".parse::<LogFormat>().is_err());
    }
}
