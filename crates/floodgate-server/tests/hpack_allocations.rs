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

/// The same first request from a client that does not index `:path`
/// (literal without indexing, Huffman-coded), and those after it, which
/// send `:path` again so.
const FIRST_PATH_UNINDEXED: &str = "838604ab60b5773fa5d05b3b98855ec1a4b41a93257eecafb4692e735264ee2d\
    9dcc42b1ba73db449b4692e735264f418ab0692d06a4c9b8f01e0f5f8b1d75d0620d263d4c4d\
    65644082497f864d833505b11f7a8a9acac8b4c7602bb805c140899acac8b24d494f6a7f821029";
const STEADY_PATH_UNINDEXED: &str = "838604ab60b5773fa5d05b3b98855ec1a4b41a93257eecafb4692e735264ee2d\
    9dcc42b1ba73db449b4692e735264fc2c1c0bfbe";

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

/// A decoder that has read `first`, then `steady` as the same request.
fn warm(first: &str, steady: &str) -> (HpackDecoder, Vec<u8>) {
    let mut decoder = HpackDecoder::new(4096);
    let first_bytes = decode(&mut decoder, &hex(first));
    let steady = hex(steady);
    assert_eq!(
        decode(&mut decoder, &steady),
        first_bytes,
        "the same request"
    );
    (decoder, steady)
}

#[test]
fn a_warm_decoder_allocates_nothing_per_block() {
    for (first, steady, what) in [
        (FIRST, STEADY, "indexed fields"),
        (
            FIRST_PATH_UNINDEXED,
            STEADY_PATH_UNINDEXED,
            "a Huffman-coded literal",
        ),
    ] {
        let (mut decoder, steady) = warm(first, steady);
        let steady_allocations = allocations(10_000, |_| {
            decode(&mut decoder, &steady);
        });
        assert_eq!(steady_allocations, 0, "{what}");
    }

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
/// --release -p floodgate-server --test suite -- --ignored --nocapture
/// measure_a_warm`.
#[test]
#[ignore = "a measure, for release builds"]
fn measure_a_warm_request_block() {
    let per_block = |decoder: &mut HpackDecoder, block: &[u8], n: u32| {
        let start = Instant::now();
        for _ in 0..n {
            black_box(decode(decoder, black_box(block)));
        }
        start.elapsed().as_nanos() as f64 / f64::from(n)
    };
    let (mut decoder, steady) = warm(FIRST, STEADY);
    let indexed = per_block(&mut decoder, &steady, 10_000_000);
    let (mut decoder, steady) = warm(FIRST_PATH_UNINDEXED, STEADY_PATH_UNINDEXED);
    let path_literal = per_block(&mut decoder, &steady, 1_000_000);
    // The first block again and again: its six insertions churn the table.
    let first = per_block(&mut HpackDecoder::new(4096), &hex(FIRST), 1_000_000);
    eprintln!(
        "HPACK ns per block: {indexed:.1} warm and indexed, {path_literal:.1} warm with a \
         Huffman-coded :path, {first:.1} as the first"
    );
}
