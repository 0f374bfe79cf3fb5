//! How many streams share a bucket: in memory, those of this instance
//! ([`Shares`](super::shares::Shares)); on Redis, those of every instance
//! on it (`RedisBackend::rlqs_report`), so that a bucket reported by two
//! instances gets half its limit on each. When Redis cannot count them,
//! the store's failure policy chooses the assignment: fail open allows
//! all, fail closed denies all, the local fallback shares the limit
//! divided by its `divide_by` among this instance's streams.

use std::time::Duration;

use floodgate::{Clock, SystemClock};
use floodgate_redis::{BreakerState, FailurePolicy, ResilientBackend};
use floodgate_runtime::host::AnyBackend;

use super::assignment::Kind;
use super::mapping::BucketKey;
use super::weights::Peers;

/// A bucket's streams, or the blanket assignment the failure policy
/// chooses when they cannot be counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// The streams sharing its limit.
    Streams(Peers),
    /// `AllowAll` or `DenyAll`, by the failure policy.
    Blanket(Kind),
}

/// This instance's part of the fleet's count: its streams' ids are
/// `<instance>-<stream>`, unique over every instance.
#[derive(Debug)]
pub(crate) struct Fleet {
    instance: u64,
}

impl Fleet {
    /// A random id for this instance.
    pub(crate) fn new() -> Self {
        use std::hash::{BuildHasher, RandomState};
        let instance =
            RandomState::new().hash_one((std::process::id(), std::time::SystemTime::now()));
        Fleet { instance }
    }

    /// Records that `stream` reported `key` with its use (`None`: records
    /// nothing), seen by `local` streams of this instance (their use): the
    /// streams that share it, and whether they were counted (false: Redis
    /// could not, the failure policy chose).
    pub(crate) async fn report(
        &self,
        backend: &AnyBackend,
        key: &BucketKey,
        stream: Option<(u64, Option<u64>)>,
        local: Vec<Option<u64>>,
        ttl: Duration,
    ) -> (Sharing, bool) {
        let AnyBackend::Redis(redis) = backend else {
            return (
                Sharing::Streams(Peers {
                    usages: local,
                    times: 1,
                }),
                true,
            );
        };
        let counted = if redis.breaker_state() == BreakerState::Open {
            None
        } else if let Some((stream, usage)) = stream {
            let id = self.stream_id(stream);
            let now = SystemClock.now();
            let mine = (id.as_str(), usage);
            (redis
                .redis()
                .rlqs_report(&key.bytes(), mine, ttl, now)
                .await)
                .ok()
        } else {
            let now = SystemClock.now();
            (redis.redis().rlqs_streams_of(&key.bytes(), ttl, now).await).ok()
        };
        match counted {
            Some(usages) => (Sharing::Streams(Peers { usages, times: 1 }), true),
            None => (failure_policy(redis, local), false),
        }
    }

    /// Removes `stream` from the fleet's count of each of `keys` (best
    /// effort: a set Redis cannot reach trims it after the time to live).
    pub(crate) async fn leave<'a>(
        &self,
        backend: &AnyBackend,
        keys: impl IntoIterator<Item = &'a BucketKey>,
        stream: u64,
        ttl: Duration,
    ) {
        let AnyBackend::Redis(redis) = backend else {
            return;
        };
        let id = self.stream_id(stream);
        for key in keys {
            let now = SystemClock.now();
            if (redis.redis().rlqs_leave(&key.bytes(), &id, ttl, now).await).is_err() {
                return;
            }
        }
    }

    fn stream_id(&self, stream: u64) -> String {
        format!("{:016x}-{stream}", self.instance)
    }
}

/// The assignment the failure policy chooses for a bucket Redis could not
/// count, seen by `local` streams of this instance (their use).
fn failure_policy(redis: &ResilientBackend, local: Vec<Option<u64>>) -> Sharing {
    match redis.failure_policy() {
        FailurePolicy::FailOpen => Sharing::Blanket(Kind::AllowAll),
        FailurePolicy::FailClosed => Sharing::Blanket(Kind::DenyAll),
        FailurePolicy::Local { divide_by } => Sharing::Streams(Peers {
            usages: local,
            times: u64::from(divide_by.max(1)),
        }),
    }
}
