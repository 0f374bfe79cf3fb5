//! `AnyLimit::with_block`: a denial blocks the key for a while; a cost that
//! can never fit is still `Never`; in-flight limits are never blocked.

use std::time::Duration;

use floodgate::algorithms::{AnyLimit, AnyState, Concurrency, FixedWindow};
use floodgate::{Algorithm, Apply, Outcome, Timestamp};

/// While blocked, a cost above the quota is `Never`, not a wait that would
/// end in `Never`.
#[test]
fn a_blocked_key_never_admits_a_cost_above_the_quota() {
    let block = Duration::from_secs(10);
    let limit =
        AnyLimit::from(FixedWindow::new(2, Duration::from_secs(60)).unwrap()).with_block(block);
    let mut s = limit.fresh();
    let t = Timestamp::from_secs(600);
    assert!(limit.decide(&mut s, t, 2, Apply::Commit).is_allowed());
    let d = limit.decide(&mut s, t, 1, Apply::Commit);
    assert_eq!((d.outcome, d.retry_after), (Outcome::Denied, Some(block)));
    let d = limit.decide(&mut s, t, 5, Apply::Commit);
    assert_eq!(
        (d.outcome, d.limit, d.retry_after),
        (Outcome::Never, 2, None)
    );
    assert_eq!(d.reset_after, block);
    // Still blocked for the costs that fit, whatever the apply.
    for apply in [Apply::Check, Apply::Commit, Apply::Force, Apply::Rejected] {
        let d = limit.decide(&mut s, t, 2, apply);
        assert_eq!((d.outcome, d.retry_after), (Outcome::Denied, Some(block)));
    }
    let later = t + block;
    assert_eq!(
        limit.decide(&mut s, later, 5, Apply::Commit).outcome,
        Outcome::Never
    );
    assert!(limit.decide(&mut s, later, 2, Apply::Commit).is_allowed());
}

/// A block would forget the units in flight (the permits are still out and
/// give them back later): a concurrency limit ignores it.
#[test]
fn an_in_flight_limit_is_never_blocked() {
    let limit = AnyLimit::from(Concurrency::new(1).unwrap()).with_block(Duration::from_secs(10));
    assert_eq!(limit.block(), Duration::ZERO);
    let mut s = limit.fresh();
    let t = Timestamp::from_secs(600);
    assert!(limit.decide(&mut s, t, 1, Apply::Commit).is_allowed());
    let d = limit.decide(&mut s, t, 1, Apply::Commit);
    assert_eq!((d.outcome, d.retry_after), (Outcome::Denied, None));
    assert_eq!(s, AnyState::Concurrency(1));
    // Past the would-be block, the permit still counts...
    let later = t + Duration::from_secs(11);
    assert!(limit.decide(&mut s, later, 1, Apply::Commit).is_denied());
    // ...until it is given back.
    limit.release(&mut s, 1);
    assert!(limit.decide(&mut s, t, 1, Apply::Commit).is_allowed());
    assert!(limit.decide(&mut s, later, 1, Apply::Commit).is_denied());
}
