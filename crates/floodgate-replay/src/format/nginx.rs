//! nginx access logs: any `log_format` (the `combined` one by default),
//! compiled once into literals and variables, each line matched against
//! it without allocating.
//!
//! A variable's value runs to the first occurrence of the literal text
//! after it (a quote preceded by a backslash does not count, for
//! `escape=json`). nginx writes `-` for a variable without a value: a
//! header logged as `-` is absent. Values are unescaped (`\xHH`, and the
//! JSON escapes of `escape=json`).

use std::net::IpAddr;

use super::time;
use super::{Fields, LineError, Provides, unescape_into};
use crate::record::{HeaderSet, Parsed, Span};

/// nginx's predefined `combined` format.
pub const COMBINED: &str = r#"$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent""#;

/// What a variable gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Var {
    RemoteAddr,
    /// `$time_local` (the end of the request, whole seconds).
    TimeLocal,
    /// `$time_iso8601` (the end, whole seconds).
    TimeIso,
    /// `$msec` (the end, milliseconds).
    Msec,
    /// `$request_time` (seconds with milliseconds).
    RequestTime,
    /// `$request`: `METHOD URI PROTOCOL`.
    Request,
    RequestMethod,
    /// `$request_uri` (with the query), `$uri` (without).
    Uri,
    Status,
    /// `$http_NAME`: a header the identities read, by position.
    Header(usize),
    /// Anything else: read past.
    Other,
}

/// A piece of a `log_format`.
#[derive(Clone, Debug)]
enum Token {
    /// Text, and a searcher for it built once.
    Literal(Vec<u8>, Box<memchr::memmem::Finder<'static>>),
    /// A variable's value.
    Var(Var),
}

/// A compiled `log_format`.
#[derive(Clone, Debug)]
pub(crate) struct NginxFormat {
    /// The format, in order.
    tokens: Vec<Token>,
    /// A variable gives the time (always, once compiled).
    has_time: bool,
}

/// What variable `$name` gives (`$http_NAME`: a header the identities
/// read, else nothing).
fn var_of(name: &str, headers: &HeaderSet) -> Var {
    match name {
        "remote_addr" => Var::RemoteAddr,
        "time_local" => Var::TimeLocal,
        "time_iso8601" => Var::TimeIso,
        "msec" => Var::Msec,
        "request_time" => Var::RequestTime,
        "request" => Var::Request,
        "request_method" => Var::RequestMethod,
        "request_uri" | "uri" | "document_uri" => Var::Uri,
        "status" => Var::Status,
        _ => match name.strip_prefix("http_") {
            Some(h) => headers
                .position(h.replace('_', "-").as_bytes())
                .map_or(Var::Other, Var::Header),
            None => Var::Other,
        },
    }
}

impl NginxFormat {
    /// Compiles a `log_format` string (its variables `$name` or `${name}`).
    pub(crate) fn new(format: &str, headers: &HeaderSet) -> Result<Self, String> {
        let b = format.as_bytes();
        let mut tokens = Vec::new();
        let mut literal = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] != b'$' {
                literal.push(b[i]);
                i += 1;
                continue;
            }
            let (name, next) = if b.get(i + 1) == Some(&b'{') {
                let end = b[i + 2..]
                    .iter()
                    .position(|&c| c == b'}')
                    .ok_or_else(|| format!("unclosed `${{` at byte {i}"))?;
                (&format[i + 2..i + 2 + end], i + 3 + end)
            } else {
                let n = b[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                    .count();
                (&format[i + 1..i + 1 + n], i + 1 + n)
            };
            if name.is_empty() {
                return Err(format!("a `$` without a variable name at byte {i}"));
            }
            if !literal.is_empty() {
                tokens.push(literal_token(std::mem::take(&mut literal)));
            } else if let Some(Token::Var(_)) = tokens.last() {
                return Err(format!(
                    "`${name}` follows another variable with nothing between them: their values cannot be told apart"
                ));
            }
            tokens.push(Token::Var(var_of(name, headers)));
            i = next;
        }
        if !literal.is_empty() {
            tokens.push(literal_token(literal));
        }
        let has = |v: Var| tokens.iter().any(|t| matches!(t, Token::Var(x) if *x == v));
        let has_time = has(Var::Msec) || has(Var::TimeLocal) || has(Var::TimeIso);
        if !has_time {
            return Err(
                "the format has no time: it needs $msec, $time_local or $time_iso8601".into(),
            );
        }
        Ok(NginxFormat { tokens, has_time })
    }

    /// What lines give, of what a replay needs (`headers`: the headers
    /// the identities read).
    pub(crate) fn provides(&self, headers: &HeaderSet) -> Provides {
        let vars: Vec<Var> = self
            .tokens
            .iter()
            .filter_map(|t| match t {
                Token::Var(v) => Some(*v),
                Token::Literal(..) => None,
            })
            .collect();
        Provides {
            address: vars.contains(&Var::RemoteAddr),
            path: vars.contains(&Var::Request) || vars.contains(&Var::Uri),
            method: vars.contains(&Var::Request) || vars.contains(&Var::RequestMethod),
            duration: vars.contains(&Var::RequestTime),
            headers: vars
                .iter()
                .filter_map(|v| match v {
                    Var::Header(i) => Some(headers.names()[*i].as_str().to_owned()),
                    _ => None,
                })
                .collect(),
        }
    }

    /// Parses the line `text[start..end]`; header spans go to `hdrs`
    /// (one per header of the set, already filled with [`Span::NONE`]).
    pub(crate) fn parse(
        &self,
        text: &[u8],
        start: usize,
        end: usize,
        extra: &mut Vec<u8>,
        hdrs: &mut [Span],
    ) -> Result<Fields, LineError> {
        debug_assert!(self.has_time);
        let mut line = Line {
            f: Fields::default(),
            times: Times::default(),
            extra,
            hdrs,
        };
        let mut p = start;
        for (k, token) in self.tokens.iter().enumerate() {
            match token {
                Token::Literal(lit, _) => {
                    if !text[p..end].starts_with(lit) {
                        return Err(LineError::at(p - start, "does not match the format"));
                    }
                    p += lit.len();
                }
                Token::Var(var) => {
                    let value_end = match self.tokens.get(k + 1) {
                        Some(Token::Literal(lit, finder)) => {
                            find_literal(&text[p..end], lit, finder)
                                .map(|n| p + n)
                                .ok_or_else(|| {
                                    LineError::at(p - start, "does not match the format")
                                })?
                        }
                        _ => end,
                    };
                    let v = &text[p..value_end];
                    if v != b"-" {
                        line.set(*var, v, p, p - start)?;
                    }
                    p = value_end;
                }
            }
        }
        if p != end {
            return Err(LineError::at(p - start, "has text after the format's end"));
        }
        let Line { mut f, times, .. } = line;
        let logged = times
            .msec
            .or(times.end_time)
            .ok_or_else(|| LineError::at(0, "has no time (`-`)"))?;
        // nginx logs when the request ends: it arrived `$request_time`
        // earlier.
        f.time = logged.saturating_sub(times.took.unwrap_or(0));
        f.duration = times.took;
        Ok(f)
    }
}

/// The times a line gives: when nginx logged it (`$time_local`,
/// `$time_iso8601` or `$msec`) and how long the request took.
#[derive(Default)]
struct Times {
    /// `$time_local` or `$time_iso8601` (whole seconds).
    end_time: Option<u64>,
    /// `$msec`: preferred, for its milliseconds.
    msec: Option<u64>,
    /// `$request_time`.
    took: Option<u64>,
}

/// A line being parsed: the fields read so far, and where header values go.
struct Line<'o> {
    /// The fields read so far.
    f: Fields,
    /// The times read so far.
    times: Times,
    /// Header values that had to be unescaped.
    extra: &'o mut Vec<u8>,
    /// The span of each header the identities read.
    hdrs: &'o mut [Span],
}

impl Line<'_> {
    /// Reads `var`'s value `v` (not `-`), found at byte `at` of the text,
    /// column `col` of the line.
    fn set(&mut self, var: Var, v: &[u8], at: usize, col: usize) -> Result<(), LineError> {
        let err = |what: &str| LineError::at(col, what);
        let f = &mut self.f;
        match var {
            Var::RemoteAddr => {
                f.peer = Some(parse_ip(v).ok_or_else(|| err("$remote_addr is not an address"))?);
            }
            Var::TimeLocal => {
                let t = time::time_local(v).ok_or_else(|| err("$time_local is not a time"))?;
                self.times.end_time = Some(t);
            }
            Var::TimeIso => {
                let t = time::rfc3339(v).ok_or_else(|| err("$time_iso8601 is not a time"))?;
                self.times.end_time = Some(t);
            }
            Var::Msec => {
                let t = time::epoch_seconds(v).ok_or_else(|| err("$msec is not a time"))?;
                self.times.msec = Some(t);
            }
            Var::RequestTime => {
                let t = time::seconds(v).ok_or_else(|| err("$request_time is not a duration"))?;
                self.times.took = Some(t);
            }
            Var::Request => {
                let (m, path) =
                    split_request(v).ok_or_else(|| err("$request is not `METHOD URI PROTOCOL`"))?;
                f.method = Parsed::span(at + m.0, at + m.1);
                f.path = Parsed::span(at + path.0, at + path.1);
            }
            Var::RequestMethod => f.method = Parsed::span(at, at + v.len()),
            Var::Uri => {
                let q = memchr::memchr(b'?', v).unwrap_or(v.len());
                f.path = Parsed::span(at, at + q);
            }
            Var::Status => {
                f.status = std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| err("$status is not a status"))?;
            }
            Var::Header(i) => {
                self.hdrs[i] = if memchr::memchr(b'\\', v).is_some() {
                    Parsed::push_extra(self.extra, |out| unescape_into(v, out))
                } else {
                    Parsed::span(at, at + v.len())
                };
            }
            Var::Other => {}
        }
        Ok(())
    }
}

/// A literal token, with its searcher.
fn literal_token(text: Vec<u8>) -> Token {
    let finder = Box::new(memchr::memmem::Finder::new(&text).into_owned());
    Token::Literal(text, finder)
}

/// Literals up to this long are found by their first byte (a few
/// comparisons per candidate); longer ones by `memmem`.
const SHORT_LITERAL: usize = 16;

/// The position of the first `lit` in `hay` that is not an escaped quote.
fn find_literal(hay: &[u8], lit: &[u8], finder: &memchr::memmem::Finder<'_>) -> Option<usize> {
    if lit.len() <= SHORT_LITERAL {
        // The separators of a log format (` `, `"`, `] "`, `" "`): memchr
        // for the first byte, then a comparison; setting up a substring
        // search per field would cost more than the search itself.
        let first = *lit.first()?;
        let mut from = 0;
        while let Some(i) = memchr::memchr(first, &hay[from..]) {
            let at = from + i;
            if hay[at..].starts_with(lit) && !escaped_quote(hay, at, first) {
                return Some(at);
            }
            from = at + 1;
        }
        return None;
    }
    finder
        .find_iter(hay)
        .find(|&at| !escaped_quote(hay, at, lit[0]))
}

/// Whether `hay[at]`, a quote, is escaped by an odd number of backslashes.
fn escaped_quote(hay: &[u8], at: usize, first: u8) -> bool {
    first == b'"' && hay[..at].iter().rev().take_while(|&&c| c == b'\\').count() % 2 == 1
}

/// `METHOD URI PROTOCOL` (or `METHOD URI` for HTTP/0.9): the method's and
/// the path's ranges (the path without its query).
fn split_request(v: &[u8]) -> Option<((usize, usize), (usize, usize))> {
    let sp = memchr::memchr(b' ', v)?;
    let rest = &v[sp + 1..];
    let uri_len = memchr::memchr(b' ', rest).unwrap_or(rest.len());
    let uri = &rest[..uri_len];
    let path_len = memchr::memchr(b'?', uri).unwrap_or(uri.len());
    if sp == 0 || uri.is_empty() {
        return None;
    }
    Some(((0, sp), (sp + 1, sp + 1 + path_len)))
}

/// An IPv4 or IPv6 address, possibly with a port or in brackets.
pub(crate) fn parse_ip(v: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(v).ok()?;
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    s.parse::<std::net::SocketAddr>().ok().map(|a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::bytes;

    fn set(names: &[&str]) -> HeaderSet {
        HeaderSet::new(
            names
                .iter()
                .map(|n| http::HeaderName::from_bytes(n.as_bytes()).unwrap())
                .collect(),
        )
    }

    fn parse(format: &str, hs: &HeaderSet, line: &str) -> Result<(Fields, Vec<String>), LineError> {
        let f = NginxFormat::new(format, hs).unwrap();
        let mut extra = Vec::new();
        let mut h = vec![Span::NONE; hs.len()];
        let text = line.as_bytes();
        let fields = f.parse(text, 0, text.len(), &mut extra, &mut h)?;
        let p = (text, extra);
        let values = h
            .iter()
            .map(|s| String::from_utf8_lossy(bytes(p.0, &p.1, *s)).into_owned())
            .collect();
        Ok((fields, values))
    }

    #[test]
    fn combined() {
        let hs = set(&["user-agent"]);
        let line = r#"203.0.113.9 - alice [10/Oct/2000:13:55:36 -0700] "GET /a/b?x=1 HTTP/1.1" 200 2326 "-" "curl/8 \x22q\x22""#;
        let (f, h) = parse(COMBINED, &hs, line).unwrap();
        assert_eq!(f.peer, Some("203.0.113.9".parse().unwrap()));
        assert_eq!(f.time, 971_211_336 * time::NANOS);
        assert_eq!(f.status, 200);
        assert_eq!(
            &line[f.method.start as usize..][..f.method.len as usize],
            "GET"
        );
        assert_eq!(
            &line[f.path.start as usize..][..f.path.len as usize],
            "/a/b"
        );
        assert_eq!(h, ["curl/8 \"q\""]);
    }

    #[test]
    fn msec_and_request_time() {
        let hs = set(&["x-api-key"]);
        let fmt = "$msec $request_time $http_x_api_key $remote_addr";
        let (f, h) = parse(fmt, &hs, "1700000000.250 0.050 k1 ::1").unwrap();
        assert_eq!(f.time, 1_700_000_000_200_000_000);
        assert_eq!(f.duration, Some(50_000_000));
        assert_eq!(h, ["k1"]);
        let (_, h) = parse(fmt, &hs, "1700000000.250 0.050 - ::1").unwrap();
        assert_eq!(h, [""]);
    }

    /// Separators are found past escaped quotes, whatever their length
    /// (short ones by their first byte, long ones by substring search).
    #[test]
    fn separators_short_and_long_past_escaped_quotes() {
        let hs = set(&["x-key", "x-other"]);
        let fmt = r#"$msec "$http_x_key" "$http_x_other" -- a long separator here -- $status"#;
        let line = r#"1700000000.000 "a\" \"b" "c\" \"" -- a long separator here -- 201"#;
        let (f, h) = parse(fmt, &hs, line).unwrap();
        assert_eq!(h, [r#"a" "b"#, r#"c" ""#]);
        assert_eq!(f.status, 201);
        // The long separator missing: the line does not match.
        let e = parse(
            fmt,
            &hs,
            r#"1700000000.000 "a" "c" -- a long separator -- 201"#,
        );
        assert!(e.is_err());
    }

    #[test]
    fn bad_lines_name_their_column() {
        let hs = set(&[]);
        let e = parse(COMBINED, &hs, "garbage").unwrap_err();
        assert!(e.to_string().contains("does not match"), "{e}");
        let e = parse("$msec $status", &hs, "1.5 abc").unwrap_err();
        assert!(e.to_string().contains("column 5"), "{e}");
        let e = parse("$msec", &hs, "-").unwrap_err();
        assert!(e.to_string().contains("no time"), "{e}");
        assert!(NginxFormat::new("$status", &hs).is_err());
        assert!(NginxFormat::new("$msec$status", &hs).is_err());
        assert!(NginxFormat::new("${msec", &hs).is_err());
    }
}
