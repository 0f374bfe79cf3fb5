//! A request's descriptors, built into buffers reused from request to
//! request: once they have grown to fit, building allocates nothing.

use std::net::IpAddr;

use floodgate_policy::Descriptor;

/// One descriptor of a request: its entries' keys and values back to back
/// in one string, plus their ranges.
#[derive(Clone, Debug, Default)]
pub struct HttpDescriptor {
    text: String,
    /// (key start, key end = value start, value end).
    entries: Vec<[u32; 3]>,
    hits: Option<u64>,
    /// It carries the cost known after the response.
    after: bool,
}

impl HttpDescriptor {
    /// The entries, in order.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        self.entries.iter().map(|&r| self.pair(r))
    }

    /// The value of the first entry named `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    fn pair(&self, [a, b, c]: [u32; 3]) -> (&str, &str) {
        let text = self.text.as_str();
        (
            text.get(a as usize..b as usize).unwrap_or_default(),
            text.get(b as usize..c as usize).unwrap_or_default(),
        )
    }

    fn clear(&mut self) {
        self.text.clear();
        self.entries.clear();
        self.hits = None;
        self.after = false;
    }

    /// Appends an entry of `key` whose value `value` writes; false when it
    /// writes none (a partial entry is left: discard the descriptor).
    pub(crate) fn entry(&mut self, key: &str, value: impl FnOnce(&mut String) -> bool) -> bool {
        let start = self.text.len();
        self.text.push_str(key);
        let written = value(&mut self.text);
        if written {
            let mid = (start + key.len()) as u32;
            self.entries
                .push([start as u32, mid, self.text.len() as u32]);
        }
        written
    }
}

impl Descriptor for HttpDescriptor {
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn entry(&self, i: usize) -> (&str, &str) {
        self.entries
            .get(i)
            .map_or(("", ""), |&range| self.pair(range))
    }

    fn hits_addend(&self) -> Option<u64> {
        self.hits
    }
}

/// The descriptors of one request, reused across requests.
///
/// [`as_slice`](Self::as_slice) is what the engine evaluates; build with
/// [`HttpIdentity::build`](super::HttpIdentity::build).
#[derive(Clone, Debug, Default)]
pub struct RequestDescriptors {
    slots: Vec<HttpDescriptor>,
    len: usize,
    pub(super) hits: u32,
    pub(super) client: Option<IpAddr>,
}

impl RequestDescriptors {
    /// Empty buffers (they grow on first use).
    pub fn new() -> Self {
        Self::default()
    }

    /// The descriptors built, in configuration order (those whose actions
    /// all produced an entry).
    pub fn as_slice(&self) -> &[HttpDescriptor] {
        self.slots.get(..self.len).unwrap_or_default()
    }

    /// The request's cost: the hits addend to evaluate with (1 without a
    /// cost source).
    pub fn hits_addend(&self) -> u32 {
        self.hits
    }

    /// Sets the hits addend of every descriptor carrying the cost known
    /// after the response to `hits`, and of the others to 0 (nothing
    /// charged): the charge after the response.
    pub(crate) fn charge(&mut self, hits: u64) {
        for slot in self.slots.iter_mut().take(self.len) {
            slot.hits = Some(if slot.after { hits } else { 0 });
        }
    }

    /// Leaves descriptor `i` out of [`charge`](Self::charge).
    pub(crate) fn spare(&mut self, i: usize) {
        if let Some(slot) = self.slots.get_mut(i) {
            slot.after = false;
        }
    }

    /// The client address, when an action needed it (for logs).
    pub fn client_ip(&self) -> Option<IpAddr> {
        self.client
    }

    /// Makes room for `count` descriptors of up to `bytes` bytes and
    /// `entries` entries each, and clears the previous request's.
    pub(crate) fn prepare(&mut self, count: usize, bytes: usize, entries: usize) {
        while self.slots.len() < count {
            self.slots.push(HttpDescriptor::default());
        }
        for slot in &mut self.slots[..count] {
            slot.clear();
            slot.text.reserve(bytes);
            slot.entries.reserve(entries);
        }
        self.len = 0;
        self.hits = 1;
        self.client = None;
    }

    /// Builds the next descriptor with `build` (after
    /// [`prepare`](Self::prepare)), keeping it when `build` returns true,
    /// with the hits addend `hits`, carrying the cost known after the
    /// response if `after`.
    pub(crate) fn push(
        &mut self,
        hits: Option<u64>,
        after: bool,
        build: impl FnOnce(&mut HttpDescriptor) -> bool,
    ) {
        let Some(slot) = self.slots.get_mut(self.len) else {
            return;
        };
        if build(slot) {
            slot.hits = hits;
            slot.after = after;
            self.len += 1;
        } else {
            slot.clear();
        }
    }
}

impl std::ops::Deref for RequestDescriptors {
    type Target = [HttpDescriptor];

    fn deref(&self) -> &[HttpDescriptor] {
        self.as_slice()
    }
}
