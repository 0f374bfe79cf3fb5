//! An independent reference of nginx's `limit_req` accounting (lookup,
//! account, several zones, dry run, and each zone's queue of nodes with
//! the expiry of idle ones), used to generate request schedules whose
//! decisions stay well away from every boundary, so that nginx's cached
//! millisecond clock cannot flip them.

use std::collections::HashMap;

/// One `limit_req` (its zone's rate and the directive's burst and delay).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Zone {
    /// Units (milli-requests) per second: `N·1000` for r/s, `N·1000/60` for r/m.
    pub rate: u64,
    /// `burst·1000`.
    pub burst: u64,
    /// `delay·1000`; `u64::MAX` for nodelay.
    pub delay: u64,
}

impl Zone {
    pub(crate) fn per_second(n: u64, burst: u64, delay: Option<u64>) -> Zone {
        Zone {
            rate: n * 1000,
            burst: burst * 1000,
            delay: delay.map_or(0, |d| d.saturating_mul(1000)),
        }
    }

    pub(crate) fn per_minute(n: u64, burst: u64, delay: Option<u64>) -> Zone {
        Zone {
            rate: n * 1000 / 60,
            ..Zone::per_second(n, burst, delay)
        }
    }

    /// nginx's delay (ms) for a request that leaves `excess` in this zone.
    pub(crate) fn delay_of(&self, excess: u64) -> u64 {
        if excess > self.delay {
            (excess - self.delay) * 1000 / self.rate
        } else {
            0
        }
    }
}

/// nginx's decision on one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Pass,
    Delay(u64),
    Reject,
}

impl Class {
    pub(crate) fn kind(self) -> u8 {
        match self {
            Class::Pass => 0,
            Class::Delay(_) => 1,
            Class::Reject => 2,
        }
    }
}

#[derive(Clone, Copy)]
struct Node {
    excess: u64,
    /// 0 for a node a rejected request made (never charged).
    last: u64,
}

/// One zone's nodes, and their keys most recently looked up first.
#[derive(Clone, Default)]
struct Nodes {
    map: HashMap<String, Node>,
    queue: Vec<String>,
}

impl Nodes {
    /// nginx's lookup: the key's node moves to the front, or (after
    /// `expire(1)`) the key gets one, uncharged.
    fn look_up(&mut self, zone: &Zone, key: &str, now: u64) -> Node {
        if let Some(i) = self.queue.iter().position(|k| k == key) {
            let k = self.queue.remove(i);
            self.queue.insert(0, k);
            return self.map[key];
        }
        // expire(1): the oldest node, twice at most, while it is idle a
        // minute and drained (`excess − rate·ms/1000 ≤ 0`).
        for _ in 0..2 {
            let Some(oldest) = self.queue.last() else {
                break;
            };
            let n = self.map[oldest];
            let ms = now.abs_diff(n.last);
            if ms < 60_000 || n.excess > zone.rate * ms / 1000 {
                break;
            }
            let k = self.queue.pop().unwrap();
            self.map.remove(&k);
        }
        let node = Node { excess: 0, last: 0 };
        self.map.insert(key.to_owned(), node);
        self.queue.insert(0, key.to_owned());
        node
    }
}

/// The zones of one location, in configuration order.
#[derive(Clone)]
pub(crate) struct Model {
    zones: Vec<(Zone, Nodes)>,
}

impl Model {
    pub(crate) fn new(zones: &[Zone]) -> Self {
        Model {
            zones: zones.iter().map(|z| (*z, Nodes::default())).collect(),
        }
    }

    /// Keys with a node in zone `z`.
    pub(crate) fn nodes(&self, z: usize) -> usize {
        self.zones[z].1.map.len()
    }

    /// The decision at `now` (ms) for a request with key `keys[z]` in zone
    /// `z` (none or empty: that limit is skipped).
    pub(crate) fn decide(&mut self, now: u64, keys: &[Option<String>]) -> Option<Class> {
        let mut found: Vec<(usize, u64)> = Vec::new();
        for (z, (zone, nodes)) in self.zones.iter_mut().enumerate() {
            let Some(key) = keys
                .get(z)
                .and_then(|k| k.as_deref())
                .filter(|k| !k.is_empty())
            else {
                continue;
            };
            let n = nodes.look_up(zone, key, now);
            let ms = now.saturating_sub(n.last);
            let excess = (n.excess + 1000).saturating_sub(zone.rate * ms / 1000);
            if excess > zone.burst {
                return Some(Class::Reject);
            }
            found.push((z, excess));
        }
        if found.is_empty() {
            return None;
        }
        let mut delay = 0;
        for (z, excess) in found {
            let (zone, nodes) = &mut self.zones[z];
            let key = keys[z].clone().unwrap_or_default();
            let node = nodes.map.get_mut(&key).expect("looked up");
            node.excess = excess;
            if now > node.last {
                node.last = now;
            }
            delay = delay.max(zone.delay_of(excess));
        }
        Some(if delay == 0 {
            Class::Pass
        } else {
            Class::Delay(delay)
        })
    }
}

/// One request of a schedule: when (ms after the start) and its key in
/// each zone.
#[derive(Clone, Debug)]
pub(crate) struct Req {
    pub at: u64,
    pub keys: Vec<Option<String>>,
}

/// The decisions of a whole schedule.
pub(crate) fn run(zones: &[Zone], schedule: &[Req], base: u64) -> Vec<Option<Class>> {
    let mut m = Model::new(zones);
    schedule
        .iter()
        .map(|r| m.decide(base + r.at, &r.keys))
        .collect()
}

/// A small deterministic generator (xorshift).
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Whether every decision of `schedule` is the same kind when any one
/// request arrives up to `margin` ms earlier or later, and every delay is
/// at least `min_delay` ms: nginx's ±1 ms clock cannot change anything.
pub(crate) fn robust(zones: &[Zone], schedule: &[Req], margin: u64, min_delay: u64) -> bool {
    let base = 1_000_000;
    let exact = run(zones, schedule, base);
    if exact
        .iter()
        .any(|c| matches!(c, Some(Class::Delay(d)) if *d < min_delay))
    {
        return false;
    }
    for i in 0..schedule.len() {
        for delta in 1..=margin {
            for sign in [-1i64, 1] {
                let mut moved = schedule.to_vec();
                moved[i].at = (moved[i].at as i64 + sign * delta as i64).max(0) as u64;
                // Order is by time; a move that reorders requests is not
                // a perturbation this check is about.
                if moved.windows(2).any(|w| w[0].at > w[1].at) {
                    continue;
                }
                let got = run(zones, &moved, base);
                let same = got
                    .iter()
                    .zip(&exact)
                    .all(|(a, b)| a.map(Class::kind) == b.map(Class::kind));
                if !same {
                    return false;
                }
            }
        }
    }
    true
}

/// A bursty schedule of `n` requests over about `span` ms: requests
/// sharing a key in any zone are at least `spacing` ms apart (so network
/// and scheduling noise cannot reorder them). `keys[z]` lists the keys
/// zone `z` draws from.
pub(crate) fn generate(
    rng: &mut Rng,
    n: usize,
    span: u64,
    spacing: u64,
    keys: &[&[&str]],
) -> Vec<Req> {
    let mut out: Vec<Req> = Vec::new();
    let mut t = 0;
    while out.len() < n {
        // A burst of a few requests, then a pause.
        let burst = 1 + rng.below(5);
        for _ in 0..burst {
            let ks: Vec<Option<String>> = keys
                .iter()
                .map(|choices| Some(choices[rng.below(choices.len() as u64) as usize].to_owned()))
                .collect();
            // After every earlier request sharing a key, by `spacing`.
            let earliest = out
                .iter()
                .filter(|r| r.keys.iter().zip(&ks).any(|(a, b)| a.is_some() && a == b))
                .map(|r| r.at + spacing)
                .max()
                .unwrap_or(0);
            t = t.max(earliest) + rng.below(3);
            out.push(Req { at: t, keys: ks });
        }
        t += rng.below(span * 2 / n as u64 + 1);
    }
    out.sort_by_key(|r| r.at);
    out
}

/// Whether the decisions of `schedule` show what `zones` are about: a
/// pass, a rejection, and a delay when a zone delays (a delay below its
/// burst).
pub(crate) fn covers(zones: &[Zone], schedule: &[Req]) -> bool {
    let decisions = run(zones, schedule, 1_000_000);
    let seen = |kind: u8| decisions.iter().flatten().any(|c| c.kind() == kind);
    let delays = zones.iter().any(|z| z.delay < z.burst);
    seen(0) && seen(2) && (!delays || seen(1))
}

/// The first robust schedule from successive seeds that
/// [`covers`] its zones.
pub(crate) fn robust_schedule(
    zones: &[Zone],
    seed: u64,
    n: usize,
    span: u64,
    keys: &[&[&str]],
) -> Vec<Req> {
    let mut rng = Rng(seed | 1);
    for _ in 0..10_000 {
        let s = generate(&mut rng, n, span, 12, keys);
        if covers(zones, &s) && robust(zones, &s, 5, 15) {
            return s;
        }
    }
    panic!("no robust schedule found for {zones:?}");
}
