//! Any bytes as an upstream's answer to the gateway's own HTTP/1.1 client:
//! the response head and the body it frames, fed in pieces of any sizes.
//! No panic; the same outcome however the bytes are split; a body never
//! yields more bytes than it was sent, nor more than its `Content-Length`.
#![no_main]

use bytes::BytesMut;
use floodgate_gateway::h1::framing::{Framing, Step};
use floodgate_gateway::h1::head::{Parsed, parse_response};
use http::Method;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Answer<'a> {
    head_request: bool,
    /// Sizes of the pieces the bytes arrive in (cycled; 0 counts as 1).
    pieces: Vec<u8>,
    bytes: &'a [u8],
}

/// What the client would get: the head's framing and the body's bytes
/// and trailer count, or where it failed.
#[derive(Debug, PartialEq)]
enum Outcome {
    HeadError,
    NoHead,
    Body(Framing, Vec<u8>, usize, bool),
    BodyError(Framing),
}

fn run(method: &Method, bytes: &[u8], pieces: &[u8]) -> Outcome {
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let mut k = 0;
    let mut feed = |buf: &mut BytesMut| -> bool {
        if fed >= bytes.len() {
            return false;
        }
        let n = pieces
            .get(k % pieces.len().max(1))
            .map_or(bytes.len(), |&p| p.max(1) as usize);
        k += 1;
        let n = n.min(bytes.len() - fed);
        buf.extend_from_slice(&bytes[fed..fed + n]);
        fed += n;
        true
    };
    let mut names = Vec::new();
    let head = loop {
        match parse_response(&mut buf, method, false, &mut names) {
            Ok(Parsed::Final(h)) => break h,
            Ok(Parsed::Interim) => continue,
            Ok(Parsed::Partial) => {
                if !feed(&mut buf) {
                    return Outcome::NoHead;
                }
            }
            Err(_) => return Outcome::HeadError,
        }
    };
    let framing = head.framing;
    let mut body = head.framing;
    let mut data = Vec::new();
    loop {
        match body.step(&mut buf) {
            Ok(Step::Data(d)) => {
                assert!(!d.is_empty());
                data.extend_from_slice(&d);
            }
            Ok(Step::Trailers(t)) => {
                return Outcome::Body(framing, data, t.len(), buf.is_empty());
            }
            Ok(Step::End) => {
                if let Framing::Length(n) = framing {
                    assert_eq!(data.len() as u64, n);
                }
                return Outcome::Body(framing, data, 0, buf.is_empty());
            }
            Ok(Step::More) if feed(&mut buf) => {}
            // A body delimited by the close ends with the bytes.
            Ok(Step::More) if body == Framing::Close => {
                return Outcome::Body(framing, data, 0, true);
            }
            Ok(Step::More) | Err(_) => return Outcome::BodyError(framing),
        }
    }
}

fuzz_target!(|a: Answer<'_>| {
    let method = if a.head_request {
        Method::HEAD
    } else {
        Method::GET
    };
    let pieced = run(&method, a.bytes, &a.pieces);
    if let Outcome::Body(_, data, _, _) = &pieced {
        assert!(data.len() <= a.bytes.len());
    }
    // Split invariance: all at once gives the same answer, except where
    // a whole buffer decides earlier (a size line or trailer section over
    // its bound is refused as soon as the buffer shows it; the leftover
    // flag depends on what had arrived).
    let whole = run(&method, a.bytes, &[]);
    match (&pieced, &whole) {
        (Outcome::Body(f1, d1, t1, _), Outcome::Body(f2, d2, t2, _)) => {
            assert_eq!((f1, d1, t1), (f2, d2, t2));
        }
        (Outcome::BodyError(f1), Outcome::BodyError(f2)) => assert_eq!(f1, f2),
        (Outcome::HeadError, Outcome::HeadError) | (Outcome::NoHead, Outcome::NoHead) => {}
        (p, w) => panic!("pieced {p:?} but whole {w:?}"),
    }
});
