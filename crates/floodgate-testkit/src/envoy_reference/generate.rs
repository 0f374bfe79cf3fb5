//! Random envoyproxy/ratelimit configurations and request sequences, from
//! a seed: every key of the file format, trees three levels deep, exact,
//! default and wildcard values (shared thresholds too), names and
//! `replaces`, unlimited rules, shadow and quota modes, every unit in any
//! case, `requests_per_unit` 0 or missing; requests with several
//! descriptors, duplicates, descriptors without entries, empty keys and
//! values, limit overrides, `hits_addend` 0, 1 or huge, negative hits,
//! unknown domains.
//!
//! Sequences stay clear of the reference's documented counter collisions
//! (see [`Service::shared_keys`](super::Service::shared_keys)): keys and
//! values never contain `_` or `*` where they could join into another
//! descriptor's text, and the entries a request overrides are always
//! overridden, with one unit.

use std::collections::HashMap;

use super::config::{File, Node, RateLimit};
use super::service::{Descriptor, Request};

/// A small deterministic generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// From `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// Descriptor keys: none is another followed by `_`.
pub const KEYS: &[&str] = &["remote_address", "user", "path", "tier", "api_key"];
/// Exact values (no `_`, no `*`).
pub const VALUES: &[&str] = &[
    "a",
    "b",
    "foo",
    "foobar",
    "bar",
    "10.0.0.1",
    "/v1/items",
    "GET",
];
/// Wildcard values.
pub const PATTERNS: &[&str] = &["foo*", "*", "*bar", "f*r", "/v1/*"];
/// Rule names.
pub const NAMES: &[&str] = &["n1", "n2", "n3"];
/// Units as files may spell them.
pub const UNITS: &[&str] = &[
    "second", "SECOND", "Minute", "minute", "hour", "HOUR", "day", "week", "month", "year",
];

/// Values a request sends: the exact ones, values the patterns match, the
/// empty value, one no rule names.
const REQUEST_VALUES: &[&str] = &[
    "a",
    "b",
    "foo",
    "foobar",
    "bar",
    "far",
    "fbr",
    "/v1/items",
    "/v1/x",
    "GET",
    "10.0.0.1",
    "",
    "zz",
];

/// Knobs of a generated case.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Units a rule or an override may have (protocol numbers); a binary
    /// on the real clock keeps to the long ones.
    pub units: &'static [i32],
    /// Percent of descriptors sent with a limit override.
    pub overrides: u64,
    /// Percent of requests that are malformed (empty domain, no
    /// descriptors, an override of an unknown unit).
    pub malformed: u64,
    /// Rules may be in shadow or quota mode.
    pub modes: bool,
    /// A request may send a descriptor twice, or two that share a counter
    /// (wildcards with `share_threshold`).
    pub duplicates: bool,
    /// Percent of descriptors whose hits are negative (`is_negative_hits`).
    pub negative: u64,
}

/// Every unit.
pub const ALL_UNITS: &[i32] = &[1, 2, 3, 4, 5, 6, 7];
/// Units of a minute or more.
pub const LONG_UNITS: &[i32] = &[2, 3, 4, 5, 6, 7];

impl Default for Shape {
    fn default() -> Self {
        Shape {
            units: ALL_UNITS,
            overrides: 12,
            malformed: 2,
            modes: true,
            duplicates: true,
            negative: 20,
        }
    }
}

fn unit_name(rng: &mut Rng, units: &[i32]) -> String {
    let u = *rng.pick(units);
    let name = match u {
        1 => "second",
        2 => "minute",
        3 => "hour",
        4 => "day",
        5 => "month",
        6 => "year",
        _ => "week",
    };
    if rng.chance(50) {
        name.to_ascii_uppercase()
    } else {
        name.to_owned()
    }
}

fn rate_limit(rng: &mut Rng, shape: &Shape) -> RateLimit {
    let mut rl = RateLimit::default();
    if rng.chance(10) {
        rl.unlimited = true;
    } else {
        rl.unit = Some(unit_name(rng, shape.units));
        rl.requests_per_unit = match rng.below(10) {
            0 => None,
            1 => Some(0),
            2 => Some(1),
            3 => Some(u32::MAX),
            _ => Some(1 + rng.below(6) as u32),
        };
    }
    if rng.chance(35) {
        rl.name = rng.pick(NAMES).to_string();
    }
    if rng.chance(20) {
        for _ in 0..1 + rng.below(2) {
            let n = rng.pick(NAMES).to_string();
            if n != rl.name && !rl.replaces.contains(&n) {
                rl.replaces.push(n);
            }
        }
    }
    rl
}

fn nodes(rng: &mut Rng, shape: &Shape, depth: u32) -> Vec<Node> {
    let mut out: Vec<Node> = Vec::new();
    let n = 1 + rng.below(if depth == 0 { 5 } else { 3 });
    for _ in 0..n {
        let key = rng.pick(KEYS).to_string();
        let value = match rng.below(10) {
            0..=3 => String::new(),
            4..=7 => rng.pick(VALUES).to_string(),
            _ => rng.pick(PATTERNS).to_string(),
        };
        if out.iter().any(|o| o.key == key && o.value == value) {
            continue;
        }
        let mut node = Node {
            key,
            value,
            shadow_mode: shape.modes && rng.chance(12),
            quota_mode: shape.modes && rng.chance(10),
            detailed_metric: rng.chance(15),
            value_to_metric: rng.chance(15),
            metadata: rng.chance(10).then(|| "m".to_owned()),
            ..Node::default()
        };
        node.share_threshold = shape.duplicates && node.value.contains('*') && rng.chance(40);
        let children = depth < 2 && rng.chance(35);
        if !children || rng.chance(40) {
            node.rate_limit = Some(rate_limit(rng, shape));
        }
        if children {
            node.descriptors = nodes(rng, shape, depth + 1);
        }
        out.push(node);
    }
    out
}

/// A configuration: one to three files, each its own domain.
pub fn config(rng: &mut Rng, shape: &Shape) -> Vec<File> {
    (0..1 + rng.below(3))
        .map(|i| File {
            domain: format!("d{i}"),
            descriptors: nodes(rng, shape, 0),
        })
        .collect()
}

/// Entries that walk `tree` (matching rules, or missing them on purpose).
fn walk(rng: &mut Rng, tree: &[Node], out: &mut Vec<(String, String)>) {
    if tree.is_empty() || out.len() >= 4 {
        return;
    }
    let n = rng.pick(tree);
    let value = if n.value.is_empty() || n.value.contains('*') || rng.chance(15) {
        rng.pick(REQUEST_VALUES).to_string()
    } else {
        n.value.clone()
    };
    out.push((n.key.clone(), value));
    if !n.descriptors.is_empty() && (n.rate_limit.is_none() || rng.chance(50)) {
        walk(rng, &n.descriptors, out);
    } else if rng.chance(8) {
        out.push((
            rng.pick(KEYS).to_string(),
            rng.pick(REQUEST_VALUES).to_string(),
        ));
    }
}

/// A request sequence generator over one configuration: remembers which
/// entries are overridden, and with which unit.
#[derive(Debug, Default)]
pub struct Requests {
    overridden: HashMap<Vec<(String, String)>, Option<i32>>,
}

impl Requests {
    /// The next request against `files`.
    pub fn next(&mut self, rng: &mut Rng, files: &[File], shape: &Shape) -> Request {
        if rng.chance(shape.malformed) {
            return malformed(rng);
        }
        let file = rng.pick(files);
        let domain = if rng.chance(5) {
            "unknown".to_owned()
        } else {
            file.domain.clone()
        };
        let mut descriptors: Vec<Descriptor> = Vec::new();
        let mut signs: Vec<(Vec<String>, bool)> = Vec::new();
        for _ in 0..1 + rng.below(4) {
            if shape.duplicates && !descriptors.is_empty() && rng.chance(20) {
                let again = rng.pick(&descriptors).clone();
                descriptors.push(again);
                continue;
            }
            let entries = entries(rng, file);
            let limit = self.limit(rng, &entries, shape);
            let hits_addend = descriptor_hits(rng);
            let negative = sign(rng, shape, &entries, &mut signs);
            if !shape.duplicates && descriptors.iter().any(|d| d.entries == entries) {
                continue;
            }
            descriptors.push(Descriptor {
                entries,
                limit,
                hits_addend,
                negative,
            });
        }
        let hits_addend = match rng.below(10) {
            0..=5 => 0,
            6 => 1,
            7 => 2,
            8 => 3,
            _ => u32::MAX - rng.below(3) as u32,
        };
        Request {
            domain,
            descriptors,
            hits_addend,
        }
    }

    /// The limit override of a descriptor of `entries`: overridden or not
    /// (and in which unit) as it was the first time, with a small
    /// `requests_per_unit` drawn each time.
    fn limit(
        &mut self,
        rng: &mut Rng,
        entries: &[(String, String)],
        shape: &Shape,
    ) -> Option<(u32, i32)> {
        let unit = *self
            .overridden
            .entry(entries.to_vec())
            .or_insert_with(|| rng.chance(shape.overrides).then(|| *rng.pick(shape.units)));
        unit.map(|u| {
            let rpu = match rng.below(6) {
                0 => 0,
                1 => 1,
                _ => 1 + rng.below(5) as u32,
            };
            (rpu, u)
        })
    }
}

/// Whether a descriptor of `entries` is negative: drawn once per request
/// for each sequence of keys (`signs`), as descriptors that can share a
/// counter (the same entries, or values under one `share_threshold`)
/// have the same keys. A request that charges a counter and gives back to
/// it is decided in another order by Floodgate (docs/service.md).
fn sign(
    rng: &mut Rng,
    shape: &Shape,
    entries: &[(String, String)],
    signs: &mut Vec<(Vec<String>, bool)>,
) -> bool {
    let keys: Vec<String> = entries.iter().map(|(k, _)| k.clone()).collect();
    if let Some((_, s)) = signs.iter().find(|(k, _)| *k == keys) {
        return *s;
    }
    let s = rng.chance(shape.negative);
    signs.push((keys, s));
    s
}

/// A request the service refuses: no domain, no descriptors, or a limit
/// override with an unknown unit (or none).
fn malformed(rng: &mut Rng) -> Request {
    match rng.below(3) {
        0 => Request {
            domain: String::new(),
            descriptors: vec![Descriptor::default()],
            hits_addend: 0,
        },
        1 => Request {
            domain: "d0".into(),
            ..Request::default()
        },
        _ => Request {
            domain: "d0".into(),
            descriptors: vec![Descriptor {
                entries: vec![("bad".into(), "unit".into())],
                limit: Some((1, if rng.chance(50) { 0 } else { 8 })),
                ..Descriptor::default()
            }],
            hits_addend: 0,
        },
    }
}

/// A descriptor's entries: none, an empty key, random keys and values, or
/// (mostly) a walk down `file`'s tree.
fn entries(rng: &mut Rng, file: &File) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    match rng.below(20) {
        0 => {}
        1 => entries.push((String::new(), rng.pick(REQUEST_VALUES).to_string())),
        2 | 3 => {
            for _ in 0..1 + rng.below(3) {
                entries.push((
                    rng.pick(KEYS).to_string(),
                    rng.pick(REQUEST_VALUES).to_string(),
                ));
            }
        }
        _ => walk(rng, &file.descriptors, &mut entries),
    }
    entries
}

/// A descriptor's `hits_addend`: mostly none, else from zero to past
/// `u32::MAX`.
fn descriptor_hits(rng: &mut Rng) -> Option<u64> {
    match rng.below(12) {
        0..=6 => None,
        7 => Some(0),
        8 => Some(1),
        9 => Some(2 + rng.below(4)),
        10 => Some(1 << 40),
        _ => Some(u64::from(u32::MAX) + rng.below(1000)),
    }
}
