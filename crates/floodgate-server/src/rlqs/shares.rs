//! Which streams report each bucket, shared by every stream: a bucket's
//! share of its rule's limit is the limit divided by the streams that
//! reported it within the assignments' time to live. When that set
//! changes (a stream joins, leaves, or falls silent past the time to
//! live) the other streams of the bucket are nudged, so they push the
//! bucket's new assignment without waiting for their next report.
//! Bounded: at most `max_buckets` buckets at once, a new one refused
//! beyond; a nudge that finds its stream's queue full is dropped.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::assignment::Kind;
use super::mapping::BucketKey;

/// Where a stream is told that one of its buckets' streams changed.
pub(crate) type Nudge = mpsc::Sender<BucketKey>;

/// A stream reporting a bucket: when it last did, its use then (see
/// [`weights`](super::weights)), its nudges, and its last assignment (for
/// the dashboard).
#[derive(Debug)]
struct Member {
    at: Instant,
    usage: Option<u64>,
    nudge: Nudge,
    last: Option<Assigned>,
}

/// An assignment sent: when, its kind, and its terms in words.
#[derive(Clone, Debug)]
pub(crate) struct Assigned {
    pub(crate) at: Instant,
    pub(crate) kind: Kind,
    pub(crate) terms: String,
}

/// A bucket as the dashboard lists it.
#[derive(Debug)]
pub(crate) struct BucketView {
    pub(crate) key: BucketKey,
    /// Each stream's use and last assignment.
    pub(crate) streams: Vec<(Option<u64>, Option<Assigned>)>,
}

/// The streams reporting each bucket, and when each last did.
#[derive(Debug)]
pub(crate) struct Shares {
    buckets: Mutex<HashMap<BucketKey, HashMap<u64, Member>>>,
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

    fn lock(&self) -> MutexGuard<'_, HashMap<BucketKey, HashMap<u64, Member>>> {
        self.buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that `stream` (nudged through `nudge`) reported `key` at
    /// `now`, having used `usage`; the use of each stream that reported it
    /// since `now - recent` (this one included). The others are nudged if
    /// the set changed.
    pub(crate) fn report(
        &self,
        key: &BucketKey,
        (stream, usage): (u64, Option<u64>),
        nudge: &Nudge,
        now: Instant,
        recent: Duration,
    ) -> Result<Vec<Option<u64>>, Full> {
        let mut buckets = self.lock();
        if !buckets.contains_key(key) && buckets.len() >= self.max_buckets {
            return Err(Full);
        }
        let streams = buckets.entry(key.clone()).or_default();
        let before = streams.len();
        let joined = match streams.get_mut(&stream) {
            Some(member) => {
                (member.at, member.usage) = (now, usage);
                false
            }
            None => {
                let nudge = nudge.clone();
                let last = None;
                streams.insert(
                    stream,
                    Member {
                        at: now,
                        usage,
                        nudge,
                        last,
                    },
                );
                true
            }
        };
        streams.retain(|_, m| now.saturating_duration_since(m.at) <= recent);
        if joined || streams.len() != before {
            nudge_others(key, streams, stream);
        }
        Ok(streams.values().map(|m| m.usage).collect())
    }

    /// The use of each stream that reported `key` since `now - recent`.
    pub(crate) fn usages(
        &self,
        key: &BucketKey,
        now: Instant,
        recent: Duration,
    ) -> Vec<Option<u64>> {
        (self.lock().get(key)).map_or_else(Vec::new, |streams| {
            (streams.values())
                .filter(|m| now.saturating_duration_since(m.at) <= recent)
                .map(|m| m.usage)
                .collect()
        })
    }

    /// Forgets the streams of `keys` silent since before `now - recent`,
    /// nudging the others of each bucket that lost one (`stream`, which
    /// asks, included: it pushes the bucket's new assignment too).
    pub(crate) fn expire<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a BucketKey>,
        now: Instant,
        recent: Duration,
    ) {
        let mut buckets = self.lock();
        for key in keys {
            if let Some(streams) = buckets.get_mut(key) {
                let before = streams.len();
                streams.retain(|_, m| now.saturating_duration_since(m.at) <= recent);
                if streams.len() != before {
                    nudge_others(key, streams, u64::MAX);
                }
            }
        }
    }

    /// Forgets `stream`'s reports of `keys` (it ended, or abandoned them),
    /// nudging the others; a bucket nobody reports any more is dropped.
    pub(crate) fn leave<'a>(&self, keys: impl IntoIterator<Item = &'a BucketKey>, stream: u64) {
        let mut buckets = self.lock();
        for key in keys {
            if let Some(streams) = buckets.get_mut(key) {
                if streams.remove(&stream).is_some() {
                    nudge_others(key, streams, stream);
                }
                if streams.is_empty() {
                    buckets.remove(key);
                }
            }
        }
    }

    /// Records the assignment `stream` was sent for `key`.
    pub(crate) fn assigned(&self, key: &BucketKey, stream: u64, assigned: Assigned) {
        if let Some(member) = self.lock().get_mut(key).and_then(|s| s.get_mut(&stream)) {
            member.last = Some(assigned);
        }
    }

    /// The `n` buckets with the most streams (then the most recent
    /// assignment), for the dashboard.
    pub(crate) fn top(&self, n: usize) -> Vec<BucketView> {
        let buckets = self.lock();
        let latest = |streams: &HashMap<u64, Member>| {
            streams
                .values()
                .filter_map(|m| m.last.as_ref().map(|l| l.at))
                .max()
        };
        let rank = |(_, streams): &(&BucketKey, &HashMap<u64, Member>)| {
            std::cmp::Reverse((streams.len(), latest(streams)))
        };
        let mut ranked: Vec<_> = buckets.iter().collect();
        // The first n in linear time, then only they are sorted.
        if n > 0 && ranked.len() > n {
            ranked.select_nth_unstable_by_key(n, rank);
            ranked.truncate(n);
        }
        ranked.sort_by_key(rank);
        (ranked.into_iter().take(n))
            .map(|(key, streams)| BucketView {
                key: key.clone(),
                streams: streams
                    .values()
                    .map(|m| (m.usage, m.last.clone()))
                    .collect(),
            })
            .collect()
    }

    /// Buckets held.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Tells every stream of `streams` but `except` that `key`'s streams
/// changed (dropped when its queue is full: its next report answers).
fn nudge_others(key: &BucketKey, streams: &HashMap<u64, Member>, except: u64) {
    for (_, member) in streams.iter().filter(|(id, _)| **id != except) {
        let _ = member.nudge.try_send(key.clone());
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

    fn nudges() -> (Nudge, mpsc::Receiver<BucketKey>) {
        mpsc::channel(4)
    }

    #[test]
    fn streams_count_while_recent_and_leave_cleanly() {
        let shares = Shares::new(10);
        let ((n1, _r1), (n2, _r2)) = (nudges(), nudges());
        let (t0, ttl) = (Instant::now(), Duration::from_secs(2));
        assert_eq!(
            shares
                .report(&key("a"), (1, None), &n1, t0, ttl)
                .map(|u| u.len()),
            Ok(1)
        );
        assert_eq!(
            shares
                .report(&key("a"), (2, None), &n2, t0, ttl)
                .map(|u| u.len()),
            Ok(2)
        );
        assert_eq!(shares.usages(&key("a"), t0, ttl).len(), 2);
        // Stream 1 fell silent for longer than the time to live.
        let later = t0 + Duration::from_secs(3);
        assert_eq!(shares.usages(&key("a"), later, ttl).len(), 0);
        assert_eq!(
            shares
                .report(&key("a"), (2, None), &n2, later, ttl)
                .map(|u| u.len()),
            Ok(1)
        );
        shares.leave([&key("a")], 2);
        assert_eq!(shares.len(), 0);
    }

    #[test]
    fn a_new_bucket_beyond_the_bound_is_refused() {
        let shares = Shares::new(1);
        let (n, _r) = nudges();
        let (now, ttl) = (Instant::now(), Duration::from_secs(2));
        assert_eq!(
            shares
                .report(&key("a"), (1, None), &n, now, ttl)
                .map(|u| u.len()),
            Ok(1)
        );
        assert_eq!(shares.report(&key("b"), (1, None), &n, now, ttl), Err(Full));
        assert_eq!(
            shares
                .report(&key("a"), (2, None), &n, now, ttl)
                .map(|u| u.len()),
            Ok(2)
        );
    }

    #[test]
    fn the_others_are_nudged_when_a_stream_joins_leaves_or_falls_silent() {
        let shares = Shares::new(10);
        let ((n1, mut r1), (n2, mut r2)) = (nudges(), nudges());
        let (t0, ttl) = (Instant::now(), Duration::from_secs(2));
        shares.report(&key("a"), (1, None), &n1, t0, ttl).unwrap();
        assert!(r1.try_recv().is_err(), "alone: nobody to nudge");
        shares.report(&key("a"), (2, None), &n2, t0, ttl).unwrap();
        assert_eq!(r1.try_recv().unwrap(), key("a"));
        assert!(r2.try_recv().is_err(), "the joiner has its answer");
        // Reporting again changes nothing.
        shares.report(&key("a"), (1, None), &n1, t0, ttl).unwrap();
        assert!(r1.try_recv().is_err() && r2.try_recv().is_err());
        // Stream 2 falls silent: stream 1 learns it when it looks.
        shares
            .report(&key("a"), (1, None), &n1, t0 + ttl, ttl)
            .unwrap();
        shares.expire([&key("a")], t0 + ttl + Duration::from_millis(1), ttl);
        assert_eq!(r1.try_recv().unwrap(), key("a"));
        shares
            .report(&key("a"), (2, None), &n2, t0 + ttl, ttl)
            .unwrap();
        let _ = r1.try_recv();
        shares.leave([&key("a")], 2);
        assert_eq!(r1.try_recv().unwrap(), key("a"));
    }

    #[test]
    fn the_top_buckets_are_those_with_the_most_streams() {
        let shares = Shares::new(10);
        let (n, _r) = nudges();
        let (now, ttl) = (Instant::now(), Duration::from_secs(2));
        for (bucket, streams) in [("a", 1), ("b", 3), ("c", 2)] {
            for s in 0..streams {
                shares
                    .report(&key(bucket), (s, Some(1000)), &n, now, ttl)
                    .unwrap();
            }
        }
        let top: Vec<_> = (shares.top(2).into_iter())
            .map(|v| (v.key.entries[0].1.clone(), v.streams.len()))
            .collect();
        assert_eq!(top, [("b".to_owned(), 3), ("c".to_owned(), 2)]);
    }
}
