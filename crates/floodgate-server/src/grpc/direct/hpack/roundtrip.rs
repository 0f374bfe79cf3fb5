//! Random header lists, encoded by a reference encoder (every
//! representation, Huffman-coded or not, table size updates) over blocks
//! sharing one table, decode to themselves, and the decoder's table
//! follows the encoder's.

use proptest::prelude::*;

use super::huffman::tests::encode as huffman;
use super::table::STATIC;
use super::tests::{decode, table};
use super::*;

/// How a field is to be sent.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// By index when the table has it, else as `WithIndexing`.
    Indexed,
    WithIndexing,
    WithoutIndexing,
    NeverIndexed,
}

#[derive(Debug, Clone)]
struct FieldSpec {
    name: Vec<u8>,
    value: Vec<u8>,
    kind: Kind,
    /// Name by index when a table has it.
    name_by_index: bool,
    huffman_name: bool,
    huffman_value: bool,
}

#[derive(Debug, Clone)]
struct BlockSpec {
    updates: Vec<usize>,
    fields: Vec<FieldSpec>,
}

/// The encoder's side: its copy of the dynamic table, newest first.
struct Encoder {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    max_size: usize,
}

impl Encoder {
    fn size(&self) -> usize {
        self.entries
            .iter()
            .map(|(n, v)| n.len() + v.len() + 32)
            .sum()
    }

    fn evict_to(&mut self, size: usize) {
        while self.size() > size {
            self.entries.pop();
        }
    }

    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + 32;
        if size > self.max_size {
            self.entries.clear();
            return;
        }
        self.evict_to(self.max_size - size);
        self.entries.insert(0, (name.to_vec(), value.to_vec()));
    }

    /// The first index (static then dynamic) whose entry `matches`.
    fn find(&self, matches: impl Fn(&[u8], &[u8]) -> bool) -> Option<usize> {
        let statics = STATIC.iter().map(|(n, v)| (*n, *v));
        let dynamics = self.entries.iter().map(|(n, v)| (&n[..], &v[..]));
        statics
            .chain(dynamics)
            .position(|(n, v)| matches(n, v))
            .map(|i| i + 1)
    }

    fn block(&mut self, spec: &BlockSpec) -> Vec<u8> {
        let mut out = Vec::new();
        for &size in &spec.updates {
            integer(&mut out, 0x20, 5, size);
            self.max_size = size;
            self.evict_to(size);
        }
        for field in &spec.fields {
            self.field(&mut out, field);
        }
        out
    }

    fn field(&mut self, out: &mut Vec<u8>, f: &FieldSpec) {
        if let Kind::Indexed = f.kind
            && let Some(index) = self.find(|n, v| n == f.name && v == f.value)
        {
            return integer(out, 0x80, 7, index);
        }
        let (pattern, prefix) = match f.kind {
            Kind::Indexed | Kind::WithIndexing => (0x40, 6),
            Kind::WithoutIndexing => (0x00, 4),
            Kind::NeverIndexed => (0x10, 4),
        };
        match self.find(|n, _| n == f.name).filter(|_| f.name_by_index) {
            Some(index) => integer(out, pattern, prefix, index),
            None => {
                integer(out, pattern, prefix, 0);
                string(out, &f.name, f.huffman_name);
            }
        }
        string(out, &f.value, f.huffman_value);
        if pattern == 0x40 {
            self.insert(&f.name, &f.value);
        }
    }
}

/// An integer with a `prefix`-bit prefix after `pattern` (§5.1).
fn integer(out: &mut Vec<u8>, pattern: u8, prefix: u32, value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        return out.push(pattern | value as u8);
    }
    out.push(pattern | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

fn string(out: &mut Vec<u8>, bytes: &[u8], huffman_coded: bool) {
    if huffman_coded {
        let coded = huffman(bytes);
        integer(out, 0x80, 7, coded.len());
        out.extend_from_slice(&coded);
    } else {
        integer(out, 0x00, 7, bytes.len());
        out.extend_from_slice(bytes);
    }
}

fn text() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Names and values that repeat, some the static table's.
        prop::sample::select(vec![
            &b":path"[..],
            b":method",
            b"POST",
            b"content-type",
            b"application/grpc",
            b"te",
            b"trailers",
            b"x",
            b"",
        ])
        .prop_map(<[u8]>::to_vec),
        prop::collection::vec(any::<u8>(), 0..40),
        prop::collection::vec(any::<u8>(), 100..300),
    ]
}

fn field() -> impl Strategy<Value = FieldSpec> {
    let kind = prop_oneof![
        Just(Kind::Indexed),
        Just(Kind::WithIndexing),
        Just(Kind::WithoutIndexing),
        Just(Kind::NeverIndexed),
    ];
    (text(), text(), kind, any::<[bool; 3]>()).prop_map(|(name, value, kind, flags)| FieldSpec {
        name,
        value,
        kind,
        name_by_index: flags[0],
        huffman_name: flags[1],
        huffman_value: flags[2],
    })
}

fn blocks(largest: usize) -> impl Strategy<Value = Vec<BlockSpec>> {
    let updates = prop::collection::vec(0..=largest, 0..3);
    let updates = prop_oneof![3 => Just(Vec::new()), 1 => updates];
    let block = (updates, prop::collection::vec(field(), 0..12))
        .prop_map(|(updates, fields)| BlockSpec { updates, fields });
    prop::collection::vec(block, 1..12)
}

fn sized_blocks() -> impl Strategy<Value = (usize, Vec<BlockSpec>)> {
    prop::sample::select(vec![0usize, 31, 64, 256, 4096])
        .prop_flat_map(|largest| (Just(largest), blocks(largest)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn encoded_header_lists_decode_to_themselves((largest, blocks) in sized_blocks()) {
        let mut encoder = Encoder { entries: Vec::new(), max_size: largest };
        let mut decoder = Decoder::new(largest);
        for (i, spec) in blocks.iter().enumerate() {
            let block = encoder.block(spec);
            let got = decode(&mut decoder, &block).unwrap();
            let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            let expected: Vec<_> = spec.fields.iter().map(|f| (lossy(&f.name), lossy(&f.value))).collect();
            prop_assert_eq!(got, expected, "fields of block {}", i);
            let entries: Vec<_> = encoder.entries.iter().map(|(n, v)| (lossy(n), lossy(v))).collect();
            prop_assert_eq!(table(&decoder), entries, "table after block {}", i);
            prop_assert_eq!(decoder.table.size(), encoder.size());
        }
    }
}
