//! Reading a `sync:` value, in a rule's `rate_limit` and in the store's
//! settings alike.

use std::time::Duration;

use crate::error::Errors;
use crate::sync_mode::SyncMode;
use crate::yaml::{Map, Node};

/// Keys a `sync:` mapping may have.
const SYNC_KEYS: &[&str] = &["mode", "interval", "duration"];

/// Reads a synchronisation mode: `exact`, `lease`, `sync`, or a mapping
/// naming the mode with its period, `{mode: lease, duration: 2s}` or
/// `{mode: sync, interval: 50ms}`. Periods are between 1 ms and 1 h.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use floodgate_policy::SyncMode;
/// use floodgate_policy::error::Errors;
/// use floodgate_policy::read::read_sync_mode;
/// use floodgate_policy::yaml::Document;
///
/// let doc = Document::parse(&Arc::from("f.yaml"), "{mode: sync, interval: 250ms}").unwrap();
/// let mut errors = Errors::default();
/// let mode = read_sync_mode(doc.root(), &mut errors);
/// assert_eq!(mode, Some(SyncMode::Sync { interval: Duration::from_millis(250) }));
/// ```
pub fn read_sync_mode(n: Node<'_>, errors: &mut Errors) -> Option<SyncMode> {
    if let Some(text) = n.scalar_text() {
        return errors.take(SyncMode::read(text).map_err(|m| n.error(m)));
    }
    let map = errors.take(n.map())?;
    let Some(mode_node) = map.get("mode") else {
        errors.push(n.error(format!(
            "sync needs 'mode' ({})",
            SyncMode::NAMES.join(", ")
        )));
        return None;
    };
    let name = errors.take(mode_node.str())?;
    let mut mode = errors.take(SyncMode::read(name).map_err(|m| mode_node.error(m)))?;
    let interval = read_period(&map, "interval", errors);
    let duration = read_period(&map, "duration", errors);
    match &mut mode {
        SyncMode::Exact => {}
        SyncMode::Lease { duration: d } => {
            if let Some(Some(x)) = duration {
                *d = x;
            }
        }
        SyncMode::Sync { interval: i } => {
            if let Some(Some(x)) = interval {
                *i = x;
            }
        }
    }
    check_periods(&map, &mode, errors);
    for e in map.deny_unknown(SYNC_KEYS) {
        errors.push(e);
    }
    if interval.is_none() || duration.is_none() {
        return None;
    }
    Some(mode)
}

/// The period under `key`: `Some(None)` when missing, `None` when invalid
/// (the error recorded).
fn read_period(map: &Map<'_>, key: &str, errors: &mut Errors) -> Option<Option<Duration>> {
    let Some(p) = map.get(key) else {
        return Some(None);
    };
    let d = SyncMode::read_period(errors.take(p.str())?);
    errors
        .take(d.map_err(|m| p.error(format!("{key}: {m}"))))
        .map(Some)
}

/// Reports a period given to a mode it does not apply to.
fn check_periods(map: &Map<'_>, mode: &SyncMode, errors: &mut Errors) {
    for (key, applies) in [
        ("interval", matches!(mode, SyncMode::Sync { .. })),
        ("duration", matches!(mode, SyncMode::Lease { .. })),
    ] {
        if !applies && let Some(k) = map.get(key) {
            errors.push(k.error(format!(
                "{key} does not apply to sync mode {} ({})",
                mode.name(),
                if key == "interval" {
                    "interval is the period of mode: sync"
                } else {
                    "duration is the lease's length in mode: lease"
                }
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::yaml::Document;

    fn read(text: &str) -> Result<Option<SyncMode>, String> {
        let doc = Document::parse(&Arc::from("f.yaml"), text).unwrap();
        let mut errors = Errors::default();
        let mode = read_sync_mode(doc.root(), &mut errors);
        errors.finish(mode).map_err(|e| e.to_string())
    }

    #[test]
    fn every_form() {
        let ms = Duration::from_millis;
        assert_eq!(read("exact"), Ok(Some(SyncMode::Exact)));
        assert_eq!(
            read("lease"),
            Ok(Some(SyncMode::Lease {
                duration: SyncMode::DEFAULT_LEASE
            }))
        );
        assert_eq!(
            read("sync"),
            Ok(Some(SyncMode::Sync {
                interval: SyncMode::DEFAULT_INTERVAL
            }))
        );
        assert_eq!(
            read("{mode: sync, interval: 100ms}"),
            Ok(Some(SyncMode::Sync { interval: ms(100) }))
        );
        assert_eq!(
            read("{mode: lease, duration: 5s}"),
            Ok(Some(SyncMode::Lease { duration: ms(5000) }))
        );
        assert_eq!(read("{mode: exact}"), Ok(Some(SyncMode::Exact)));
    }

    #[test]
    fn errors_name_the_problem() {
        for (text, expect) in [
            (
                "eventually",
                "f.yaml:1:1: unknown sync mode `eventually` (expected one of: exact, lease, sync)",
            ),
            ("{interval: 1s}", "sync needs 'mode'"),
            (
                "{mode: lease, interval: 1s}",
                "interval does not apply to sync mode lease",
            ),
            (
                "{mode: sync, duration: 1s}",
                "duration does not apply to sync mode sync",
            ),
            (
                "{mode: sync, interval: 0s}",
                "interval: expected a duration above zero, found `0s`",
            ),
            (
                "{mode: sync, interval: 2h}",
                "interval: expected 1ms to 1h, found",
            ),
            (
                "{mode: sync, interval: 10us}",
                "interval: expected 1ms to 1h, found",
            ),
            ("{mode: sync, every: 1s}", "unknown key 'every'"),
            ("[sync]", "expected"),
        ] {
            let e = read(text).expect_err(text);
            assert!(e.contains(expect), "{text}: {e}");
        }
    }
}
