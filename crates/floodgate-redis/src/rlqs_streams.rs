//! The streams of a quota service (RLQS) sharing one bucket, counted over
//! every instance on this Redis: each bucket's sorted set of stream ids,
//! scored by their last report, trimmed by the assignments' time to live
//! (see `lua/rlqs_streams.lua`). A bucket's set lives in its own hash slot
//! (the tag is the bucket's hash), so buckets spread over a cluster.

use std::sync::LazyLock;
use std::time::Duration;

use floodgate::Timestamp;
use floodgate_policy::BackendError;
use redis::Value;

use crate::RedisBackend;
use crate::script::Script;

/// The script counting a bucket's streams.
static STREAMS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/rlqs_streams.lua")));

/// The name under a bucket's hash tag of its set of streams.
const NAME: &[u8] = b"rlqs.streams";

impl RedisBackend {
    /// Records that `stream` (an id unique over the fleet) reported
    /// `bucket` at `now`; answers how many streams, over every instance,
    /// reported it within `ttl` (this one included).
    pub async fn rlqs_report(
        &self,
        bucket: &[u8],
        stream: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<u64, BackendError> {
        self.rlqs_streams(bucket, stream, ttl, now, "1").await
    }

    /// How many streams, over every instance, reported `bucket` within
    /// `ttl` (recording nothing).
    pub async fn rlqs_count(
        &self,
        bucket: &[u8],
        ttl: Duration,
        now: Timestamp,
    ) -> Result<u64, BackendError> {
        self.rlqs_streams(bucket, "", ttl, now, "").await
    }

    /// Removes `stream` from `bucket`'s streams (it ended, or abandoned
    /// the bucket); answers how many remain.
    pub async fn rlqs_leave(
        &self,
        bucket: &[u8],
        stream: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<u64, BackendError> {
        self.rlqs_streams(bucket, stream, ttl, now, "0").await
    }

    async fn rlqs_streams(
        &self,
        bucket: &[u8],
        stream: &str,
        ttl: Duration,
        now: Timestamp,
        what: &str,
    ) -> Result<u64, BackendError> {
        let key = self.layout().key(bucket, NAME);
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut call = STREAMS.call(1);
        call.arg(&key.name)
            .arg(self.now_arg(now))
            .arg(ttl_ms)
            .arg(stream)
            .arg(what);
        match self.run_script(&STREAMS, &call).await? {
            Value::Int(n) => Ok(u64::try_from(n).unwrap_or(0)),
            other => Err(BackendError::Protocol(format!(
                "the RLQS streams script answered {other:?}"
            ))),
        }
    }
}
