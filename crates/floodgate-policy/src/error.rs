//! Configuration errors: where (file, line, column), what, and the value at
//! fault.

use std::fmt;
use std::sync::Arc;

/// A position in a configuration file (line and column are 1-based).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Location {
    /// The file's path as given, or a name such as `<inline>`.
    pub file: Arc<str>,
    /// Line, from 1 (0 when unknown).
    pub line: usize,
    /// Column, from 1 (0 when unknown).
    pub column: usize,
}

impl Location {
    /// A location in `file` with no position (errors about a whole file).
    pub fn file(file: &Arc<str>) -> Self {
        Location {
            file: file.clone(),
            line: 0,
            column: 0,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.file)
        } else {
            write!(f, "{}:{}:{}", self.file, self.line, self.column)
        }
    }
}

/// One problem in a configuration.
///
/// Displays as `file:line:column: message`, the message naming the
/// offending value; for envoyproxy/ratelimit files the message is the one
/// that service gives for the same mistake.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {message}")]
pub struct ConfigError {
    /// Where.
    pub at: Location,
    /// What.
    pub message: String,
}

impl ConfigError {
    /// An error at `at`.
    pub fn new(at: Location, message: impl Into<String>) -> Self {
        ConfigError {
            at,
            message: message.into(),
        }
    }
}

/// All the problems found in a configuration (checking does not stop at the
/// first one).
#[derive(Clone, Debug, Default, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }
}

/// Collects errors while reading on, so that one check reports them all.
#[derive(Debug, Default)]
pub struct Errors(Vec<ConfigError>);

impl Errors {
    /// Records an error.
    pub fn push(&mut self, e: ConfigError) {
        // Bound the report: a pathological file cannot produce a huge one.
        if self.0.len() < 1000 {
            self.0.push(e);
        }
    }

    /// Records the error of a result, returning its value if any.
    pub fn take<T>(&mut self, r: Result<T, ConfigError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.push(e);
                None
            }
        }
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok(value)` when nothing was recorded, otherwise every error.
    pub fn finish<T>(self, value: T) -> Result<T, ConfigErrors> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ConfigErrors(self.0))
        }
    }

    /// Appends all of `other`.
    pub fn extend(&mut self, other: ConfigErrors) {
        for e in other.0 {
            self.push(e);
        }
    }
}
