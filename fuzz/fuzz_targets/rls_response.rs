//! A `RateLimitResponse` written by the service's own encoder, from any
//! statuses and names, with and without the rate limit headers: prost, the
//! generated decoder, reads back exactly the message the generated types
//! would have sent (the oracle of the unit tests), and the frame's length
//! is right.
#![no_main]

use std::time::Duration;

use bytes::BytesMut;
use floodgate_policy::engine::CurrentLimit;
use floodgate_policy::spec::Reported;
use floodgate_policy::unit::Unit;
use floodgate_policy::{Code, Response, Status};
use floodgate_server::RlsSettings;
use floodgate_server::internals::{encode_response, envoy_headers, generated};
use floodgate_server::proto::rls::RateLimitResponse;
use floodgate_server::settings::HeaderSettings;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use prost::Message;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    over: bool,
    statuses: Vec<StatusInput<'a>>,
    headers: u8,
}

#[derive(Arbitrary, Debug)]
struct StatusInput<'a> {
    over: bool,
    limit: Option<(u32, u8, Option<&'a str>)>,
    remaining: u32,
    secs: u64,
    nanos: u32,
}

fuzz_target!(|input: Input<'_>| {
    let mut response = Response::default();
    response.overall = if input.over {
        Code::OverLimit
    } else {
        Code::Ok
    };
    for s in input.statuses.iter().take(64) {
        response.statuses.push(Status {
            code: if s.over { Code::OverLimit } else { Code::Ok },
            current_limit: s.limit.map(|(rpu, unit, name)| CurrentLimit {
                reported: Reported {
                    requests_per_unit: rpu,
                    unit: Unit::from_number(i32::from(unit % 8)).unwrap_or(Unit::Second),
                },
                name: name.map(Into::into),
            }),
            limit_remaining: s.remaining,
            duration_until_reset: Duration::new(s.secs, s.nanos % 1_000_000_000),
            ..Status::default()
        });
    }
    let settings = HeaderSettings {
        enabled: input.headers & 1 == 1,
        x_ratelimit: input.headers & 2 == 2,
        ..RlsSettings::default().headers
    };
    let headers = envoy_headers(&settings).expect("the default header names are valid");
    let mut out = BytesMut::new();
    encode_response(&response, &headers, &mut out);
    assert_eq!(out[0], 0, "an uncompressed frame");
    let len = u32::from_be_bytes([out[1], out[2], out[3], out[4]]) as usize;
    assert_eq!(len, out.len() - 5, "the frame's length prefix");
    let decoded = RateLimitResponse::decode(&out[5..]).expect("prost reads what the encoder wrote");
    let expected = generated(&response, &headers);
    // Every length in its shortest varint, as prost writes it.
    assert_eq!(len, expected.encoded_len(), "the message's size");
    assert_eq!(decoded, expected);
});
