//! Reading `shedding.adaptive`: every setting checked, a bad one refused
//! with its place and the range it must be in.

use std::time::Duration;

use floodgate_policy::error::Errors;
use floodgate_policy::yaml::{Map, Node, excerpt};

use super::super::config::{Adaptive, AdaptiveQueue, QueueOrder};
use crate::read::deny_unknown;

const KEYS: &[&str] = &[
    "min",
    "max",
    "initial",
    "tolerance",
    "smoothing",
    "interval",
    "min_samples",
    "probe_every",
    "shares",
    "queue",
];
const QUEUE_KEYS: &[&str] = &["max_waiting", "timeout", "target", "interval", "order"];
const SHARE_KEYS: &[&str] = &["sheddable", "default"];
/// Beyond this, a limit is no limit (a count of requests in flight).
const MAX_LIMIT: u64 = 1 << 24;

/// An integer under `key` in `[lo, hi]`.
fn int(map: &Map<'_>, key: &str, (lo, hi): (u64, u64), errors: &mut Errors) -> Option<u64> {
    let n = map.get(key)?;
    let v = errors.take(n.u64())?;
    if !(lo..=hi).contains(&v) {
        errors.push(n.error(format!("{key} must be in {lo}..={hi} (got {v})")));
        return None;
    }
    Some(v)
}

/// A number under `key` in `(lo, hi]`.
fn number(map: &Map<'_>, key: &str, (lo, hi): (f64, f64), errors: &mut Errors) -> Option<f64> {
    let n = map.get(key)?;
    let text = n.scalar_text().unwrap_or("");
    match text.parse::<f64>() {
        Ok(v) if v > lo && v <= hi => Some(v),
        _ => {
            let got = n.describe();
            errors.push(n.error(format!(
                "{key} must be a number above {lo}, at most {hi} (got {got})"
            )));
            None
        }
    }
}

/// Reads an `adaptive` mapping; defaults for what it leaves out.
pub(crate) fn read_adaptive(n: Node<'_>, errors: &mut Errors) -> Option<Adaptive> {
    let map = errors.take(n.map())?;
    let mut a = Adaptive::default();
    let limit = (1, MAX_LIMIT);
    let usize_of = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    a.min = int(&map, "min", limit, errors).map_or(a.min, usize_of);
    a.max = int(&map, "max", limit, errors).map_or(a.max, usize_of);
    let initial = a.initial.clamp(a.min, a.max.max(a.min));
    a.initial = int(&map, "initial", limit, errors).map_or(initial, usize_of);
    a.tolerance = number(&map, "tolerance", (0.0, 10.0), errors).unwrap_or(a.tolerance);
    a.smoothing = number(&map, "smoothing", (0.0, 1.0), errors).unwrap_or(a.smoothing);
    a.min_samples = int(&map, "min_samples", (1, 1_000_000), errors).unwrap_or(a.min_samples);
    a.probe_every =
        int(&map, "probe_every", (0, 1_000_000), errors).map_or(a.probe_every, |v| v as u32);
    a.interval = duration(&map, "interval", errors).unwrap_or(a.interval);
    read_shares(&map, &mut a, errors);
    a.queue = map.get("queue").and_then(|q| read_queue(q, errors));
    check_bounds(&map, &a, errors);
    deny_unknown(&map, KEYS, errors);
    Some(a)
}

/// A duration under `key`, above zero and at most 60 s.
fn duration(map: &Map<'_>, key: &str, errors: &mut Errors) -> Option<Duration> {
    let n = map.get(key)?;
    let t = errors.take(n.duration(false))?;
    if t > Duration::from_secs(60) {
        errors.push(n.error(format!("{key} must be at most 60s")));
        return None;
    }
    Some(t)
}

/// The `queue` mapping: defaults for what it leaves out, `target` no
/// longer than `timeout`.
fn read_queue(n: Node<'_>, errors: &mut Errors) -> Option<AdaptiveQueue> {
    let map = errors.take(n.map())?;
    let mut q = AdaptiveQueue::default();
    let waiting = int(&map, "max_waiting", (1, MAX_LIMIT), errors);
    q.max_waiting = waiting.map_or(q.max_waiting, |v| v as usize);
    q.timeout = duration(&map, "timeout", errors).unwrap_or(q.timeout);
    q.target = duration(&map, "target", errors).unwrap_or(q.target);
    q.interval = duration(&map, "interval", errors).unwrap_or(q.interval);
    if let Some(o) = map.get("order") {
        match errors.take(o.str()) {
            Some("codel") => q.order = QueueOrder::Codel,
            Some("lifo") => q.order = QueueOrder::Lifo,
            Some("fifo") => q.order = QueueOrder::Fifo,
            Some(other) => errors.push(o.error(format!(
                "order must be codel, lifo or fifo (got '{}')",
                excerpt(other)
            ))),
            None => {}
        }
    }
    if q.target > q.timeout {
        let at = map.get("target").unwrap_or(map.node());
        let (t, to) = (q.target, q.timeout);
        errors.push(at.error(format!("target ({t:?}) must not be above timeout ({to:?})")));
    }
    deny_unknown(&map, QUEUE_KEYS, errors);
    Some(q)
}

fn read_shares(map: &Map<'_>, a: &mut Adaptive, errors: &mut Errors) {
    let Some(m) = map.get("shares").and_then(|s| errors.take(s.map())) else {
        return;
    };
    let unit = (0.0, 1.0);
    a.sheddable_share = number(&m, "sheddable", unit, errors).unwrap_or(a.sheddable_share);
    a.default_share = number(&m, "default", unit, errors).unwrap_or(a.default_share);
    if a.sheddable_share > a.default_share {
        errors.push(m.node().error(format!(
            "shares: sheddable ({}) must not be above default ({})",
            a.sheddable_share, a.default_share
        )));
    }
    deny_unknown(&m, SHARE_KEYS, errors);
}

/// `min ≤ initial ≤ max`.
fn check_bounds(map: &Map<'_>, a: &Adaptive, errors: &mut Errors) {
    if a.min > a.max {
        let at = map.get("min").unwrap_or(map.node());
        errors.push(at.error(format!("min ({}) is above max ({})", a.min, a.max)));
    } else if !(a.min..=a.max).contains(&a.initial) {
        let at = map.get("initial").unwrap_or(map.node());
        let (i, lo, hi) = (a.initial, a.min, a.max);
        errors.push(at.error(format!(
            "initial ({i}) must be within min..=max ({lo}..={hi})"
        )));
    }
}
