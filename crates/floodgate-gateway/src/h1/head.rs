//! Message heads on an upstream HTTP/1.1 connection: a request's written
//! out, a response's parsed, with how its body is framed (RFC 9112 §6.3).
//! Pure: bytes in, bytes or values out.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};

use super::FramingError;
use super::framing::Framing;

/// The most fields in a response head (as hyper's client).
pub const MAX_HEADERS: usize = 100;
/// The largest response head.
pub const MAX_HEAD_BYTES: usize = 256 * 1024;
/// Fields a response head's map has room for beyond its own.
const ADDED_FIELDS: usize = 3;

/// Writes a request head: request line, fields (all but
/// `Transfer-Encoding`, written only when the body is chunked: the
/// codings of the request's own field, which the body's bytes are still
/// in, ending with `chunked`), empty line.
pub fn encode_request(out: &mut Vec<u8>, parts: &http::request::Parts, chunked: bool) {
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(if target.is_empty() {
        b"/"
    } else {
        target.as_bytes()
    });
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if chunked {
        out.extend_from_slice(b"transfer-encoding: ");
        match parts
            .headers
            .get(TRANSFER_ENCODING)
            .map(HeaderValue::as_bytes)
        {
            Some(codings) if last_token_is(codings, b"chunked") => out.extend_from_slice(codings),
            Some(codings) => {
                out.extend_from_slice(codings);
                out.extend_from_slice(b", chunked");
            }
            None => out.extend_from_slice(b"chunked"),
        }
        out.extend_from_slice(b"\r\n");
    }
    encode_fields(out, &parts.headers);
    out.extend_from_slice(b"\r\n");
}

/// Writes field lines (all but `Transfer-Encoding`).
pub fn encode_fields<'a>(
    out: &mut Vec<u8>,
    fields: impl IntoIterator<Item = (&'a HeaderName, &'a HeaderValue)>,
) {
    for (name, value) in fields {
        if name == TRANSFER_ENCODING {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// A parsed final response head.
#[derive(Debug)]
pub struct Head {
    /// Status, version and fields (the values share the head's bytes).
    pub parts: http::response::Parts,
    /// How the body is delimited.
    pub framing: Framing,
    /// Whether the connection may carry another request after this
    /// response's body.
    pub keep_alive: bool,
}

/// What the start of the read buffer holds.
#[derive(Debug)]
pub enum Parsed {
    /// Not a whole head yet.
    Partial,
    /// An interim response (1xx other than 101), consumed: read on.
    Interim,
    /// A final response head, consumed.
    Final(Head),
}

/// Offsets of a field's name and value in the head.
#[derive(Clone, Copy, Default)]
struct Field {
    name: (u32, u32),
    value: (u32, u32),
}

/// Parses a response head at the start of `buf` (consuming it when
/// whole) for a request of method `method` (asking for an `upgrade`: a
/// `101` is then final). `names` are the (lower-case) field names of
/// the previous head on the connection, in order: a field whose name is
/// spelled the same takes it rather than parsing it again; updated.
pub fn parse_response(
    buf: &mut BytesMut,
    method: &Method,
    upgrade: bool,
    names: &mut Vec<HeaderName>,
) -> Result<Parsed, FramingError> {
    let mut fields = [Field::default(); MAX_HEADERS];
    let Some(Scanned {
        len,
        code,
        version,
        count,
    }) = scan(buf, &mut fields)?
    else {
        return Ok(Parsed::Partial);
    };
    let status = StatusCode::from_u16(code).map_err(|_| FramingError::Status(code))?;
    let switching = status == StatusCode::SWITCHING_PROTOCOLS;
    if switching && !upgrade {
        return Err(FramingError::UnaskedUpgrade);
    }
    if status.is_informational() && !switching {
        let _ = buf.split_to(len);
        return Ok(Parsed::Interim);
    }
    let head = buf.split_to(len).freeze();
    // Room for the rate-limit fields the layer adds, and (hyper reuses a
    // written response's map for the connection's next request) for that
    // request's forwarding fields: no growth of the map per request.
    let mut headers = HeaderMap::with_capacity(count + ADDED_FIELDS);
    let mut cues = Cues::default();
    names.truncate(count);
    for (i, f) in fields[..count].iter().enumerate() {
        let name = name_of(&head, f.name, i, names)?;
        let value = HeaderValue::from_maybe_shared(slice(&head, f.value))
            .map_err(|_| FramingError::FieldValue)?;
        cues.note(&name, value.as_bytes())?;
        headers.append(name, value);
    }
    let version = if version == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let no_body = method == Method::HEAD
        || switching
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let (framing, keep_alive) = cues.framing(version, no_body);
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = status;
    parts.version = version;
    parts.headers = headers;
    Ok(Parsed::Final(Head {
        parts,
        framing,
        keep_alive,
    }))
}

/// What the parser found of a whole head: its length, status code, minor
/// version and number of fields.
struct Scanned {
    len: usize,
    code: u16,
    version: u8,
    count: usize,
}

/// Parses the head at the start of `buf` into `fields` (offsets in
/// `buf`); `None` while it is not whole.
#[inline]
fn scan(
    buf: &BytesMut,
    fields: &mut [Field; MAX_HEADERS],
) -> Result<Option<Scanned>, FramingError> {
    // Left uninitialised: the parser writes what it finds.
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut res,
        buf,
        &mut headers,
    ) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_BYTES => {
            return Err(FramingError::HeadTooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(FramingError::Head(e)),
    };
    if len > MAX_HEAD_BYTES {
        return Err(FramingError::HeadTooLarge);
    }
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| ((s.as_ptr() as usize - base) as u32, s.len() as u32);
    for (slot, h) in fields.iter_mut().zip(res.headers.iter()) {
        *slot = Field {
            name: at(h.name.as_bytes()),
            value: at(h.value),
        };
    }
    Ok(Some(Scanned {
        len,
        code: res.code.unwrap_or(0),
        version: res.version.unwrap_or(1),
        count: res.headers.len(),
    }))
}

/// The name of field `i` (at `name` in `head`): the previous head's name
/// at the same place when spelled the same, else parsed (and remembered
/// in `names` when spelled in lower case).
#[inline]
fn name_of(
    head: &Bytes,
    name: (u32, u32),
    i: usize,
    names: &mut Vec<HeaderName>,
) -> Result<HeaderName, FramingError> {
    let spelled = &head[name.0 as usize..(name.0 + name.1) as usize];
    if let Some(n) = names.get(i)
        && n.as_str().as_bytes() == spelled
    {
        return Ok(n.clone());
    }
    let n = HeaderName::from_bytes(spelled).map_err(|_| FramingError::FieldName)?;
    names.truncate(i);
    if n.as_str().as_bytes() == spelled {
        names.push(n.clone());
    }
    Ok(n)
}

/// What a head's fields say of its body's framing and of the connection.
#[derive(Default)]
struct Cues {
    length: Option<u64>,
    transfer_encoding: bool,
    chunked: bool,
    close: bool,
    keep_alive_token: bool,
}

impl Cues {
    /// Notes field `name`'s `value` if it frames the body or speaks of the
    /// connection.
    #[inline]
    fn note(&mut self, name: &HeaderName, value: &[u8]) -> Result<(), FramingError> {
        if name == CONTENT_LENGTH {
            let n = content_length(value)?;
            if self.length.is_some_and(|l| l != n) {
                return Err(FramingError::ContentLength);
            }
            self.length = Some(n);
        } else if name == TRANSFER_ENCODING {
            self.transfer_encoding = true;
            // Only the last coding decides; a later field is appended.
            self.chunked = last_token_is(value, b"chunked");
        } else if name == CONNECTION {
            for token in value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                self.close |= token.eq_ignore_ascii_case(b"close");
                self.keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
        Ok(())
    }

    /// The body's framing (none when the response has no body), and
    /// whether the connection can carry another message.
    #[inline]
    fn framing(&self, version: Version, no_body: bool) -> (Framing, bool) {
        let mut keep_alive = !self.close && (version == Version::HTTP_11 || self.keep_alive_token);
        let framing = if no_body {
            Framing::Length(0)
        } else if self.transfer_encoding {
            // Both fields: the coding wins, and the connection is not
            // trusted with another message (RFC 9112 §6.3, item 3).
            if self.length.is_some() {
                keep_alive = false;
            }
            if self.chunked {
                Framing::Chunked
            } else {
                Framing::Close
            }
        } else {
            match self.length {
                Some(n) => Framing::Length(n),
                None => Framing::Close,
            }
        };
        if framing == Framing::Close {
            keep_alive = false;
        }
        (framing, keep_alive)
    }
}

/// The bytes of `head` at `(offset, length)`, shared.
fn slice(head: &Bytes, (at, len): (u32, u32)) -> Bytes {
    head.slice(at as usize..(at + len) as usize)
}

/// A `Content-Length` value: digits only (a list of equal values, as some
/// servers send, is taken as one).
fn content_length(value: &[u8]) -> Result<u64, FramingError> {
    let mut found: Option<u64> = None;
    for part in value.split(|&b| b == b',') {
        let part = part.trim_ascii();
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err(FramingError::ContentLength);
        }
        let n = part.iter().try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        });
        let n = n.ok_or(FramingError::ContentLength)?;
        if found.is_some_and(|f| f != n) {
            return Err(FramingError::ContentLength);
        }
        found = Some(n);
    }
    found.ok_or(FramingError::ContentLength)
}

fn last_token_is(value: &[u8], token: &[u8]) -> bool {
    value
        .rsplit(|&b| b == b',')
        .next()
        .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(wire: &str, method: Method) -> Result<Parsed, FramingError> {
        parse_response(
            &mut BytesMut::from(wire.as_bytes()),
            &method,
            false,
            &mut Vec::new(),
        )
    }

    fn head(wire: &str) -> Head {
        match parse(wire, Method::GET).unwrap() {
            Parsed::Final(h) => h,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_request_head_is_written_whole() {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("up:9000"));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("2"));
        headers.insert(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        let mut out = Vec::new();
        let (mut parts, ()) = http::Request::get("/p?q=1").body(()).unwrap().into_parts();
        parts.headers = headers;
        encode_request(&mut out, &parts, false);
        assert_eq!(
            out,
            b"GET /p?q=1 HTTP/1.1\r\nhost: up:9000\r\nx-a: 1\r\nx-a: 2\r\n\r\n"
        );
        out.clear();
        encode_request(&mut out, &parts, true);
        assert_eq!(
            out,
            &b"GET /p?q=1 HTTP/1.1\r\ntransfer-encoding: chunked\r\nhost: up:9000\r\nx-a: 1\r\nx-a: 2\r\n\r\n"[..]
        );
        // Other codings are forwarded as sent; only `chunked` is this hop's.
        for (codings, written) in [
            ("gzip, chunked", "gzip, chunked"),
            ("gzip", "gzip, chunked"),
        ] {
            parts
                .headers
                .insert(TRANSFER_ENCODING, HeaderValue::from_static(codings));
            out.clear();
            encode_request(&mut out, &parts, true);
            let want = format!("transfer-encoding: {written}\r\nhost:");
            assert!(String::from_utf8_lossy(&out).contains(&want), "{codings}");
        }
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello");
        assert_eq!((h.framing, h.keep_alive), (Framing::Length(5), true));
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(h.framing, Framing::Length(0));
        let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Chunked, true));
        let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Chunked, false));
        let h = head("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
        let h = head("HTTP/1.1 204 No Content\r\ncontent-length: 9\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Length(0), true));
        let h = head("HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n");
        assert_eq!(h.framing, Framing::Length(0));
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 3, 3\r\nconnection: close\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Length(3), false));
        match parse("HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n", Method::HEAD).unwrap() {
            Parsed::Final(h) => assert_eq!(h.framing, Framing::Length(0)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn http_1_0_keeps_alive_only_when_it_says_so() {
        let h = head("HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n");
        assert_eq!((h.parts.version, h.keep_alive), (Version::HTTP_10, false));
        let h = head("HTTP/1.0 200 OK\r\ncontent-length: 1\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(h.keep_alive);
    }

    #[test]
    fn fields_and_status_are_kept() {
        let h = head("HTTP/1.1 418 Teapot\r\nX-One: a b\r\nx-one: c\r\ncontent-length: 0\r\n\r\n");
        assert_eq!(h.parts.status, StatusCode::IM_A_TEAPOT);
        let all: Vec<_> = h.parts.headers.get_all("x-one").iter().collect();
        assert_eq!(all, ["a b", "c"]);
        // Room for what is added to it without growing.
        assert!(h.parts.headers.capacity() >= 3 + ADDED_FIELDS);
    }

    #[test]
    fn names_of_the_previous_head_are_taken_only_when_the_same() {
        let mut names = Vec::new();
        let mut fields = |wire: &str| {
            let mut buf = BytesMut::from(wire.as_bytes());
            match parse_response(&mut buf, &Method::GET, false, &mut names).unwrap() {
                Parsed::Final(h) => (h.parts.headers.iter())
                    .map(|(n, v)| format!("{n}={}", v.to_str().unwrap()))
                    .collect::<Vec<_>>(),
                other => panic!("{other:?}"),
            }
        };
        let wire = "HTTP/1.1 200 OK\r\nX-One: a\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(fields(wire), ["x-one=a", "content-length=0"]);
        let wire = "HTTP/1.1 200 OK\r\nx-one: b\r\nx-two: c\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(fields(wire), ["x-one=b", "x-two=c", "content-length=0"]);
        let wire = "HTTP/1.1 200 OK\r\nx-one: b\r\nX-Two: c\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(fields(wire), ["x-one=b", "x-two=c", "content-length=0"]);
        let wire = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nx-one: d\r\n\r\n";
        assert_eq!(fields(wire), ["content-length=0", "x-one=d"]);
        assert_eq!(names, ["content-length", "x-one"]);
    }

    #[test]
    fn interim_responses_are_skipped_and_101_refused() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n"[..],
        );
        assert!(matches!(
            parse_response(&mut buf, &Method::GET, false, &mut Vec::new()),
            Ok(Parsed::Interim)
        ));
        assert_eq!(&buf[..], b"HTTP/1.1 200 OK\r\n");
        assert!(matches!(
            parse_response(&mut buf, &Method::GET, false, &mut Vec::new()),
            Ok(Parsed::Partial)
        ));
        assert!(matches!(
            parse("HTTP/1.1 101 Switching Protocols\r\n\r\n", Method::GET),
            Err(FramingError::UnaskedUpgrade)
        ));
        // Asked for, a 101 is the final answer, with nothing to read.
        let mut buf =
            BytesMut::from(&b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\nraw"[..]);
        match parse_response(&mut buf, &Method::GET, true, &mut Vec::new()).unwrap() {
            Parsed::Final(h) => {
                assert_eq!(h.parts.status, StatusCode::SWITCHING_PROTOCOLS);
                assert_eq!(h.framing, Framing::Length(0));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(&buf[..], b"raw", "the upgraded protocol's bytes stay");
    }

    #[test]
    fn bad_heads_are_errors() {
        for wire in [
            "HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length:\r\n\r\n",
            "HTTP/1.1 20 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nbad name: x\r\n\r\n",
            "HTTP/2 200 OK\r\n\r\n",
        ] {
            assert!(parse(wire, Method::GET).is_err(), "{wire:?}");
        }
        let endless = format!("HTTP/1.1 200 OK\r\nx-a: {}", "b".repeat(MAX_HEAD_BYTES));
        assert!(matches!(
            parse(&endless, Method::GET),
            Err(FramingError::HeadTooLarge)
        ));
        let many = format!(
            "HTTP/1.1 200 OK\r\n{}\r\n",
            "x-a: b\r\n".repeat(MAX_HEADERS + 1)
        );
        assert!(parse(&many, Method::GET).is_err());
    }
}
