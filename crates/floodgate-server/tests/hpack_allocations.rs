//! The HPACK decoder allocates nothing per header block once warm: not to
//! look fields up, not to Huffman-decode them, not to insert and evict
//! dynamic table entries (counted on the test's own thread by the
//! binary's counting allocator).

use std::hint::black_box;
use std::time::Instant;

use floodgate_server::internals::HpackDecoder;

use crate::allocations::on_this_thread;

/// A gRPC client's first RLS request: `:method POST` and `:scheme http`
/// from the static table, then `:path`, `:authority`, `content-type`,
/// `te`, `user-agent` and `grpc-timeout` Huffman-coded and indexed.
const FIRST: &str = "838644ab60b5773fa5d05b3b98855ec1a4b41a93257eecafb4692e735264ee2d\
    9dcc42b1ba73db449b4692e735264f418ab0692d06a4c9b8f01e0f5f8b1d75d0620d263d4c4d\
    65644082497f864d833505b11f7a8a9acac8b4c7602bb805c140899acac8b24d494f6a7f821029";

/// The requests after it: every field from the tables.
const STEADY: &str = "8386c3c2c1c0bfbe";

/// `x-request-id` literals with indexing, Huffman-coded, four values:
/// each block inserts an entry, and the table fills, evicts and wraps.
const CHURN: [&str; 4] = [
    "4089f2b585ed6950958d279974812be368ab02372559a206459f1800b372b25148120237c7",
    "4089f2b585ed6950958d279974812be368ab02372559a206459f1802b372b25148120237c7",
    "4089f2b585ed6950958d279974812be368ab02372559a206459f1804b372b25148120237c7",
    "4089f2b585ed6950958d279974812be368ab02372559a206459f181959b95928a409011be3",
];

/// The bytes of a hex dump.
fn hex(dump: &str) -> Vec<u8> {
    let digits: Vec<u8> = dump.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

/// Decodes `block`, returning the bytes of its fields (and allocating
/// nothing itself).
fn decode(decoder: &mut HpackDecoder, block: &[u8]) -> usize {
    let mut bytes = 0;
    decoder
        .decode(block, |name, value| {
            bytes += name.len() + value.len();
            Ok(())
        })
        .unwrap();
    bytes
}

/// Allocations over `n` rounds of `round`.
fn allocations(n: usize, mut round: impl FnMut(usize)) -> u64 {
    let before = on_this_thread();
    for i in 0..n {
        round(i);
    }
    on_this_thread() - before
}

#[test]
fn a_warm_decoder_allocates_nothing_per_block() {
    let (first, steady) = (hex(FIRST), hex(STEADY));
    let mut decoder = HpackDecoder::new(4096);
    let first_bytes = decode(&mut decoder, &first);
    assert_eq!(
        decode(&mut decoder, &steady),
        first_bytes,
        "the same request"
    );
    let steady_allocations = allocations(10_000, |_| {
        decode(&mut decoder, &steady);
    });
    assert_eq!(steady_allocations, 0, "indexed fields");

    let churn: Vec<Vec<u8>> = CHURN.iter().map(|b| hex(b)).collect();
    let mut decoder = HpackDecoder::new(4096);
    // Enough to fill the table several times over, wrapping its buffer.
    for block in churn.iter().cycle().take(1_000) {
        decode(&mut decoder, block);
    }
    let churn_allocations = allocations(10_000, |i| {
        decode(&mut decoder, &churn[i % churn.len()]);
    });
    assert_eq!(
        churn_allocations, 0,
        "Huffman-coded insertions and evictions"
    );
}

/// The time to decode a warm gRPC request block: run with `cargo test
/// --release -p floodgate-server --test suite -- --ignored hpack`.
#[test]
#[ignore = "a measure, for release builds"]
fn measure_a_warm_request_block() {
    let (first, steady) = (hex(FIRST), hex(STEADY));
    let mut decoder = HpackDecoder::new(4096);
    decode(&mut decoder, &first);
    let n = 10_000_000u32;
    let start = Instant::now();
    for _ in 0..n {
        black_box(decode(&mut decoder, black_box(&steady)));
    }
    let steady_ns = start.elapsed().as_nanos() as f64 / f64::from(n);
    let n = 1_000_000u32;
    let start = Instant::now();
    for _ in 0..n {
        let mut fresh = HpackDecoder::new(4096);
        black_box(decode(&mut fresh, black_box(&first)));
    }
    let first_ns = start.elapsed().as_nanos() as f64 / f64::from(n);
    eprintln!(
        "HPACK: {steady_ns:.1} ns per warm request block, {first_ns:.1} ns per first block (with a new decoder)"
    );
}
