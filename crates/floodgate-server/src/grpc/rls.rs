//! An RLS call decided from its message's bytes, for either HTTP/2
//! server: at once when the store needs no IO (no future built), later
//! when it does; the answer encoded into a block shared by many answers.

use std::time::Instant;

use bytes::Bytes;
use floodgate_policy::{EngineError, ErrorCode, Response};

use super::answer::encoded;
use super::wire::{WireRequest, encode_response};
use crate::decision::DecisionService;
use crate::metrics::Api;

/// What a call was decided.
pub(super) enum Decided {
    /// The answer's message, a whole gRPC frame.
    Message(Bytes),
    /// The error answering it: its gRPC code and message.
    Failed(i32, String),
}

/// The call of `message` (a gRPC frame's contents, after its prefix)
/// decided at once; none when the store needs IO (nothing done then).
pub(super) fn decide_now(
    svc: &DecisionService,
    message: &[u8],
    started: Instant,
) -> Option<Decided> {
    if !svc.decides_at_once() {
        return None;
    }
    let request = match WireRequest::decode(message) {
        Ok(r) => r,
        Err(e) => return Some(invalid(svc, started, &e)),
    };
    let descriptors = request.descriptors();
    let mut response = svc.pool.take();
    let decided = svc.decide_rls_now(
        Api::Grpc,
        request.domain,
        &descriptors,
        request.hits_addend,
        &mut response,
    )?;
    Some(answer(svc, decided, &response))
}

/// The call of `message` decided by a store that needs IO.
pub(super) async fn decide_later(
    svc: &DecisionService,
    message: &[u8],
    started: Instant,
) -> Decided {
    let request = match WireRequest::decode(message) {
        Ok(r) => r,
        Err(e) => return invalid(svc, started, &e),
    };
    let descriptors = request.descriptors();
    let mut response = svc.pool.take();
    let decided = svc
        .decide_rls(
            Api::Grpc,
            request.domain,
            &descriptors,
            request.hits_addend,
            &mut response,
        )
        .await;
    answer(svc, decided, &response)
}

/// The answer carrying `response`, once `decided`.
fn answer(svc: &DecisionService, decided: Result<(), EngineError>, response: &Response) -> Decided {
    match decided {
        Ok(()) => Decided::Message(encoded(|out| {
            encode_response(response, &svc.headers, out);
        })),
        Err(e) => Decided::Failed(e.code().grpc_code(), e.to_string()),
    }
}

/// A message that does not decode: the call is invalid, and counted.
fn invalid(svc: &DecisionService, started: Instant, e: &dyn std::fmt::Display) -> Decided {
    svc.metrics
        .failed(Api::Grpc, ErrorCode::InvalidArgument, started);
    Decided::Failed(ErrorCode::InvalidArgument.grpc_code(), e.to_string())
}
