//! Borrowed lookups, owned keys: a store looks keys up by reference and
//! allocates an owned key only when it inserts a new one.

use std::sync::Arc;

/// Makes the owned key `K` from a borrowed form (only when a key is first
/// stored). Implemented for every `Clone` type (`K` from `&K`) and for the
/// usual string and byte forms.
pub trait ToKey<K> {
    /// The owned key.
    fn to_key(&self) -> K;
}

impl<T: Clone> ToKey<T> for T {
    fn to_key(&self) -> T {
        self.clone()
    }
}

impl ToKey<String> for str {
    fn to_key(&self) -> String {
        self.to_owned()
    }
}

impl ToKey<Box<str>> for str {
    fn to_key(&self) -> Box<str> {
        self.into()
    }
}

impl ToKey<Arc<str>> for str {
    fn to_key(&self) -> Arc<str> {
        self.into()
    }
}

impl ToKey<Vec<u8>> for [u8] {
    fn to_key(&self) -> Vec<u8> {
        self.to_vec()
    }
}

impl ToKey<Box<[u8]>> for [u8] {
    fn to_key(&self) -> Box<[u8]> {
        self.into()
    }
}

impl ToKey<Arc<[u8]>> for [u8] {
    fn to_key(&self) -> Arc<[u8]> {
        self.into()
    }
}
