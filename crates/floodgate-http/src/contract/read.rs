//! Reading the `http.responses` section of a Floodgate file.

use floodgate_policy::error::{ConfigErrors, Errors};
use floodgate_policy::yaml::{Node, excerpt};
use http::StatusCode;

use super::config::{Contract, HeaderForm, RuleResponse};
use crate::read::deny_unknown;

/// The key of the contract's section under `http:`.
pub const RESPONSES: &str = "responses";

const KEYS: &[&str] = &[
    "headers",
    "hide_headers",
    "on_success",
    "status",
    "error_status",
    "retry_after_unknown",
    "rules",
];
const RULE_KEYS: &[&str] = &["status", "hide", "policy_name"];

fn read_status(n: Node<'_>, errors: &mut Errors) -> Option<StatusCode> {
    let v = errors.take(n.u64())?;
    match u16::try_from(v)
        .ok()
        .and_then(|v| StatusCode::from_u16(v).ok())
    {
        Some(s) if (400..600).contains(&s.as_u16()) => Some(s),
        _ => {
            errors.push(n.error(format!(
                "status must be an HTTP error status from 400 to 599 (got {})",
                n.describe()
            )));
            None
        }
    }
}

impl Contract {
    /// Reads an `http.responses` section (the node under the key).
    pub fn from_yaml(node: Node<'_>) -> Result<Contract, ConfigErrors> {
        let mut errors = Errors::default();
        let mut c = Contract::default();
        let map = node.map()?;
        if let Some(h) = map.get("headers") {
            c.forms = read_forms(h, &mut errors);
        }
        for (key, flag) in [
            ("hide_headers", &mut c.hide_headers),
            ("on_success", &mut c.on_success),
        ] {
            if let Some(b) = map.get(key).and_then(|n| errors.take(n.bool())) {
                *flag = b;
            }
        }
        for (key, status) in [
            ("status", &mut c.status),
            ("error_status", &mut c.error_status),
        ] {
            if let Some(s) = map.get(key).and_then(|n| read_status(n, &mut errors)) {
                *status = s;
            }
        }
        if let Some(n) = map.get("retry_after_unknown") {
            c.retry_after_unknown = errors.take(n.duration(true));
        }
        if let Some(rules) = map.get("rules").and_then(|n| errors.take(n.map())) {
            for (name, n) in rules.entries() {
                if let Some(r) = read_rule(n, &mut errors) {
                    c.rules.insert(name.to_owned(), r);
                }
            }
        }
        deny_unknown(&map, KEYS, &mut errors);
        errors.finish(c)
    }
}

/// The header forms of `headers:` (one, or a list; `none` adds none), each
/// once.
fn read_forms(h: Node<'_>, errors: &mut Errors) -> Vec<HeaderForm> {
    let items = match h.list() {
        Ok(list) => list,
        Err(_) => vec![h],
    };
    let mut forms = Vec::new();
    for item in items {
        let Some(name) = errors.take(item.str()) else {
            continue;
        };
        if name == "none" {
            continue;
        }
        match HeaderForm::parse(name) {
            Some(f) if !forms.contains(&f) => forms.push(f),
            Some(_) => {}
            None => errors.push(item.error(format!(
                "unknown header form '{}' (expected {} or none)",
                excerpt(name),
                HeaderForm::ALL.map(HeaderForm::name).join(", ")
            ))),
        }
    }
    forms
}

/// One rule's answers under `rules:` (none when it is not a map).
fn read_rule(n: Node<'_>, errors: &mut Errors) -> Option<RuleResponse> {
    let m = errors.take(n.map())?;
    let mut r = RuleResponse {
        status: m.get("status").and_then(|s| read_status(s, errors)),
        ..RuleResponse::default()
    };
    if let Some(b) = m.get("hide").and_then(|b| errors.take(b.bool())) {
        r.hide = b;
    }
    if let Some(p) = m.get("policy_name").and_then(|p| errors.take(p.str())) {
        r.policy_name = Some(p.to_owned());
    }
    deny_unknown(&m, RULE_KEYS, errors);
    Some(r)
}
