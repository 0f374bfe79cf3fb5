//! Which streams report each bucket, shared by every stream: a bucket's
//! share of its rule's limit is the limit divided by the streams that
//! reported it within the assignments' time to live. Bounded: at most
//! `max_buckets` buckets at once, a new one refused beyond.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::mapping::BucketKey;

/// The streams reporting each bucket, and when each last did.
#[derive(Debug)]
pub(crate) struct Shares {
    buckets: Mutex<HashMap<BucketKey, HashMap<u64, Instant>>>,
    max_buckets: usize,
}

/// Every place for a new bucket is taken.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Full;

impl Shares {
    /// Room for `max_buckets` buckets over every stream.
    pub(crate) fn new(max_buckets: usize) -> Self {
        Shares {
            buckets: Mutex::new(HashMap::new()),
            max_buckets,
        }
    }

    /// Records that `stream` reported `key` at `now`; the streams that
    /// reported it since `now - recent` (this one included).
    pub(crate) fn report(
        &self,
        key: &BucketKey,
        stream: u64,
        now: Instant,
        recent: Duration,
    ) -> Result<usize, Full> {
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !buckets.contains_key(key) && buckets.len() >= self.max_buckets {
            return Err(Full);
        }
        let streams = buckets.entry(key.clone()).or_default();
        streams.insert(stream, now);
        streams.retain(|_, at| now.saturating_duration_since(*at) <= recent);
        Ok(streams.len())
    }

    /// Forgets `stream`'s reports of `keys` (it ended, or abandoned them);
    /// a bucket nobody reports any more is dropped.
    pub(crate) fn leave<'a>(&self, keys: impl IntoIterator<Item = &'a BucketKey>, stream: u64) {
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for key in keys {
            if let Some(streams) = buckets.get_mut(key) {
                streams.remove(&stream);
                if streams.is_empty() {
                    buckets.remove(key);
                }
            }
        }
    }

    /// Buckets held.
    pub(crate) fn len(&self) -> usize {
        self.buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(v: &str) -> BucketKey {
        BucketKey {
            domain: "api".into(),
            entries: vec![("user".into(), v.into())],
        }
    }

    #[test]
    fn streams_count_while_recent_and_leave_cleanly() {
        let shares = Shares::new(10);
        let (t0, ttl) = (Instant::now(), Duration::from_secs(2));
        assert_eq!(shares.report(&key("a"), 1, t0, ttl), Ok(1));
        assert_eq!(shares.report(&key("a"), 2, t0, ttl), Ok(2));
        // Stream 1 fell silent for longer than the time to live.
        let later = t0 + Duration::from_secs(3);
        assert_eq!(shares.report(&key("a"), 2, later, ttl), Ok(1));
        shares.leave([&key("a")], 2);
        assert_eq!(shares.len(), 0);
    }

    #[test]
    fn a_new_bucket_beyond_the_bound_is_refused() {
        let shares = Shares::new(1);
        let (now, ttl) = (Instant::now(), Duration::from_secs(2));
        assert_eq!(shares.report(&key("a"), 1, now, ttl), Ok(1));
        assert_eq!(shares.report(&key("b"), 1, now, ttl), Err(Full));
        assert_eq!(shares.report(&key("a"), 2, now, ttl), Ok(2));
    }
}
