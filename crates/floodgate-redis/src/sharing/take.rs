//! What an entry sends with its next call: a lease's unused units, what it
//! owes and what it asks for, or a view's hits; and what goes back to it
//! when the call fails.

use floodgate::Timestamp;

use super::calls::{Ask, LeaseAsk, SyncAsk};
use super::entry::Entry;
use super::local::Share;
use super::state;

/// What an entry had for the next call.
pub(super) enum Taken {
    /// A call for it is on its way: wait for it.
    Wait,
    /// Send this.
    Go(Ask),
    /// Nothing to send.
    Nothing,
}

/// How many units to ask for: what the last lease's pace would use over a
/// lease (twice the last grant when it ran out), at least `need`.
fn want(e: &Entry, need: u64, now: u64, duration: u64) -> u64 {
    let l = &e.lease;
    if need == 0 {
        return 0;
    }
    if l.granted == 0 {
        return need;
    }
    let elapsed = now.saturating_sub(l.granted_at).max(1_000_000);
    let pace = (u128::from(l.used) * u128::from(duration) / u128::from(elapsed)) as u64;
    let mut w = pace.saturating_add(pace / 4);
    if l.used >= l.granted {
        w = w.max(l.granted.saturating_mul(2));
    }
    w.max(need)
}

/// Whether the entry's lease was granted in a fixed window (one that
/// forgets its counts at its end) that is over at `now`.
fn lapsed_fixed_window(e: &Entry, now: Timestamp) -> bool {
    let l = &e.lease;
    e.limit.reset_window().is_some()
        && (l.open || l.units > 0)
        && state::window_of(&e.limit, now) > l.at
}

/// Who makes a call.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Caller {
    /// A request: a lease's unused units go back with it (it is renewed).
    Request,
    /// The background task: what is due (a lease still usable, less
    /// `margin`, is kept).
    Due { margin: u64 },
    /// Shutdown: everything.
    All,
}

/// What an entry sends with its next call under `share`, taken from it
/// (`Wait` while a call for it is on its way, `Nothing` when the
/// background task has nothing to send).
pub(super) fn take_from(
    e: &mut Entry,
    share: Share,
    need: u64,
    now: Timestamp,
    caller: Caller,
) -> Taken {
    match share {
        Share::Lease { duration } => take_lease(e, duration, need, now, caller),
        Share::Sync { .. } => take_view(e, caller),
    }
}

/// [`take_from`] under a lease of `duration` (ns).
fn take_lease(e: &mut Entry, duration: u64, need: u64, now: Timestamp, caller: Caller) -> Taken {
    if e.lease.pending {
        return Taken::Wait;
    }
    if lapsed_fixed_window(e, now) {
        // Units of a fixed window that is over: no decision reads
        // that window's count again, so there is nothing to give
        // back (and no call to make at every window's end).
        let l = &mut e.lease;
        l.units = 0;
        l.open = false;
    }
    let keep = match caller {
        Caller::Due { margin } => e.usable(now, margin) > 0,
        _ => false,
    };
    let l = &e.lease;
    let ret = if keep { 0 } else { l.units };
    let ends = !keep && (l.open || l.units > 0);
    if caller != Caller::Request
        && ret == 0
        && !ends
        && l.debts.is_empty()
        && !l.floor
        && l.block == 0
    {
        return Taken::Nothing;
    }
    // A TAT is raised to what is known here whenever a lease ends
    // (admissions here came later than the grant charged them, and
    // a penalty's charge must outlast the units given back) or a
    // request asks.
    let floor = if l.floor || ends || caller == Caller::Request {
        state::gcra_floor(&e.replica, &e.limit)
    } else {
        (0, 0)
    };
    let ask = LeaseAsk {
        need,
        want: want(e, need, now.as_nanos(), duration),
        dur_us: duration / 1000,
        ret,
        ends,
        at_us: l.at / 1000,
        debts: l.debts.0.map(|(at, n)| (at / 1000, n)),
        floor,
        in_use: l.in_use,
        block_us: l.block.div_ceil(1000),
    };
    let l = &mut e.lease;
    l.units -= ret;
    l.debts.take();
    l.pending = true;
    Taken::Go(Ask::Lease(ask))
}

/// [`take_from`] under `sync`: the view's hits.
fn take_view(e: &mut Entry, caller: Caller) -> Taken {
    if e.view.pending {
        return Taken::Wait;
    }
    if caller != Caller::Request && !e.view.dirty() {
        return Taken::Nothing;
    }
    let hits = e.view.hits.take();
    let ask = SyncAsk {
        hits: hits.map(|(at, n)| (at / 1000, n)),
        block_us: e.view.block.div_ceil(1000),
    };
    // `since` goes on counting the pushed hits until Redis has
    // them (see `install`).
    e.view.pending = true;
    Taken::Go(Ask::Sync(ask))
}

/// A call failed: what it took goes back to the entry (a lease's unused
/// units excepted: Redis may have taken them back; they are lost, never
/// used twice).
pub(super) fn give_back(e: &mut Entry, ask: Ask) {
    match ask {
        Ask::Lease(sent) => {
            // Owed still: sent again with the next call.
            for (at, n) in sent.debts {
                e.lease.debts.add(at.saturating_mul(1000), n);
            }
            e.lease.pending = false;
        }
        Ask::Sync(sent) => {
            // Still counted in `since` (never acknowledged).
            for (at, n) in sent.hits {
                e.view.hits.add(at.saturating_mul(1000), n);
            }
            if e.view.block == 0 && sent.block_us > 0 {
                e.view.block = sent.block_us.saturating_mul(1000);
            }
            e.view.pending = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::algorithms::{AnyLimit, FixedWindow, SlidingWindow};
    use std::time::Duration;

    const SEC: u64 = 1_000_000_000;

    /// An entry holding 3 unused units of a lease granted in the window of
    /// second 10, until its end.
    fn leased(limit: AnyLimit) -> Entry {
        let mut e = Entry::new(&limit, None);
        let l = &mut e.lease;
        (l.units, l.open, l.at, l.end) = (3, true, 10 * SEC, 11 * SEC);
        e
    }

    #[test]
    fn a_fixed_windows_lease_ends_with_its_window_without_a_call() {
        let mut e = leased(FixedWindow::new(10, Duration::from_secs(1)).unwrap().into());
        let due = Caller::Due { margin: 0 };
        let share = Share::Lease { duration: SEC };
        assert!(matches!(
            take_from(&mut e, share, 0, Timestamp::from_nanos(11 * SEC + 1), due),
            Taken::Nothing
        ));
        assert_eq!((e.lease.units, e.lease.open), (0, false));
        // A sliding window's previous window still counts: its unused
        // units go back.
        let limit = SlidingWindow::new(10, Duration::from_secs(1))
            .unwrap()
            .into();
        let mut e = leased(limit);
        let Taken::Go(Ask::Lease(ask)) =
            take_from(&mut e, share, 0, Timestamp::from_nanos(11 * SEC + 1), due)
        else {
            panic!("no call");
        };
        assert_eq!((ask.ret, ask.ends, ask.at_us), (3, true, 10_000_000));
    }
}
