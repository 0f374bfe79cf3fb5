//! The frames of an answer: header blocks encoded with HPACK's static
//! table and literals never added to the peer's dynamic table (so the
//! server keeps no encoder state), and messages as `DATA` frames.

use bytes::{BufMut, BytesMut};

use super::frame::{self, flag, kind};

/// `:status: 200`, entry 8 of the static table.
const STATUS_200: u8 = 0x88;

/// Static table index of `:status`.
const STATUS_NAME: usize = 8;

/// Static table index of `content-type`.
const CONTENT_TYPE_NAME: usize = 31;

/// The longest `grpc-message` written, in bytes (an answer's header block
/// then always fits one frame).
const MESSAGE_CAP: usize = 1024;

/// Writes an HPACK integer of `value` with an `n`-bit prefix, the
/// prefix's other bits `first`.
fn put_int(out: &mut BytesMut, n: u32, first: u8, value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.put_u8(first | value as u8);
        return;
    }
    out.put_u8(first | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.put_u8((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.put_u8(rest as u8);
}

/// Writes a string literal, without Huffman coding.
fn put_string(out: &mut BytesMut, s: &[u8]) {
    put_int(out, 7, 0, s.len());
    out.put_slice(s);
}

/// A field whose name is entry `index` of the static table, as a literal
/// without indexing.
fn put_indexed_name(out: &mut BytesMut, index: usize, value: &[u8]) {
    put_int(out, 4, 0, index);
    put_string(out, value);
}

/// A field as a literal without indexing, name and value spelled out.
pub(super) fn put_field(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    out.put_u8(0);
    put_string(out, name);
    put_string(out, value);
}

/// A `:status` field.
fn put_status(out: &mut BytesMut, status: u16) {
    if status == 200 {
        out.put_u8(STATUS_200);
    } else {
        let digits = status.to_string();
        put_indexed_name(out, STATUS_NAME, digits.as_bytes());
    }
}

/// Writes a `HEADERS` frame on `stream` whose block `block` writes (it
/// must fit one frame), with `END_STREAM` when `end`.
pub(super) fn put_headers(
    out: &mut BytesMut,
    stream: u32,
    end: bool,
    block: impl FnOnce(&mut BytesMut),
) {
    let start = out.len();
    let flags = flag::END_HEADERS | if end { flag::END_STREAM } else { 0 };
    frame::put_head(out, 0, kind::HEADERS, flags, stream);
    block(out);
    let len = out.len() - start - frame::HEAD;
    debug_assert!(len <= frame::MAX_FRAME);
    out[start..start + 3].copy_from_slice(&(len as u32).to_be_bytes()[1..]);
}

/// The head of a gRPC answer: `200`, `content-type: application/grpc`.
pub(super) fn grpc_head(out: &mut BytesMut, stream: u32, end: bool) {
    put_headers(out, stream, end, |b| {
        b.put_u8(STATUS_200);
        put_indexed_name(b, CONTENT_TYPE_NAME, b"application/grpc");
    });
}

/// The trailers of a gRPC answer that succeeded.
pub(super) fn grpc_ok_trailers(out: &mut BytesMut, stream: u32) {
    put_headers(out, stream, true, |b| put_field(b, b"grpc-status", b"0"));
}

/// A trailers-only gRPC answer carrying the error `code` and `message`.
pub(super) fn grpc_error(out: &mut BytesMut, stream: u32, code: i32, message: &str) {
    let message = floodgate_http::contract::grpc_message(message);
    let message = &message.as_bytes()[..message.len().min(MESSAGE_CAP)];
    put_headers(out, stream, true, |b| {
        b.put_u8(STATUS_200);
        put_indexed_name(b, CONTENT_TYPE_NAME, b"application/grpc");
        put_field(b, b"grpc-status", code.to_string().as_bytes());
        put_field(b, b"grpc-message", message);
    });
}

/// The head of a plain HTTP answer (not gRPC): `status`, a text body to
/// follow, and `extra` fields.
pub(super) fn plain_head(out: &mut BytesMut, stream: u32, status: u16, extra: &[(&[u8], &[u8])]) {
    put_headers(out, stream, false, |b| {
        put_status(b, status);
        put_indexed_name(b, CONTENT_TYPE_NAME, b"text/plain; charset=utf-8");
        for (name, value) in extra {
            put_field(b, name, value);
        }
    });
}

/// A response's head as a tonic service wrote it: its status and fields
/// (connection-specific ones left out), ending the stream when `end`.
pub(super) fn head_of(out: &mut BytesMut, stream: u32, head: &http::response::Parts, end: bool) {
    put_headers(out, stream, end, |b| {
        put_status(b, head.status.as_u16());
        put_map(b, &head.headers);
    });
}

/// Trailers as a tonic service wrote them.
pub(super) fn trailers_of(out: &mut BytesMut, stream: u32, trailers: &http::HeaderMap) {
    put_headers(out, stream, true, |b| put_map(b, trailers));
}

fn put_map(b: &mut BytesMut, map: &http::HeaderMap) {
    for (name, value) in map {
        if is_connection_specific(name.as_str()) {
            continue;
        }
        let value = value.as_bytes();
        put_field(
            b,
            name.as_str().as_bytes(),
            &value[..value.len().min(MESSAGE_CAP)],
        );
    }
}

/// Fields HTTP/2 forbids (RFC 9113 §8.2.2).
pub(super) fn is_connection_specific(name: &str) -> bool {
    matches!(
        name,
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Integers with a prefix: RFC 7541 C.1's examples.
    #[test]
    fn integers_are_encoded_as_the_rfc_shows() {
        let mut out = BytesMut::new();
        put_int(&mut out, 5, 0, 10);
        assert_eq!(&out[..], [0x0a]);
        out.clear();
        put_int(&mut out, 5, 0, 1337);
        assert_eq!(&out[..], [0x1f, 0x9a, 0x0a]);
        out.clear();
        put_int(&mut out, 8, 0, 42);
        assert_eq!(&out[..], [0x2a]);
    }

    #[test]
    fn a_header_frame_carries_its_length() {
        let mut out = BytesMut::new();
        grpc_head(&mut out, 3, false);
        let head = frame::Head::parse(&out);
        assert_eq!(head.len, out.len() - frame::HEAD);
        assert_eq!(
            (head.kind, head.flags, head.stream),
            (kind::HEADERS, flag::END_HEADERS, 3)
        );
        assert_eq!(out[9], STATUS_200);
        assert_eq!(&out[10..12], [0x0f, 0x10]);
    }
}
