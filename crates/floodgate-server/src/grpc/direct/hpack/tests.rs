//! The decoder against RFC 7541's examples (Appendix C) and its errors.

use super::*;

/// The bytes of a hex dump (spaces and newlines ignored).
pub(super) fn hex(dump: &str) -> Vec<u8> {
    let digits: Vec<u8> = dump.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

type Fields = Vec<(String, String)>;

fn fields(list: &[(&str, &str)]) -> Fields {
    list.iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

/// Decodes `block`, returning its fields.
pub(super) fn decode(decoder: &mut Decoder, block: &[u8]) -> Result<Fields, HpackError> {
    let mut out = Vec::new();
    decoder.decode(block, |name, value| {
        out.push((
            String::from_utf8_lossy(name).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        ));
        Ok(())
    })?;
    Ok(out)
}

/// The dynamic table, newest first.
pub(super) fn table(decoder: &Decoder) -> Fields {
    (0..decoder.table.len())
        .map(|i| {
            let (name, value) = decoder.table.get(i).unwrap();
            (
                String::from_utf8_lossy(name).into_owned(),
                String::from_utf8_lossy(value).into_owned(),
            )
        })
        .collect()
}

/// A block of the examples: its hex, the fields, then the table after it
/// and its size.
struct Step<'a> {
    block: &'a str,
    fields: &'a [(&'a str, &'a str)],
    table: &'a [(&'a str, &'a str)],
    size: usize,
}

fn run(table_size: usize, steps: &[Step<'_>]) {
    let mut decoder = Decoder::new(table_size);
    for (i, step) in steps.iter().enumerate() {
        let got = decode(&mut decoder, &hex(step.block)).unwrap();
        assert_eq!(got, fields(step.fields), "fields of block {i}");
        assert_eq!(table(&decoder), fields(step.table), "table after block {i}");
        assert_eq!(
            decoder.table.size(),
            step.size,
            "table size after block {i}"
        );
    }
}

#[test]
fn c_2_1_a_literal_with_indexing() {
    run(
        4096,
        &[Step {
            block: "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
            fields: &[("custom-key", "custom-header")],
            table: &[("custom-key", "custom-header")],
            size: 55,
        }],
    );
}

#[test]
fn c_2_2_a_literal_without_indexing() {
    run(
        4096,
        &[Step {
            block: "040c 2f73 616d 706c 652f 7061 7468",
            fields: &[(":path", "/sample/path")],
            table: &[],
            size: 0,
        }],
    );
}

#[test]
fn c_2_3_a_literal_never_indexed() {
    run(
        4096,
        &[Step {
            block: "1008 7061 7373 776f 7264 0673 6563 7265 74",
            fields: &[("password", "secret")],
            table: &[],
            size: 0,
        }],
    );
}

#[test]
fn c_2_4_an_indexed_field() {
    run(
        4096,
        &[Step {
            block: "82",
            fields: &[(":method", "GET")],
            table: &[],
            size: 0,
        }],
    );
}

const REQUEST_1: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
];
const REQUEST_2: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
    ("cache-control", "no-cache"),
];
const REQUEST_3: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/index.html"),
    (":authority", "www.example.com"),
    ("custom-key", "custom-value"),
];
const REQUEST_TABLE_1: &[(&str, &str)] = &[(":authority", "www.example.com")];
const REQUEST_TABLE_2: &[(&str, &str)] = &[
    ("cache-control", "no-cache"),
    (":authority", "www.example.com"),
];
const REQUEST_TABLE_3: &[(&str, &str)] = &[
    ("custom-key", "custom-value"),
    ("cache-control", "no-cache"),
    (":authority", "www.example.com"),
];

fn requests(blocks: [&str; 3]) -> [Step<'_>; 3] {
    [
        Step {
            block: blocks[0],
            fields: REQUEST_1,
            table: REQUEST_TABLE_1,
            size: 57,
        },
        Step {
            block: blocks[1],
            fields: REQUEST_2,
            table: REQUEST_TABLE_2,
            size: 110,
        },
        Step {
            block: blocks[2],
            fields: REQUEST_3,
            table: REQUEST_TABLE_3,
            size: 164,
        },
    ]
}

#[test]
fn c_3_requests_without_huffman_coding() {
    run(
        4096,
        &requests([
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ]),
    );
}

#[test]
fn c_4_requests_with_huffman_coding() {
    run(
        4096,
        &requests([
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ]),
    );
}

const DATE_1: &str = "Mon, 21 Oct 2013 20:13:21 GMT";
const DATE_2: &str = "Mon, 21 Oct 2013 20:13:22 GMT";
const LOCATION: &str = "https://www.example.com";
const COOKIE: &str = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";

fn responses(blocks: [&str; 3]) -> [Step<'_>; 3] {
    [
        Step {
            block: blocks[0],
            fields: &[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", DATE_1),
                ("location", LOCATION),
            ],
            table: &[
                ("location", LOCATION),
                ("date", DATE_1),
                ("cache-control", "private"),
                (":status", "302"),
            ],
            size: 222,
        },
        Step {
            block: blocks[1],
            fields: &[
                (":status", "307"),
                ("cache-control", "private"),
                ("date", DATE_1),
                ("location", LOCATION),
            ],
            table: &[
                (":status", "307"),
                ("location", LOCATION),
                ("date", DATE_1),
                ("cache-control", "private"),
            ],
            size: 222,
        },
        Step {
            block: blocks[2],
            fields: &[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", DATE_2),
                ("location", LOCATION),
                ("content-encoding", "gzip"),
                ("set-cookie", COOKIE),
            ],
            table: &[
                ("set-cookie", COOKIE),
                ("content-encoding", "gzip"),
                ("date", DATE_2),
            ],
            size: 215,
        },
    ]
}

#[test]
fn c_5_responses_without_huffman_coding_evict() {
    run(
        256,
        &responses([
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
         6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
         54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
         5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
         3d31",
        ]),
    );
}

#[test]
fn c_6_responses_with_huffman_coding_evict() {
    run(
        256,
        &responses([
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
         2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
         77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
         9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ]),
    );
}

fn error_of(table_size: usize, block: &str) -> HpackError {
    decode(&mut Decoder::new(table_size), &hex(block)).unwrap_err()
}

#[test]
fn index_0_is_refused() {
    assert_eq!(error_of(4096, "80"), HpackError::ZeroIndex);
}

#[test]
fn an_index_beyond_the_tables_is_refused() {
    // 62 with an empty dynamic table; then 63 with one entry.
    let expected = HpackError::IndexOutOfRange {
        index: 62,
        entries: 61,
    };
    assert_eq!(error_of(4096, "be"), expected);
    // A literal's name, indexed likewise.
    assert_eq!(error_of(4096, "7e 01 61"), expected);
    let mut decoder = Decoder::new(4096);
    let error = decode(&mut decoder, &hex("4001 6101 62 bf")).unwrap_err();
    assert_eq!(
        error,
        HpackError::IndexOutOfRange {
            index: 63,
            entries: 62
        }
    );
}

#[test]
fn a_size_update_after_a_field_is_refused() {
    assert_eq!(error_of(4096, "82 20"), HpackError::SizeUpdateNotFirst);
}

#[test]
fn a_size_update_above_the_announced_size_is_refused() {
    // 4097: 31 + 4066 (0xe2 0x1f).
    assert_eq!(
        error_of(4096, "3f e2 1f"),
        HpackError::SizeUpdateTooLarge {
            size: 4097,
            largest: 4096
        }
    );
}

#[test]
fn size_updates_at_the_start_evict_and_set_the_size() {
    let mut decoder = Decoder::new(4096);
    decode(&mut decoder, &hex("4001 6101 62 4001 6301 64")).unwrap();
    assert_eq!(table(&decoder).len(), 2);
    // Down to 0 then up to 34: the table empties, then holds one entry.
    let got = decode(&mut decoder, &hex("20 3f 03 4001 6501 66 4001 6701 68")).unwrap();
    assert_eq!(got, fields(&[("e", "f"), ("g", "h")]));
    assert_eq!(table(&decoder), fields(&[("g", "h")]));
    // A block of size updates alone.
    decode(&mut decoder, &hex("20")).unwrap();
    assert_eq!(table(&decoder), []);
}

#[test]
fn an_entry_larger_than_the_table_empties_it_and_is_still_a_field() {
    let mut decoder = Decoder::new(40);
    decode(&mut decoder, &hex("4001 6101 62")).unwrap();
    let got = decode(&mut decoder, &hex("4005 6c6f 6e67 6505 7661 6c75 65")).unwrap();
    assert_eq!(got, fields(&[("longe", "value")]));
    assert_eq!(table(&decoder), []);
}

#[test]
fn a_name_from_the_entry_it_evicts_is_kept() {
    // A table of one entry: `a: b`, then a literal with indexing naming
    // it (index 62), which evicts it to make room.
    let mut decoder = Decoder::new(34);
    decode(&mut decoder, &hex("4001 6101 62")).unwrap();
    let got = decode(&mut decoder, &hex("7e 01 63")).unwrap();
    assert_eq!(got, fields(&[("a", "c")]));
    assert_eq!(table(&decoder), fields(&[("a", "c")]));
}

#[test]
fn truncated_integers_and_strings_are_refused() {
    assert_eq!(error_of(4096, "ff"), HpackError::IntegerTruncated);
    assert_eq!(error_of(4096, "40"), HpackError::IntegerTruncated);
    assert_eq!(
        error_of(4096, "4003 6162"),
        HpackError::StringTruncated { length: 3 }
    );
    assert_eq!(error_of(4096, "4001 61"), HpackError::IntegerTruncated);
    assert_eq!(
        error_of(4096, "ff ff ff ff ff 7f"),
        HpackError::IntegerOverflow
    );
}

#[test]
fn huffman_errors_are_the_blocks() {
    assert_eq!(
        error_of(4096, "0001 61 85 07ff ffff ff"),
        HpackError::HuffmanEos
    );
    assert_eq!(
        error_of(4096, "0082 1fff 00"),
        HpackError::HuffmanPaddingTooLong
    );
    assert_eq!(
        error_of(4096, "0081 18 00"),
        HpackError::HuffmanPaddingNotEos
    );
}

#[test]
fn a_refused_field_stops_the_block() {
    let mut decoder = Decoder::new(4096);
    let mut seen = 0;
    let result = decoder.decode(&hex("8286 84"), |_, _| {
        seen += 1;
        if seen == 2 { Err(()) } else { Ok(()) }
    });
    assert_eq!(result, Err(HpackError::Stopped));
    assert_eq!(seen, 2);
}
