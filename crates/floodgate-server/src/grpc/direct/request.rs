//! A request's head, read field by field as the HPACK decoder hands them
//! out: what the answer needs kept, the rest checked (RFC 9113 §8.2–§8.3)
//! and dropped.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};

use super::super::deadline::parse_grpc_timeout;
use super::super::fast::{RLS_PATH, grpc_content_type};
use super::respond::is_connection_specific;

/// The methods this server does not serve: they stream, and it answers
/// unary calls only.
const STREAMING: &[&str] = &[
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas",
];

/// What a request calls.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) enum Target {
    /// No `:path` (yet).
    #[default]
    None,
    /// `ShouldRateLimit`.
    Rls,
    /// A streaming method (see [`STREAMING`]).
    Streaming,
    /// Another path, for tonic's services.
    Other(String),
}

/// A request's head.
#[derive(Debug, Default)]
pub(super) struct RequestHead {
    pub(super) target: Target,
    /// The method, when it is not `POST`.
    pub(super) not_post: Option<String>,
    /// Whether the content type is gRPC's (`None`: absent; see
    /// [`grpc_content_type`]).
    pub(super) content_type: Option<Result<(), String>>,
    /// The caller's deadline (`grpc-timeout`).
    pub(super) timeout: Option<Duration>,
    /// The fields of a call for tonic, and the trace context of any call.
    pub(super) fields: Option<HeaderMap>,
    /// Why the head is malformed (the stream is reset).
    pub(super) malformed: Option<&'static str>,
    /// The header list's size (RFC 9113 §6.5.2).
    pub(super) size: usize,
    method: bool,
    scheme: bool,
    regular: bool,
}

impl RequestHead {
    /// Takes one field of the head.
    pub(super) fn field(&mut self, name: &[u8], value: &[u8]) {
        self.size += name.len() + value.len() + 32;
        if self.malformed.is_some() {
            return;
        }
        if let Err(why) = self.take(name, value) {
            self.malformed = Some(why);
        }
    }

    fn take(&mut self, name: &[u8], value: &[u8]) -> Result<(), &'static str> {
        if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
            return Err("a field value holds NUL, CR or LF");
        }
        if name.first() == Some(&b':') {
            return self.pseudo(name, value);
        }
        self.regular = true;
        if name.is_empty() || name.iter().any(u8::is_ascii_uppercase) {
            return Err("a field name is empty or not in lowercase");
        }
        let name = std::str::from_utf8(name).map_err(|_| "a field name is not ASCII")?;
        if is_connection_specific(name) {
            return Err("a connection-specific field");
        }
        match name {
            "te" if value != b"trailers" => return Err("`te` other than `trailers`"),
            "content-type" => self.content_type = Some(grpc_content_type(Some(value))),
            "grpc-timeout" => self.timeout = parse_grpc_timeout(value),
            _ => {}
        }
        self.keep(name, value)
    }

    fn pseudo(&mut self, name: &[u8], value: &[u8]) -> Result<(), &'static str> {
        if self.regular {
            return Err("a pseudo-header after a regular field");
        }
        match name {
            b":method" if !self.method => {
                self.method = true;
                if value != b"POST" {
                    self.not_post = Some(String::from_utf8_lossy(value).into_owned());
                }
            }
            b":scheme" if !self.scheme => self.scheme = true,
            b":path" if self.target == Target::None => self.target = target(value)?,
            b":authority" => {}
            _ => return Err("an unknown or repeated pseudo-header"),
        }
        Ok(())
    }

    /// Keeps a field a call for tonic needs, or the trace context.
    fn keep(&mut self, name: &str, value: &[u8]) -> Result<(), &'static str> {
        let wanted =
            matches!(self.target, Target::Other(_)) || matches!(name, "traceparent" | "tracestate");
        if !wanted || name == "te" {
            return Ok(());
        }
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| "an invalid field name")?;
        let value = HeaderValue::from_bytes(value).map_err(|_| "an invalid field value")?;
        self.fields
            .get_or_insert_with(HeaderMap::new)
            .append(name, value);
        Ok(())
    }

    /// The required pseudo-headers are there.
    pub(super) fn complete(&self) -> bool {
        self.method && self.scheme && self.target != Target::None
    }
}

fn target(path: &[u8]) -> Result<Target, &'static str> {
    if path == RLS_PATH.as_bytes() {
        return Ok(Target::Rls);
    }
    let path = std::str::from_utf8(path).map_err(|_| "`:path` is not ASCII")?;
    if path.is_empty() {
        return Err("an empty `:path`");
    }
    if STREAMING.contains(&path) {
        return Ok(Target::Streaming);
    }
    Ok(Target::Other(path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(fields: &[(&str, &str)]) -> RequestHead {
        let mut h = RequestHead::default();
        for (n, v) in fields {
            h.field(n.as_bytes(), v.as_bytes());
        }
        h
    }

    const CALL: &[(&str, &str)] = &[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", RLS_PATH),
        (":authority", "x"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("grpc-timeout", "200m"),
    ];

    #[test]
    fn a_call_is_read() {
        let h = head(CALL);
        assert!(h.complete() && h.malformed.is_none());
        assert_eq!(h.target, Target::Rls);
        assert_eq!(h.content_type, Some(Ok(())));
        assert_eq!(h.timeout, Some(Duration::from_millis(200)));
        assert!(h.fields.is_none(), "nothing kept for a decision");
    }

    #[test]
    fn malformed_heads_are_told() {
        for (fields, why) in [
            (&[("Content-Type", "x")][..], "lowercase"),
            (&[("connection", "keep-alive")][..], "connection-specific"),
            (&[("te", "gzip")][..], "`te`"),
            (&[("a", "b"), (":path", "/x")][..], "after a regular"),
            (&[(":path", "/x"), (":path", "/y")][..], "repeated"),
            (&[(":status", "200")][..], "unknown"),
            (&[("a", "b\nc")][..], "CR or LF"),
        ] {
            let h = head(fields);
            assert!(
                h.malformed.is_some_and(|m| m.contains(why)),
                "{fields:?}: {:?}",
                h.malformed
            );
        }
        assert!(!head(&[(":method", "POST"), (":path", "/x")]).complete());
    }

    #[test]
    fn other_calls_keep_their_fields() {
        let h = head(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/grpc.health.v1.Health/Check"),
            ("content-type", "text/plain"),
            ("x-a", "1"),
        ]);
        assert_eq!(h.not_post.as_deref(), Some("GET"));
        assert_eq!(h.content_type, Some(Err("`text/plain`".into())));
        assert_eq!(h.fields.unwrap().get("x-a").unwrap(), "1");
        assert_eq!(
            head(&[(":path", "/grpc.health.v1.Health/Watch")]).target,
            Target::Streaming
        );
    }
}
