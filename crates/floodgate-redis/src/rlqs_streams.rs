//! The streams of a quota service (RLQS) sharing one bucket, counted over
//! every instance on this Redis: each bucket's sorted set of stream ids,
//! scored by their last report, and a hash of their use as of that
//! report, trimmed by the assignments' time to live (see
//! `lua/rlqs_streams.lua`). A bucket's keys live in its own hash slot (the
//! tag is the bucket's hash), so buckets spread over a cluster.

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

/// The names under a bucket's hash tag of its set of streams and of their
/// use.
const NAMES: [&[u8]; 2] = [b"rlqs.streams", b"rlqs.usage"];

/// What a call does to the calling stream.
enum Call<'a> {
    /// It reports, with this use.
    Report(&'a str, Option<u64>),
    /// It leaves.
    Leave(&'a str),
    /// Nothing: the streams are only read.
    Read,
}

impl RedisBackend {
    /// Records that `stream` (an id unique over the fleet) reported
    /// `bucket` at `now`, having used `usage` (any measure the caller
    /// chooses; `None`: unknown); answers the use of each stream, over
    /// every instance, that reported it within `ttl` (this one included).
    pub async fn rlqs_report(
        &self,
        bucket: &[u8],
        (stream, usage): (&str, Option<u64>),
        ttl: Duration,
        now: Timestamp,
    ) -> Result<Vec<Option<u64>>, BackendError> {
        self.rlqs_streams(bucket, Call::Report(stream, usage), ttl, now)
            .await
    }

    /// The use of each stream, over every instance, that reported `bucket`
    /// within `ttl` (recording nothing).
    pub async fn rlqs_streams_of(
        &self,
        bucket: &[u8],
        ttl: Duration,
        now: Timestamp,
    ) -> Result<Vec<Option<u64>>, BackendError> {
        self.rlqs_streams(bucket, Call::Read, ttl, now).await
    }

    /// Removes `stream` from `bucket`'s streams (it ended, or abandoned
    /// the bucket).
    pub async fn rlqs_leave(
        &self,
        bucket: &[u8],
        stream: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<(), BackendError> {
        self.rlqs_streams(bucket, Call::Leave(stream), ttl, now)
            .await
            .map(drop)
    }

    async fn rlqs_streams(
        &self,
        bucket: &[u8],
        what: Call<'_>,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<Vec<Option<u64>>, BackendError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let (stream, op, usage) = match what {
            Call::Report(s, u) => (s, "1", u.map(|u| u.to_string()).unwrap_or_default()),
            Call::Leave(s) => (s, "0", String::new()),
            Call::Read => ("", "", String::new()),
        };
        let mut call = STREAMS.call(2);
        for name in NAMES {
            call.arg(&self.layout().key(bucket, name).name);
        }
        call.arg(self.now_arg(now))
            .arg(ttl_ms)
            .arg(stream)
            .arg(op)
            .arg(usage);
        usages(self.run_script(&STREAMS, &call).await?)
    }
}

/// The script's reply: each stream's use.
fn usages(reply: Value) -> Result<Vec<Option<u64>>, BackendError> {
    let bad = |v: &Value| BackendError::Protocol(format!("the RLQS streams script answered {v:?}"));
    let Value::Array(items) = &reply else {
        return Err(bad(&reply));
    };
    (items.iter())
        .map(|item| match item {
            Value::BulkString(b) if b.is_empty() => Ok(None),
            Value::BulkString(b) => (std::str::from_utf8(b).ok())
                .and_then(|s| s.parse().ok())
                .map(Some)
                .ok_or_else(|| bad(item)),
            other => Err(bad(other)),
        })
        .collect()
}
