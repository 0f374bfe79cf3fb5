//! What the readers of the `http:` section (the identity, `responses` and
//! `layer`) share.

use floodgate_policy::error::{ConfigError, ConfigErrors, Errors};
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

/// A header name.
pub(crate) fn header_name(n: Node<'_>) -> Result<HeaderName, ConfigError> {
    let text = n.str()?;
    HeaderName::from_bytes(text.as_bytes())
        .map_err(|_| n.error(format!("invalid header name `{}`", excerpt(text))))
}
