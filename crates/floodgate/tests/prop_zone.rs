//! The shaper's zone against nginx's, rewritten here from nginx's source
//! (`ngx_http_limit_req_lookup` and `ngx_http_limit_req_expire`): a queue
//! of nodes, most recently looked up first; a key found moves to the front
//! (passed or rejected); a key not found first runs `expire(1)` (delete the
//! oldest node if it is idle ≥ 60 000 ms and `excess − rate·ms/1000 ≤ 0`,
//! then once more), `expire(0)` when the zone is full (the oldest node
//! whatever its state, then the same twice), and gets a node at the front
//! with excess 0 — `last = now` when the request is charged, `last = 0`
//! when another limit rejected it. Signed C arithmetic, millisecond time,
//! times far from 0 as nginx's monotonic clock is. Every outcome and delay
//! must agree, and so must the number of nodes.

use std::time::Duration;

use floodgate::algorithms::{NginxRate, Shaper, ShaperDelay};
use floodgate::store::ShaperZone;
use floodgate::{Apply, Outcome, Timestamp};
use proptest::prelude::*;

use crate::common::config;

#[derive(Clone, Debug)]
struct Node {
    key: u8,
    excess: i64,
    last: i64,
}

/// One nginx zone with one `limit_req` on it.
struct Nginx {
    rate: i64,
    burst: i64,
    /// `None`: nodelay.
    delay: Option<i64>,
    capacity: usize,
    /// Most recently looked up first.
    queue: Vec<Node>,
}

impl Nginx {
    fn new(rate: NginxRate, burst: u64, delay: ShaperDelay, capacity: usize) -> Self {
        let rate = match rate {
            NginxRate::PerSecond(n) => n as i64 * 1000,
            NginxRate::PerMinute(n) => n as i64 * 1000 / 60,
        };
        Nginx {
            rate,
            burst: burst as i64 * 1000,
            delay: match delay {
                ShaperDelay::Queue => Some(0),
                ShaperDelay::NoDelay => None,
                ShaperDelay::After(n) => Some(n as i64 * 1000),
            },
            capacity,
            queue: Vec::new(),
        }
    }

    fn expire(&mut self, now: i64, mut n: u32) {
        while n < 3 {
            let Some(lr) = self.queue.last() else { return };
            let test = n != 0;
            n += 1;
            if test {
                let ms = (now - lr.last).abs();
                if ms < 60_000 {
                    return;
                }
                if lr.excess - self.rate * ms / 1000 > 0 {
                    return;
                }
            }
            self.queue.pop();
        }
    }

    /// The excess a request computes on `node` at `now`.
    fn excess(&self, node: &Node, now: i64) -> i64 {
        let mut ms = now - node.last;
        if ms < -60_000 {
            ms = 1;
        } else if ms < 0 {
            ms = 0;
        }
        (node.excess - self.rate * ms / 1000 + 1000).max(0)
    }

    fn outcome(&self, excess: i64) -> Outcome {
        if excess > self.burst {
            return Outcome::Denied;
        }
        match self.delay {
            Some(d) if excess > d => {
                let ms = (excess - d) * 1000 / self.rate;
                if ms == 0 {
                    Outcome::Allowed
                } else {
                    Outcome::Delayed(Duration::from_millis(ms as u64))
                }
            }
            _ => Outcome::Allowed,
        }
    }

    /// A request for `key` at `now` (ms): charged if it passes (`Commit`),
    /// looked up only (`Rejected`: another limit rejected it), or not even
    /// looked up (`Check`).
    fn request(&mut self, key: u8, now: i64, apply: Apply) -> Outcome {
        let found = self.queue.iter().position(|n| n.key == key);
        if apply == Apply::Check {
            let excess = found.map_or(0, |i| self.excess(&self.queue[i], now));
            return self.outcome(excess);
        }
        match found {
            Some(i) => {
                let node = self.queue.remove(i);
                let excess = self.excess(&node, now);
                let outcome = self.outcome(excess);
                let mut node = node;
                if apply == Apply::Commit && outcome != Outcome::Denied {
                    // ms as computed above, clamped the same way.
                    let ms = now - node.last;
                    node.excess = excess;
                    if !(-60_000..=0).contains(&ms) {
                        node.last = now;
                    }
                }
                self.queue.insert(0, node);
                outcome
            }
            None => {
                self.expire(now, 1);
                if self.queue.len() >= self.capacity {
                    self.expire(now, 0);
                }
                let last = if apply == Apply::Commit { now } else { 0 };
                self.queue.insert(
                    0,
                    Node {
                        key,
                        excess: 0,
                        last,
                    },
                );
                self.outcome(0)
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Req {
    gap_ms: u64,
    key: u8,
    apply: Apply,
}

fn params() -> impl Strategy<Value = (NginxRate, u64, ShaperDelay, usize)> {
    let slow = prop_oneof![
        // Slower than a request a minute's drain, with or without a burst.
        (1..=3u64, 0..=3u64).prop_map(|(n, b)| (NginxRate::PerMinute(n), b)),
        // A burst about a minute's drain.
        (1..=2u64, 0..=3u64).prop_map(|(n, b)| (NginxRate::PerSecond(n), 60 * n - 2 + b)),
    ];
    let delay = prop_oneof![
        Just(ShaperDelay::Queue),
        Just(ShaperDelay::NoDelay),
        (0..=3u64).prop_map(ShaperDelay::After),
    ];
    (slow, delay, 1..=6usize).prop_map(|((r, b), d, c)| (r, b, d, c))
}

fn schedule() -> impl Strategy<Value = Vec<Req>> {
    let gap = prop_oneof![
        3 => Just(0u64),
        3 => 0..3_000u64,
        4 => 58_000..64_000u64,
        1 => 0..200_000u64,
    ];
    let apply = prop_oneof![
        6 => Just(Apply::Commit),
        2 => Just(Apply::Rejected),
        1 => Just(Apply::Check),
    ];
    prop::collection::vec(
        (gap, 0..5u8, apply).prop_map(|(gap_ms, key, apply)| Req { gap_ms, key, apply }),
        1..60,
    )
}

proptest! {
    #![proptest_config(config(400))]

    /// Every decision and the zone's size agree with nginx's, over keys
    /// that come and go around the minute.
    #[test]
    fn zone_matches_nginx(((rate, burst, delay, capacity), reqs) in (params(), schedule())) {
        let shaper = Shaper::new(rate, burst, delay).unwrap();
        let zone: ShaperZone<u8> = ShaperZone::new(capacity).unwrap();
        let mut nginx = Nginx::new(rate, burst, delay, capacity);
        // nginx's clock is far from 0 (its monotonic clock counts from boot).
        let mut now = 100_000_000u64;
        for (i, r) in reqs.iter().enumerate() {
            now += r.gap_ms;
            // Any nanoseconds within the millisecond: nginx's is truncated.
            let t = Timestamp::from_nanos(now * 1_000_000 + (i as u64 * 7_919) % 1_000_000);
            let want = nginx.request(r.key, now as i64, r.apply);
            let got = zone.decide(&shaper, &r.key, t, 1, r.apply);
            prop_assert_eq!(got.outcome, want, "request {} ({:?}) at {} ms", i, r, now);
            prop_assert_eq!(zone.len(), nginx.queue.len(), "nodes after request {}", i);
        }
    }
}

/// The cases nginx 1.22 shows with `rate=1r/m` and no burst (the gateway's
/// parity test runs them against a real nginx).
#[test]
fn one_per_minute_a_key_alone_and_with_another_in_between() {
    let shaper = Shaper::new(NginxRate::PerMinute(1), 0, ShaperDelay::Queue).unwrap();
    let at = |ms: u64| Timestamp::from_millis(100_000_000 + ms);
    // Alone: rejected at 61 and 62 s, passes at 63 s.
    let zone: ShaperZone<String> = ShaperZone::new(100).unwrap();
    assert!(
        zone.decide(&shaper, "a", at(0), 1, Apply::Commit)
            .is_allowed()
    );
    assert!(
        zone.decide(&shaper, "a", at(61_000), 1, Apply::Commit)
            .is_denied()
    );
    assert!(
        zone.decide(&shaper, "a", at(62_000), 1, Apply::Commit)
            .is_denied()
    );
    assert!(
        zone.decide(&shaper, "a", at(63_000), 1, Apply::Commit)
            .is_allowed()
    );
    // Another key given a node at 60.5 s deletes the idle, drained node.
    let zone: ShaperZone<String> = ShaperZone::new(100).unwrap();
    assert!(
        zone.decide(&shaper, "a", at(0), 1, Apply::Commit)
            .is_allowed()
    );
    assert!(
        zone.decide(&shaper, "b", at(60_500), 1, Apply::Commit)
            .is_allowed()
    );
    assert_eq!(zone.len(), 1);
    assert!(
        zone.decide(&shaper, "a", at(61_000), 1, Apply::Commit)
            .is_allowed()
    );
    // Before the minute the node stays: "c" at 59.9 s changes nothing.
    let zone: ShaperZone<String> = ShaperZone::new(100).unwrap();
    assert!(
        zone.decide(&shaper, "a", at(0), 1, Apply::Commit)
            .is_allowed()
    );
    assert!(
        zone.decide(&shaper, "c", at(59_900), 1, Apply::Commit)
            .is_allowed()
    );
    assert!(
        zone.decide(&shaper, "a", at(61_000), 1, Apply::Commit)
            .is_denied()
    );
    // One arrival deletes two nodes at most, the oldest first; a node
    // looked up since (even rejected) is no longer among the oldest.
    let zone: ShaperZone<String> = ShaperZone::new(100).unwrap();
    for (k, ms) in [("a", 0), ("b", 1), ("c", 2)] {
        assert!(
            zone.decide(&shaper, k, at(ms), 1, Apply::Commit)
                .is_allowed()
        );
    }
    assert!(
        zone.decide(&shaper, "e", at(61_000), 1, Apply::Commit)
            .is_allowed()
    );
    assert_eq!(zone.len(), 2);
    // "c" kept its node: rejected, and now in front of "e"...
    assert!(
        zone.decide(&shaper, "c", at(61_500), 1, Apply::Commit)
            .is_denied()
    );
    // ...so "b", given a node again, stops at "e" (idle 0.5 s).
    assert!(
        zone.decide(&shaper, "b", at(61_500), 1, Apply::Commit)
            .is_allowed()
    );
    assert_eq!(zone.len(), 3);
    assert!(
        zone.decide(&shaper, "c", at(62_000), 1, Apply::Commit)
            .is_denied()
    );
}
