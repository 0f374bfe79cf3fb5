//! What a [`Contract`] answers a rejected request with: a whole response
//! (its headers are written in `headers.rs`).

use std::time::Duration;

use bytes::Bytes;
use floodgate::Timestamp;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, StatusCode};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

use super::config::Contract;
use super::header_buf::HeaderBuf;
use super::names::{GRPC_MESSAGE, GRPC_STATUS};
use super::problem::{
    BodyKind, PROBLEM_JSON, Problem, QUOTA_EXCEEDED, TEMPORARY_REDUCED_CAPACITY, TEXT_PLAIN,
    negotiate, write_body,
};
use super::report::Report;
use super::sf::{ceil_secs, clamp};

/// Why a request is rejected.
#[derive(Clone, Copy, Debug)]
pub enum Rejection<'a> {
    /// Over a limit, as the report says (429 unless a rule says otherwise).
    Limited(&'a Report),
    /// Shed to keep capacity for critical traffic (503,
    /// `temporary-reduced-capacity`).
    Overloaded {
        /// The wait suggested to the client.
        retry_after: Option<Duration>,
    },
    /// The limiter could not decide and fails closed (the configured error
    /// status, 503 by default).
    Unavailable,
}

/// The bytes percent-encoded in `grpc-message`: all but printable ASCII,
/// and `%`.
const GRPC_ESCAPED: &AsciiSet = &CONTROLS.add(b'%');

/// `message` as a `grpc-message` value: percent-encoded as gRPC requires
/// (UTF-8, every byte but printable ASCII, and `%`).
pub fn grpc_message(message: &str) -> HeaderValue {
    let encoded = utf8_percent_encode(message, GRPC_ESCAPED).to_string();
    HeaderValue::from_str(&encoded).expect("percent-encoded text is a header value")
}

static NO_STORE: HeaderValue = HeaderValue::from_static("no-store");

impl Contract {
    /// The status a rejection gets.
    pub fn status_of(&self, rejection: &Rejection<'_>) -> StatusCode {
        match rejection {
            Rejection::Limited(r) => r.status().unwrap_or(self.status),
            Rejection::Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::Unavailable => self.error_status,
        }
    }

    /// The whole response rejecting a request whose headers are
    /// `request_headers` (for `Accept` and gRPC): status, `Retry-After`,
    /// rate-limit headers, `Cache-Control: no-store`, and a problem+json or
    /// plain-text body. A gRPC request (`content-type: application/grpc...`)
    /// gets a trailers-only gRPC response instead (`RESOURCE_EXHAUSTED`, or
    /// `UNAVAILABLE` for a 503) with the same headers.
    ///
    /// `now` is the decision's instant; `out` reusable buffers.
    pub fn reject(
        &self,
        rejection: Rejection<'_>,
        request_headers: &HeaderMap,
        now: Timestamp,
        out: &mut HeaderBuf,
    ) -> http::Response<Bytes> {
        let status = self.status_of(&rejection);
        let mut headers = HeaderMap::new();
        let (report, retry_after, kind, detail) = match rejection {
            Rejection::Limited(report) => {
                self.write_headers(report, now, Duration::ZERO, &mut headers, out, None);
                let kind = if status == StatusCode::SERVICE_UNAVAILABLE {
                    TEMPORARY_REDUCED_CAPACITY
                } else {
                    QUOTA_EXCEEDED
                };
                (Some(report), self.retry_after_secs(report), kind, None)
            }
            Rejection::Overloaded { retry_after } => {
                let secs = retry_after.map(|d| clamp(ceil_secs(d)));
                if let Some(s) = secs {
                    headers.insert(RETRY_AFTER, HeaderValue::from(s));
                }
                let detail = "The service is shedding load to protect critical requests.";
                (None, secs, TEMPORARY_REDUCED_CAPACITY, Some(detail))
            }
            Rejection::Unavailable => {
                let detail = Some("The rate limiter is unavailable.");
                (None, None, "about:blank", detail)
            }
        };
        headers.insert(CACHE_CONTROL, NO_STORE.clone());
        let hidden = self.hide_headers || report.is_some_and(|r| r.violated().next().is_none());
        let problem = Problem {
            status,
            kind,
            report,
            hidden,
            retry_after,
            detail,
        };
        let buf = out.text();
        let content_type = request_headers.get(CONTENT_TYPE);
        if content_type.is_some_and(|v| v.as_bytes().starts_with(b"application/grpc")) {
            return grpc(status, &problem, headers, buf);
        }
        let body_kind = negotiate(request_headers);
        write_body(&problem, body_kind, buf);
        let content_type = match body_kind {
            BodyKind::Json => PROBLEM_JSON,
            BodyKind::Text => TEXT_PLAIN,
        };
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        let mut res = http::Response::new(Bytes::copy_from_slice(buf.as_bytes()));
        *res.status_mut() = status;
        *res.headers_mut() = headers;
        res
    }
}

/// A trailers-only gRPC response: HTTP 200, the status in headers.
fn grpc(
    status: StatusCode,
    problem: &Problem<'_>,
    mut headers: HeaderMap,
    buf: &mut String,
) -> http::Response<Bytes> {
    let code = if status == StatusCode::SERVICE_UNAVAILABLE {
        "14"
    } else {
        "8"
    };
    write_body(problem, BodyKind::Text, buf);
    headers.insert(GRPC_STATUS, HeaderValue::from_static(code));
    headers.insert(GRPC_MESSAGE, grpc_message(buf.trim_end()));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    let mut res = http::Response::new(Bytes::new());
    *res.headers_mut() = headers;
    res
}

/// A rejection built by [`Contract::reject`], as an axum response (feature
/// `axum`).
#[cfg(feature = "axum")]
#[derive(Debug)]
pub struct Rejected(pub http::Response<Bytes>);

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for Rejected {
    fn into_response(self) -> axum::response::Response {
        self.0.map(axum::body::Body::from)
    }
}

#[cfg(test)]
mod tests {
    /// `%`, controls and non-ASCII are escaped; printable ASCII is kept.
    #[test]
    fn grpc_message_escapes_as_grpc_requires() {
        let v = super::grpc_message("over limit: 100% of \"d\"\né");
        assert_eq!(v, "over limit: 100%25 of \"d\"%0A%C3%A9");
    }
}
