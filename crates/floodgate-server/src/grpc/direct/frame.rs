//! HTTP/2 frames (RFC 9113 §4 and §6): the 9-byte head, the payload rules
//! each type has, and the frames the server writes.

use bytes::{BufMut, BytesMut};

/// The client's connection preface.
pub(super) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Bytes of a frame's head.
pub(super) const HEAD: usize = 9;

/// The largest frame payload a peer may send before it is told otherwise,
/// and the largest this server accepts (it never raises it).
pub(super) const MAX_FRAME: usize = 16_384;

/// The largest flow-control window.
pub(super) const MAX_WINDOW: i64 = (1 << 31) - 1;

/// Frame types.
pub(super) mod kind {
    pub(crate) const DATA: u8 = 0;
    pub(crate) const HEADERS: u8 = 1;
    pub(crate) const PRIORITY: u8 = 2;
    pub(crate) const RST_STREAM: u8 = 3;
    pub(crate) const SETTINGS: u8 = 4;
    pub(crate) const PUSH_PROMISE: u8 = 5;
    pub(crate) const PING: u8 = 6;
    pub(crate) const GOAWAY: u8 = 7;
    pub(crate) const WINDOW_UPDATE: u8 = 8;
    pub(crate) const CONTINUATION: u8 = 9;
}

/// Frame flags.
pub(super) mod flag {
    pub(crate) const END_STREAM: u8 = 0x1;
    pub(crate) const ACK: u8 = 0x1;
    pub(crate) const END_HEADERS: u8 = 0x4;
    pub(crate) const PADDED: u8 = 0x8;
    pub(crate) const PRIORITY: u8 = 0x20;
}

/// Settings identifiers.
pub(super) mod setting {
    pub(crate) const ENABLE_PUSH: u16 = 0x2;
    pub(crate) const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub(crate) const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub(crate) const MAX_FRAME_SIZE: u16 = 0x5;
    pub(crate) const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// Error codes (RFC 9113 §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Reason {
    NoError = 0x0,
    ProtocolError = 0x1,
    FlowControlError = 0x3,
    StreamClosed = 0x5,
    FrameSizeError = 0x6,
    RefusedStream = 0x7,
    Cancel = 0x8,
    CompressionError = 0x9,
    EnhanceYourCalm = 0xb,
}

/// A frame's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Head {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Head {
    /// The head at the start of `b` (at least [`HEAD`] bytes); the
    /// stream identifier's reserved bit is ignored, as the RFC says.
    pub(super) fn parse(b: &[u8]) -> Head {
        Head {
            len: usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    pub(super) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A payload without its padding (`PADDED`), and the priority fields of a
/// `HEADERS` frame (`PRIORITY`); `None` when the padding is longer than the
/// payload (a `PROTOCOL_ERROR`).
pub(super) fn unpadded<'p>(head: &Head, payload: &'p [u8]) -> Option<(&'p [u8], Option<u32>)> {
    let mut body = payload;
    let mut pad = 0;
    if head.has(flag::PADDED) {
        pad = usize::from(*body.first()?);
        body = &body[1..];
    }
    let mut depends_on = None;
    if head.kind == kind::HEADERS && head.has(flag::PRIORITY) {
        let fields = body.get(..5)?;
        depends_on =
            Some(u32::from_be_bytes([fields[0], fields[1], fields[2], fields[3]]) & 0x7fff_ffff);
        body = &body[5..];
    }
    let end = body.len().checked_sub(pad)?;
    Some((&body[..end], depends_on))
}

/// Writes a frame's head.
pub(super) fn put_head(out: &mut BytesMut, len: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(len < 1 << 24);
    out.put_uint(len as u64, 3);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream);
}

/// Writes a `SETTINGS` frame of `(identifier, value)` pairs.
pub(super) fn put_settings(out: &mut BytesMut, settings: &[(u16, u32)]) {
    put_head(out, settings.len() * 6, kind::SETTINGS, 0, 0);
    for &(id, value) in settings {
        out.put_u16(id);
        out.put_u32(value);
    }
}

/// Writes the acknowledgement of the peer's `SETTINGS`.
pub(super) fn put_settings_ack(out: &mut BytesMut) {
    put_head(out, 0, kind::SETTINGS, flag::ACK, 0);
}

/// Writes the acknowledgement of a `PING`.
pub(super) fn put_ping_ack(out: &mut BytesMut, data: &[u8]) {
    put_head(out, 8, kind::PING, flag::ACK, 0);
    out.put_slice(data);
}

/// Writes a `WINDOW_UPDATE`.
pub(super) fn put_window_update(out: &mut BytesMut, stream: u32, increment: u32) {
    put_head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.put_u32(increment);
}

/// Writes a `RST_STREAM`.
pub(super) fn put_reset(out: &mut BytesMut, stream: u32, reason: Reason) {
    put_head(out, 4, kind::RST_STREAM, 0, stream);
    out.put_u32(reason as u32);
}

/// Writes a `GOAWAY` naming the last stream processed, with `debug` as its
/// debug data.
pub(super) fn put_goaway(out: &mut BytesMut, last: u32, reason: Reason, debug: &str) {
    put_head(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.put_u32(last);
    out.put_u32(reason as u32);
    out.put_slice(debug.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_round_trip_and_ignore_the_reserved_bit() {
        let mut out = BytesMut::new();
        put_head(&mut out, 0x01_02_03, kind::HEADERS, 0x25, 7);
        let head = Head::parse(&out);
        assert_eq!(
            head,
            Head {
                len: 0x01_02_03,
                kind: 1,
                flags: 0x25,
                stream: 7
            }
        );
        out[5] |= 0x80;
        assert_eq!(Head::parse(&out).stream, 7);
    }

    #[test]
    fn padding_and_priority_are_taken_off() {
        let head = Head {
            len: 0,
            kind: kind::HEADERS,
            flags: flag::PADDED | flag::PRIORITY,
            stream: 1,
        };
        let payload = [2, 0, 0, 0, 3, 16, b'a', b'b', 0, 0];
        assert_eq!(unpadded(&head, &payload), Some((&b"ab"[..], Some(3))));
        let too_much = [9, b'a'];
        assert_eq!(unpadded(&head, &too_much), None);
        let data = Head {
            kind: kind::DATA,
            flags: flag::PADDED,
            ..head
        };
        assert_eq!(unpadded(&data, &[1, b'x', 0]), Some((&b"x"[..], None)));
        assert_eq!(unpadded(&data, &[]), None);
    }
}
