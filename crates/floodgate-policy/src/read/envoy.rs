//! envoyproxy/ratelimit files: one domain per file, read with that service's
//! keys, defaults and error messages, so existing files load unchanged.

use crate::error::Errors;
use crate::spec::{Dialect, DomainSpec};
use crate::yaml::Map;

use super::descriptors::{check_keys, read_nodes};

/// Reads an envoyproxy/ratelimit file's top level (`domain`, `descriptors`).
pub(crate) fn read_envoy_file(root: &Map<'_>, errors: &mut Errors) -> Option<DomainSpec> {
    let name = root
        .get("domain")
        .and_then(|n| errors.take(n.str()))
        .unwrap_or("");
    if name.is_empty() {
        errors.push(root.node().error("config file cannot have empty domain"));
    }
    let descriptors = root
        .get("descriptors")
        .map(|n| read_nodes(n, Dialect::Envoy, errors))
        .unwrap_or_default();
    check_keys(root, Dialect::Envoy, &["domain", "descriptors"], errors);
    (!name.is_empty()).then(|| DomainSpec {
        name: name.to_owned(),
        at: root.node().at(),
        dialect: Dialect::Envoy,
        descriptors,
        allow: Vec::new(),
        deny: Vec::new(),
    })
}
