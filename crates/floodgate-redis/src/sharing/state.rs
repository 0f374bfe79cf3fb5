//! A key's state as the lease and sync scripts send it (numbers: see
//! `lua/state_edit.lua`), as the core algorithms' state, and back (a GCRA
//! TAT the instance has seen, raised to in Redis). Exact on whole
//! microseconds: a window's start and counts are integers, a TAT is whole
//! microseconds plus ticks of `1/C` µs, which the core's ticks of `1/c` ns
//! hold exactly (`C` divides `1000·c`).

use floodgate::Timestamp;
use floodgate::algorithms::{
    AnyLimit, AnyState, GcraState, LimitKind, SlidingWindowState, SubWindowState, WindowState,
};

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A GCRA's tick sizes: `C` (ticks per µs in Redis) and `k = 1000·c / C`
/// (core ticks per Redis tick).
fn gcra_ticks(count: u64, period_ns: u128) -> (u128, u128) {
    let count = u128::from(count);
    let period_us = period_ns / 1000;
    let big_c = count / gcd(period_us.max(1), count);
    let c = count / gcd(period_ns.max(1), count);
    (big_c, (1000 * c / big_c).max(1))
}

/// `state` becomes the state Redis sent (`fields`; `blocked_us`: the end of
/// a block in force, 0: none), reusing its allocation where it can. `held`
/// is added to a concurrency limit's units (the holder's own, which Redis
/// counts apart). False when the fields do not fit the limit (the state is
/// then fresh).
pub(crate) fn install(
    state: &mut AnyState,
    limit: &AnyLimit,
    fields: &[u64],
    blocked_us: u64,
    held: u64,
) -> bool {
    if blocked_us > 0 {
        *state = AnyState::Blocked(blocked_us.saturating_mul(1000));
        return true;
    }
    let ok = install_fields(state, limit, fields, held);
    if !ok {
        *state = AnyState::Fresh;
    }
    ok
}

/// A timestamp of `us` microseconds.
fn at(us: u64) -> Timestamp {
    Timestamp::from_nanos(us.saturating_mul(1000))
}

/// [`install`] with no block in force: false when `fields` are not a state
/// of `limit`'s algorithm.
fn install_fields(state: &mut AnyState, limit: &AnyLimit, fields: &[u64], held: u64) -> bool {
    match (limit.kind(), fields) {
        (LimitKind::FixedWindow(_), &[start, count]) => {
            *state = if start == 0 && count == 0 {
                AnyState::Fresh
            } else {
                AnyState::FixedWindow(WindowState::new(at(start), count))
            };
        }
        (LimitKind::SlidingWindow(_), &[start, prev, cur]) => {
            let c = |x: u64| x.min(u64::from(u32::MAX)) as u32;
            *state = AnyState::SlidingWindow(SlidingWindowState::new(at(start), c(prev), c(cur)));
        }
        (LimitKind::SubWindows(w), [start, counts @ ..])
            if counts.len() == w.sub_windows() as usize + 1 =>
        {
            install_counts(state, at(*start), counts);
        }
        (LimitKind::Gcra(g), &[ti, tf]) => {
            let (count, period) = g.rate();
            let (big_c, k) = gcra_ticks(count, period.as_nanos());
            let ticks = (u128::from(ti) * big_c + u128::from(tf)) * k;
            *state = if ticks == 0 {
                AnyState::Fresh
            } else {
                AnyState::Gcra(GcraState::from_ticks(ticks))
            };
        }
        (LimitKind::Concurrency(_), &[others]) => {
            *state = AnyState::Concurrency(others.saturating_add(held));
        }
        // Fields of another shape.
        (
            LimitKind::FixedWindow(_)
            | LimitKind::SlidingWindow(_)
            | LimitKind::SubWindows(_)
            | LimitKind::Gcra(_)
            | LimitKind::Concurrency(_),
            _,
        ) => return false,
        // Decided in Redis only: no lease or sync script sends their state.
        (LimitKind::SlidingLog(_) | LimitKind::Shaper(_), _) => return false,
    }
    true
}

/// `state` becomes sub-windows starting at `start` holding `counts`, in
/// the allocation it has when it is one of the same length.
fn install_counts(state: &mut AnyState, start: Timestamp, counts: &[u64]) {
    match state {
        AnyState::SubWindows(s) if s.counts().len() == counts.len() => {
            let mut boxed = std::mem::take(&mut **s).into_counts();
            boxed.copy_from_slice(counts);
            **s = SubWindowState::new(start, boxed);
        }
        _ => *state = AnyState::SubWindows(Box::new(SubWindowState::new(start, counts.into()))),
    }
}

/// A GCRA state's TAT as Redis writes it, `(µs, ticks of 1/C µs)`, rounded
/// up (never below the core's); `(0, 0)` for any other state.
pub(crate) fn gcra_floor(state: &AnyState, limit: &AnyLimit) -> (u64, u64) {
    let (LimitKind::Gcra(g), AnyState::Gcra(ticks)) = (limit.kind(), state) else {
        return (0, 0);
    };
    let (count, period) = g.rate();
    let (big_c, k) = gcra_ticks(count, period.as_nanos());
    let per_us = big_c * k;
    let ticks = ticks.ticks();
    let (mut us, rem) = (ticks / per_us, ticks % per_us);
    let mut tf = rem.div_ceil(k);
    if tf == big_c {
        us += 1;
        tf = 0;
    }
    (
        u64::try_from(us).unwrap_or(u64::MAX),
        u64::try_from(tf).unwrap_or(0),
    )
}

/// What a state holds now, for telling what a decision charged: a window's
/// start (ns) and the units of its current (sub-)window, a TAT in ticks.
pub(crate) fn load(state: &AnyState) -> (u64, u128) {
    match state {
        AnyState::FixedWindow(s) => (s.start().as_nanos(), u128::from(s.count())),
        AnyState::SlidingWindow(s) => (s.start().as_nanos(), u128::from(s.counts()[1])),
        AnyState::SubWindows(s) => (
            s.start().as_nanos(),
            u128::from(s.counts().last().copied().unwrap_or(0)),
        ),
        AnyState::Gcra(t) => (0, t.ticks()),
        AnyState::Concurrency(h) => (0, u128::from(*h)),
        // Nothing charged yet, or not shared (decided in Redis only).
        AnyState::Fresh
        | AnyState::Blocked(_)
        | AnyState::SlidingLog(_)
        | AnyState::Shaper(_)
        | AnyState::Leases(_) => (0, 0),
    }
}

/// The start (ns) of the window or sub-window holding `now` for a window
/// limit (its length is the unit a lease or a hit belongs to); 0 for other
/// limits.
pub(crate) fn window_of(limit: &AnyLimit, now: Timestamp) -> u64 {
    let Some(width) = limit.counting_window() else {
        return 0;
    };
    let now = now.as_nanos();
    now - now % (width.as_nanos() as u64).max(1)
}

/// The window or sub-window length (ns) of a window limit; 0 otherwise.
pub(crate) fn window_width(limit: &AnyLimit) -> u64 {
    limit.counting_window().map_or(0, |w| w.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::algorithms::{FixedWindow, Gcra, SubWindowCounter};
    use floodgate::{Algorithm, Apply};
    use std::time::Duration;

    #[test]
    fn gcra_round_trips_exactly_on_microseconds() {
        // 3 per second: T = 333 333⅓ µs.
        let limit = AnyLimit::from(Gcra::new(3, Duration::from_secs(1), 5).unwrap());
        let mut s = limit.fresh();
        let t = Timestamp::from_micros(1_700_000_000_000_000);
        for _ in 0..4 {
            limit.decide(&mut s, t, 1, Apply::Commit);
        }
        let (ti, tf) = gcra_floor(&s, &limit);
        // 4 intervals: 1 333 333⅓ µs past t.
        assert_eq!((ti, tf), (1_700_000_000_000_000 + 1_333_333, 1));
        let mut back = AnyState::Fresh;
        assert!(install(&mut back, &limit, &[ti, tf], 0, 0));
        assert_eq!(back, s);
    }

    #[test]
    fn windows_and_blocks() {
        let limit = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(1)).unwrap());
        let mut s = AnyState::Fresh;
        assert!(install(&mut s, &limit, &[2_000_000, 3], 0, 0));
        let d = limit.decide(&mut s, Timestamp::from_secs(2), 1, Apply::Commit);
        assert_eq!(d.remaining, 1);
        assert!(install(&mut s, &limit, &[], 9, 0));
        assert_eq!(s, AnyState::Blocked(9_000));
        assert!(!install(&mut s, &limit, &[1, 2, 3], 0, 0));
        assert_eq!(s, AnyState::Fresh);
        let subs = AnyLimit::from(SubWindowCounter::new(9, Duration::from_secs(3), 3).unwrap());
        assert!(install(&mut s, &subs, &[3_000_000, 1, 2, 3, 0], 0, 0));
        assert!(install(&mut s, &subs, &[4_000_000, 2, 3, 0, 1], 0, 0));
        let AnyState::SubWindows(w) = &s else {
            panic!()
        };
        assert_eq!(w.counts(), [2, 3, 0, 1]);
        assert_eq!(
            window_of(&subs, Timestamp::from_millis(4_500)),
            4_000_000_000
        );
    }
}
