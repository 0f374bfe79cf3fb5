//! Reading the `http.responses` section of a Floodgate file.

use std::sync::Arc;
use std::time::Duration;

use floodgate_policy::error::{ConfigErrors, Errors};
use floodgate_policy::unit::parse_duration;
use floodgate_policy::yaml::{Document, Node, excerpt};
use http::StatusCode;

use super::config::{ContractConfig, HeaderForm, RuleResponse};
use super::http_contract::Contract;

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

pub(crate) fn read_duration(n: Node<'_>, errors: &mut Errors) -> Option<Duration> {
    let text = n.scalar_text().unwrap_or("");
    match parse_duration(text) {
        Some(d) => Some(d),
        None => {
            errors.push(n.error(format!(
                "invalid duration '{}' (expected e.g. 500ms, 1s, 2m)",
                excerpt(text)
            )));
            None
        }
    }
}

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

impl ContractConfig {
    /// Reads an `http.responses` section (the node under the key).
    pub fn from_yaml(node: Node<'_>) -> Result<ContractConfig, ConfigErrors> {
        let mut errors = Errors::default();
        let mut c = ContractConfig::default();
        let Some(map) = errors.take(node.map()) else {
            return Err(errors.finish(()).err().unwrap_or_default());
        };
        if let Some(h) = map.get("headers") {
            let items = match h.list() {
                Ok(list) => list,
                Err(_) => vec![h],
            };
            c.forms.clear();
            for item in items {
                let Some(name) = errors.take(item.str()) else {
                    continue;
                };
                if name == "none" {
                    continue;
                }
                match HeaderForm::parse(name) {
                    Some(f) if !c.forms.contains(&f) => c.forms.push(f),
                    Some(_) => {}
                    None => errors.push(item.error(format!(
                        "unknown header form '{}' (expected ietf, x-ratelimit, x-ratelimit-epoch, draft-03 or none)",
                        excerpt(name)
                    ))),
                }
            }
        }
        let flag =
            |key: &str, errors: &mut Errors| map.get(key).and_then(|n| errors.take(n.bool()));
        if let Some(b) = flag("hide_headers", &mut errors) {
            c.hide_headers = b;
        }
        if let Some(b) = flag("on_success", &mut errors) {
            c.on_success = b;
        }
        if let Some(s) = map.get("status").and_then(|n| read_status(n, &mut errors)) {
            c.status = s;
        }
        if let Some(s) = map
            .get("error_status")
            .and_then(|n| read_status(n, &mut errors))
        {
            c.error_status = s;
        }
        if let Some(n) = map.get("retry_after_unknown") {
            c.retry_after_unknown = read_duration(n, &mut errors);
        }
        if let Some(rules) = map.get("rules").and_then(|n| errors.take(n.map())) {
            for (name, n) in rules.entries() {
                let Some(m) = errors.take(n.map()) else {
                    continue;
                };
                let mut r = RuleResponse {
                    status: m.get("status").and_then(|s| read_status(s, &mut errors)),
                    ..RuleResponse::default()
                };
                if let Some(b) = m.get("hide").and_then(|b| errors.take(b.bool())) {
                    r.hide = b;
                }
                if let Some(p) = m.get("policy_name").and_then(|p| errors.take(p.str())) {
                    r.policy_name = Some(p.to_owned());
                }
                for e in m.deny_unknown(RULE_KEYS) {
                    errors.push(e);
                }
                c.rules.insert(name.to_owned(), r);
            }
        }
        for e in map.deny_unknown(KEYS) {
            errors.push(e);
        }
        errors.finish(c)
    }

    /// Reads the `http.responses` section of the Floodgate file `text`
    /// (named `file` in messages); the defaults when there is none.
    pub fn from_yaml_str(file: &str, text: &str) -> Result<ContractConfig, ConfigErrors> {
        let doc = Document::parse(&Arc::from(file), text)?;
        let root = doc.root().map()?;
        let Some(http) = root.get(crate::identity::SECTION) else {
            return Ok(ContractConfig::default());
        };
        let http = http.map().map_err(ConfigErrors::from)?;
        match http.get(RESPONSES) {
            Some(n) => ContractConfig::from_yaml(n),
            None => Ok(ContractConfig::default()),
        }
    }
}

impl Contract {
    /// The contract of the Floodgate file `text` (its `http.responses`).
    pub fn from_yaml_str(file: &str, text: &str) -> Result<Contract, ConfigErrors> {
        ContractConfig::from_yaml_str(file, text).map(Contract::new)
    }
}
