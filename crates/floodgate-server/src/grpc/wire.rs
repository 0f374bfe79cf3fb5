//! The RLS messages on the wire, by hand: a `RateLimitRequest` read in
//! place (keys and values borrowed from the received bytes, no copies) and
//! a `RateLimitResponse` written straight from the engine's [`Response`].
//! Field numbers are those of `proto/`; unknown fields are skipped, as
//! protobuf requires.

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use floodgate_policy::engine::LimitOverride;
use floodgate_policy::{Code, Descriptor, Response, Status};
use smallvec::SmallVec;

use floodgate_http::contract::EnvoyHeaders;

use crate::decision::{DELAY_KEY, carried_delay};

/// A malformed message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid RateLimitRequest: {0}")]
pub struct WireError(&'static str);

/// How deep unknown groups may nest (prost's recursion limit).
const MAX_GROUP_DEPTH: u32 = 100;

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or(WireError("truncated varint"))?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(WireError("varint too long"))
    }

    /// A field's key: its number and wire type. Field numbers run from 1
    /// to 2^29 - 1 (a key fits in 32 bits); prost refuses 0 and larger
    /// keys, and so does this reading.
    fn key(&mut self) -> Result<(u64, u8), WireError> {
        let k = self.varint()?;
        if k > u64::from(u32::MAX) {
            return Err(WireError("a field key beyond 32 bits"));
        }
        if k >> 3 == 0 {
            return Err(WireError("field number 0"));
        }
        Ok((k >> 3, (k & 7) as u8))
    }

    fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let len = self.varint()?;
        let end = (self.pos as u64)
            .checked_add(len)
            .filter(|e| *e <= self.buf.len() as u64)
            .ok_or(WireError("truncated field"))? as usize;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn str(&mut self) -> Result<&'a str, WireError> {
        std::str::from_utf8(self.bytes()?)
            .map_err(|_| WireError("a string field is not valid UTF-8"))
    }

    /// Skips an unknown field `field` of wire type `wire`, groups
    /// (proto2's wire types 3 and 4) included, as generated decoders do.
    fn skip(&mut self, field: u64, wire: u8) -> Result<(), WireError> {
        self.skip_nested(field, wire, 0)
    }

    fn skip_nested(&mut self, field: u64, wire: u8, depth: u32) -> Result<(), WireError> {
        match wire {
            0 => self.varint().map(drop),
            1 => self.advance(8),
            2 => self.bytes().map(drop),
            3 => {
                if depth >= MAX_GROUP_DEPTH {
                    return Err(WireError("groups nested too deep"));
                }
                loop {
                    match self.key()? {
                        (f, 4) if f == field => return Ok(()),
                        (_, 4) => return Err(WireError("a group ends with another field's tag")),
                        (f, w) => self.skip_nested(f, w, depth + 1)?,
                    }
                }
            }
            4 => Err(WireError("a group ends that never began")),
            5 => self.advance(4),
            _ => Err(WireError("unsupported wire type")),
        }
    }

    fn advance(&mut self, n: usize) -> Result<(), WireError> {
        if self.pos + n > self.buf.len() {
            return Err(WireError("truncated field"));
        }
        self.pos += n;
        Ok(())
    }
}

/// One descriptor, borrowed from the request bytes.
#[derive(Clone, Copy, Debug)]
pub struct WireDescriptor<'a> {
    entries: &'a [(&'a str, &'a str)],
    limit: Option<(u32, i32)>,
    hits: Option<u64>,
    negative: bool,
}

impl Descriptor for WireDescriptor<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.entries.len()
    }
    #[inline]
    fn entry(&self, i: usize) -> (&str, &str) {
        self.entries[i]
    }
    fn limit_override(&self) -> Option<LimitOverride> {
        let (requests_per_unit, unit_number) = self.limit?;
        Some(LimitOverride {
            requests_per_unit,
            unit_number,
        })
    }
    #[inline]
    fn hits_addend(&self) -> Option<u64> {
        self.hits
    }
    #[inline]
    fn is_negative_hits(&self) -> bool {
        self.negative
    }
}

/// Entries of all descriptors, back to back (inline for small requests).
pub(crate) type Entries<'a> = SmallVec<[(&'a str, &'a str); 16]>;

/// Where a descriptor's entries are, and its other fields.
#[derive(Clone, Copy, Debug)]
struct Meta {
    start: u32,
    end: u32,
    limit: Option<(u32, i32)>,
    hits: Option<u64>,
    negative: bool,
}

/// A decoded request.
pub struct WireRequest<'a> {
    /// The domain.
    pub domain: &'a str,
    /// The request's hits addend.
    pub hits_addend: u32,
    entries: Entries<'a>,
    metas: SmallVec<[Meta; 8]>,
}

impl<'a> WireRequest<'a> {
    /// Decodes `buf`.
    pub fn decode(buf: &'a [u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf);
        let mut req = WireRequest {
            domain: "",
            hits_addend: 0,
            entries: SmallVec::new(),
            metas: SmallVec::new(),
        };
        while !r.done() {
            match r.key()? {
                (1, 2) => req.domain = r.str()?,
                (2, 2) => {
                    let d = r.bytes()?;
                    req.descriptor(d)?;
                }
                (3, 0) => req.hits_addend = r.varint()? as u32,
                (f, w) => r.skip(f, w)?,
            }
        }
        Ok(req)
    }

    fn descriptor(&mut self, buf: &'a [u8]) -> Result<(), WireError> {
        let mut r = Reader::new(buf);
        let start = self.entries.len() as u32;
        let mut meta = Meta {
            start,
            end: start,
            limit: None,
            hits: None,
            negative: false,
        };
        while !r.done() {
            match r.key()? {
                (1, 2) => {
                    let mut e = Reader::new(r.bytes()?);
                    let (mut k, mut v) = ("", "");
                    while !e.done() {
                        match e.key()? {
                            (1, 2) => k = e.str()?,
                            (2, 2) => v = e.str()?,
                            (f, w) => e.skip(f, w)?,
                        }
                    }
                    self.entries.push((k, v));
                }
                (2, 2) => {
                    let mut l = Reader::new(r.bytes()?);
                    let (mut rpu, mut unit) = meta.limit.unwrap_or((0, 0));
                    while !l.done() {
                        match l.key()? {
                            (1, 0) => rpu = l.varint()? as u32,
                            (2, 0) => unit = l.varint()? as i32,
                            (f, w) => l.skip(f, w)?,
                        }
                    }
                    meta.limit = Some((rpu, unit));
                }
                (3, 2) => {
                    let mut h = Reader::new(r.bytes()?);
                    // A repeated message field merges, as the limit does.
                    let mut value = meta.hits.unwrap_or(0);
                    while !h.done() {
                        match h.key()? {
                            (1, 0) => value = h.varint()?,
                            (f, w) => h.skip(f, w)?,
                        }
                    }
                    meta.hits = Some(value);
                }
                // `is_negative_hits`: any non-zero varint is true.
                (4, 0) => meta.negative = r.varint()? != 0,
                (f, w) => r.skip(f, w)?,
            }
        }
        meta.end = self.entries.len() as u32;
        self.metas.push(meta);
        Ok(())
    }

    /// The descriptors, as the engine reads them.
    pub fn descriptors(&self) -> SmallVec<[WireDescriptor<'_>; 8]> {
        self.metas
            .iter()
            .map(|m| WireDescriptor {
                entries: &self.entries[m.start as usize..m.end as usize],
                limit: m.limit,
                hits: m.hits,
                negative: m.negative,
            })
            .collect()
    }
}

/// A status's `duration_until_reset` as a `google.protobuf.Duration`'s
/// seconds (whole, an `int64`): larger durations are capped.
fn proto_secs(s: &Status) -> u64 {
    s.reset_seconds().min(i64::MAX as u64)
}

fn put_varint(out: &mut impl BufMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// A varint field.
fn put_field(out: &mut BytesMut, field: u8, v: u64) {
    out.put_u8(field << 3);
    put_varint(out, v);
}

fn put_str(out: &mut BytesMut, field: u8, s: &str) {
    out.put_u8(field << 3 | 2);
    put_varint(out, s.len() as u64);
    out.put_slice(s.as_bytes());
}

/// A message field whose contents `body` writes, in one pass: its length
/// goes in front once known, in the byte kept for it when under 128 (the
/// usual case), the contents moved along for a longer length.
fn put_message(out: &mut BytesMut, field: u8, body: impl FnOnce(&mut BytesMut)) {
    out.put_u8(field << 3 | 2);
    let at = out.len();
    out.put_u8(0);
    body(out);
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
        return;
    }
    let mut varint = [0u8; 10];
    let n = {
        let mut w = &mut varint[..];
        put_varint(&mut w, len as u64);
        10 - w.len()
    };
    out.put_bytes(0, n - 1);
    out.copy_within(at + 1..at + 1 + len, at + n);
    out[at..at + n].copy_from_slice(&varint[..n]);
}

fn code(c: Code) -> u64 {
    match c {
        Code::Ok => 1,
        Code::OverLimit => 2,
    }
}

fn put_status(out: &mut BytesMut, s: &Status) {
    put_message(out, 2, |out| {
        put_field(out, 1, code(s.code));
        if let Some(l) = &s.current_limit {
            put_message(out, 2, |out| {
                if l.reported.requests_per_unit != 0 {
                    put_field(out, 1, u64::from(l.reported.requests_per_unit));
                }
                put_field(out, 2, l.reported.unit as u64);
                let name = l.name.as_deref().unwrap_or("");
                if !name.is_empty() {
                    put_str(out, 3, name);
                }
            });
        }
        if s.limit_remaining != 0 {
            put_field(out, 3, u64::from(s.limit_remaining));
        }
        if s.reports_reset() {
            put_message(out, 4, |out| {
                let secs = proto_secs(s);
                if secs != 0 {
                    put_field(out, 1, secs);
                }
            });
        }
    });
}

/// `dynamic_metadata` (a `google.protobuf.Struct`) holding the carried
/// delay: one entry of `fields`, its value a `number_value`, in
/// milliseconds.
fn put_delay(out: &mut BytesMut, delay: Duration) {
    put_message(out, 6, |out| {
        put_message(out, 1, |out| {
            put_str(out, 1, DELAY_KEY);
            put_message(out, 2, |out| {
                // Field 2 (`number_value`), a double: wire type 1.
                out.put_u8(2 << 3 | 1);
                out.put_f64_le(delay.as_secs_f64() * 1000.0);
            });
        });
    });
}

/// Appends the gRPC frame (5-byte prefix and message) of the response to
/// `response` to `out`.
pub fn encode_response(response: &Response, headers: &EnvoyHeaders, out: &mut BytesMut) {
    let start = out.len();
    // Uncompressed, then the message's length, written last.
    out.put_bytes(0, 5);
    put_field(out, 1, code(response.overall));
    for s in &response.statuses {
        put_status(out, s);
    }
    headers.emit(response, &mut String::new(), |h, v| {
        put_message(out, 3, |out| {
            put_str(out, 1, &h.text);
            put_str(out, 2, v);
        });
    });
    if let Some(delay) = carried_delay(response) {
        put_delay(out, delay);
    }
    let len = (out.len() - start - 5) as u32;
    out[start + 1..start + 5].copy_from_slice(&len.to_be_bytes());
}

/// The oracle of [`encode_response`]: the message the generated types
/// build for `response` (for the tests and the fuzz target).
#[cfg(any(test, feature = "internals"))]
pub fn generated(
    response: &Response,
    headers: &EnvoyHeaders,
) -> crate::proto::rls::RateLimitResponse {
    use crate::proto::envoy::config::core::v3::HeaderValue;
    use crate::proto::rls::rate_limit_response::rate_limit::Unit as ProtoUnit;
    use crate::proto::rls::rate_limit_response::{Code as ProtoCode, DescriptorStatus, RateLimit};
    let code = |c| match c {
        Code::Ok => ProtoCode::Ok as i32,
        Code::OverLimit => ProtoCode::OverLimit as i32,
    };
    // By name: the protocol's numbers, independently of the encoder's.
    let unit =
        |u: floodgate_policy::unit::Unit| ProtoUnit::from_str_name(u.name()).map(|u| u as i32);
    let mut out = crate::proto::rls::RateLimitResponse {
        overall_code: code(response.overall),
        ..Default::default()
    };
    for s in &response.statuses {
        out.statuses.push(DescriptorStatus {
            code: code(s.code),
            current_limit: s.current_limit.as_ref().map(|l| RateLimit {
                name: l.name.as_deref().unwrap_or_default().to_owned(),
                requests_per_unit: l.reported.requests_per_unit,
                unit: unit(l.reported.unit).expect("every unit is in the protocol"),
            }),
            limit_remaining: s.limit_remaining,
            duration_until_reset: s.reports_reset().then(|| prost_types::Duration {
                seconds: s.reset_seconds().min(i64::MAX as u64) as i64,
                nanos: 0,
            }),
            quota: None,
        });
    }
    headers.emit(response, &mut String::new(), |name, value| {
        out.response_headers_to_add.push(HeaderValue {
            key: name.text.to_string(),
            value: value.to_owned(),
            raw_value: Vec::new(),
        });
    });
    out.dynamic_metadata = carried_delay(response).map(|d| {
        let ms = prost_types::Value {
            kind: Some(prost_types::value::Kind::NumberValue(
                d.as_secs_f64() * 1000.0,
            )),
        };
        prost_types::Struct {
            fields: [(DELAY_KEY.to_owned(), ms)].into(),
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::ratelimit::RateLimitDescriptor;
    use crate::proto::ratelimit::rate_limit_descriptor::{Entry, RateLimitOverride};
    use crate::proto::rls::RateLimitRequest;
    use floodgate_policy::unit::Unit;
    use prost::Message;

    #[test]
    fn decodes_what_prost_encodes() {
        let req = RateLimitRequest {
            domain: "api".into(),
            hits_addend: 7,
            descriptors: vec![
                RateLimitDescriptor {
                    entries: vec![
                        Entry {
                            key: "user".into(),
                            value: "alice".into(),
                        },
                        Entry {
                            key: "route".into(),
                            value: "".into(),
                        },
                    ],
                    limit: Some(RateLimitOverride {
                        requests_per_unit: 9,
                        unit: 2,
                    }),
                    hits_addend: Some(0),
                    is_negative_hits: false,
                },
                RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "k".into(),
                        value: "v".into(),
                    }],
                    is_negative_hits: true,
                    ..Default::default()
                },
            ],
        };
        let bytes = req.encode_to_vec();
        let w = WireRequest::decode(&bytes).unwrap();
        assert_eq!((w.domain, w.hits_addend), ("api", 7));
        let d = w.descriptors();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].entry(0), ("user", "alice"));
        assert_eq!(d[0].entry(1), ("route", ""));
        assert_eq!(d[0].hits_addend(), Some(0));
        assert_eq!(d[0].limit_override().unwrap().requests_per_unit, 9);
        assert_eq!(d[1].len(), 1);
        assert_eq!(d[1].hits_addend(), None);
        assert!(!d[0].is_negative_hits() && d[1].is_negative_hits());
        for cut in 1..bytes.len() {
            // Never panics on truncated input.
            let _ = WireRequest::decode(&bytes[..cut]);
        }
        assert!(WireRequest::decode(&[0x0a, 0x02, 0xff, 0xfe]).is_err());
    }

    #[test]
    fn merges_a_repeated_hits_addend_as_prost_does() {
        // One descriptor, its hits addend sent twice: `{value: 5}` then `{}`
        // (the second merges into the first, so the value stays 5), then a
        // limit sent as `{requests_per_unit: 9}` and `{unit: MINUTE}`.
        let bytes = [
            0x12, 14, 0x1a, 0x02, 0x08, 0x05, 0x1a, 0x00, 0x12, 0x02, 0x08, 0x09, 0x12, 0x02, 0x10,
            0x02,
        ];
        let generated = RateLimitRequest::decode(&bytes[..]).unwrap();
        let w = WireRequest::decode(&bytes).unwrap();
        let d = w.descriptors();
        assert_eq!(generated.descriptors[0].hits_addend, Some(5));
        assert_eq!(d[0].hits_addend(), Some(5));
        let limit = generated.descriptors[0].limit.unwrap();
        assert_eq!((limit.requests_per_unit, limit.unit), (9, 2));
        let ours = d[0].limit_override().unwrap();
        assert_eq!(
            (ours.requests_per_unit, ours.unit()),
            (9, Some(Unit::Minute))
        );
    }

    #[test]
    fn skips_unknown_groups_as_prost_does() {
        let mut bytes = RateLimitRequest {
            domain: "api".into(),
            ..Default::default()
        }
        .encode_to_vec();
        // Field 14 as a group holding a varint and a nested group (field 2).
        bytes.extend_from_slice(&[
            14 << 3 | 3,
            1 << 3,
            0x96,
            0x01,
            2 << 3 | 3,
            2 << 3 | 4,
            14 << 3 | 4,
        ]);
        bytes.extend_from_slice(&[3 << 3, 5]);
        let generated = RateLimitRequest::decode(bytes.as_slice()).unwrap();
        let w = WireRequest::decode(&bytes).unwrap();
        assert_eq!((w.domain, w.hits_addend), (generated.domain.as_str(), 5));
        // An empty group, found by fuzzing (prost reads it, as must we).
        assert!(RateLimitRequest::decode(&[0x73, 0x74][..]).is_ok());
        assert!(WireRequest::decode(&[0x73, 0x74]).is_ok());
        // What prost refuses: an end without a start, another field's end,
        // a group never closed, field number 0 (any wire type, at the top,
        // in a descriptor, in a group), a key beyond 32 bits, groups nested
        // past the recursion limit.
        let field_zero_in_descriptor = [0x12, 0x04, 0x0a, 0x02, 0x00, 0x01];
        let beyond_32_bits = [0x80, 0x80, 0x80, 0x80, 0x10, 0x00];
        for bad in [
            &[0x74][..],
            &[0x73, 0x7c],
            &[0x73, 0x08, 0x01],
            &[0x00, 0x01],
            &[0x02, 0x00],
            &[0x0a, 0x01, b'd', 0x00, 0x05],
            &[0x73, 0x00, 0x00, 0x74],
            &field_zero_in_descriptor,
            &beyond_32_bits,
        ] {
            assert!(RateLimitRequest::decode(bad).is_err());
            assert!(WireRequest::decode(bad).is_err(), "{bad:x?}");
        }
        let nested = |n| -> Vec<u8> {
            std::iter::repeat_n(0x73, n)
                .chain(std::iter::repeat_n(0x74, n))
                .collect()
        };
        assert!(RateLimitRequest::decode(nested(100).as_slice()).is_ok());
        assert!(WireRequest::decode(&nested(100)).is_ok());
        assert!(RateLimitRequest::decode(nested(101).as_slice()).is_err());
        assert_eq!(
            WireRequest::decode(&nested(101)).err(),
            Some(WireError("groups nested too deep"))
        );
    }

    #[test]
    fn encodes_what_prost_decodes() {
        use crate::proto::rls::RateLimitResponse;
        use floodgate_policy::engine::CurrentLimit;
        use floodgate_policy::spec::Reported;
        use std::time::Duration;

        let mut r = Response::default();
        r.overall = Code::OverLimit;
        r.statuses.push(Status {
            code: Code::OverLimit,
            current_limit: Some(CurrentLimit {
                reported: Reported {
                    requests_per_unit: 3,
                    unit: Unit::Minute,
                },
                name: Some("per-user".into()),
            }),
            limit_remaining: 0,
            duration_until_reset: Duration::new(41, 500),
            ..Status::default()
        });
        r.statuses.push(Status::default());
        r.statuses.push(Status {
            limit_remaining: u32::MAX,
            ..Status::default()
        });
        r.statuses.push(Status {
            current_limit: Some(CurrentLimit {
                reported: Reported {
                    requests_per_unit: 300,
                    unit: Unit::Week,
                },
                name: None,
            }),
            limit_remaining: 299,
            duration_until_reset: Duration::from_secs(600_000),
            ..Status::default()
        });
        // Longer than an int64 of seconds holds (found by fuzzing).
        r.statuses.push(Status {
            duration_until_reset: Duration::new(u64::MAX, 7),
            ..Status::default()
        });
        // A status of more than 127 bytes: its length takes two bytes.
        r.statuses.push(Status {
            current_limit: Some(CurrentLimit {
                reported: Reported {
                    requests_per_unit: 1,
                    unit: Unit::Second,
                },
                name: Some("n".repeat(300).into()),
            }),
            ..Status::default()
        });
        let settings = crate::settings::HeaderSettings {
            enabled: true,
            x_ratelimit: true,
            ..crate::RlsSettings::default().headers
        };
        let headers = crate::headers::envoy_headers(&settings).unwrap();
        let mut out = BytesMut::new();
        encode_response(&r, &headers, &mut out);
        assert_eq!(out[0], 0);
        assert_eq!(
            u32::from_be_bytes([out[1], out[2], out[3], out[4]]) as usize,
            out.len() - 5
        );
        let decoded = RateLimitResponse::decode(&out[5..]).unwrap();
        let expected = generated(&r, &headers);
        // Every length in its shortest varint, as prost writes it.
        assert_eq!(out.len() - 5, expected.encoded_len());
        assert_eq!(decoded, expected);
        assert_eq!(decoded.response_headers_to_add.len(), 6);
    }

    /// An `OK` answer a shaper delays carries the longest delay in
    /// `dynamic_metadata` (`delay_ms`), as the generated types write it;
    /// an answer without a delay, or over the limit, carries none.
    #[test]
    fn carries_a_delay_in_dynamic_metadata() {
        use crate::proto::rls::RateLimitResponse;
        use floodgate::{Decision, Outcome};
        use std::time::Duration;

        let delayed = |ms| Status {
            decision: Some(Decision {
                outcome: Outcome::Delayed(Duration::from_millis(ms)),
                limit: 6,
                remaining: 3,
                reset_after: Duration::from_millis(400),
                retry_after: None,
            }),
            ..Status::default()
        };
        let headers =
            crate::headers::envoy_headers(&crate::RlsSettings::default().headers).unwrap();
        let encode = |r: &Response| {
            let mut out = BytesMut::new();
            encode_response(r, &headers, &mut out);
            let decoded = RateLimitResponse::decode(&out[5..]).unwrap();
            assert_eq!(decoded, generated(r, &headers));
            decoded.dynamic_metadata
        };
        let mut r = Response::default();
        r.statuses
            .extend([delayed(150), Status::default(), delayed(250)]);
        let metadata = encode(&r).expect("a delay carried");
        let value = &metadata.fields["delay_ms"];
        assert_eq!(
            value.kind,
            Some(prost_types::value::Kind::NumberValue(250.0))
        );
        r.overall = Code::OverLimit;
        assert_eq!(encode(&r), None);
        r.overall = Code::Ok;
        r.statuses = vec![Status::default()];
        assert_eq!(encode(&r), None);
    }
}
