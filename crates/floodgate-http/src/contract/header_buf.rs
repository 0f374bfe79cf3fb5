//! [`HeaderBuf`]: reusable buffers for writing header values without an
//! allocation per value. A value is rendered into a reused string, then
//! copied into one shared byte buffer and split off it: every value of a
//! response shares that buffer, which is reclaimed in place once they are
//! all dropped (after the response is written).

use bytes::BytesMut;
use http::HeaderValue;

/// Bytes reserved at a time for values.
const CHUNK: usize = 4096;

/// Reusable buffers for header values (see the module docs). Keep one per
/// request in flight (a pool of them), not one per process: values split
/// off it stay alive until their response is written.
#[derive(Debug, Default)]
pub struct HeaderBuf {
    text: String,
    bytes: BytesMut,
}

impl HeaderBuf {
    /// Empty buffers (nothing is allocated until the first value).
    pub fn new() -> Self {
        Self::default()
    }

    /// The text buffer values are rendered into (also usable as scratch
    /// space for a problem body).
    pub fn text(&mut self) -> &mut String {
        &mut self.text
    }

    /// The rendered text as a header value (none if it holds bytes a field
    /// value cannot), split off the shared byte buffer.
    pub fn value(&mut self) -> Option<HeaderValue> {
        let n = self.text.len();
        if self.bytes.capacity() < n {
            self.bytes.reserve(n.max(CHUNK));
        }
        self.bytes.extend_from_slice(self.text.as_bytes());
        HeaderValue::from_maybe_shared(self.bytes.split().freeze()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_split_off_one_buffer() {
        let mut b = HeaderBuf::new();
        b.text().push_str("\"a\";r=1;t=2");
        let one = b.value().unwrap();
        b.text().clear();
        b.text().push_str("second");
        let two = b.value().unwrap();
        assert_eq!(one, "\"a\";r=1;t=2");
        assert_eq!(two, "second");
        b.text().clear();
        b.text().push_str("bad\nvalue");
        assert!(b.value().is_none());
        // Longer than a chunk.
        b.text().clear();
        b.text().push_str(&"x".repeat(3 * CHUNK));
        assert_eq!(b.value().unwrap().len(), 3 * CHUNK);
    }
}
