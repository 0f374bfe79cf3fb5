//! What the readers of the `http:` section (the identity, `responses` and
//! `layer`) share.

use std::time::Duration;

use floodgate_policy::error::{ConfigError, ConfigErrors, Errors};
use floodgate_policy::unit::parse_duration;
use floodgate_policy::yaml::{Map, Node, excerpt};
use http::HeaderName;

/// Reports every key of `map` not read, with the `allowed` ones.
pub(crate) fn deny_unknown(map: &Map<'_>, allowed: &[&str], errors: &mut Errors) {
    errors.extend(ConfigErrors(map.deny_unknown(allowed)));
}

/// Calls `f` with each string of the list `n` and its node, in order
/// (anything else is reported).
pub(crate) fn each_string<'a>(
    n: Node<'a>,
    errors: &mut Errors,
    mut f: impl FnMut(&'a str, Node<'a>, &mut Errors),
) {
    for item in errors.take(n.list()).unwrap_or_default() {
        if let Some(text) = errors.take(item.str()) {
            f(text, item, errors);
        }
    }
}

/// A duration (`500ms`, `1s`, `2m`).
pub(crate) fn read_duration(n: Node<'_>, errors: &mut Errors) -> Option<Duration> {
    let text = n.scalar_text().unwrap_or("");
    let d = parse_duration(text);
    if d.is_none() {
        errors.push(n.error(format!(
            "invalid duration '{}' (expected e.g. 500ms, 1s, 2m)",
            excerpt(text)
        )));
    }
    d
}

/// A header name.
pub(crate) fn header_name(n: Node<'_>) -> Result<HeaderName, ConfigError> {
    let text = n.str()?;
    HeaderName::from_bytes(text.as_bytes())
        .map_err(|_| n.error(format!("invalid header name `{}`", excerpt(text))))
}
