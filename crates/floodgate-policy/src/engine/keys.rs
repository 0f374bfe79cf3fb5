//! Counter keys: the rule's fingerprint and the descriptor's entries (the
//! pattern instead of the value for shared wildcard thresholds), each field
//! length-prefixed so distinct descriptors never produce equal keys; one
//! byte more names the limit within the rule.

use floodgate::algorithms::ANONYMOUS;

use crate::compile::{Path, Tree};

use super::request::Descriptor;

fn field(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

/// How many of `d`'s entries name its counters, and who holds the units
/// it takes: with `holder` (a rule's `holder: true`), its last entry names
/// the holder (a stable hash of its value, the same in every process, never
/// [`ANONYMOUS`]) and is left out of the counters; otherwise all entries
/// count and the holder is [`ANONYMOUS`].
pub(crate) fn holder<D: Descriptor>(holder: bool, d: &D) -> (usize, u64) {
    match d.len().checked_sub(1).filter(|_| holder) {
        Some(last) => {
            let mut h = crate::compile::StableHasher::default();
            h.field(b"holder").field(d.entry(last).1.as_bytes());
            (last, h.finish().max(1))
        }
        None => (d.len(), ANONYMOUS),
    }
}

/// Appends a rule's group key, of the first `n` entries of `d`; returns
/// its byte range.
pub(crate) fn group<D: Descriptor>(
    buf: &mut Vec<u8>,
    fingerprint: u64,
    (d, n): (&D, usize),
    path: &Path,
    tree: &Tree,
) -> (u32, u32) {
    let start = buf.len();
    buf.extend_from_slice(&fingerprint.to_le_bytes());
    for j in 0..n {
        let (k, v) = d.entry(j);
        field(buf, k.as_bytes());
        let shared = path
            .get(j)
            .and_then(|&id| tree.node(id).shared_pattern.as_deref());
        field(buf, shared.unwrap_or(v).as_bytes());
    }
    (start as u32, buf.len() as u32)
}

/// Appends a group key for a descriptor without a tree path (overrides).
pub(crate) fn group_plain<D: Descriptor>(buf: &mut Vec<u8>, fingerprint: u64, d: &D) -> (u32, u32) {
    let start = buf.len();
    buf.extend_from_slice(&fingerprint.to_le_bytes());
    for j in 0..d.len() {
        let (k, v) = d.entry(j);
        field(buf, k.as_bytes());
        field(buf, v.as_bytes());
    }
    (start as u32, buf.len() as u32)
}

/// Appends the key of limit `index` of the group at `range`; returns its
/// range. The group itself is the key minus its last byte.
pub(crate) fn member(buf: &mut Vec<u8>, range: (u32, u32), index: u8) -> (u32, u32) {
    let start = buf.len();
    buf.extend_from_within(range.0 as usize..range.1 as usize);
    buf.push(index);
    (start as u32, buf.len() as u32)
}
