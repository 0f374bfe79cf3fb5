//! Construction errors. Building a limit validates every parameter once, so
//! the decision path never has to.

use thiserror::Error;

/// A limit parameter that cannot work, naming the field at fault.
///
/// ```
/// use floodgate::algorithms::Gcra;
/// use std::time::Duration;
/// let err = Gcra::new(10, Duration::from_secs(1), 0).unwrap_err();
/// assert_eq!(err.field(), "burst");
/// assert!(err.to_string().contains("burst"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid {field}: {reason}")]
pub struct ConfigError {
    field: &'static str,
    reason: String,
}

impl ConfigError {
    pub(crate) fn new(field: &'static str, reason: impl Into<String>) -> Self {
        ConfigError {
            field,
            reason: reason.into(),
        }
    }

    /// The parameter at fault (`"limit"`, `"period"`, `"burst"`, ...).
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// Why it was rejected.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// Largest count, burst or limit accepted: 2^40 (about 1.1 trillion).
pub const MAX_COUNT: u64 = 1 << 40;

/// Longest period or window accepted: 100 years of 365 days.
pub const MAX_PERIOD_NANOS: u64 = 100 * 365 * 86_400 * 1_000_000_000;

pub(crate) fn check_count(field: &'static str, value: u64) -> Result<u64, ConfigError> {
    if value == 0 {
        return Err(ConfigError::new(field, "must be at least 1 (got 0)"));
    }
    if value > MAX_COUNT {
        return Err(ConfigError::new(
            field,
            format!("must be at most {MAX_COUNT} (got {value})"),
        ));
    }
    Ok(value)
}

pub(crate) fn check_period(
    field: &'static str,
    period: std::time::Duration,
) -> Result<u64, ConfigError> {
    let nanos = period.as_nanos();
    if nanos == 0 {
        return Err(ConfigError::new(field, "must be longer than zero"));
    }
    if nanos > u128::from(MAX_PERIOD_NANOS) {
        return Err(ConfigError::new(
            field,
            format!("must be at most 100 years (got {period:?})"),
        ));
    }
    Ok(nanos as u64)
}
