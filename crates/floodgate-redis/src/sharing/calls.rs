//! The lease and sync scripts' calls: what an entry sends (an [`Ask`]) as
//! arguments, and each key's answer decoded. Nothing here panics on a
//! strange reply: it is a [`BackendError::Protocol`].

use floodgate::algorithms::{AnyLimit, Penalty};
use floodgate_policy::{BackendError, Permit};
use redis::{Cmd, Value};

use crate::UnsupportedLimit;
use crate::encode::{Params, block_micros};
use crate::script::Script;

/// What one key's lease call sends.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LeaseAsk {
    /// The least worth granting (0: grant nothing, only give back, pay
    /// and read the state).
    pub need: u64,
    /// The most to grant.
    pub want: u64,
    /// How long the lease may last (µs).
    pub dur_us: u64,
    /// Unused units given back, granted in the (sub-)window at `at_us`.
    pub ret: u64,
    pub at_us: u64,
    /// The holder's lease on the key ends with this call (renewed, ended,
    /// or at shutdown); otherwise it goes on (only owed units are sent).
    pub ends: bool,
    /// Units owed, per (sub-)window start (µs).
    pub debts: [(u64, u64); 2],
    /// A GCRA TAT seen here (µs, ticks of 1/C µs; 0 0: none).
    pub floor: (u64, u64),
    /// Permits given out and not taken back (in-flight limits).
    pub in_use: u64,
    /// A block started here, until then (µs; 0: none).
    pub block_us: u64,
}

/// What one key's sync call sends: hits per (sub-)window start (µs; a
/// GCRA's tokens in the first), and a block started here.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SyncAsk {
    pub hits: [(u64, u64); 2],
    pub block_us: u64,
}

/// What one key's call sends.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ask {
    Lease(LeaseAsk),
    Sync(SyncAsk),
}

/// One key's answer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Answer {
    /// Units granted (leases).
    pub granted: u64,
    /// The lease's end (µs, Redis's clock or the caller's).
    pub end_us: u64,
    /// The end of a block in force (µs; 0: none).
    pub blocked_us: u64,
    /// The key's state (before the grant), as `sharing::state` reads it.
    pub fields: Vec<u64>,
}

/// A call's answers and the time the script ran at (µs).
pub(crate) struct Answers {
    pub now_us: u64,
    pub resets: u64,
    pub keys: Vec<Answer>,
}

/// The shared arguments of a call.
pub(crate) struct Shared<'a> {
    /// `now` in µs, or `""` for the server's clock.
    pub now: &'a str,
    /// `""` for absolute expiry, or the slack in ms.
    pub slack: &'a str,
    /// Concurrency permits' lease in ms (0: none).
    pub permit_lease: u64,
    /// The holder's id.
    pub holder: &'a str,
}

/// The call of `script` over `keys` (one hash slot), each with its limit
/// and what it sends.
pub(crate) fn command(
    script: &Script,
    shared: &Shared<'_>,
    keys: &[(&[u8], &AnyLimit, Ask)],
) -> Result<Cmd, UnsupportedLimit> {
    let lease = matches!(keys.first(), Some((_, _, Ask::Lease(_))));
    let mut cmd = script.call(keys.len());
    for (name, _, _) in keys {
        cmd.arg(*name);
    }
    cmd.arg(shared.now).arg(shared.slack);
    if lease {
        cmd.arg(shared.permit_lease).arg(shared.holder);
    }
    for (_, limit, ask) in keys {
        let params = Params::of(limit)?;
        let block = block_micros(limit)?;
        match ask {
            Ask::Lease(a) => {
                params.push_args(a.need, None, Penalty::None, block, Permit::NONE, &mut cmd);
                cmd.arg(a.want)
                    .arg(a.dur_us)
                    .arg(a.ret)
                    .arg(if a.ends { "1" } else { "0" })
                    .arg(a.at_us)
                    .arg(a.debts[0].0)
                    .arg(a.debts[0].1)
                    .arg(a.debts[1].0)
                    .arg(a.debts[1].1)
                    .arg(a.floor.0)
                    .arg(a.floor.1)
                    .arg(a.in_use)
                    .arg(a.block_us);
            }
            Ask::Sync(s) => {
                params.push_args(0, None, Penalty::None, block, Permit::NONE, &mut cmd);
                cmd.arg(s.hits[0].0)
                    .arg(s.hits[0].1)
                    .arg(s.hits[1].0)
                    .arg(s.hits[1].1)
                    .arg(s.block_us);
            }
        }
    }
    Ok(cmd)
}

fn bad(what: impl std::fmt::Display) -> BackendError {
    BackendError::Protocol(format!("unexpected lease or sync reply: {what}"))
}

fn num(v: Option<&Value>) -> Result<u64, BackendError> {
    match v {
        Some(Value::Int(i)) => u64::try_from(*i).map_err(|_| bad(format_args!("negative {i}"))),
        other => Err(bad(format_args!("{other:?} is not an integer"))),
    }
}

/// Decodes a reply to a call over `n` keys (`lease`: a lease call).
pub(crate) fn parse(value: Value, n: usize, lease: bool) -> Result<Answers, BackendError> {
    let Value::Array(values) = value else {
        return Err(bad(format_args!("{value:?}")));
    };
    let mut it = values.iter();
    let now_us = num(it.next())?;
    let resets = num(it.next())?;
    let mut keys = Vec::with_capacity(n);
    for _ in 0..n {
        let mut a = Answer::default();
        if lease {
            a.granted = num(it.next())?;
            a.end_us = num(it.next())?;
        }
        a.blocked_us = num(it.next())?;
        let k = num(it.next())?;
        if k > 1025 {
            return Err(bad(format_args!("{k} state fields")));
        }
        for _ in 0..k {
            a.fields.push(num(it.next())?);
        }
        keys.push(a);
    }
    if it.next().is_some() {
        return Err(bad("trailing values"));
    }
    Ok(Answers {
        now_us,
        resets,
        keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_rejects() {
        let ints = |xs: &[i64]| Value::Array(xs.iter().map(|&x| Value::Int(x)).collect());
        let a = parse(ints(&[7, 0, 3, 90, 0, 2, 5, 1]), 1, true).unwrap();
        assert_eq!(a.now_us, 7);
        assert_eq!((a.keys[0].granted, a.keys[0].end_us), (3, 90));
        assert_eq!(a.keys[0].fields, [5, 1]);
        let s = parse(ints(&[7, 0, 0, 2, 5, 1, 9, 0]), 2, false).unwrap();
        assert_eq!(s.keys[1].blocked_us, 9);
        assert!(parse(ints(&[7, 0, 3, 90, 0, 2, 5]), 1, true).is_err());
        assert!(parse(ints(&[7, 0, 3, 90, 0, 0, 1]), 1, true).is_err());
        assert!(parse(ints(&[7, 0, -3, 90, 0, 0]), 1, true).is_err());
        assert!(parse(Value::Nil, 1, true).is_err());
    }
}
