//! From a usage report to the policy's terms: a bucket of a domain is a
//! descriptor of that domain, its key/values the descriptor's entries in
//! key order (`{k: v}` is `[(k, v)]`), so the rules that serve RLS serve
//! RLQS unchanged. A report's counts are checked before they are charged.

use floodgate_policy::OwnedDescriptor;
use tonic::Status;

use crate::proto::rlqs::BucketId;

/// Most requests one report may say a bucket allowed: an RLS call's
/// largest `hits_addend`. More (or a negative count sent as a huge
/// `uint64`) ends the stream with `INVALID_ARGUMENT`.
pub(crate) const MAX_REPORTED: u64 = u32::MAX as u64;

/// A bucket of a domain, as the stream and the shares know it: the domain
/// and the bucket's entries in key order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BucketKey {
    /// The stream's domain.
    pub(crate) domain: String,
    /// The bucket's key/values, sorted by key.
    pub(crate) entries: Vec<(String, String)>,
}

impl BucketKey {
    /// The key of `bucket` in `domain`; an empty bucket, or an empty key or
    /// value, is refused.
    pub(crate) fn of(domain: &str, bucket: &BucketId) -> Result<BucketKey, Status> {
        if bucket.bucket.is_empty() {
            return Err(Status::invalid_argument("a bucket id has no key/values"));
        }
        let mut entries: Vec<(String, String)> = bucket
            .bucket
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if entries.iter().any(|(k, v)| k.is_empty() || v.is_empty()) {
            return Err(Status::invalid_argument(
                "a bucket id has an empty key or value",
            ));
        }
        entries.sort_unstable();
        Ok(BucketKey {
            domain: domain.to_owned(),
            entries,
        })
    }

    /// The descriptor the bucket is, charged `hits`.
    pub(crate) fn descriptor(&self, hits: u64) -> OwnedDescriptor {
        OwnedDescriptor::new(self.entries.iter().cloned()).hits(hits)
    }

    /// The bucket as bytes, unique per domain and key/values (Redis's name
    /// for it): each part preceded by its length, so no two differ only
    /// in where one part ends.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let parts = std::iter::once(self.domain.as_str()).chain(
            self.entries
                .iter()
                .flat_map(|(k, v)| [k.as_str(), v.as_str()]),
        );
        let mut out = Vec::new();
        for part in parts {
            out.extend_from_slice(part.len().to_string().as_bytes());
            out.push(b':');
            out.extend_from_slice(part.as_bytes());
        }
        out
    }

    /// The bucket id it came from (for the answer).
    pub(crate) fn bucket_id(&self) -> BucketId {
        BucketId {
            bucket: self.entries.iter().cloned().collect(),
        }
    }
}

/// The requests a report says were allowed, refused beyond
/// [`MAX_REPORTED`].
pub(crate) fn allowed(reported: u64) -> Result<u64, Status> {
    if reported > MAX_REPORTED {
        return Err(Status::invalid_argument(format!(
            "a usage report says {reported} requests were allowed, more than the {MAX_REPORTED} one report may carry (a negative count?)"
        )));
    }
    Ok(reported)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(pairs: &[(&str, &str)]) -> BucketId {
        BucketId {
            bucket: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn entries_are_in_key_order_whatever_the_map_order() {
        let key = BucketKey::of("api", &bucket(&[("z", "1"), ("a", "2")])).unwrap();
        let pairs = [("a", "2"), ("z", "1")].map(|(k, v)| (k.to_owned(), v.to_owned()));
        assert_eq!(key.entries, pairs);
        assert_eq!(key.descriptor(3).hits_addend, Some(3));
    }

    #[test]
    fn bucket_bytes_tell_where_each_part_ends() {
        let one = BucketKey::of("api", &bucket(&[("a", "bc")])).unwrap();
        let two = BucketKey::of("api", &bucket(&[("ab", "c")])).unwrap();
        let other = BucketKey::of("ap", &bucket(&[("ia", "bc")])).unwrap();
        assert_eq!(one.bytes(), b"3:api1:a2:bc");
        assert_ne!(one.bytes(), two.bytes());
        assert_ne!(one.bytes(), other.bytes());
    }

    #[test]
    fn empty_buckets_keys_and_values_are_refused() {
        for b in [bucket(&[]), bucket(&[("", "v")]), bucket(&[("k", "")])] {
            let e = BucketKey::of("api", &b).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
        }
    }

    #[test]
    fn counts_beyond_one_report_are_refused() {
        assert_eq!(allowed(MAX_REPORTED).unwrap(), MAX_REPORTED);
        for huge in [MAX_REPORTED + 1, u64::MAX, (-1i64) as u64] {
            assert_eq!(
                allowed(huge).unwrap_err().code(),
                tonic::Code::InvalidArgument
            );
        }
    }
}
