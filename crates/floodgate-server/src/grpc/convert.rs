//! Between the protocol messages and the engine: proto descriptors are
//! read in place (no copies), responses are written from the engine's.

use floodgate_policy::engine::LimitOverride;
use floodgate_policy::unit::Unit;
use floodgate_policy::{Code, Descriptor, EngineError, Response, Status};
use tonic::Code as GrpcCode;

use crate::headers::RateLimitHeaders;
use crate::proto::envoy::config::core::v3::HeaderValue;
use crate::proto::ratelimit::RateLimitDescriptor;
use crate::proto::rls::rate_limit_response::{
    Code as ProtoCode, DescriptorStatus, RateLimit, rate_limit::Unit as ProtoUnit,
};
use crate::proto::rls::{RateLimitRequest, RateLimitResponse};

impl Descriptor for RateLimitDescriptor {
    #[inline]
    fn len(&self) -> usize {
        self.entries.len()
    }

    #[inline]
    fn entry(&self, i: usize) -> (&str, &str) {
        let e = &self.entries[i];
        (&e.key, &e.value)
    }

    fn limit_override(&self) -> Option<LimitOverride> {
        let l = self.limit.as_ref()?;
        Some(LimitOverride {
            requests_per_unit: l.requests_per_unit,
            unit: Unit::from_number(l.unit)?,
        })
    }

    #[inline]
    fn hits_addend(&self) -> Option<u64> {
        self.hits_addend
    }
}

/// Checks what the engine cannot see: a limit override's unit must be a
/// known one.
pub fn check_request(req: &RateLimitRequest) -> Result<(), EngineError> {
    for (i, d) in req.descriptors.iter().enumerate() {
        if let Some(l) = &d.limit
            && Unit::from_number(l.unit).is_none()
        {
            return Err(EngineError::InvalidArgument(format!(
                "descriptor {i}: the limit override has an unknown unit ({})",
                l.unit
            )));
        }
    }
    Ok(())
}

/// The gRPC status of an engine error (via [`ErrorCode`](floodgate_policy::ErrorCode)).
pub fn status_of(e: &EngineError) -> tonic::Status {
    tonic::Status::new(GrpcCode::from_i32(e.code().grpc_code()), e.to_string())
}

fn code(c: Code) -> i32 {
    match c {
        Code::Ok => ProtoCode::Ok as i32,
        Code::OverLimit => ProtoCode::OverLimit as i32,
    }
}

fn unit(u: Unit) -> i32 {
    match u {
        Unit::Second => ProtoUnit::Second as i32,
        Unit::Minute => ProtoUnit::Minute as i32,
        Unit::Hour => ProtoUnit::Hour as i32,
        Unit::Day => ProtoUnit::Day as i32,
        Unit::Week => ProtoUnit::Week as i32,
        Unit::Month => ProtoUnit::Month as i32,
        Unit::Year => ProtoUnit::Year as i32,
    }
}

/// The protocol's status of one descriptor.
pub fn descriptor_status(s: &Status) -> DescriptorStatus {
    let current_limit = s.current_limit.as_ref().map(|l| RateLimit {
        name: l.name.as_deref().unwrap_or_default().to_owned(),
        requests_per_unit: l.reported.requests_per_unit,
        unit: unit(l.reported.unit),
    });
    let duration_until_reset = s.reports_reset().then(|| prost_types::Duration {
        seconds: s.reset_seconds().min(i64::MAX as u64) as i64,
        nanos: 0,
    });
    DescriptorStatus {
        code: code(s.code),
        current_limit,
        limit_remaining: s.limit_remaining,
        duration_until_reset,
        quota: None,
    }
}

/// Writes `response` into `out` (overall code, one status per descriptor,
/// rate limit headers).
pub fn fill_response(response: &Response, headers: &RateLimitHeaders, out: &mut RateLimitResponse) {
    out.overall_code = code(response.overall);
    out.statuses.clear();
    out.statuses
        .extend(response.statuses.iter().map(descriptor_status));
    out.response_headers_to_add.clear();
    let mut buf = String::new();
    headers.emit(response, &mut buf, |name, value| {
        out.response_headers_to_add.push(HeaderValue {
            key: name.text.to_string(),
            value: value.to_owned(),
            raw_value: Vec::new(),
        })
    });
}
