//! Counter keys: the rule's fingerprint and the descriptor's entries (the
//! pattern instead of the value for shared wildcard thresholds), each field
//! length-prefixed so distinct descriptors never produce equal keys; one
//! byte more names the limit within the rule.

use crate::compile::{Path, Tree};

use super::request::Descriptor;

fn field(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

/// Appends a rule's group key; returns its byte range.
pub(crate) fn group<D: Descriptor>(
    buf: &mut Vec<u8>,
    fingerprint: u64,
    d: &D,
    path: &Path,
    tree: &Tree,
) -> (u32, u32) {
    let start = buf.len();
    buf.extend_from_slice(&fingerprint.to_le_bytes());
    for j in 0..d.len() {
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
