//! The decision script's reply: `{now, resets, expired, (outcome, limit,
//! remaining, reset_us, retry_us, delay_ms) per item}`, all integers. Anything else is
//! a [`BackendError::Protocol`]; nothing here panics on a strange reply.

use std::time::Duration;

use floodgate::{Decision, Outcome};
use floodgate_policy::BackendError;
use redis::Value;

/// Fields per item in the reply.
const FIELDS: usize = 6;

/// Fields before the items'.
const HEAD: usize = 3;

/// A decoded reply.
pub(crate) struct Reply {
    /// The time of the decision, µs.
    pub now_us: u64,
    /// Keys reset because they held something else.
    pub resets: u64,
    /// Concurrency units whose lease ended before they were given back,
    /// dropped by this decision.
    pub expired: u64,
    pub decisions: Vec<Decision>,
}

fn bad(what: impl std::fmt::Display) -> BackendError {
    BackendError::Protocol(format!("unexpected script reply: {what}"))
}

fn int(v: &Value) -> Result<i64, BackendError> {
    match v {
        Value::Int(i) => Ok(*i),
        other => Err(bad(format_args!("{other:?} is not an integer"))),
    }
}

fn nonneg(v: &Value) -> Result<u64, BackendError> {
    let i = int(v)?;
    u64::try_from(i).map_err(|_| bad(format_args!("negative value {i}")))
}

pub(crate) fn parse(value: Value, items: usize) -> Result<Reply, BackendError> {
    let values = match value {
        Value::Array(values) => values,
        other => return Err(bad(format_args!("{other:?}"))),
    };
    if values.len() != HEAD + FIELDS * items {
        return Err(bad(format_args!(
            "{} values for {items} items",
            values.len()
        )));
    }
    let now_us = nonneg(&values[0])?;
    let resets = nonneg(&values[1])?;
    let expired = nonneg(&values[2])?;
    let mut decisions = Vec::with_capacity(items);
    for f in values[HEAD..].chunks_exact(FIELDS) {
        let outcome = match int(&f[0])? {
            0 => Outcome::Allowed,
            1 => Outcome::Delayed(Duration::from_millis(nonneg(&f[5])?)),
            2 => Outcome::Denied,
            3 => Outcome::Never,
            o => return Err(bad(format_args!("outcome {o}"))),
        };
        let retry = int(&f[4])?;
        decisions.push(Decision {
            outcome,
            limit: nonneg(&f[1])?,
            remaining: nonneg(&f[2])?,
            reset_after: Duration::from_micros(nonneg(&f[3])?),
            retry_after: match (outcome, retry) {
                // An in-flight limit frees up by releases, not at a time.
                (Outcome::Denied, r) if r >= 0 => Some(Duration::from_micros(r as u64)),
                (Outcome::Denied, -1) => None,
                (Outcome::Denied, r) => return Err(bad(format_args!("retry {r}"))),
                _ => None,
            },
        });
    }
    Ok(Reply {
        now_us,
        resets,
        expired,
        decisions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_rejects() {
        let ok = Value::Array(
            [5, 0, 4, 2, 10, 0, 7, 3, 0]
                .into_iter()
                .map(Value::Int)
                .collect(),
        );
        let r = parse(ok, 1).unwrap();
        assert_eq!((r.now_us, r.expired), (5, 4));
        assert_eq!(r.decisions[0].retry_after, Some(Duration::from_micros(3)));
        assert!(parse(Value::Nil, 1).is_err());
        assert!(parse(Value::Array(vec![Value::Int(1)]), 1).is_err());
        let bad_outcome = Value::Array(
            [5, 0, 0, 9, 1, 1, 1, -1, 0]
                .into_iter()
                .map(Value::Int)
                .collect(),
        );
        assert!(parse(bad_outcome, 1).is_err());
        let text = Value::Array(vec![Value::SimpleString("x".into()); 9]);
        assert!(parse(text, 1).is_err());
    }
}
