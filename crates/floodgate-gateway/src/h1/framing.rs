//! How a response body is delimited (RFC 9112 §6.3), and its decoding
//! from the connection's read buffer as it arrives: pure (no IO); the
//! chunked transfer coding (RFC 9112 §7.1) bounded (a size line,
//! extensions included, and the trailer section have limits) and strict
//! about sizes (hex digits only, no overflow).

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};

use super::FramingError;

/// The longest chunk-size line, extensions included.
pub const MAX_SIZE_LINE: usize = 4096;
/// The largest trailer section.
pub const MAX_TRAILERS: usize = 64 * 1024;
/// The most trailer fields.
const MAX_TRAILER_FIELDS: usize = 64;

/// How a response's body is delimited, and how far it has been read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length`: the bytes still to come. 0: no body (`HEAD`, 204,
    /// 304, a length of 0), or the body has ended, whatever its framing.
    Length(u64),
    /// Until the upstream closes the connection.
    Close,
    /// The chunked transfer coding, before a chunk-size line.
    Chunked,
    /// Inside a chunk's data: bytes left.
    ChunkData(u64),
    /// After a chunk's data: its CRLF.
    ChunkEnd,
    /// After the last chunk: the trailer section, then the final CRLF.
    Trailers,
}

/// What the buffer yielded.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Body bytes.
    Data(Bytes),
    /// The trailer fields (only when there are some), the body has ended.
    Trailers(HeaderMap),
    /// The body has ended.
    End,
    /// The buffer holds no complete step: read more (or, for
    /// [`Framing::Close`], the body ends where the connection does).
    More,
}

impl Framing {
    /// The next step from `buf`, consuming what it decodes.
    pub fn step(&mut self, buf: &mut BytesMut) -> Result<Step, FramingError> {
        loop {
            match *self {
                Framing::Length(0) => return Ok(Step::End),
                Framing::Length(left) | Framing::ChunkData(left) => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let data = buf.split_to(n).freeze();
                    let left = left - n as u64;
                    *self = match *self {
                        Framing::Length(_) => Framing::Length(left),
                        _ if left == 0 => Framing::ChunkEnd,
                        _ => Framing::ChunkData(left),
                    };
                    return Ok(Step::Data(data));
                }
                Framing::Close if buf.is_empty() => return Ok(Step::More),
                Framing::Close => return Ok(Step::Data(buf.split().freeze())),
                Framing::Chunked => {
                    let Some(line) = take_line(buf, MAX_SIZE_LINE)? else {
                        return Ok(Step::More);
                    };
                    *self = match chunk_size(&line)? {
                        0 => Framing::Trailers,
                        size => Framing::ChunkData(size),
                    };
                }
                Framing::ChunkEnd => {
                    let Some(line) = take_line(buf, 2)? else {
                        return Ok(Step::More);
                    };
                    if !line.is_empty() {
                        return Err(FramingError::Chunk("data longer than its size"));
                    }
                    *self = Framing::Chunked;
                }
                Framing::Trailers => {
                    let Some(map) = trailers(buf)? else {
                        return Ok(Step::More);
                    };
                    *self = Framing::Length(0);
                    return Ok(if map.is_empty() {
                        Step::End
                    } else {
                        Step::Trailers(map)
                    });
                }
            }
        }
    }
}

/// One line, its CRLF (or bare LF) removed, if the buffer holds it whole;
/// a line longer than `max` is an error.
fn take_line(buf: &mut BytesMut, max: usize) -> Result<Option<BytesMut>, FramingError> {
    let window = &buf[..buf.len().min(max + 2)];
    match window.iter().position(|&b| b == b'\n') {
        Some(end) => {
            let mut line = buf.split_to(end + 1);
            line.truncate(end);
            if line.last() == Some(&b'\r') {
                line.truncate(end - 1);
            }
            if line.len() > max {
                return Err(FramingError::Chunk("line too long"));
            }
            Ok(Some(line))
        }
        None if buf.len() > max + 1 => Err(FramingError::Chunk("line too long")),
        None => Ok(None),
    }
}

/// The size of a chunk-size line: hex digits, then optional whitespace
/// and extensions (ignored).
fn chunk_size(line: &[u8]) -> Result<u64, FramingError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(FramingError::Chunk("no chunk size"));
    }
    let rest = &line[digits..];
    let rest = &rest[rest
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count()..];
    if !rest.is_empty() && rest[0] != b';' {
        return Err(FramingError::Chunk("invalid chunk size"));
    }
    if rest.iter().any(|&b| b.is_ascii_control() && b != b'\t') {
        return Err(FramingError::Chunk("control byte in a chunk extension"));
    }
    line[..digits].iter().try_fold(0u64, |size, &b| {
        let d = u64::from((b as char).to_digit(16).unwrap_or(0));
        size.checked_mul(16)
            .and_then(|s| s.checked_add(d))
            .ok_or(FramingError::Chunk("chunk size overflows"))
    })
}

/// The trailer section and its final empty line, if whole in `buf`.
fn trailers(buf: &mut BytesMut) -> Result<Option<HeaderMap>, FramingError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_TRAILER_FIELDS];
    let parsed = match httparse::parse_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete(p)) => p,
        Ok(httparse::Status::Partial) if buf.len() > MAX_TRAILERS => {
            return Err(FramingError::Chunk("trailer section too large"));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(FramingError::Chunk("malformed trailer section")),
    };
    let (len, fields) = parsed;
    let mut map = HeaderMap::new();
    for f in fields {
        let name = HeaderName::from_bytes(f.name.as_bytes())
            .map_err(|_| FramingError::Chunk("invalid trailer name"))?;
        let value = HeaderValue::from_bytes(f.value)
            .map_err(|_| FramingError::Chunk("invalid trailer value"))?;
        map.append(name, value);
    }
    let _ = buf.split_to(len);
    Ok(Some(map))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `wire` fed `at` bytes at a time: the data, the trailers.
    fn decode(wire: &[u8], at: usize) -> Result<(Vec<u8>, HeaderMap), FramingError> {
        let mut body = Framing::Chunked;
        let mut buf = BytesMut::new();
        let mut data = Vec::new();
        let mut fed = 0;
        loop {
            match body.step(&mut buf)? {
                Step::Data(d) => data.extend_from_slice(&d),
                Step::Trailers(t) => return Ok((data, t)),
                Step::End => return Ok((data, HeaderMap::new())),
                Step::More => {
                    assert!(fed < wire.len(), "ran out of input");
                    let n = at.min(wire.len() - fed);
                    buf.extend_from_slice(&wire[fed..fed + n]);
                    fed += n;
                }
            }
        }
    }

    #[test]
    fn any_split_of_the_input_decodes_alike() {
        let wire =
            b"3\r\nabc\r\n1A ; name=\"v\"\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-sum: 9\r\n\r\n";
        for at in 1..wire.len() {
            let (data, trailers) = decode(wire, at).unwrap();
            assert_eq!(data, b"abcabcdefghijklmnopqrstuvwxyz");
            assert_eq!(trailers["x-sum"], "9");
        }
    }

    #[test]
    fn a_length_stops_at_its_end_and_close_takes_all() {
        let mut buf = BytesMut::from(&b"abcde"[..]);
        let mut body = Framing::Length(3);
        assert_eq!(body.step(&mut buf).unwrap(), Step::Data("abc".into()));
        assert_eq!(body.step(&mut buf).unwrap(), Step::End);
        assert_eq!(&buf[..], b"de");
        let mut body = Framing::Close;
        assert_eq!(body.step(&mut buf).unwrap(), Step::Data("de".into()));
        assert_eq!(body.step(&mut buf).unwrap(), Step::More);
    }

    #[test]
    fn bare_line_feeds_and_no_trailers() {
        let (data, trailers) = decode(b"2\nhi\n0\n\n", 1).unwrap();
        assert_eq!(data, b"hi");
        assert!(trailers.is_empty());
    }

    #[test]
    fn bad_sizes_are_errors() {
        for wire in [
            &b"x\r\n"[..],
            b"-1\r\n",
            b"+1\r\n",
            b"1 2\r\n",
            b"10000000000000000\r\n",
            b"2\r\nabc\r\n",
            b"1;a\x00b\r\n",
        ] {
            assert!(
                decode(wire, wire.len()).is_err(),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
    }

    #[test]
    fn endless_lines_are_errors_not_buffered() {
        let mut body = Framing::Chunked;
        let mut buf = BytesMut::from(&[b'1'; MAX_SIZE_LINE + 2][..]);
        assert!(body.step(&mut buf).is_err());
        let mut body = Framing::Chunked;
        let mut buf = BytesMut::from(&b"0\r\n"[..]);
        buf.extend_from_slice(&[b'a'; MAX_TRAILERS + 1]);
        assert!(body.step(&mut buf).is_err());
    }

    #[test]
    fn a_largest_size_fits() {
        let mut buf = BytesMut::from(&b"ffffffffffffffff\r\nab"[..]);
        let mut body = Framing::Chunked;
        assert_eq!(body.step(&mut buf).unwrap(), Step::Data("ab".into()));
        assert_eq!(body, Framing::ChunkData(u64::MAX - 2));
    }
}
